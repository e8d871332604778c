import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  base64url,
  CompactSign,
  createLocalJWKSet,
  decodeProtectedHeader,
  exportPKCS8,
  exportSPKI,
  generateKeyPair,
  jwtVerify,
  SignJWT,
  type JSONWebKeySet,
  type JWTPayload,
} from "jose";
import { ManualClock } from "../../src/clock.js";
import { ConfigError, parseConfig, type Config } from "../../src/config.js";
import { DeliverySigner, mintToken, TokenError, TokenVerifier } from "../../src/auth/tokens.js";

const SECRET = "a-verification-secret-of-32-bytes-or-more";
const DELIVERY_SECRET = "a-delivery-secret-of-at-least-32-bytes";
const encode = (text: string): Uint8Array => new TextEncoder().encode(text);

function hsAuth(overrides: Partial<Config["auth"]> = {}): Config["auth"] {
  return {
    audience: "opqueue",
    keys: [{ kid: "k1", alg: "HS256", secret: SECRET }],
    delivery_key: { kid: "q1", alg: "HS256", secret: DELIVERY_SECRET },
    ...overrides,
  };
}

async function setup(auth: Config["auth"] = hsAuth()): Promise<{ clock: ManualClock; verifier: TokenVerifier; auth: Config["auth"] }> {
  const clock = new ManualClock();
  return { clock, verifier: await TokenVerifier.create({ auth, clock }), auth };
}

const nowS = (clock: ManualClock): number => Math.floor(clock.now() / 1000);

/** Signs arbitrary claims and header by hand, for tokens mintToken would never produce. */
async function signRaw(options: {
  payload: JWTPayload;
  alg?: string;
  kid?: string | undefined;
  key?: Parameters<SignJWT["sign"]>[0];
}): Promise<string> {
  const header: { alg: string; kid?: string } = { alg: options.alg ?? "HS256" };
  if (options.kid !== undefined) header.kid = options.kid;
  return new SignJWT(options.payload).setProtectedHeader(header).sign(options.key ?? encode(SECRET));
}

function assertionClaims(clock: ManualClock, extra: JWTPayload = {}): JWTPayload {
  const iat = nowS(clock);
  return { aud: "opqueue", iat, exp: iat + 300, sub: "u1", op: "createUser", rid: "req-1", ...extra };
}

async function refused(promise: Promise<unknown>, message: string | RegExp): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof TokenError, `expected TokenError, got ${String(error)}`);
    if (typeof message === "string") assert.equal(error.message, message);
    else assert.match(error.message, message);
    return true;
  });
}

describe("enqueue assertions", () => {
  it("accepts a minted assertion and returns its claims and raw token", async () => {
    const { clock, verifier, auth } = await setup();
    const token = await mintToken({ auth, clock, sub: "u1", op: "createUser", rid: "req-1" });
    assert.deepEqual(await verifier.verifyAssertion(token), { sub: "u1", op: "createUser", rid: "req-1", job: undefined, token });
  });

  it("refuses alg none crafted by hand, with or without a kid", async () => {
    const { clock, verifier } = await setup();
    const body = base64url.encode(JSON.stringify(assertionClaims(clock)));
    for (const header of [{ alg: "none" }, { alg: "none", kid: "k1" }]) {
      const token = `${base64url.encode(JSON.stringify(header))}.${body}.`;
      await refused(verifier.verifyAssertion(token), 'alg "none" is not accepted');
    }
  });

  it("refuses HS512 signed with the key's own secret", async () => {
    const { clock, verifier } = await setup();
    const token = await signRaw({ payload: assertionClaims(clock), alg: "HS512", kid: "k1" });
    await refused(verifier.verifyAssertion(token), 'alg "HS512" is not allowed for kid "k1" (expects HS256)');
  });

  it("refuses an unknown kid", async () => {
    const { clock, verifier } = await setup();
    const token = await signRaw({ payload: assertionClaims(clock), kid: "x" });
    await refused(verifier.verifyAssertion(token), 'unknown kid "x"');
  });

  it("refuses a bad signature", async () => {
    const { clock, verifier } = await setup();
    const token = await signRaw({ payload: assertionClaims(clock), kid: "k1", key: encode("another-secret-of-at-least-32-bytes!!") });
    await refused(verifier.verifyAssertion(token), "bad signature");
  });

  it("refuses a token whose payload was altered after signing", async () => {
    const { clock, verifier, auth } = await setup();
    const [header, , signature] = (await mintToken({ auth, clock, sub: "u1", op: "createUser", rid: "r" })).split(".");
    const forged = base64url.encode(JSON.stringify(assertionClaims(clock, { sub: "admin" })));
    await refused(verifier.verifyAssertion(`${header}.${forged}.${signature}`), "bad signature");
  });

  it("refuses other spellings of a valid signature: padded, spare bits set, or non-ASCII", async () => {
    const { clock, verifier, auth } = await setup();
    const token = await mintToken({ auth, clock, sub: "u1", op: "createUser", rid: "r" });
    const body = token.slice(0, token.lastIndexOf(".") + 1);
    const signature = token.slice(token.lastIndexOf(".") + 1);
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    // 32 bytes take 43 characters; the last one carries 2 spare bits that decoding ignores.
    const last = alphabet.indexOf(signature.at(-1) ?? "");
    const spareBitSet = signature.slice(0, -1) + alphabet.charAt(last ^ 1);
    assert.deepEqual(Buffer.from(spareBitSet, "base64url"), Buffer.from(signature, "base64url"));
    await refused(verifier.verifyAssertion(`${body}${spareBitSet}`), "bad signature");
    await refused(verifier.verifyAssertion(`${body}${signature}=`), "bad signature");
    // U+0141 shares its low byte with "A": a byte-folding comparison would take one for the other.
    const folded = signature.replace(/[A-Za-z]/, (c) => String.fromCharCode(0x100 + c.charCodeAt(0)));
    await refused(verifier.verifyAssertion(`${body}${folded}`), "bad signature");
    assert.equal((await verifier.verifyAssertion(token)).sub, "u1");
  });

  it("refuses a wrong aud, an array aud and a missing aud", async () => {
    const { clock, verifier } = await setup();
    const wrong = await signRaw({ payload: assertionClaims(clock, { aud: "product" }), kid: "k1" });
    await refused(verifier.verifyAssertion(wrong), 'wrong aud "product" (expected "opqueue")');
    const array = await signRaw({ payload: assertionClaims(clock, { aud: ["opqueue", "product"] }), kid: "k1" });
    await refused(verifier.verifyAssertion(array), /^wrong aud/);
    const missing = await signRaw({ payload: assertionClaims(clock, { aud: undefined }), kid: "k1" });
    await refused(verifier.verifyAssertion(missing), "missing claim aud");
  });

  it("refuses a missing exp and a non-numeric exp", async () => {
    const { clock, verifier, auth } = await setup();
    const missing = await mintToken({ auth, clock, sub: "u1", op: "createUser", rid: "r", extraClaims: { exp: undefined } });
    await refused(verifier.verifyAssertion(missing), "missing claim exp");
    const text = await mintToken({ auth, clock, sub: "u1", op: "createUser", rid: "r", extraClaims: { exp: "soon" } });
    await refused(verifier.verifyAssertion(text), "claim exp must be a number");
  });

  it("accepts an exp up to 30 s in the past and refuses one further back", async () => {
    const { clock, verifier, auth } = await setup();
    const token = await mintToken({ auth, clock, sub: "u1", op: "createUser", rid: "r", ttlSeconds: 60 });
    clock.advance((60 + 29) * 1000);
    assert.equal((await verifier.verifyAssertion(token)).sub, "u1");
    clock.advance(2000);
    await refused(verifier.verifyAssertion(token), "token expired");
  });

  it("accepts a 300 s lifetime and refuses 301 s", async () => {
    const { clock, verifier, auth } = await setup();
    const ok = await mintToken({ auth, clock, sub: "u1", op: "createUser", rid: "r", ttlSeconds: 300 });
    assert.equal((await verifier.verifyAssertion(ok)).op, "createUser");
    const long = await mintToken({ auth, clock, sub: "u1", op: "createUser", rid: "r", ttlSeconds: 301 });
    await refused(verifier.verifyAssertion(long), "assertion lifetime 301 s exceeds 300 s");
    const longer = await mintToken({ auth, clock, sub: "u1", op: "createUser", rid: "r", ttlSeconds: 600 });
    await refused(verifier.verifyAssertion(longer), "assertion lifetime 600 s exceeds 300 s");
  });

  it("refuses a missing iat", async () => {
    const { clock, verifier, auth } = await setup();
    const token = await mintToken({ auth, clock, sub: "u1", op: "createUser", rid: "r", extraClaims: { iat: undefined } });
    await refused(verifier.verifyAssertion(token), "missing claim iat");
  });

  it("refuses an iat more than 30 s in the future and accepts one within 30 s", async () => {
    const { clock, verifier } = await setup();
    const near = await signRaw({ payload: assertionClaims(clock, { iat: nowS(clock) + 30, exp: nowS(clock) + 330 }), kid: "k1" });
    assert.equal((await verifier.verifyAssertion(near)).sub, "u1");
    const far = await signRaw({ payload: assertionClaims(clock, { iat: nowS(clock) + 31, exp: nowS(clock) + 331 }), kid: "k1" });
    await refused(verifier.verifyAssertion(far), "iat is in the future");
  });

  it("refuses a missing sub, op or rid, and empty or non-string values", async () => {
    const { clock, verifier } = await setup();
    for (const claim of ["sub", "op", "rid"]) {
      const missing = await signRaw({ payload: assertionClaims(clock, { [claim]: undefined }), kid: "k1" });
      await refused(verifier.verifyAssertion(missing), `missing claim ${claim}`);
      const empty = await signRaw({ payload: assertionClaims(clock, { [claim]: "" }), kid: "k1" });
      await refused(verifier.verifyAssertion(empty), `claim ${claim} must be a non-empty string`);
      const number = await signRaw({ payload: assertionClaims(clock, { [claim]: 7 }), kid: "k1" });
      await refused(verifier.verifyAssertion(number), `claim ${claim} must be a non-empty string`);
    }
  });

  it("makes rid optional when job is present", async () => {
    const { clock, verifier, auth } = await setup();
    const chained = await mintToken({ auth, clock, sub: "u1", op: "sendWelcomeEmail", job: "job_12345678" });
    assert.deepEqual(await verifier.verifyAssertion(chained), {
      sub: "u1",
      op: "sendWelcomeEmail",
      rid: undefined,
      job: "job_12345678",
      token: chained,
    });
    const both = await mintToken({ auth, clock, sub: "u1", op: "sendWelcomeEmail", job: "job_12345678", rid: "r" });
    assert.equal((await verifier.verifyAssertion(both)).rid, "r");
  });

  it("refuses an empty job", async () => {
    const { clock, verifier } = await setup();
    const token = await signRaw({ payload: assertionClaims(clock, { job: "" }), kid: "k1" });
    await refused(verifier.verifyAssertion(token), "claim job must be a non-empty string");
  });

  it("decodes a header once, yet checks the shape, signature and claims of every token carrying it", async () => {
    const { clock, verifier, auth } = await setup();
    const token = await mintToken({ auth, clock, sub: "u1", op: "createUser", rid: "r" });
    assert.equal((await verifier.verifyAssertion(token)).sub, "u1");
    const [header, payload, signature] = token.split(".");
    const forged = base64url.encode(JSON.stringify(assertionClaims(clock, { sub: "admin" })));
    await refused(verifier.verifyAssertion(`${header}.${forged}.${signature}`), "bad signature");
    await refused(verifier.verifyAssertion(`${header}.${payload}`), "malformed token: expected a compact JWT (header.payload.signature)");
    await refused(verifier.verifyAssertion(`${header}.${payload}.${signature}.x`), "malformed token: expected a compact JWT (header.payload.signature)");
    for (let i = 0; i < 2; i++) await refused(verifier.verifyAssertion("e30.e30."), "malformed token: the header has no alg");
  });

  it("refuses malformed tokens", async () => {
    const { verifier } = await setup();
    for (const token of ["", "not-a-token", "a.b", "a.b.c.d.e"]) {
      await refused(verifier.verifyAssertion(token), "malformed token: expected a compact JWT (header.payload.signature)");
    }
    await refused(verifier.verifyAssertion("a.b.c"), "malformed token: the header is not base64url-encoded JSON");
    await refused(verifier.verifyAssertion("e30.e30."), "malformed token: the header has no alg");
    const objectKid = `${base64url.encode(JSON.stringify({ alg: "HS256", kid: { a: 1 } }))}.e30.x`;
    await refused(verifier.verifyAssertion(objectKid), "malformed token: kid must be a string");
  });

  it("refuses a correctly signed payload that is not a JSON object", async () => {
    const { verifier } = await setup();
    for (const body of ["not json", "[1,2]"]) {
      const token = await new CompactSign(encode(body)).setProtectedHeader({ alg: "HS256", kid: "k1" }).sign(encode(SECRET));
      await refused(verifier.verifyAssertion(token), /^malformed token: JWT Claims Set must be a top-level JSON object/);
    }
  });

  it("verifies a token without kid when exactly one key is configured", async () => {
    const { clock, verifier } = await setup();
    const token = await signRaw({ payload: assertionClaims(clock) });
    assert.equal((await verifier.verifyAssertion(token)).sub, "u1");
  });

  it("refuses a token without kid when several keys are configured", async () => {
    const second = { kid: "k2", alg: "HS256" as const, secret: "a-second-secret-of-at-least-32-bytes" };
    const { clock, verifier } = await setup(hsAuth({ keys: [{ kid: "k1", alg: "HS256", secret: SECRET }, second] }));
    const token = await signRaw({ payload: assertionClaims(clock) });
    await refused(verifier.verifyAssertion(token), /no kid header/);
    const withKid = await signRaw({ payload: assertionClaims(clock), kid: "k2", key: encode(second.secret) });
    assert.equal((await verifier.verifyAssertion(withKid)).sub, "u1");
  });
});

describe("admin tokens", () => {
  it("grants site admin only for site_admin exactly true", async () => {
    const { clock, verifier, auth } = await setup();
    const admin = await mintToken({ auth, clock, sub: "ops", siteAdmin: true });
    assert.deepEqual(await verifier.verifyAdmin(admin), { sub: "ops", siteAdmin: true });
    const plain = await mintToken({ auth, clock, sub: "ops" });
    assert.deepEqual(await verifier.verifyAdmin(plain), { sub: "ops", siteAdmin: false });
    for (const value of [false, "true", 1]) {
      const token = await mintToken({ auth, clock, sub: "ops", extraClaims: { site_admin: value } });
      assert.deepEqual(await verifier.verifyAdmin(token), { sub: "ops", siteAdmin: false });
    }
  });

  it("accepts a 24 h lifetime and refuses anything longer, with or without iat", async () => {
    const { clock, verifier, auth } = await setup();
    const day = await mintToken({ auth, clock, sub: "ops", ttlSeconds: 86_400 });
    assert.equal((await verifier.verifyAdmin(day)).sub, "ops");
    const long = await mintToken({ auth, clock, sub: "ops", ttlSeconds: 86_401 });
    await refused(verifier.verifyAdmin(long), "admin token lifetime 86401 s exceeds 86400 s");
    const noIat = await mintToken({ auth, clock, sub: "ops", ttlSeconds: 2 * 86_400, extraClaims: { iat: undefined } });
    await refused(verifier.verifyAdmin(noIat), "admin token lifetime 172800 s exceeds 86400 s");
    const noIatShort = await mintToken({ auth, clock, sub: "ops", ttlSeconds: 3600, extraClaims: { iat: undefined } });
    assert.equal((await verifier.verifyAdmin(noIatShort)).sub, "ops");
  });

  it("refuses a missing sub or exp, an expired token and a wrong aud", async () => {
    const { clock, verifier, auth } = await setup();
    await refused(verifier.verifyAdmin(await mintToken({ auth, clock, sub: "ops", extraClaims: { sub: undefined } })), "missing claim sub");
    await refused(verifier.verifyAdmin(await mintToken({ auth, clock, sub: "ops", extraClaims: { exp: undefined } })), "missing claim exp");
    await refused(verifier.verifyAdmin(await mintToken({ auth, clock, sub: "ops", extraClaims: { aud: "product" } })), /^wrong aud/);
    const token = await mintToken({ auth, clock, sub: "ops", ttlSeconds: 60 });
    clock.advance(91_000);
    await refused(verifier.verifyAdmin(token), "token expired");
  });

  it("refuses an admin token signed by an unknown kid", async () => {
    const { clock, verifier } = await setup();
    const token = await signRaw({ payload: { aud: "opqueue", sub: "ops", exp: nowS(clock) + 60, site_admin: true }, kid: "nope" });
    await refused(verifier.verifyAdmin(token), 'unknown kid "nope"');
  });
});

describe("asymmetric verification keys", () => {
  for (const alg of ["EdDSA", "ES256"] as const) {
    it(`verifies ${alg} tokens against a PEM public key and refuses other signers`, async () => {
      const pair = await generateKeyPair(alg, { extractable: true });
      const other = await generateKeyPair(alg, { extractable: true });
      const publicPem = await exportSPKI(pair.publicKey);
      const auth = hsAuth({ keys: [{ kid: "k1", alg: "HS256", secret: SECRET }, { kid: "a1", alg, public_key: publicPem }] });
      const { clock, verifier } = await setup(auth);
      const good = await signRaw({ payload: assertionClaims(clock), alg, kid: "a1", key: pair.privateKey });
      assert.equal((await verifier.verifyAssertion(good)).sub, "u1");
      const forged = await signRaw({ payload: assertionClaims(clock), alg, kid: "a1", key: other.privateKey });
      await refused(verifier.verifyAssertion(forged), "bad signature");
      // The classic key confusion: HS256 keyed with the public PEM must not pass for this key.
      const confused = await signRaw({ payload: assertionClaims(clock), alg: "HS256", kid: "a1", key: encode(publicPem) });
      await refused(verifier.verifyAssertion(confused), `alg "HS256" is not allowed for kid "a1" (expects ${alg})`);
    });
  }

  it("refuses at start-up a public key that does not match its declared alg", async () => {
    const pair = await generateKeyPair("ES256", { extractable: true });
    const auth = hsAuth({ keys: [{ kid: "a1", alg: "EdDSA", public_key: await exportSPKI(pair.publicKey) }] });
    await assert.rejects(TokenVerifier.create({ auth, clock: new ManualClock() }), (error: unknown) => {
      assert.ok(error instanceof ConfigError);
      assert.match(error.message, /auth\.keys\.0\.public_key: cannot import it as a EdDSA key/);
      return true;
    });
  });
});

describe("config-built verifier", () => {
  it("verifies with a secret resolved from secret_env by parseConfig", async () => {
    const config = parseConfig({
      raw: {
        openapi: "./product.openapi.yaml",
        target: { base_url: "http://127.0.0.1:3000", audience: "product" },
        auth: {
          keys: [{ kid: "k1", alg: "HS256", secret_env: "TEST_OPQUEUE_SECRET" }],
          delivery_key: { kid: "q1", alg: "HS256", secret: DELIVERY_SECRET },
        },
      },
      baseDir: "/tmp",
      env: { TEST_OPQUEUE_SECRET: SECRET },
    });
    const clock = new ManualClock();
    const verifier = await TokenVerifier.create({ auth: config.auth, clock });
    const token = await signRaw({ payload: assertionClaims(clock), kid: "k1" });
    assert.equal((await verifier.verifyAssertion(token)).rid, "req-1");
  });
});

describe("mintToken", () => {
  it("mints with the first HS256 key, its kid, and the default lifetimes", async () => {
    const pair = await generateKeyPair("EdDSA", { extractable: true });
    const auth = hsAuth({
      keys: [
        { kid: "a1", alg: "EdDSA", public_key: await exportSPKI(pair.publicKey) },
        { kid: "k1", alg: "HS256", secret: SECRET },
        { kid: "k2", alg: "HS256", secret: "a-second-secret-of-at-least-32-bytes" },
      ],
    });
    const clock = new ManualClock();
    const assertion = await mintToken({ auth, clock, sub: "u1", op: "createUser", rid: "r" });
    assert.deepEqual(decodeProtectedHeader(assertion), { alg: "HS256", kid: "k1", typ: "JWT" });
    const { payload } = await jwtVerify(assertion, encode(SECRET), { currentDate: new Date(clock.now()) });
    const iat = nowS(clock);
    assert.deepEqual(payload, { aud: "opqueue", iat, exp: iat + 300, sub: "u1", op: "createUser", rid: "r" });
    const admin = await mintToken({ auth, clock, sub: "ops", siteAdmin: true });
    const adminClaims = (await jwtVerify(admin, encode(SECRET), { currentDate: new Date(clock.now()) })).payload;
    assert.deepEqual(adminClaims, { aud: "opqueue", iat, exp: iat + 3600, sub: "ops", site_admin: true });
  });

  it("throws when no HS256 key is configured", async () => {
    const pair = await generateKeyPair("EdDSA", { extractable: true });
    const auth = hsAuth({ keys: [{ kid: "a1", alg: "EdDSA", public_key: await exportSPKI(pair.publicKey) }] });
    await assert.rejects(mintToken({ auth, clock: new ManualClock(), sub: "u1" }), /needs an HS256 key/);
  });
});

describe("delivery tokens", () => {
  const claims = {
    sub: "u1",
    op: "sendWelcomeEmail",
    job: "job_12345678",
    att: 2,
    rid: "req-1",
    authority: { kind: "request", request_id: "req-1", user_id: "u1" },
  };

  it("carries exactly the contract's claims and header", async () => {
    const clock = new ManualClock();
    const signer = await DeliverySigner.create({ deliveryKey: hsAuth().delivery_key, audience: "product", clock });
    const token = await signer.sign({ ...claims, timeoutMs: 30_000 });
    const { payload, protectedHeader } = await jwtVerify(token, encode(DELIVERY_SECRET), {
      audience: "product",
      algorithms: ["HS256"],
      currentDate: new Date(clock.now()),
    });
    const iat = nowS(clock);
    assert.deepEqual(protectedHeader, { alg: "HS256", kid: "q1", typ: "JWT" });
    assert.deepEqual(payload, {
      iss: "opqueue",
      aud: "product",
      sub: "u1",
      op: "sendWelcomeEmail",
      job: "job_12345678",
      att: 2,
      rid: "req-1",
      authority: { kind: "request", request_id: "req-1", user_id: "u1" },
      iat,
      exp: iat + 90,
      jti: "job_12345678:2",
    });
  });

  it("sets exp to iat + ceil(timeout in s) + 60 from the injected clock", async () => {
    const clock = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 999));
    const signer = await DeliverySigner.create({ deliveryKey: hsAuth().delivery_key, audience: "product", clock });
    const iat = Math.floor(clock.now() / 1000);
    for (const [timeoutMs, expected] of [[30_000, 90], [1500, 62], [30_001, 91], [1, 61]] as const) {
      const { payload } = await jwtVerify(await signer.sign({ ...claims, timeoutMs }), encode(DELIVERY_SECRET), {
        currentDate: new Date(clock.now()),
      });
      assert.equal(payload.iat, iat);
      assert.equal(payload.exp, iat + expected, `timeoutMs ${timeoutMs}`);
    }
  });

  it("has no JWKS for an HS256 delivery key", async () => {
    const signer = await DeliverySigner.create({ deliveryKey: hsAuth().delivery_key, audience: "product", clock: new ManualClock() });
    assert.equal(signer.jwks(), null);
  });

  for (const alg of ["EdDSA", "ES256"] as const) {
    it(`publishes a ${alg} public JWKS that verifies its tokens`, async () => {
      const clock = new ManualClock();
      const pair = await generateKeyPair(alg, { extractable: true });
      const signer = await DeliverySigner.create({
        deliveryKey: { kid: "q1", alg, private_key: await exportPKCS8(pair.privateKey) },
        audience: "product",
        clock,
      });
      const jwks = signer.jwks();
      assert.ok(jwks !== null);
      const [jwk] = jwks.keys as Array<Record<string, unknown>>;
      assert.ok(jwk !== undefined);
      assert.equal(jwk["kid"], "q1");
      assert.equal(jwk["alg"], alg);
      assert.equal(jwk["use"], "sig");
      assert.equal(jwk["d"], undefined, "the private part must never be published");
      const token = await signer.sign({ ...claims, timeoutMs: 10_000 });
      const { payload, protectedHeader } = await jwtVerify(token, createLocalJWKSet(jwks as JSONWebKeySet), {
        audience: "product",
        issuer: "opqueue",
        currentDate: new Date(clock.now()),
      });
      assert.deepEqual(protectedHeader, { alg, kid: "q1", typ: "JWT" });
      assert.equal(payload.jti, "job_12345678:2");
    });
  }

  it("refuses at start-up a delivery private key that is not PKCS#8 PEM", async () => {
    const pair = await generateKeyPair("EdDSA", { extractable: true });
    const create = DeliverySigner.create({
      deliveryKey: { kid: "q1", alg: "EdDSA", private_key: await exportSPKI(pair.publicKey) },
      audience: "product",
      clock: new ManualClock(),
    });
    await assert.rejects(create, (error: unknown) => error instanceof ConfigError && /auth\.delivery_key\.private_key/.test(error.message));
  });
});

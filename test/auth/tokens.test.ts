import assert from "node:assert/strict";
import { createHmac, generateKeyPairSync, sign as signBytes } from "node:crypto";
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
import { encodeSegment, isCanonicalSegment } from "../../src/auth/hs256.js";
import { DeliverySigner, mintToken, TokenError, TokenVerifier } from "../../src/auth/tokens.js";

const SECRET = "a-verification-secret-of-32-bytes-or-more";
const BASE64URL_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
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

async function setup(
  auth: Config["auth"] = hsAuth(),
): Promise<{ clock: ManualClock; verifier: TokenVerifier; auth: Config["auth"] }> {
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
    assert.deepEqual(await verifier.verifyAssertion(token), {
      sub: "u1",
      op: "createUser",
      rid: "req-1",
      job: undefined,
      token,
    });
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
    const token = await signRaw({
      payload: assertionClaims(clock),
      kid: "k1",
      key: encode("another-secret-of-at-least-32-bytes!!"),
    });
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
    // 32 bytes take 43 characters; the last one carries 2 spare bits that decoding ignores.
    const last = BASE64URL_ALPHABET.indexOf(signature.at(-1) ?? "");
    const spareBitSet = signature.slice(0, -1) + BASE64URL_ALPHABET.charAt(last ^ 1);
    assert.deepEqual(Buffer.from(spareBitSet, "base64url"), Buffer.from(signature, "base64url"));
    const notCanonical = /^malformed token: the signature is not canonical base64url/;
    await refused(verifier.verifyAssertion(`${body}${spareBitSet}`), notCanonical);
    await refused(verifier.verifyAssertion(`${body}${signature}=`), notCanonical);
    // U+0141 shares its low byte with "A": a byte-folding comparison would take one for the other.
    const folded = signature.replace(/[A-Za-z]/, (c) => String.fromCharCode(0x100 + c.charCodeAt(0)));
    await refused(verifier.verifyAssertion(`${body}${folded}`), notCanonical);
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
    const missing = await mintToken({
      auth,
      clock,
      sub: "u1",
      op: "createUser",
      rid: "r",
      extraClaims: { exp: undefined },
    });
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
    const token = await mintToken({
      auth,
      clock,
      sub: "u1",
      op: "createUser",
      rid: "r",
      extraClaims: { iat: undefined },
    });
    await refused(verifier.verifyAssertion(token), "missing claim iat");
  });

  it("refuses an iat more than 30 s in the future and accepts one within 30 s", async () => {
    const { clock, verifier } = await setup();
    const near = await signRaw({
      payload: assertionClaims(clock, { iat: nowS(clock) + 30, exp: nowS(clock) + 330 }),
      kid: "k1",
    });
    assert.equal((await verifier.verifyAssertion(near)).sub, "u1");
    const far = await signRaw({
      payload: assertionClaims(clock, { iat: nowS(clock) + 31, exp: nowS(clock) + 331 }),
      kid: "k1",
    });
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
    await refused(
      verifier.verifyAssertion(`${header}.${payload}`),
      "malformed token: expected a compact JWT (header.payload.signature)",
    );
    await refused(
      verifier.verifyAssertion(`${header}.${payload}.${signature}.x`),
      "malformed token: expected a compact JWT (header.payload.signature)",
    );
    for (let i = 0; i < 2; i++)
      await refused(verifier.verifyAssertion("e30.e30."), "malformed token: the header has no alg");
  });

  it("refuses malformed tokens", async () => {
    const { verifier } = await setup();
    for (const token of ["", "not-a-token", "a.b", "a.b.c.d.e"]) {
      await refused(
        verifier.verifyAssertion(token),
        "malformed token: expected a compact JWT (header.payload.signature)",
      );
    }
    await refused(verifier.verifyAssertion("a.b.c"), /^malformed token: the header is not canonical base64url/);
    await refused(
      verifier.verifyAssertion(`${base64url.encode("abc")}.e30.`),
      "malformed token: the header is not base64url-encoded JSON",
    );
    await refused(verifier.verifyAssertion("e30.e30."), "malformed token: the header has no alg");
    const objectKid = `${base64url.encode(JSON.stringify({ alg: "HS256", kid: { a: 1 } }))}.e30.`;
    await refused(verifier.verifyAssertion(objectKid), "malformed token: kid must be a string");
  });

  it("refuses a correctly signed payload that is not a JSON object", async () => {
    const { verifier } = await setup();
    for (const body of ["not json", "[1,2]"]) {
      const token = await new CompactSign(encode(body))
        .setProtectedHeader({ alg: "HS256", kid: "k1" })
        .sign(encode(SECRET));
      await refused(
        verifier.verifyAssertion(token),
        /^malformed token: JWT Claims Set must be a top-level JSON object/,
      );
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
  it("reads site_admin exactly true as role admin, and nothing else as any role", async () => {
    const { clock, verifier, auth } = await setup();
    const roleOf = async (token: string) => (await verifier.verifyAdmin(token)).role;
    assert.equal(await roleOf(await mintToken({ auth, clock, sub: "ops", siteAdmin: true })), "admin");
    assert.equal(await roleOf(await mintToken({ auth, clock, sub: "ops" })), null);
    for (const value of [false, "true", 1]) {
      assert.equal(
        await roleOf(await mintToken({ auth, clock, sub: "ops", extraClaims: { site_admin: value } })),
        null,
      );
    }
  });

  it("reads role, ops, jti, iat and exp; role decides over site_admin", async () => {
    const { clock, verifier, auth } = await setup();
    const iat = Math.floor(clock.now() / 1000);
    const operator = await mintToken({
      auth,
      clock,
      sub: "ops",
      role: "operator",
      operations: ["sendWelcomeEmail"],
      jti: "t-1",
    });
    assert.deepEqual(await verifier.verifyAdmin(operator), {
      sub: "ops",
      role: "operator",
      operations: ["sendWelcomeEmail"],
      jti: "t-1",
      iat,
      exp: iat + 3600,
    });
    for (const role of ["viewer", "operator", "admin"] as const) {
      const token = await mintToken({ auth, clock, sub: "ops", role, siteAdmin: true });
      assert.equal((await verifier.verifyAdmin(token)).role, role);
      assert.equal((await verifier.verifyAdmin(token)).operations, null);
    }
  });

  it("refuses an unknown role, ops on a role other than operator, and malformed ops or jti", async () => {
    const { clock, verifier, auth } = await setup();
    const claims = (extraClaims: Record<string, unknown>) => mintToken({ auth, clock, sub: "ops", extraClaims });
    for (const role of ["root", "Admin", "", 1, true, ["admin"]]) {
      await refused(verifier.verifyAdmin(await claims({ role })), "claim role must be one of viewer, operator, admin");
    }
    for (const role of ["viewer", "admin", undefined]) {
      await refused(
        verifier.verifyAdmin(await claims({ role, site_admin: true, ops: ["a"] })),
        "claim ops limits an operator; this token's role is not operator",
      );
    }
    for (const ops of [[], "a", [""], [1], null]) {
      await refused(
        verifier.verifyAdmin(await claims({ role: "operator", ops })),
        "claim ops must be a non-empty array of operationIds",
      );
    }
    await refused(
      verifier.verifyAdmin(await claims({ role: "admin", jti: 7 })),
      "claim jti must be a non-empty string",
    );
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
    await refused(
      verifier.verifyAdmin(await mintToken({ auth, clock, sub: "ops", extraClaims: { sub: undefined } })),
      "missing claim sub",
    );
    await refused(
      verifier.verifyAdmin(await mintToken({ auth, clock, sub: "ops", extraClaims: { exp: undefined } })),
      "missing claim exp",
    );
    await refused(
      verifier.verifyAdmin(await mintToken({ auth, clock, sub: "ops", extraClaims: { aud: "product" } })),
      /^wrong aud/,
    );
    const token = await mintToken({ auth, clock, sub: "ops", ttlSeconds: 60 });
    clock.advance(91_000);
    await refused(verifier.verifyAdmin(token), "token expired");
  });

  it("refuses an admin token signed by an unknown kid", async () => {
    const { clock, verifier } = await setup();
    const token = await signRaw({
      payload: { aud: "opqueue", sub: "ops", exp: nowS(clock) + 60, site_admin: true },
      kid: "nope",
    });
    await refused(verifier.verifyAdmin(token), 'unknown kid "nope"');
  });
});

describe("asymmetric verification keys", () => {
  for (const alg of ["EdDSA", "ES256"] as const) {
    it(`verifies ${alg} tokens against a PEM public key and refuses other signers`, async () => {
      const pair = await generateKeyPair(alg, { extractable: true });
      const other = await generateKeyPair(alg, { extractable: true });
      const publicPem = await exportSPKI(pair.publicKey);
      const auth = hsAuth({
        keys: [
          { kid: "k1", alg: "HS256", secret: SECRET },
          { kid: "a1", alg, public_key: publicPem },
        ],
      });
      const { clock, verifier } = await setup(auth);
      const good = await signRaw({ payload: assertionClaims(clock), alg, kid: "a1", key: pair.privateKey });
      assert.equal((await verifier.verifyAssertion(good)).sub, "u1");
      const forged = await signRaw({ payload: assertionClaims(clock), alg, kid: "a1", key: other.privateKey });
      await refused(verifier.verifyAssertion(forged), "bad signature");
      // The classic key confusion: HS256 keyed with the public PEM must not pass for this key.
      const confused = await signRaw({
        payload: assertionClaims(clock),
        alg: "HS256",
        kid: "a1",
        key: encode(publicPem),
      });
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
    clm: 1,
    rid: "req-1",
    authority: { kind: "request", request_id: "req-1", user_id: "u1" },
  };

  it("carries exactly the contract's claims and header, and clm (the claim it was signed for)", async () => {
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
      clm: 1,
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
    for (const [timeoutMs, expected] of [
      [30_000, 90],
      [1500, 62],
      [30_001, 91],
      [1, 61],
    ] as const) {
      const { payload } = await jwtVerify(await signer.sign({ ...claims, timeoutMs }), encode(DELIVERY_SECRET), {
        currentDate: new Date(clock.now()),
      });
      assert.equal(payload.iat, iat);
      assert.equal(payload.exp, iat + expected, `timeoutMs ${timeoutMs}`);
    }
  });

  it("has no JWKS for an HS256 delivery key", async () => {
    const signer = await DeliverySigner.create({
      deliveryKey: hsAuth().delivery_key,
      audience: "product",
      clock: new ManualClock(),
    });
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

  it("signs with the first key of a list of delivery keys, naming it by kid in the header", async () => {
    const clock = new ManualClock();
    const newSecret = "the-new-delivery-secret-of-32-bytes-or-more";
    const signer = await DeliverySigner.create({
      deliveryKey: [
        { kid: "q2", alg: "HS256", secret: newSecret },
        { kid: "q1", alg: "HS256", secret: DELIVERY_SECRET },
      ],
      audience: "product",
      clock,
    });
    const token = await signer.sign({ ...claims, timeoutMs: 30_000 });
    assert.deepEqual(decodeProtectedHeader(token), { alg: "HS256", kid: "q2", typ: "JWT" });
    await jwtVerify(token, encode(newSecret), { audience: "product", currentDate: new Date(clock.now()) });
    await assert.rejects(jwtVerify(token, encode(DELIVERY_SECRET), { currentDate: new Date(clock.now()) }));
    assert.equal(signer.jwks(), null, "HS256 keys have no public half, signing or not");
  });

  it("publishes every EdDSA and ES256 key of the list in its order, the signing one and the others, and no HS256 one", async () => {
    const clock = new ManualClock();
    const next = await generateKeyPair("EdDSA", { extractable: true });
    const previous = await generateKeyPair("ES256", { extractable: true });
    const signer = await DeliverySigner.create({
      deliveryKey: [
        { kid: "q-next", alg: "EdDSA", private_key: await exportPKCS8(next.privateKey) },
        { kid: "q-hs", alg: "HS256", secret: DELIVERY_SECRET },
        { kid: "q-previous", alg: "ES256", private_key: await exportPKCS8(previous.privateKey) },
      ],
      audience: "product",
      clock,
    });
    const jwks = signer.jwks();
    assert.ok(jwks !== null);
    const published = jwks.keys as Array<Record<string, unknown>>;
    assert.deepEqual(
      published.map((jwk) => [jwk["kid"], jwk["alg"], jwk["use"]]),
      [
        ["q-next", "EdDSA", "sig"],
        ["q-previous", "ES256", "sig"],
      ],
    );
    assert.ok(
      published.every((jwk) => jwk["d"] === undefined),
      "no private part is ever published",
    );
    const token = await signer.sign({ ...claims, timeoutMs: 10_000 });
    const { protectedHeader } = await jwtVerify(token, createLocalJWKSet(jwks as JSONWebKeySet), {
      audience: "product",
      issuer: "opqueue",
      currentDate: new Date(clock.now()),
    });
    assert.deepEqual(protectedHeader, { alg: "EdDSA", kid: "q-next", typ: "JWT" });

    // Back from EdDSA to HS256: the old public key stays published while HS256 signs.
    const hsFirst = await DeliverySigner.create({
      deliveryKey: [
        { kid: "q-hs", alg: "HS256", secret: DELIVERY_SECRET },
        { kid: "q-next", alg: "EdDSA", private_key: await exportPKCS8(next.privateKey) },
      ],
      audience: "product",
      clock,
    });
    assert.deepEqual(
      hsFirst.jwks()?.keys.map((jwk) => (jwk as Record<string, unknown>)["kid"]),
      ["q-next"],
    );
    assert.equal(decodeProtectedHeader(await hsFirst.sign({ ...claims, timeoutMs: 10_000 })).kid, "q-hs");
  });

  it("refuses at start-up a key of the list that cannot be imported, naming it by its place", async () => {
    const pair = await generateKeyPair("EdDSA", { extractable: true });
    const create = DeliverySigner.create({
      deliveryKey: [
        { kid: "q2", alg: "EdDSA", private_key: await exportPKCS8(pair.privateKey) },
        { kid: "q1", alg: "EdDSA", private_key: await exportSPKI(pair.publicKey) },
      ],
      audience: "product",
      clock: new ManualClock(),
    });
    await assert.rejects(
      create,
      (error: unknown) => error instanceof ConfigError && /auth\.delivery_key\.1\.private_key/.test(error.message),
    );
  });

  it("refuses at start-up a delivery private key that is not PKCS#8 PEM", async () => {
    const pair = await generateKeyPair("EdDSA", { extractable: true });
    const create = DeliverySigner.create({
      deliveryKey: { kid: "q1", alg: "EdDSA", private_key: await exportSPKI(pair.publicKey) },
      audience: "product",
      clock: new ManualClock(),
    });
    await assert.rejects(
      create,
      (error: unknown) => error instanceof ConfigError && /auth\.delivery_key\.private_key/.test(error.message),
    );
  });
});

/** The ways of spelling a segment's bytes otherwise, each of which a lenient decoder reads as the same bytes. */
const RESPELLINGS = {
  "padded with =": (segment: string) => segment + "=".repeat(4 - (segment.length % 4)),
  "spelled with + and /": (segment: string) => segment.replaceAll("-", "+").replaceAll("_", "/"),
  "with a spare bit set": (segment: string) =>
    segment.slice(0, -1) + BASE64URL_ALPHABET.charAt(BASE64URL_ALPHABET.indexOf(segment.at(-1) ?? "") ^ 1),
  "holding a space": (segment: string) => `${segment.slice(0, 4)} ${segment.slice(4)}`,
  "holding a character outside the alphabet": (segment: string) => `${segment.slice(0, 4)}!${segment.slice(4)}`,
} as const;

/** True when every re-spelling of `segment` is possible: its last group is partial and it uses `-` or `_`. */
const respellable = (segment: string): boolean => segment.length % 4 !== 0 && /[-_]/.test(segment);

describe("one token, one spelling (docs/tokens.md, Revision 2)", () => {
  it("isCanonicalSegment takes only unpadded base64url with no spare bit set", () => {
    for (const segment of ["", "e30", "eyJhIjoxfQ", "Pz8_", "Pj4-", "AA", "AAA", "QQ", "QUE"]) {
      assert.equal(isCanonicalSegment(segment), true, segment);
    }
    for (const segment of [
      "A",
      "AAAAA",
      "QR",
      "QUF",
      "AA==",
      "AAA=",
      "Pz8/",
      "Pj4+",
      "e3 0",
      "e30\n",
      "e3!0",
      "e3.0",
      "éé",
    ]) {
      assert.equal(isCanonicalSegment(segment), false, segment);
    }
  });

  /**
   * A verifier trusting an HS256 key and an EdDSA key (the jose path), and a signer for each: tokens whose segments
   * are signed as spelled, so only the spelling can be at fault.
   */
  async function spellingSetup() {
    const { publicKey, privateKey } = generateKeyPairSync("ed25519");
    const auth = hsAuth({
      keys: [
        { kid: "k1", alg: "HS256", secret: SECRET },
        { kid: "e1", alg: "EdDSA", public_key: publicKey.export({ type: "spki", format: "pem" }).toString() },
      ],
    });
    const { clock, verifier } = await setup(auth);
    const signers = {
      HS256: (input: string) => createHmac("sha256", SECRET).update(input).digest("base64url"),
      EdDSA: (input: string) => signBytes(null, Buffer.from(input), privateKey).toString("base64url"),
    };
    /** A canonical token of `alg` whose three segments can all be re-spelled, and a way to re-spell one. */
    function tokenFor(alg: keyof typeof signers) {
      for (let n = 0; n < 1000; n++) {
        // A filler of "?" and a counter: "?" (0x3F) encodes to "_" or "/"-like groups, the counter varies the rest.
        const header = encodeSegment({ alg, kid: alg === "HS256" ? "k1" : "e1", typ: "JWT", pad: `???${n}` });
        const payload = encodeSegment({ ...assertionClaims(clock), pad: `???${n}` });
        const sign = signers[alg];
        const signature = sign(`${header}.${payload}`);
        if (![header, payload, signature].every(respellable)) continue;
        return {
          token: `${header}.${payload}.${signature}`,
          respelled(segment: "header" | "payload" | "signature", respell: (text: string) => string): string {
            if (segment === "signature") return `${header}.${payload}.${respell(signature)}`;
            const input = segment === "header" ? `${respell(header)}.${payload}` : `${header}.${respell(payload)}`;
            return `${input}.${sign(input)}`;
          },
        };
      }
      throw new Error("no token with respellable segments was found");
    }
    return { verifier, tokenFor };
  }

  for (const alg of ["HS256", "EdDSA"] as const) {
    for (const segment of ["header", "payload", "signature"] as const) {
      it(`refuses ${alg} assertions and admin tokens whose ${segment} is padded, spelled with + or /, has a spare bit set or holds a non-alphabet character`, async () => {
        const { verifier, tokenFor } = await spellingSetup();
        const { token, respelled } = tokenFor(alg);
        // Verified first, so the decoded header and the verified token are cached when the other spellings come.
        assert.equal((await verifier.verifyAssertion(token)).sub, "u1");
        assert.equal((await verifier.verifyAdmin(token)).sub, "u1");
        const notCanonical = new RegExp(`^malformed token: the ${segment} is not canonical base64url`);
        for (const [how, respell] of Object.entries(RESPELLINGS)) {
          const other = respelled(segment, respell);
          const index = ["header", "payload", "signature"].indexOf(segment);
          const [original, changed] = [token, other].map((text) => text.split(".")[index] ?? "");
          // Node's decoder, like jose's, reads the other spelling as the same bytes: only the text differs.
          assert.deepEqual(Buffer.from(changed ?? "", "base64"), Buffer.from(original ?? "", "base64url"), how);
          await refused(verifier.verifyAssertion(other), notCanonical);
          await refused(verifier.verifyAdmin(other), notCanonical);
        }
        assert.equal((await verifier.verifyAssertion(token)).sub, "u1");
      });
    }
  }

  it("refuses a segment whose length leaves one character in its last group", async () => {
    const { clock, verifier, auth } = await setup();
    const [header, payload] = (await mintToken({ auth, clock, sub: "u1", op: "createUser", rid: "r" })).split(".");
    // Six bits cannot end an encoding of whole bytes, whatever the characters.
    let tooLong = `${payload}A`;
    while (tooLong.length % 4 !== 1) tooLong += "A";
    const input = `${header}.${tooLong}`;
    const token = `${input}.${createHmac("sha256", SECRET).update(input).digest("base64url")}`;
    await refused(verifier.verifyAssertion(token), /^malformed token: the payload is not canonical base64url/);
  });
});

describe("request ids (rid, docs/tokens.md Revision 2)", () => {
  const RULE = 'claim rid must be 1..255 characters of visible ASCII (%x21-7E), neither "." nor ".."';
  const refusedIds: Array<[what: string, rid: string, message: string]> = [
    ["empty", "", "claim rid must be a non-empty string"],
    ["256 characters", "r".repeat(256), RULE],
    ["a space", "req 1", RULE],
    ["a CR/LF", "req-1\r\nx-admin: 1", RULE],
    ["a LF", "req-1\n", RULE],
    ["a tab", "req\t1", RULE],
    ["a DEL", "req-1\x7f", RULE],
    ["a NUL", "req-1\u0000", RULE],
    ["a Latin-1 letter", "réq-1", RULE],
    ["an emoji", "req-\u{1F600}", RULE],
    ["a non-breaking space", "req\u00a01", RULE],
    ["the dot-segment .", ".", RULE],
    ["the dot-segment ..", "..", RULE],
  ];

  for (const [what, rid, message] of refusedIds) {
    it(`refuses a rid that is ${what}, on a root call and on a chained call`, async () => {
      const { clock, verifier, auth } = await setup();
      const root = await mintToken({ auth, clock, sub: "u1", op: "createUser", rid });
      await refused(verifier.verifyAssertion(root), message);
      const chained = await mintToken({ auth, clock, sub: "u1", op: "sendWelcomeEmail", job: "job_12345678", rid });
      await refused(verifier.verifyAssertion(chained), message);
    });
  }

  it("accepts 255 visible ASCII characters, every one of %x21-7E, and dots inside a longer id", async () => {
    const { clock, verifier, auth } = await setup();
    const visible = Array.from({ length: 0x7e - 0x21 + 1 }, (_, i) => String.fromCharCode(0x21 + i)).join("");
    const longest = visible.repeat(3).slice(0, 255);
    assert.equal(longest.length, 255);
    for (const rid of [longest, visible, "...", ".a", "a..", "cron:nightly:2026-11-21T03:00:00.000Z", "a/b?c#d%2F"]) {
      const token = await mintToken({ auth, clock, sub: "u1", op: "createUser", rid });
      assert.equal((await verifier.verifyAssertion(token)).rid, rid);
    }
  });
});

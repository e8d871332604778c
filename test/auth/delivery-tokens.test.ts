/**
 * Delivery tokens coming back to opqueue on a target's calls (docs/tokens.md, "Delivery tokens on the attempt calls"):
 * checked against every delivery key by kid, with the issuer, audience and the claims that name the attempt; an
 * expired token is not refused but said to be expired, for the store to judge.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, it } from "node:test";
import { exportPKCS8, generateKeyPair, SignJWT, type JWTPayload } from "jose";
import { ManualClock } from "../../src/clock.js";
import type { DeliveryKeysConfig } from "../../src/config.js";
import { deliveryTokenHash, DeliveryTokenVerifier } from "../../src/auth/delivery-tokens.js";
import { DeliverySigner, TokenError } from "../../src/auth/tokens.js";

const SECRET = "a-delivery-secret-of-at-least-32-bytes";
const OLD_SECRET = "an-older-delivery-secret-of-32-bytes-too";
const KEYS: DeliveryKeysConfig = [
  { kid: "d2", alg: "HS256", secret: SECRET },
  { kid: "d1", alg: "HS256", secret: OLD_SECRET },
];
const CLAIMS = {
  sub: "u1",
  op: "transcodeVideo",
  job: "job_12345678",
  att: 3,
  clm: 4,
  rid: "req-1",
  authority: { kind: "request", request_id: "req-1", user_id: "u1" },
  timeoutMs: 30_000,
};

async function setup(deliveryKey: DeliveryKeysConfig = KEYS) {
  const clock = new ManualClock(Date.UTC(2026, 10, 21, 12, 0, 0));
  const verifier = await DeliveryTokenVerifier.create({ deliveryKey, audience: "product", clock });
  const signer = await DeliverySigner.create({ deliveryKey, audience: "product", clock });
  return { clock, verifier, signer };
}

/** Signs `payload` with `secret` under the kid `kid` (null: no kid). */
function signHs(payload: JWTPayload, kid: string | null = "d2", secret = SECRET): Promise<string> {
  return new SignJWT(payload)
    .setProtectedHeader(kid === null ? { alg: "HS256" } : { alg: "HS256", kid })
    .sign(new TextEncoder().encode(secret));
}

/** The claims opqueue signs for CLAIMS at `iat`, changed by `change`. */
function payload(iat: number, change: Record<string, unknown> = {}): JWTPayload {
  return {
    iss: "opqueue",
    aud: "product",
    sub: "u1",
    op: "transcodeVideo",
    job: "job_12345678",
    att: 3,
    rid: "req-1",
    authority: CLAIMS.authority,
    iat,
    exp: iat + 90,
    jti: "job_12345678:3",
    ...change,
  };
}

describe("DeliveryTokenVerifier", () => {
  it("reads the job, attempt and operation a token of opqueue's names, with its digest, not expired", async () => {
    const { verifier, signer } = await setup();
    const token = await signer.sign(CLAIMS);
    const caller = await verifier.verify(token);
    assert.deepEqual(caller, {
      jobId: "job_12345678",
      attempt: 3,
      operationId: "transcodeVideo",
      token: { hash: createHash("sha256").update(token).digest("base64url"), expired: false, claim: 4 },
    });
    assert.equal(deliveryTokenHash(token), caller.token.hash);
  });

  it("says a token is expired once exp is 30 s past, and still reads it", async () => {
    const { clock, verifier, signer } = await setup();
    const token = await signer.sign(CLAIMS);
    clock.advance((90 + 29) * 1000);
    assert.equal((await verifier.verify(token)).token.expired, false, "within the tolerance");
    clock.advance(1000);
    const late = await verifier.verify(token);
    assert.equal(late.token.expired, true);
    assert.equal(late.attempt, 3);
  });

  it("checks a token of an older key of the list by its kid, and refuses kids it does not hold", async () => {
    const { clock, verifier } = await setup();
    const iat = Math.floor(clock.now() / 1000);
    assert.equal((await verifier.verify(await signHs(payload(iat), "d1", OLD_SECRET))).attempt, 3);
    await assert.rejects(verifier.verify(await signHs(payload(iat), "d1", SECRET)), new TokenError("bad signature"));
    await assert.rejects(verifier.verify(await signHs(payload(iat), "k1")), /unknown kid "k1"/);
    await assert.rejects(verifier.verify(await signHs(payload(iat), null)), /no kid header/);
  });

  it("accepts a token without kid when one delivery key is configured", async () => {
    const { clock, verifier } = await setup({ kid: "q1", alg: "HS256", secret: SECRET });
    assert.equal(
      (await verifier.verify(await signHs(payload(Math.floor(clock.now() / 1000)), null))).jobId,
      "job_12345678",
    );
  });

  it("refuses a wrong issuer or audience, a malformed job, att or jti, a future iat and missing times", async () => {
    const { clock, verifier } = await setup();
    const iat = Math.floor(clock.now() / 1000);
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ iss: "someone" }, /wrong iss/],
      [{ iss: undefined }, /wrong iss/],
      [{ aud: "opqueue" }, /wrong aud/],
      [{ aud: ["product"] }, /wrong aud/],
      [{ job: "" }, /claim job/],
      [{ job: 5 }, /claim job/],
      [{ op: undefined }, /claim op/],
      [{ att: 0 }, /claim att/],
      [{ att: 1.5 }, /claim att/],
      [{ att: "3" }, /claim att/],
      [{ jti: "job_12345678:4" }, /claim jti/],
      [{ jti: undefined }, /claim jti/],
      [{ iat: iat + 31 }, /iat is in the future/],
      [{ iat: undefined }, /missing claim iat/],
      [{ exp: undefined }, /missing claim exp/],
      [{ exp: "soon" }, /claim exp must be a number/],
      [{ nbf: iat + 31 }, /not yet valid/],
    ];
    for (const [change, message] of cases) {
      await assert.rejects(verifier.verify(await signHs(payload(iat, change))), message, JSON.stringify(change));
    }
  });

  it("refuses alg none, another algorithm than the key's, and a non-canonical spelling", async () => {
    const { clock, verifier, signer } = await setup();
    const iat = Math.floor(clock.now() / 1000);
    const [, body] = (await signHs(payload(iat))).split(".");
    const none = `${Buffer.from(JSON.stringify({ alg: "none", kid: "d2" })).toString("base64url")}.${body}.`;
    await assert.rejects(verifier.verify(none), /alg "none"/);
    const pair = await generateKeyPair("ES256");
    const es = await new SignJWT(payload(iat)).setProtectedHeader({ alg: "ES256", kid: "d2" }).sign(pair.privateKey);
    await assert.rejects(verifier.verify(es), /not allowed for kid "d2"/);
    await assert.rejects(verifier.verify(`${await signer.sign(CLAIMS)}=`), /not canonical/);
  });

  it("checks EdDSA and ES256 tokens with the public half of the delivery key, expired or not", async () => {
    for (const alg of ["EdDSA", "ES256"] as const) {
      const pair = await generateKeyPair(alg, { extractable: true });
      const { clock, verifier, signer } = await setup({
        kid: "p1",
        alg,
        private_key: await exportPKCS8(pair.privateKey),
      });
      const token = await signer.sign(CLAIMS);
      assert.equal((await verifier.verify(token)).token.expired, false, alg);
      clock.advance(3_600_000);
      assert.equal((await verifier.verify(token)).token.expired, true, alg);
      const other = await generateKeyPair(alg);
      const forged = await new SignJWT(payload(Math.floor(clock.now() / 1000)))
        .setProtectedHeader({ alg, kid: "p1" })
        .sign(other.privateKey);
      await assert.rejects(verifier.verify(forged), /bad signature/, alg);
    }
  });
});

/**
 * Delivery tokens coming back: a target that took an attempt asynchronously calls opqueue's heartbeat, complete and
 * fail routes with the delivery token of that attempt (docs/tokens.md, "Delivery tokens on the attempt calls").
 * opqueue checks it as its products do (every key of `auth.delivery_key`, chosen by `kid`; `iss`, `aud`), and reads
 * the job and attempt it names. Its `exp` is not a refusal here but a fact handed on: an attempt the target took
 * asynchronously outlives its token, and the store decides whether an expired token may still act on it
 * (src/store/external-calls.ts).
 */
import { createHash } from "node:crypto";
import { compactVerify, importJWK, type CryptoKey, type JWTPayload } from "jose";
import type { Clock } from "../clock.js";
import { ConfigError, deliveryKeyList, type DeliveryKeysConfig } from "../config.js";
import type { AttemptToken } from "../job/job.js";
import { hasValidHs256Signature } from "./hs256.js";
import { importDeliveryKey, type KeyAlgorithm } from "./keys.js";
import { CLOCK_TOLERANCE_S, quote, readHeader, TokenError, translateJoseError } from "./tokens.js";

/** A delivery token that checked out, and what it names. */
export interface DeliveryCaller {
  jobId: string;
  attempt: number;
  operationId: string;
  /** Its digest, and whether its `exp` has passed. */
  token: AttemptToken;
}

/**
 * The digest by which the store knows a delivery token (`async_token_hash`): SHA-256 of its text, base64url. Tokens
 * have one spelling each, so one token has one digest; and the digest cannot be turned back into a token.
 */
export function deliveryTokenHash(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("base64url");
}

/** A key that checks delivery tokens: an HS256 secret, or the public half of an EdDSA or ES256 delivery key. */
interface CheckingKey {
  kid: string;
  alg: KeyAlgorithm;
  key: Uint8Array | CryptoKey;
}

/** Checks delivery tokens against every key of `auth.delivery_key`. Import the keys once (async factory). */
export class DeliveryTokenVerifier {
  private readonly byKid: Map<string, CheckingKey>;

  private constructor(
    private readonly keys: readonly CheckingKey[],
    private readonly audience: string,
    private readonly clock: Clock,
  ) {
    this.byKid = new Map(keys.map((key) => [key.kid, key]));
  }

  /**
   * Imports every key of `auth.delivery_key`, signing or not: during a rotation, tokens an older key signed are still
   * out there with their attempts. A key that cannot be imported throws `ConfigError` naming it.
   */
  static async create(options: {
    deliveryKey: DeliveryKeysConfig;
    audience: string;
    clock: Clock;
  }): Promise<DeliveryTokenVerifier> {
    const keys = await Promise.all(
      deliveryKeyList(options.deliveryKey).map(async ({ where, key }): Promise<CheckingKey> => {
        const imported = await importDeliveryKey(key, where);
        if (imported.publicJwk === null) return imported.signing;
        try {
          return {
            kid: key.kid,
            alg: key.alg,
            key: (await importJWK({ ...imported.publicJwk, alg: key.alg }, key.alg)) as CryptoKey,
          };
        } catch (error) {
          throw new ConfigError(`config: ${where}: cannot import its public half: ${(error as Error).message}`);
        }
      }),
    );
    return new DeliveryTokenVerifier(keys, options.audience, options.clock);
  }

  /** Verifies a delivery token; throws `TokenError` saying why it is refused. An expired token is not refused. */
  async verify(token: string): Promise<DeliveryCaller> {
    const header = readHeader(token);
    if (header.alg.toLowerCase() === "none") throw new TokenError('alg "none" is not accepted');
    const key = this.selectKey(header.kid);
    if (header.alg !== key.alg) {
      throw new TokenError(`alg ${quote(header.alg)} is not allowed for kid ${quote(key.kid)} (expects ${key.alg})`);
    }
    const payload = await this.verifiedPayload(token, key, header.crit);
    const { claim, ...named } = this.claims(payload);
    return { ...named, token: { hash: deliveryTokenHash(token), expired: this.expired(payload), claim } };
  }

  private selectKey(kid: string | undefined): CheckingKey {
    if (kid === undefined) {
      // As for the other tokens: with several keys, guessing would let any of them vouch for the token.
      const only = this.keys.length === 1 ? this.keys[0] : undefined;
      if (only === undefined)
        throw new TokenError("token has no kid header, which is required when several delivery keys are configured");
      return only;
    }
    const key = this.byKid.get(kid);
    if (key === undefined) throw new TokenError(`unknown kid ${quote(kid)} (not a delivery key)`);
    return key;
  }

  /** The claims set, once the signature holds; its time claims are read by the caller. */
  private async verifiedPayload(token: string, key: CheckingKey, crit: unknown): Promise<JWTPayload> {
    let text: string;
    if (key.alg === "HS256") {
      if (crit !== undefined) throw new TokenError("unsupported token: the crit header is not supported");
      if (!hasValidHs256Signature(token, key.key as Uint8Array)) throw new TokenError("bad signature");
      text = Buffer.from(token.slice(token.indexOf(".") + 1, token.lastIndexOf(".")), "base64url").toString("utf8");
    } else {
      try {
        // The signature alone: jose's JWT checks would refuse an expired token, which is the caller's to judge.
        text = new TextDecoder().decode((await compactVerify(token, key.key, { algorithms: [key.alg] })).payload);
      } catch (error) {
        throw translateJoseError(error);
      }
    }
    let payload: unknown;
    try {
      payload = JSON.parse(text);
    } catch {
      payload = undefined;
    }
    if (typeof payload !== "object" || payload === null || Array.isArray(payload)) {
      throw new TokenError("malformed token: JWT Claims Set must be a top-level JSON object");
    }
    return payload as JWTPayload;
  }

  /** The claims of a delivery token that name its attempt, each checked. */
  private claims(payload: JWTPayload): Omit<DeliveryCaller, "token"> & { claim: number | null } {
    if (payload.iss !== "opqueue") throw new TokenError(`wrong iss ${quote(payload.iss)} (expected "opqueue")`);
    if (payload.aud !== this.audience)
      throw new TokenError(`wrong aud ${quote(payload.aud)} (expected ${quote(this.audience)})`);
    const { job, att, op, jti, clm } = payload as {
      job?: unknown;
      att?: unknown;
      op?: unknown;
      jti?: unknown;
      clm?: unknown;
    };
    if (typeof job !== "string" || job === "") throw new TokenError("claim job must be a non-empty string");
    if (typeof op !== "string" || op === "") throw new TokenError("claim op must be a non-empty string");
    if (typeof att !== "number" || !Number.isSafeInteger(att) || att < 1)
      throw new TokenError("claim att must be an integer ≥ 1");
    // jti is "{job}:{att}" in every token opqueue signs: anything else was not made by it.
    if (jti !== `${job}:${att}`) throw new TokenError(`claim jti must be "{job}:{att}"`);
    if (clm !== undefined && (typeof clm !== "number" || !Number.isSafeInteger(clm) || clm < 1)) {
      throw new TokenError("claim clm must be an integer ≥ 1");
    }
    return { jobId: job, attempt: att, operationId: op, claim: clm ?? null };
  }

  /** Whether the token's `exp` has passed (30 s of tolerance); refuses malformed time claims and a future `iat`. */
  private expired(payload: JWTPayload): boolean {
    const now = Math.floor(this.clock.now() / 1000);
    for (const claim of ["exp", "iat", "nbf"] as const) {
      if (payload[claim] !== undefined && typeof payload[claim] !== "number")
        throw new TokenError(`claim ${claim} must be a number`);
    }
    if (payload.exp === undefined) throw new TokenError("missing claim exp");
    if (payload.iat === undefined) throw new TokenError("missing claim iat");
    if (payload.iat > now + CLOCK_TOLERANCE_S) throw new TokenError("iat is in the future");
    if (payload.nbf !== undefined && payload.nbf > now + CLOCK_TOLERANCE_S)
      throw new TokenError("token not yet valid (nbf)");
    return payload.exp <= now - CLOCK_TOLERANCE_S;
  }
}

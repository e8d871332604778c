/**
 * The three kinds of token of docs/tokens.md: enqueue assertions and admin tokens (verified here against
 * `auth.keys`), and delivery tokens (signed here with `auth.delivery_key`).
 *
 * Verification runs in a fixed order so the first problem is the one reported: the shape (three segments, each
 * in its one canonical spelling), the header (`alg: none`, key choice by `kid`, the key's algorithm), then the
 * signature and `exp`/`nbf` (jose), then the claims of the token kind. Claims are only read once the signature holds.
 */
import { decodeProtectedHeader, errors, jwtVerify, SignJWT, type JWK, type JWTPayload } from "jose";
import type { Clock } from "../clock.js";
import { ConfigError, deliveryKeyList, type Config, type DeliveryKeysConfig } from "../config.js";
import {
  encodeSegment,
  hasValidHs256Signature,
  isCanonicalSegment,
  isValidRequestId,
  REQUEST_ID_RULE,
  signHs256,
} from "./hs256.js";
import { importDeliveryKey, importVerifyKey, secretBytes, type ImportedKey } from "./keys.js";

/** Why a token was refused; the message is safe to show to the client. */
export class TokenError extends Error {
  override readonly name = "TokenError";
}

/** A verified enqueue assertion. */
export interface EnqueueAssertion {
  sub: string;
  op: string;
  rid: string | undefined;
  job: string | undefined;
  /** The raw compact JWT, kept as evidence in the stored authority. */
  token: string;
}

/**
 * The roles of an admin token, least to most: `viewer` reads, `operator` also acts on jobs and flow control, `admin`
 * may do everything (docs/api.md, "Roles"). Each includes the ones before it.
 */
export const ADMIN_ROLES = ["viewer", "operator", "admin"] as const;
/** A role of `ADMIN_ROLES`. */
export type AdminRole = (typeof ADMIN_ROLES)[number];

/** Whether `role` may do what `needed` may. */
export function roleIncludes(role: AdminRole, needed: AdminRole): boolean {
  return ADMIN_ROLES.indexOf(role) >= ADMIN_ROLES.indexOf(needed);
}

/** A verified admin token. */
export interface AdminIdentity {
  sub: string;
  /** The `role` claim; `admin` for `site_admin: true` without one; null when the token carries neither. */
  role: AdminRole | null;
  /** An operator's `ops` claim: the operations its actions are limited to; null when not limited. */
  operations: readonly string[] | null;
  /** The `jti` claim, by which the token can be revoked. */
  jti: string | undefined;
  /** The `iat` claim (seconds), compared with a revocation's "issued before". */
  iat: number | undefined;
  /** The `exp` claim (seconds). */
  exp: number;
}

/** Clock skew tolerated on `exp`, `nbf` and a future `iat`, in seconds. */
export const CLOCK_TOLERANCE_S = 30;
/** Longest allowed enqueue assertion lifetime (`exp - iat`), in seconds. */
export const MAX_ASSERTION_LIFETIME_S = 300;
/** Longest allowed admin token lifetime (`exp - (iat ?? now)`), in seconds. */
export const MAX_ADMIN_LIFETIME_S = 86_400;
/** Extra validity of a delivery token beyond the attempt's timeout, so a slow target can still check it. */
export const DELIVERY_TOKEN_GRACE_S = 60;

const nowSeconds = (clock: Clock): number => Math.floor(clock.now() / 1000);

/** Client-controlled text put in a message: quoted and cut, so an error never echoes a huge or odd value. */
export function quote(value: unknown): string {
  const text = typeof value === "string" ? value : (JSON.stringify(value) ?? String(value));
  return JSON.stringify(text.length > 64 ? `${text.slice(0, 64)}...` : text);
}

/** Most verified HS256 tokens remembered; the cache is emptied when full. */
const VERIFIED_CACHE_SIZE = 10_000;

/** Most distinct token headers remembered; an issuer uses one per key, so a few suffice. */
const HEADER_CACHE_SIZE = 64;

/** What opqueue reads of a token's protected header. */
export type TokenHeader = { alg: string; kid: string | undefined; crit: unknown };

/** Decoded headers by their encoded segment: every token of one issuer and key carries the same one. */
const headers = new Map<string, TokenHeader>();

/**
 * The protected header of a compact JWS, after every segment's spelling checked out (see "One token, one spelling" in
 * docs/tokens.md); throws `TokenError` for anything else.
 */
export function readHeader(token: string): TokenHeader {
  // Three dot-separated parts is the compact JWS form; a JWE (five parts) is not a token we accept.
  const firstDot = typeof token === "string" ? token.indexOf(".") : -1;
  const lastDot = firstDot < 0 ? -1 : token.lastIndexOf(".");
  if (lastDot <= firstDot || token.indexOf(".", firstDot + 1) !== lastDot) {
    throw new TokenError("malformed token: expected a compact JWT (header.payload.signature)");
  }
  // Before any cache is consulted: the caches are keyed by text, so they must only ever see the one spelling.
  const segments = {
    header: token.slice(0, firstDot),
    payload: token.slice(firstDot + 1, lastDot),
    signature: token.slice(lastDot + 1),
  };
  for (const [name, text] of Object.entries(segments)) {
    if (!isCanonicalSegment(text)) {
      throw new TokenError(
        `malformed token: the ${name} is not canonical base64url (unpadded, no + or /, no spare bits set)`,
      );
    }
  }
  const segment = segments.header;
  const known = headers.get(segment);
  if (known !== undefined) return known;
  let header: Record<string, unknown>;
  try {
    header = decodeProtectedHeader(token) as Record<string, unknown>;
  } catch {
    throw new TokenError("malformed token: the header is not base64url-encoded JSON");
  }
  const { alg, kid, crit } = header;
  if (typeof alg !== "string") throw new TokenError("malformed token: the header has no alg");
  if (kid !== undefined && typeof kid !== "string") throw new TokenError("malformed token: kid must be a string");
  if (headers.size >= HEADER_CACHE_SIZE) headers.clear();
  const decoded = { alg, kid, crit };
  headers.set(segment, decoded);
  return decoded;
}

/** Maps a jose failure to a client-safe message; anything unexpected is still a refusal, never a 5xx. */
export function translateJoseError(error: unknown): TokenError {
  if (error instanceof errors.JWTExpired) return new TokenError("token expired");
  if (error instanceof errors.JWSSignatureVerificationFailed) return new TokenError("bad signature");
  if (error instanceof errors.JOSEAlgNotAllowed) return new TokenError("algorithm not allowed for this key");
  if (error instanceof errors.JWTClaimValidationFailed) {
    if (error.claim === "nbf") return new TokenError("token not yet valid (nbf)");
    if (error.reason === "invalid") return new TokenError(`claim ${error.claim} must be a number`);
    return new TokenError(`invalid claim ${error.claim}`);
  }
  if (error instanceof errors.JOSENotSupported) return new TokenError(`unsupported token: ${error.message}`);
  if (error instanceof errors.JWSInvalid || error instanceof errors.JWTInvalid) {
    return new TokenError(`malformed token: ${error.message}`);
  }
  return new TokenError("invalid token");
}

function requireString(payload: JWTPayload, claim: string): string {
  const value = payload[claim];
  if (value === undefined) throw new TokenError(`missing claim ${claim}`);
  if (typeof value !== "string" || value === "") throw new TokenError(`claim ${claim} must be a non-empty string`);
  return value;
}

function optionalString(payload: JWTPayload, claim: string): string | undefined {
  return payload[claim] === undefined ? undefined : requireString(payload, claim);
}

function requireNumber(payload: JWTPayload, claim: "exp" | "iat"): number {
  // jose has already refused a present non-number; only absence is left to check.
  const value = payload[claim];
  if (value === undefined) throw new TokenError(`missing claim ${claim}`);
  return value;
}

/**
 * An admin token's role and scope. `role` decides when present; without it, `site_admin: true` (exactly `true`: a
 * string "true" or a 1 from a sloppy issuer grants nothing) means `admin`. `ops` limits an operator to operations, and
 * is refused on any other role rather than ignored, so an issuer who meant to limit an admin learns it cannot.
 */
function readRole(payload: JWTPayload): { role: AdminRole | null; operations: readonly string[] | null } {
  const claimed = payload["role"];
  let role: AdminRole | null;
  if (claimed === undefined) role = payload["site_admin"] === true ? "admin" : null;
  else if (typeof claimed === "string" && (ADMIN_ROLES as readonly string[]).includes(claimed)) {
    role = claimed as AdminRole;
  } else throw new TokenError(`claim role must be one of ${ADMIN_ROLES.join(", ")}`);
  const ops = payload["ops"];
  if (ops === undefined) return { role, operations: null };
  if (role !== "operator") throw new TokenError("claim ops limits an operator; this token's role is not operator");
  if (!Array.isArray(ops) || ops.length === 0 || ops.some((op) => typeof op !== "string" || op === "")) {
    throw new TokenError("claim ops must be a non-empty array of operationIds");
  }
  return { role, operations: Object.freeze([...(ops as string[])]) };
}

/** Verifies enqueue assertions and admin tokens against auth.keys. Import keys once (async factory). */
export class TokenVerifier {
  private readonly keysByKid: Map<string, ImportedKey>;
  /** HS256 tokens whose signature already checked out, with their claims (a client reusing a token pays once). */
  private readonly verified = new Map<string, JWTPayload>();

  private constructor(
    private readonly keys: readonly ImportedKey[],
    private readonly audience: string,
    private readonly clock: Clock,
  ) {
    this.keysByKid = new Map(keys.map((key) => [key.kid, key]));
  }

  /** Imports every key of `auth.keys`; a key that cannot be imported throws `ConfigError`. */
  static async create(options: { auth: Config["auth"]; clock: Clock }): Promise<TokenVerifier> {
    const keys = await Promise.all(options.auth.keys.map((key, i) => importVerifyKey(key, `auth.keys.${i}`)));
    return new TokenVerifier(keys, options.auth.audience, options.clock);
  }

  /** Verifies an enqueue assertion; throws `TokenError` saying why it is refused. */
  async verifyAssertion(token: string): Promise<EnqueueAssertion> {
    const payload = await this.verifyCommon(token);
    const exp = requireNumber(payload, "exp");
    const iat = requireNumber(payload, "iat");
    const sub = requireString(payload, "sub");
    const op = requireString(payload, "op");
    const job = optionalString(payload, "job");
    // A chained call is anchored by its parent job, which already carries the chain's request id.
    const rid = job === undefined ? requireString(payload, "rid") : optionalString(payload, "rid");
    // Also on a chained call: the service ignores its rid, but a log, a header or a proxy on the way may not.
    if (rid !== undefined && !isValidRequestId(rid)) throw new TokenError(`claim rid must be ${REQUEST_ID_RULE}`);
    this.checkIssuedAt(iat);
    const lifetime = exp - iat;
    if (lifetime > MAX_ASSERTION_LIFETIME_S) {
      throw new TokenError(`assertion lifetime ${lifetime} s exceeds ${MAX_ASSERTION_LIFETIME_S} s`);
    }
    return { sub, op, rid, job, token };
  }

  /** Verifies an admin token; throws `TokenError` saying why it is refused. */
  async verifyAdmin(token: string): Promise<AdminIdentity> {
    const payload = await this.verifyCommon(token);
    const exp = requireNumber(payload, "exp");
    const sub = requireString(payload, "sub");
    const iat = payload.iat;
    if (iat !== undefined) this.checkIssuedAt(iat);
    const lifetime = exp - (iat ?? nowSeconds(this.clock));
    if (lifetime > MAX_ADMIN_LIFETIME_S) {
      throw new TokenError(`admin token lifetime ${lifetime} s exceeds ${MAX_ADMIN_LIFETIME_S} s`);
    }
    const jti = optionalString(payload, "jti");
    const { role, operations } = readRole(payload);
    return { sub, role, operations, jti, iat, exp };
  }

  /** Header, key, signature, `exp`/`nbf` and `aud`: what every token kind shares. */
  private async verifyCommon(token: string): Promise<JWTPayload> {
    const header = readHeader(token);
    if (header.alg.toLowerCase() === "none") throw new TokenError('alg "none" is not accepted');
    const key = this.selectKey(header.kid);
    if (header.alg !== key.alg) {
      throw new TokenError(`alg ${quote(header.alg)} is not allowed for kid ${quote(key.kid)} (expects ${key.alg})`);
    }
    let payload: JWTPayload;
    if (key.alg === "HS256") {
      payload = this.verifyHs256(token, key, header.crit);
    } else {
      try {
        ({ payload } = await jwtVerify(token, key.key, {
          algorithms: [key.alg],
          currentDate: new Date(this.clock.now()),
          clockTolerance: CLOCK_TOLERANCE_S,
        }));
      } catch (error) {
        throw translateJoseError(error);
      }
    }
    // Checked here rather than by jose, which also accepts an array merely containing the audience.
    if (payload.aud === undefined) throw new TokenError("missing claim aud");
    if (payload.aud !== this.audience) {
      throw new TokenError(`wrong aud ${quote(payload.aud)} (expected ${quote(this.audience)})`);
    }
    return payload;
  }

  /**
   * The HS256 path (see hs256.ts): signature, claims set shape, and the time claims jose would check (`exp` with
   * the clock tolerance, `nbf`, numeric `iat`). A token seen before skips the MAC and the parsing, never the
   * time checks: the cache holds only what a token's bytes determine.
   */
  private verifyHs256(token: string, key: ImportedKey, crit: unknown): JWTPayload {
    if (crit !== undefined) throw new TokenError("unsupported token: the crit header is not supported");
    let payload = this.verified.get(token);
    if (payload === undefined) {
      if (!hasValidHs256Signature(token, key.key as Uint8Array)) throw new TokenError("bad signature");
      const encoded = token.slice(token.indexOf(".") + 1, token.lastIndexOf("."));
      try {
        payload = JSON.parse(Buffer.from(encoded, "base64url").toString("utf8")) as JWTPayload;
      } catch {
        payload = undefined;
      }
      if (typeof payload !== "object" || payload === null || Array.isArray(payload)) {
        throw new TokenError("malformed token: JWT Claims Set must be a top-level JSON object");
      }
      for (const claim of ["exp", "iat", "nbf"] as const) {
        if (payload[claim] !== undefined && typeof payload[claim] !== "number") {
          throw new TokenError(`claim ${claim} must be a number`);
        }
      }
      if (this.verified.size >= VERIFIED_CACHE_SIZE) this.verified.clear();
      this.verified.set(token, payload);
    }
    const now = nowSeconds(this.clock);
    if (payload.exp !== undefined && payload.exp <= now - CLOCK_TOLERANCE_S) throw new TokenError("token expired");
    if (payload.nbf !== undefined && payload.nbf > now + CLOCK_TOLERANCE_S) {
      throw new TokenError("token not yet valid (nbf)");
    }
    return payload;
  }

  private selectKey(kid: string | undefined): ImportedKey {
    if (kid === undefined) {
      // Without a kid, guessing among several keys would let any one of them vouch for the token.
      const only = this.keys.length === 1 ? this.keys[0] : undefined;
      if (only === undefined) {
        throw new TokenError("token has no kid header, which is required when several keys are configured");
      }
      return only;
    }
    const key = this.keysByKid.get(kid);
    if (key === undefined) throw new TokenError(`unknown kid ${quote(kid)}`);
    return key;
  }

  private checkIssuedAt(iat: number): void {
    // A far-future iat would stretch a token's real validity past the lifetime limit.
    if (iat > nowSeconds(this.clock) + CLOCK_TOLERANCE_S) throw new TokenError("iat is in the future");
  }
}

/**
 * Signs delivery tokens with the first key of auth.delivery_key, and publishes the public half of every asymmetric
 * key of it, so that during a rotation (docs/tokens.md, "Rotating keys") a product holding the JWKS verifies a key's
 * tokens before it signs and after it has stopped. Import the keys once.
 */
export class DeliverySigner {
  /** The protected header, encoded once. */
  private readonly encodedHeader: string;

  private constructor(
    private readonly key: ImportedKey,
    private readonly publishedKeys: JWK[],
    private readonly audience: string,
    private readonly clock: Clock,
  ) {
    this.encodedHeader = encodeSegment({ alg: key.alg, kid: key.kid, typ: "JWT" });
  }

  /**
   * Imports the delivery keys (`auth.delivery_key`: one key or a list whose first key signs); a key that cannot be
   * imported throws `ConfigError` naming it.
   */
  static async create(options: {
    deliveryKey: DeliveryKeysConfig;
    audience: string;
    clock: Clock;
  }): Promise<DeliverySigner> {
    const keys = await Promise.all(
      deliveryKeyList(options.deliveryKey).map(({ where, key }) => importDeliveryKey(key, where)),
    );
    const signing = keys[0]?.signing;
    // The schema requires one key; this guards configs built in code without it.
    if (signing === undefined) throw new ConfigError("config: auth.delivery_key: at least one key is required");
    const published = keys.flatMap(({ signing: key, publicJwk }) =>
      publicJwk === null ? [] : [{ ...publicJwk, kid: key.kid, alg: key.alg, use: "sig" }],
    );
    return new DeliverySigner(signing, published, options.audience, options.clock);
  }

  /** Signs the token for one attempt; `authority` is the job's authority in wire form. */
  async sign(claims: {
    sub: string;
    op: string;
    job: string;
    att: number;
    /** The claim of the attempt (`JobRow.claimCount`): two claims of one attempt number never share a token. */
    clm: number;
    rid: string;
    authority: object;
    timeoutMs: number;
  }): Promise<string> {
    const iat = nowSeconds(this.clock);
    const payload = {
      iss: "opqueue",
      aud: this.audience,
      sub: claims.sub,
      op: claims.op,
      job: claims.job,
      att: claims.att,
      clm: claims.clm,
      rid: claims.rid,
      authority: claims.authority,
      iat,
      exp: iat + Math.ceil(claims.timeoutMs / 1000) + DELIVERY_TOKEN_GRACE_S,
      jti: `${claims.job}:${claims.att}`,
    };
    if (this.key.alg === "HS256") {
      return signHs256({ encodedHeader: this.encodedHeader, payload, secret: this.key.key as Uint8Array });
    }
    return new SignJWT(payload)
      .setProtectedHeader({ alg: this.key.alg, kid: this.key.kid, typ: "JWT" })
      .sign(this.key.key);
  }

  /**
   * The public JWK set of the asymmetric delivery keys, in the order of auth.delivery_key ({keys: [jwk with kid, alg,
   * use: "sig"], ...}); null when every delivery key is HS256.
   */
  jwks(): { keys: object[] } | null {
    return this.publishedKeys.length === 0 ? null : { keys: this.publishedKeys };
  }
}

/**
 * Mints a token with the first HS256 key of auth.keys, for `opqueue token` and tests. Throws if there is no HS256 key.
 * `extraClaims` are applied last, so tests can override a claim, or drop one by setting it to `undefined`.
 */
export async function mintToken(options: {
  auth: Config["auth"];
  clock: Clock;
  sub: string;
  op?: string;
  rid?: string;
  job?: string;
  siteAdmin?: boolean;
  /** An admin token's role claim. */
  role?: AdminRole;
  /** An operator's `ops` claim. */
  operations?: readonly string[];
  /** The `jti` claim. */
  jti?: string;
  ttlSeconds?: number;
  extraClaims?: Record<string, unknown>;
}): Promise<string> {
  const key = options.auth.keys.find((candidate) => candidate.alg === "HS256");
  if (key === undefined || key.alg !== "HS256" || key.secret === undefined) {
    throw new ConfigError("config: auth.keys: minting a token needs an HS256 key with a secret");
  }
  // An assertion (has op) must fit the 300 s lifetime limit; an admin token may live longer.
  const ttlSeconds = options.ttlSeconds ?? (options.op === undefined ? 3600 : MAX_ASSERTION_LIFETIME_S);
  const iat = nowSeconds(options.clock);
  const payload: Record<string, unknown> = { aud: options.auth.audience, iat, exp: iat + ttlSeconds, sub: options.sub };
  if (options.op !== undefined) payload["op"] = options.op;
  if (options.rid !== undefined) payload["rid"] = options.rid;
  if (options.job !== undefined) payload["job"] = options.job;
  if (options.siteAdmin === true) payload["site_admin"] = true;
  if (options.role !== undefined) payload["role"] = options.role;
  if (options.operations !== undefined) payload["ops"] = [...options.operations];
  if (options.jti !== undefined) payload["jti"] = options.jti;
  Object.assign(payload, options.extraClaims);
  return new SignJWT(payload)
    .setProtectedHeader({ alg: "HS256", kid: key.kid, typ: "JWT" })
    .sign(secretBytes(key.secret));
}

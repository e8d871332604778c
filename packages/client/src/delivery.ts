/**
 * The target side: verifying the delivery token opqueue sends with every attempt, remembering the delivery for
 * the duration of the request (so `enqueue` inside it chains automatically), and answering the way docs/delivery.md,
 * "How an attempt ends" reads answers.
 *
 * A delivery is verified against the route serving it (docs/tokens.md, "Verifying a delivery"): the token's `op` must
 * be the operationId of that route, its `job` the `x-job-id` and `idempotency-key` headers, its `att` the
 * `x-job-attempt` header. So a token captured from one delivery cannot run another operation, nor replay under a fresh
 * idempotency key that the target's deduplication has never seen.
 *
 * opqueue aborts a delivery by closing its connection before the answer has arrived: the attempt timed out, an
 * administrator cancelled the running job with `abort`, or the service shut down. `deliveryAbortSignal(res)` turns
 * that into an `AbortSignal`, which the Fastify plugin and the Express middleware hand to the handler as
 * `delivery.signal`, so long work can stop instead of finishing for nobody.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { ServerResponse } from "node:http";
import {
  createRemoteJWKSet,
  decodeProtectedHeader,
  errors,
  jwtVerify,
  type JWTPayload,
  type JWTVerifyGetKey,
} from "jose";
import { isCanonicalSegment } from "./token-rules.js";
import type { Authority } from "./wire.js";

/** What a target learns from a verified delivery. */
export interface DeliveryContext {
  jobId: string;
  attempt: number;
  /** The user the job runs as. */
  userId: string;
  /** The target operation this delivery is for: the operationId of the route that accepted it. */
  operationId: string;
  /** The chain's root request id. */
  originalRequestId: string;
  /** The chain's authority (wire form). */
  authority: Authority;
  /**
   * Aborts when opqueue aborts the delivery: the request's connection closed before the response was sent (the
   * attempt's timeout, an administrator's cancel with `abort`, a shutdown). Nobody reads an answer after that, so pass
   * it to what the handler awaits (`fetch(url, { signal })`) or check `signal.aborted` between steps; its `reason` is
   * a DOMException named `AbortError`. Set by `opqueueDelivery` and `opqueueDeliveryMiddleware`; the bare verifier
   * sees only headers, so with it make one with `deliveryAbortSignal(res)`.
   */
  signal?: AbortSignal;
  /**
   * The delivery's W3C trace context (its `traceparent` header), when the job has one: enqueues made inside the
   * delivery continue that trace unless they give their own.
   */
  traceparent?: string;
  /**
   * The delivery token this attempt was sent with (set by the verifier, the plugin and the middleware). A target that
   * takes the attempt asynchronously (`continueAsync`) keeps it with `jobId` and `attempt`: its later heartbeat,
   * complete and fail present it, and opqueue accepts no other token for the attempt from then on, expired or not.
   * It is a credential for this attempt: keep it out of logs.
   */
  token?: string;
}

/**
 * What a target keeps of an attempt it took asynchronously, to call back about it (`JobsClient.heartbeat`, `complete`,
 * `fail`): a `DeliveryContext` will do, or these three fields saved with the work (they are plain JSON).
 */
export interface AsyncAttempt {
  jobId: string;
  attempt: number;
  /** The delivery token the attempt was sent with. */
  token?: string | undefined;
}

/** One HS256 delivery key as the service's `auth.delivery_key` lists it: its `kid` and its secret. */
export interface DeliverySecret {
  /** The key's `kid` in the service's config; a token naming it is checked with `secret`, and with nothing else. */
  kid: string;
  /** The HS256 secret (its UTF-8 bytes are the key). */
  secret: string;
}

/**
 * The keys delivery tokens are checked with: exactly one of
 * - `secret`: the one HS256 delivery secret (a token's `kid` is not looked at);
 * - `secrets`: several HS256 keys during a rotation (docs/tokens.md, "Rotating keys"). As `{ kid, secret }` items,
 *   the token's `kid` picks the one key that checks it, and a token naming no kid or a kid not listed is refused. As
 *   plain strings, which name no kid, each secret is tried in turn;
 * - `jwksUrl`: the service's `/.well-known/jwks.json`, for EdDSA and ES256 keys. The token's `kid` picks the key, and
 *   a token naming no kid or a kid the key set does not hold is refused. The set is fetched again when 10 minutes
 *   old, and when a token names a kid it does not hold (at most every 30 s).
 */
export type DeliveryKeyOptions =
  | { secret: string; secrets?: never; jwksUrl?: never }
  | { secrets: DeliverySecret[] | string[]; secret?: never; jwksUrl?: never }
  | { jwksUrl: string; secret?: never; secrets?: never };

/** How delivery tokens are checked: the audience, the clock's tolerance, and the keys (`DeliveryKeyOptions`). */
export type DeliveryVerifierOptions = {
  /** `target.audience` of the service's config. */
  audience: string;
  /** Allowed clock skew, seconds (default 30). */
  clockToleranceSeconds?: number;
} & DeliveryKeyOptions;

/**
 * A delivery that does not check out: no token or a bad one, a token for another operation than the route's, or
 * delivery headers that disagree with it. The plugin and the middleware answer it 401 `invalid_delivery_token`.
 */
export class DeliveryTokenError extends Error {
  override name = "DeliveryTokenError";
}

/**
 * The service's public keys could not be fetched (JWKS URL unreachable or slow): the token may well be valid,
 * so the plugin and the middleware answer 503, which opqueue retries, rather than 401, which it would not.
 */
export class DeliveryKeysUnavailableError extends DeliveryTokenError {
  override name = "DeliveryKeysUnavailableError";
}

/** True for failures to fetch the key set, as opposed to a token that fails verification. */
function isKeyFetchFailure(error: unknown): boolean {
  const code = (error as { code?: string }).code;
  return code === "ERR_JWKS_TIMEOUT" || (error instanceof TypeError && /fetch/i.test(error.message));
}

interface DeliveryClaims extends JWTPayload {
  op?: unknown;
  job?: unknown;
  att?: unknown;
  rid?: unknown;
  authority?: unknown;
}

const storage = new AsyncLocalStorage<DeliveryContext>();

/** The delivery being handled in this async context, if any. */
export function currentDelivery(): DeliveryContext | undefined {
  return storage.getStore();
}

/** Runs `fn` as part of handling `delivery` (enqueues inside it chain to it). */
export function runInDelivery<T>(delivery: DeliveryContext, fn: () => T): T {
  return storage.run(delivery, fn);
}

/**
 * A signal that aborts when `response`'s connection closes before the response has been sent (`close` without
 * `writableFinished`): opqueue gave up on the delivery. A response that was sent in full never aborts it. Made for a
 * response already closed that way, it is aborted at once.
 */
export function deliveryAbortSignal(response: ServerResponse): AbortSignal {
  const controller = new AbortController();
  const abort = () => {
    if (response.writableFinished || controller.signal.aborted) return;
    controller.abort(
      new DOMException(
        "opqueue aborted the delivery: its connection closed before the response was sent",
        "AbortError",
      ),
    );
  };
  // Node marks the response destroyed when its connection closes, and emits `close` only once.
  if (response.destroyed) abort();
  else response.once("close", abort);
  return controller.signal;
}

/** A request's headers: Node's `IncomingHttpHeaders` (lower-case names) or a fetch `Headers`. */
export type HeaderBag = Record<string, string | string[] | undefined> | Headers;

function header(headers: HeaderBag, name: string): string | undefined {
  if (headers instanceof Headers) return headers.get(name) ?? undefined;
  const value = headers[name] ?? headers[name.toLowerCase()];
  return Array.isArray(value) ? value[0] : value;
}

/** What the route being served expects of a delivery: the operationId it implements. */
export interface DeliveryExpectation {
  /** The operationId of the route (as in the product's OpenAPI document); the token's `op` must equal it. */
  operationId: string;
}

/** A verifier of delivery tokens, made once by `createDeliveryVerifier`. */
export interface DeliveryVerifier {
  /**
   * Verifies the delivery token of a request to the route implementing `expected.operationId`, and binds it to the
   * request's `x-job-id`, `idempotency-key` and `x-job-attempt` headers. Rejects with `DeliveryTokenError` (or
   * `DeliveryKeysUnavailableError` while the JWKS cannot be fetched).
   */
  verifyDelivery(headers: HeaderBag, expected: DeliveryExpectation): Promise<DeliveryContext>;
}

/** Quoted and cut, so a refusal never echoes a huge or odd header value. */
function quote(value: string | undefined): string {
  if (value === undefined) return "missing";
  return JSON.stringify(value.length > 64 ? `${value.slice(0, 64)}...` : value);
}

/** The segments of a compact JWT, refused unless each is spelled the one way RFC 7515 allows. */
function checkSpelling(token: string): void {
  const segments = token.split(".");
  if (segments.length !== 3)
    throw new DeliveryTokenError("invalid delivery token: expected a compact JWT (header.payload.signature)");
  segments.forEach((segment, index) => {
    if (!isCanonicalSegment(segment)) {
      const name = ["header", "payload", "signature"][index];
      throw new DeliveryTokenError(
        `invalid delivery token: the ${name} is not canonical base64url (unpadded, no + or /, no spare bits set)`,
      );
    }
  });
}

/** Refuses a verified token that was not issued for this route and these delivery headers. */
function checkBinding(headers: HeaderBag, claims: { op: string; job: string; att: number }, operationId: string): void {
  if (claims.op !== operationId) {
    throw new DeliveryTokenError(
      `invalid delivery token: it is for operation ${quote(claims.op)}, but this route serves ${quote(operationId)}`,
    );
  }
  for (const name of ["x-job-id", "idempotency-key"]) {
    const value = header(headers, name);
    if (value !== claims.job) {
      throw new DeliveryTokenError(
        `invalid delivery token: it is for job ${quote(claims.job)}, but ${name} is ${quote(value)}`,
      );
    }
  }
  // The exact decimal text opqueue sends: "02" or "2.0" would be another spelling of the same attempt.
  const attempt = header(headers, "x-job-attempt");
  if (attempt !== String(claims.att)) {
    throw new DeliveryTokenError(
      `invalid delivery token: it is for attempt ${claims.att}, but x-job-attempt is ${quote(attempt)}`,
    );
  }
}

/**
 * Where the key of a token comes from: the one secret, a secret by the token's kid, each plain secret in turn, or the
 * service's key set by the token's kid.
 */
type KeySource =
  | { kind: "one"; key: Uint8Array }
  | { kind: "by-kid"; keys: Map<string, Uint8Array> }
  | { kind: "each"; keys: Uint8Array[] }
  | { kind: "jwks"; keySet: JWTVerifyGetKey };

const encoder = new TextEncoder();

/** A secret's key bytes; an empty or non-string secret is a programming error, thrown at creation. */
function secretKey(secret: unknown, where: string): Uint8Array {
  if (typeof secret !== "string" || secret === "")
    throw new TypeError(`createDeliveryVerifier: ${where} must be a non-empty string`);
  return encoder.encode(secret);
}

/** The key source `options` describe; refuses at once options naming none, or more than one, of the key forms. */
function keySourceOf(options: DeliveryKeyOptions): KeySource {
  // JavaScript callers, and `as any`, get past the types: a verifier with the wrong keys must not be made at all.
  const given = (["secret", "secrets", "jwksUrl"] as const).filter(
    (name) => (options as Record<string, unknown>)[name] !== undefined,
  );
  if (given.length !== 1) {
    throw new TypeError(
      `createDeliveryVerifier needs exactly one of secret, secrets and jwksUrl; got ${given.join(", ") || "none"}`,
    );
  }
  if (options.secret !== undefined) return { kind: "one", key: secretKey(options.secret, "secret") };
  if (options.jwksUrl !== undefined) return { kind: "jwks", keySet: createRemoteJWKSet(new URL(options.jwksUrl)) };
  const secrets: unknown = options.secrets;
  if (!Array.isArray(secrets) || secrets.length === 0) {
    throw new TypeError("createDeliveryVerifier: secrets must be a non-empty list of { kid, secret } or of strings");
  }
  if (secrets.every((item) => typeof item === "string")) {
    return { kind: "each", keys: secrets.map((secret, i) => secretKey(secret, `secrets[${i}]`)) };
  }
  const keys = new Map<string, Uint8Array>();
  secrets.forEach((item: unknown, i) => {
    const { kid, secret } = (typeof item === "object" && item !== null ? item : {}) as {
      kid?: unknown;
      secret?: unknown;
    };
    if (typeof kid !== "string" || kid === "") {
      throw new TypeError(
        `createDeliveryVerifier: secrets[${i}] must be { kid, secret } (all items, or none, strings)`,
      );
    }
    // Two secrets under one kid would make the kid choose nothing.
    if (keys.has(kid)) throw new TypeError(`createDeliveryVerifier: secrets[${i}].kid "${kid}" is listed twice`);
    keys.set(kid, secretKey(secret, `secrets[${i}].secret`));
  });
  return { kind: "by-kid", keys };
}

/** The token's `kid`, which must be there: with several keys it is what chooses one. */
function requiredKid(token: string): string {
  let kid: unknown;
  try {
    ({ kid } = decodeProtectedHeader(token));
  } catch {
    throw new DeliveryTokenError("invalid delivery token: the header is not base64url-encoded JSON");
  }
  if (typeof kid !== "string" || kid === "") {
    throw new DeliveryTokenError("invalid delivery token: it names no kid, which chooses among the delivery keys");
  }
  return kid;
}

/** Verifies delivery tokens; create one per process (keys are imported once). */
export function createDeliveryVerifier(options: DeliveryVerifierOptions): DeliveryVerifier {
  const source = keySourceOf(options);
  const verifyOptions = {
    audience: options.audience,
    issuer: "opqueue",
    algorithms: source.kind === "jwks" ? ["EdDSA", "ES256"] : ["HS256"],
    clockTolerance: options.clockToleranceSeconds ?? 30,
    requiredClaims: ["exp", "sub", "op", "job", "att", "rid", "authority"],
  };

  /** The token's claims once its signature holds under the key its source gives; jose's errors pass through. */
  async function verifySignature(token: string): Promise<DeliveryClaims> {
    if (source.kind === "one") return (await jwtVerify<DeliveryClaims>(token, source.key, verifyOptions)).payload;
    if (source.kind === "jwks") {
      const kid = requiredKid(token);
      try {
        return (await jwtVerify<DeliveryClaims>(token, source.keySet, verifyOptions)).payload;
      } catch (error) {
        if (error instanceof errors.JWKSNoMatchingKey) {
          throw new DeliveryTokenError(
            `invalid delivery token: kid ${quote(kid)} is not in opqueue's key set (for its alg)`,
          );
        }
        throw error;
      }
    }
    if (source.kind === "by-kid") {
      const kid = requiredKid(token);
      const key = source.keys.get(kid);
      if (key === undefined) throw new DeliveryTokenError(`invalid delivery token: unknown kid ${quote(kid)}`);
      return (await jwtVerify<DeliveryClaims>(token, key, verifyOptions)).payload;
    }
    // Plain secrets name no kid to choose by: a signature that fails under one may hold under the next. Any other
    // failure (expired, wrong audience) comes from a key that did check the signature, and is the answer.
    let failure: unknown;
    for (const key of source.keys) {
      try {
        return (await jwtVerify<DeliveryClaims>(token, key, verifyOptions)).payload;
      } catch (error) {
        if (!(error instanceof errors.JWSSignatureVerificationFailed)) throw error;
        failure = error;
      }
    }
    throw failure;
  }

  return {
    async verifyDelivery(headers, expected) {
      // Checked at run time too: JavaScript callers, and `as any`, get past the type.
      const operationId = (expected as DeliveryExpectation | undefined)?.operationId;
      if (typeof operationId !== "string" || operationId === "") {
        throw new DeliveryTokenError(
          "verifyDelivery needs the operationId of the route being served (verifyDelivery(headers, { operationId })): " +
            "without it a token for any operation would pass",
        );
      }
      const match = /^Bearer\s+(\S+)$/i.exec(header(headers, "authorization") ?? "");
      if (!match?.[1]) throw new DeliveryTokenError("no delivery token (Authorization: Bearer)");
      checkSpelling(match[1]);
      let payload: DeliveryClaims;
      try {
        payload = await verifySignature(match[1]);
      } catch (error) {
        if (error instanceof DeliveryTokenError) throw error;
        if (isKeyFetchFailure(error)) {
          throw new DeliveryKeysUnavailableError(`cannot fetch opqueue's public keys: ${(error as Error).message}`);
        }
        throw new DeliveryTokenError(`invalid delivery token: ${(error as Error).message}`);
      }
      const { sub, op, job, att, rid, authority } = payload;
      if (typeof sub !== "string" || typeof op !== "string" || typeof job !== "string" || typeof rid !== "string") {
        throw new DeliveryTokenError("invalid delivery token: malformed claims");
      }
      if (
        typeof att !== "number" ||
        !Number.isSafeInteger(att) ||
        typeof authority !== "object" ||
        authority === null
      ) {
        throw new DeliveryTokenError("invalid delivery token: malformed claims");
      }
      checkBinding(headers, { op, job, att }, operationId);
      const traceparent = header(headers, "traceparent");
      return {
        jobId: job,
        attempt: att,
        userId: sub,
        operationId: op,
        originalRequestId: rid,
        authority: authority as Authority,
        ...(traceparent === undefined ? {} : { traceparent }),
        token: match[1],
      };
    },
  };
}

/**
 * Verifies one delivery to the route implementing `options.operationId` (creating a verifier each call; prefer
 * `createDeliveryVerifier`).
 */
export function verifyDelivery(
  headers: HeaderBag,
  options: DeliveryVerifierOptions & DeliveryExpectation,
): Promise<DeliveryContext> {
  return createDeliveryVerifier(options).verifyDelivery(headers, options);
}

/** The answer for a delivery whose token could not be verified: 401, or 503 while the keys cannot be fetched. */
export function deliveryRefusal(error: unknown): {
  statusCode: 401 | 503;
  headers: Record<string, string>;
  body: object;
} {
  const message = (error as Error).message;
  if (error instanceof DeliveryKeysUnavailableError) {
    return { statusCode: 503, headers: { "retry-after": "5" }, body: { code: "delivery_keys_unavailable", message } };
  }
  return { statusCode: 401, headers: {}, body: { code: "invalid_delivery_token", message } };
}

/** Something that can take a response header: a Fastify reply or a Node/Express response. */
type HeaderTarget =
  { header(name: string, value: string): unknown } | { setHeader(name: string, value: string): unknown };

/**
 * Marks a failure answer as final: opqueue will not retry it (`x-job-retry: never`, docs/delivery.md, "How an attempt
 * ends", rule 2); the job ends dead with `rejected-by-endpoint`. Send any non-2xx status with it.
 */
export function neverRetry(response: HeaderTarget): void {
  if ("header" in response) response.header("x-job-retry", "never");
  else response.setHeader("x-job-retry", "never");
}

/**
 * Marks a failure answer as worth retrying whatever its status (`x-job-retry: always`, rule 4); a `Retry-After`
 * header is honoured with it.
 */
export function alwaysRetry(response: HeaderTarget): void {
  if ("header" in response) response.header("x-job-retry", "always");
  else response.setHeader("x-job-retry", "always");
}

/** Something whose status can be set: a Fastify reply or a Node/Express response. */
type StatusTarget = { code(statusCode: number): unknown } | { statusCode: number };

/**
 * Makes the answer say "this job continues asynchronously" (docs/delivery.md, "Long jobs"): status 202 and the header
 * `x-job-async: 1`; send it with an empty body (`return reply.send()`, `res.end()`). The attempt then stays running
 * without its HTTP exchange: keep `{ jobId, attempt, token }` of the delivery, send heartbeats within the operation's
 * lease (`JobsClient.heartbeat`), and end it with `complete` or `fail`. A heartbeat answered `JobNotRunningError`
 * means the attempt is over (cancelled, or rescued after a missed heartbeat): stop working on it.
 */
export function continueAsync(response: HeaderTarget & StatusTarget): void {
  if ("code" in response) response.code(202);
  else response.statusCode = 202;
  if ("header" in response) response.header("x-job-async", "1");
  else response.setHeader("x-job-async", "1");
}

/**
 * The answer for a delivery whose authority cannot be resolved any more (the user is gone, the grant revoked):
 * 401 with `code: "auth_unresolvable"`, which ends the job dead with `auth-unresolvable` (rule 5).
 */
export function authUnresolvable(message = "the job's authority cannot be resolved"): {
  statusCode: 401;
  body: { code: "auth_unresolvable"; message: string };
} {
  return { statusCode: 401, body: { code: "auth_unresolvable", message } };
}

/**
 * Step 2 of enqueueJob, every check of the body in the contract's order, in this one place (docs/api.md, "Enqueue,
 * step by step"); the first that fails answers:
 *
 *   400 invalid_request      the schema (unknown fields included), a run_at no engine can store, nesting deeper than
 *                            128 levels, text no engine can store
 *   400 payload_too_large    more than 16,384 bytes of JSON in `request`
 *   400 invalid_on_behalf_of on_behalf_of breaks its schema, or names two users
 *   400 missing_path_param   the target's path template needs a parameter the request lacks
 *   400 invalid_path_param   a path parameter whose text is empty, "." or ".." (another route once normalised)
 *
 * and then opqueue's own (docs/api.md, "Expiry", "Idempotency"): 400 invalid_request for an expiry that is not after
 * the job's run time, or an Idempotency-Key header that differs from the body's idempotency_key.
 *
 * The schema is validated by the HTTP layer, which hands over its first problem instead of answering it: a problem
 * inside `on_behalf_of` has its own code, and comes after the payload checks.
 */
import { ApiError } from "../errors.js";
import type { RunTime } from "../job/job.js";
import { CALLBACK_FIELDS, type EnqueueBody } from "../job/schemas.js";
import { MAX_PAYLOAD_DEPTH, nestsDeeperThan, pathParamsProblem, payloadProblem } from "../job/payload-rules.js";
import type { Operation, OperationRegistry } from "../operations/registry.js";
import type { RequestSchema, RequestSchemas } from "../operations/request-schemas.js";

/**
 * 0001-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z: the instants an RFC 3339 UTC date can write, less year
 * 0000, which PostgreSQL's timestamptz does not have.
 */
const MIN_RUN_AT_MS = -62_135_596_800_000;
const MAX_RUN_AT_MS = 253_402_300_799_999;

/** The first problem the schema found in a body: its message and the JSON pointer of the value at fault. */
export interface SchemaProblem {
  message: string;
  pointer: string;
}

/** A body that passed step 2: typed, its run and expiry times, its target when the OpenAPI document has it, and its checks. */
export interface CheckedEnqueueBody {
  body: EnqueueBody;
  runTime: RunTime;
  /** When it expires unless started: null never. */
  expiry: RunTime | null;
  /** The producer's idempotency key (the header's or the body's), if any. */
  idempotencyKey: string | undefined;
  /** Undefined for an operation the document lacks: step 3 answers that. */
  target: Operation | undefined;
  /** The targets of its callbacks, by field; undefined for one the document lacks (step 3 answers that too). */
  callbackTargets: Partial<Record<CallbackField, Operation | undefined>>;
  /**
   * The target's own request schemas, which step 4a checks once the caller is known to be allowed (it must not learn
   * them otherwise); undefined when there is nothing to check.
   */
  requestSchema: RequestSchema | undefined;
}

/** A callback field of the body. */
export type CallbackField = (typeof CALLBACK_FIELDS)[number];

/** Runs step 2; throws the `ApiError` of the first check that fails. */
export function checkEnqueueBody(options: {
  body: unknown;
  schemaProblem: SchemaProblem | undefined;
  registry: OperationRegistry;
  /** This node's clock, for an expiry and a run time one absolute and the other relative. */
  now: number;
  /** The Idempotency-Key header, already checked for its form. */
  idempotencyHeader?: string | undefined;
  requestSchemas: RequestSchemas;
}): CheckedEnqueueBody {
  const { schemaProblem } = options;
  const inOnBehalfOf = schemaProblem !== undefined && schemaProblem.pointer.startsWith("/on_behalf_of");
  if (schemaProblem && !inOnBehalfOf) throw new ApiError(400, "invalid_request", schemaProblem.message);
  // Past here the body matches the schema, but for on_behalf_of when its problem is there (the schema validates
  // on_behalf_of last).
  const body = options.body as EnqueueBody;
  const runTime = runTimeOf(body);
  checkPayload(body);
  if (inOnBehalfOf) throw new ApiError(400, "invalid_on_behalf_of", schemaProblem.message);
  const onBehalfOf = body.on_behalf_of;
  if (onBehalfOf && onBehalfOf.authority.user_id !== onBehalfOf.user_id) {
    throw new ApiError(400, "invalid_on_behalf_of", "on_behalf_of.authority.user_id must equal on_behalf_of.user_id");
  }
  const target = options.registry.get(body.operation_id);
  if (target) checkPathParams(target, body.request.path_params ?? {});
  const callbackTargets: CheckedEnqueueBody["callbackTargets"] = {};
  for (const field of CALLBACK_FIELDS) {
    const callback = body[field];
    if (callback === undefined) continue;
    const callbackTarget = options.registry.get(callback.operation_id);
    callbackTargets[field] = callbackTarget;
    if (callbackTarget) checkPathParams(callbackTarget, callback.request?.path_params ?? {}, field);
  }
  const expiry = expiryOf(body, runTime, options.now);
  const header = options.idempotencyHeader;
  if (header !== undefined && body.idempotency_key !== undefined && header !== body.idempotency_key) {
    throw new ApiError(400, "invalid_request", "the Idempotency-Key header and the body's idempotency_key differ");
  }
  return {
    body,
    runTime,
    expiry,
    idempotencyKey: header ?? body.idempotency_key,
    target,
    callbackTargets,
    requestSchema: options.requestSchemas.get(body.operation_id),
  };
}

/**
 * `ttl_ms` wins over `expires_at`, as `delay_ms` over `run_at`; neither means never. An expiry at or before the job's
 * run time would let it expire unrun: a producer's mistake, refused. Two relative times compare exactly; otherwise
 * this node's clock places the relative one.
 */
function expiryOf(body: EnqueueBody, runTime: RunTime, now: number): RunTime | null {
  let expiry: RunTime;
  if (body.ttl_ms !== undefined) expiry = { delayMs: body.ttl_ms };
  else if (body.expires_at !== undefined) expiry = { at: parseInstant("expires_at", body.expires_at) };
  else return null;
  const runs = "at" in runTime ? runTime.at : now + runTime.delayMs;
  const expires = "at" in expiry ? expiry.at : now + expiry.delayMs;
  const after = "delayMs" in runTime && "delayMs" in expiry ? expiry.delayMs > runTime.delayMs : expires > runs;
  if (!after)
    throw new ApiError(
      400,
      "invalid_request",
      "the job would expire before it may run: its expiry must come after its run time",
    );
  return expiry;
}

/** Nesting, storable text and the payload's size; a callback's request is held to the request's nesting. */
function checkPayload(body: EnqueueBody): void {
  const problem = payloadProblem(body.request, body);
  if (problem) throw new ApiError(400, problem.code, problem.message);
  for (const field of CALLBACK_FIELDS) {
    const request = body[field]?.request;
    if (request !== undefined && nestsDeeperThan(request, MAX_PAYLOAD_DEPTH)) {
      throw new ApiError(
        400,
        "invalid_request",
        `${field}.request is nested more than ${MAX_PAYLOAD_DEPTH} levels deep`,
      );
    }
  }
}

function checkPathParams(target: Operation, pathParams: Record<string, unknown>, callback?: CallbackField): void {
  const problem = pathParamsProblem({ path: `${target.method} ${target.path}`, names: target.pathParams, pathParams });
  if (problem)
    throw new ApiError(400, problem.code, callback === undefined ? problem.message : `${callback}: ${problem.message}`);
}

/** `delay_ms` wins over `run_at`; neither means now. A delay runs from the store's clock, the database's on PostgreSQL. */
function runTimeOf(body: EnqueueBody): RunTime {
  if (body.delay_ms !== undefined) return { delayMs: body.delay_ms };
  if (body.run_at !== undefined) return { at: parseInstant("run_at", body.run_at) };
  return { delayMs: 0 };
}

/** An RFC 3339 date-time of the body as ms since the epoch, within what both engines can store. */
function parseInstant(field: string, text: string): number {
  const ms = Date.parse(text);
  // The schema's date-time format admits a few strings Date cannot represent (a leap second, say).
  if (Number.isNaN(ms)) throw new ApiError(400, "invalid_request", `${field} "${text}" is not a usable date-time`);
  // An offset can carry 0000-01-01 or 9999-12-31 out of the years RFC 3339 can write once in UTC.
  if (ms < MIN_RUN_AT_MS || ms > MAX_RUN_AT_MS) {
    throw new ApiError(400, "invalid_request", `${field} "${text}" falls outside years 0001-9999 in UTC`);
  }
  return ms;
}

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
 * The schema is validated by the HTTP layer, which hands over its first problem instead of answering it: a problem
 * inside `on_behalf_of` has its own code, and comes after the payload checks.
 */
import { ApiError } from "../errors.js";
import type { RunTime } from "../job/job.js";
import type { EnqueueBody } from "../job/schemas.js";
import type { Operation, OperationRegistry } from "../operations/registry.js";

/** Largest request payload: UTF-8 bytes of `JSON.stringify(request)`. */
export const MAX_PAYLOAD_BYTES = 16_384;
/**
 * Deepest nesting of `request` (the request object itself is level 1). JSON.parse takes any depth, but
 * JSON.stringify recurses: a few thousand levels (10 KB of `[`) would overflow the stack in the size check,
 * the store or the response, as a 500.
 */
export const MAX_PAYLOAD_DEPTH = 128;
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

/** A body that passed step 2: typed, its run time, and its target when the OpenAPI document has it. */
export interface CheckedEnqueueBody {
  body: EnqueueBody;
  runTime: RunTime;
  /** Undefined for an operation the document lacks: step 3 answers that. */
  target: Operation | undefined;
}

/** Runs step 2; throws the `ApiError` of the first check that fails. */
export function checkEnqueueBody(options: {
  body: unknown;
  schemaProblem: SchemaProblem | undefined;
  registry: OperationRegistry;
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
  return { body, runTime, target };
}

/** Nesting, storable text and the payload's size. */
function checkPayload(body: EnqueueBody): void {
  if (nestsDeeperThan(body.request, MAX_PAYLOAD_DEPTH)) {
    throw new ApiError(400, "invalid_request", `request is nested more than ${MAX_PAYLOAD_DEPTH} levels deep`);
  }
  if (hasUnstorableText(body)) {
    throw new ApiError(
      400,
      "invalid_request",
      "a string in the body holds U+0000 or a lone UTF-16 surrogate, which cannot be stored",
    );
  }
  const payloadBytes = Buffer.byteLength(JSON.stringify(body.request), "utf8");
  if (payloadBytes > MAX_PAYLOAD_BYTES) {
    throw new ApiError(
      400,
      "payload_too_large",
      `the request payload is ${payloadBytes} bytes of JSON; at most ${MAX_PAYLOAD_BYTES} are allowed`,
    );
  }
}

function checkPathParams(target: Operation, pathParams: Record<string, unknown>): void {
  const missing = target.pathParams.filter((name) => pathParams[name] === undefined || pathParams[name] === null);
  if (missing.length > 0) {
    throw new ApiError(
      400,
      "missing_path_param",
      `request.path_params lacks ${missing.map((name) => `"${name}"`).join(", ")}, needed by ${target.method} ${target.path}`,
    );
  }
  const unsafe = target.pathParams.find((name) => isUnsafePathValue(pathParams[name]));
  if (unsafe !== undefined) {
    throw new ApiError(
      400,
      "invalid_path_param",
      `request.path_params.${unsafe} is ${JSON.stringify(String(pathParams[unsafe]))}: an empty, "." or ".." value ` +
        `would make ${target.method} ${target.path} another route once the URL is normalised`,
    );
  }
}

/**
 * A path parameter is delivered as `encodeURIComponent(String(value))`, which leaves `.` alone: a value whose text is
 * empty, `.` or `..` becomes an empty or dot segment, and URL parsers and proxies normalise `/users/../welcome` into
 * `/welcome`, another operation. Checked on the text that would be sent, so `[]` (text "") counts as empty.
 */
export function isUnsafePathValue(value: unknown): boolean {
  const text = String(value);
  return text === "" || text === "." || text === "..";
}

/** `delay_ms` wins over `run_at`; neither means now. A delay runs from the store's clock, the database's on PostgreSQL. */
function runTimeOf(body: EnqueueBody): RunTime {
  if (body.delay_ms !== undefined) return { delayMs: body.delay_ms };
  if (body.run_at !== undefined) {
    const runAt = Date.parse(body.run_at);
    // The schema's date-time format admits a few strings Date cannot represent (a leap second, say).
    if (Number.isNaN(runAt)) throw new ApiError(400, "invalid_request", `run_at "${body.run_at}" is not a usable date-time`);
    // An offset can carry 0000-01-01 or 9999-12-31 out of the years RFC 3339 can write once in UTC.
    if (runAt < MIN_RUN_AT_MS || runAt > MAX_RUN_AT_MS) {
      throw new ApiError(400, "invalid_request", `run_at "${body.run_at}" falls outside years 0001-9999 in UTC`);
    }
    return { at: runAt };
  }
  return { delayMs: 0 };
}

/** True when `value` nests arrays/objects deeper than `max` levels; iterative, so no depth can overflow the stack. */
function nestsDeeperThan(value: unknown, max: number): boolean {
  const pending: Array<{ node: unknown; depth: number }> = [{ node: value, depth: 1 }];
  for (let item = pending.pop(); item !== undefined; item = pending.pop()) {
    if (typeof item.node !== "object" || item.node === null) continue;
    if (item.depth > max) return true;
    for (const child of Object.values(item.node)) pending.push({ node: child, depth: item.depth + 1 });
  }
  return false;
}

/**
 * U+0000, or a surrogate that is not half of a pair (with the u flag a pair is one code point, never Cs). JSON's
 * escapes can carry both, but PostgreSQL stores neither in text or json, so both engines refuse them alike.
 */
// eslint-disable-next-line no-control-regex -- matching U+0000 is the point
const UNSTORABLE = /[\u0000\p{Cs}]/u;

/** True when a string (key or value) anywhere in `value` holds text no engine can store; iterative. */
export function hasUnstorableText(value: unknown): boolean {
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const node = pending.pop();
    if (typeof node === "string") {
      if (UNSTORABLE.test(node)) return true;
    } else if (typeof node === "object" && node !== null) {
      for (const [key, child] of Object.entries(node)) {
        if (UNSTORABLE.test(key)) return true;
        pending.push(child);
      }
    }
  }
  return false;
}


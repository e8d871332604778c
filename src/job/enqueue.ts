/**
 * enqueueJob, the steps of CONTRACT §3 after authentication: the first failing step answers.
 *
 *   1. 401 invalid_assertion       (done before this, by the HTTP layer, with the parent read once)
 *   2. 400 invalid_request …       (the body schema, by the HTTP layer) then the checks below
 *   3. 422 unknown target
 *   4. 403 trigger map, on_behalf_of, chain
 *   5–7.   dedupe upsert, spawn cap, insert: one atomic store call
 */
import type { Config } from "../config.js";
import { ApiError } from "../errors.js";
import type { EnqueueAssertion } from "../auth/tokens.js";
import type { OperationRegistry } from "../operations/registry.js";
import type { JobRow, RunTime, Store, StoredAuthority } from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";
import { newJobId } from "./job-id.js";
import type { EnqueueBody } from "./schemas.js";

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

/** What enqueueing needs from the running service. */
export interface EnqueueDeps {
  config: Config;
  registry: OperationRegistry;
  store: Store;
  telemetry: Telemetry;
}

/** An authenticated enqueue call: the verified assertion and, for a chained call, the parent it names. */
export interface EnqueueCaller {
  assertion: EnqueueAssertion;
  parent: JobRow | undefined;
}

/** The answer: 201 for a new job, 200 for a dedupe upsert. */
export interface EnqueueResult {
  statusCode: 200 | 201;
  job: JobRow;
}

/**
 * Runs steps 2 (past the schema) to 7 of enqueueJob. Throws `ApiError` for every refusal; the route reports
 * refusals (with the auth hook's and the framework's own) as `job:enqueue-refused`.
 */
export async function enqueueJob(deps: EnqueueDeps, caller: EnqueueCaller, body: EnqueueBody): Promise<EnqueueResult> {
  const result = await enqueue(deps, caller, body);
  deps.telemetry.emit("job:enqueued", {
    operationId: result.job.operationId,
    outcome: enqueueOutcome(result.statusCode, result.job),
    runAt: result.job.runAt,
  });
  return result;
}

async function enqueue(deps: EnqueueDeps, caller: EnqueueCaller, body: EnqueueBody): Promise<EnqueueResult> {
  const { config, registry, store } = deps;
  const { assertion, parent } = caller;

  // Step 2, past the schema.
  const runTime = runTimeOf(body);
  checkPayload(body);
  const onBehalfOf = body.on_behalf_of;
  if (onBehalfOf && onBehalfOf.authority.user_id !== onBehalfOf.user_id) {
    throw new ApiError(
      400,
      "invalid_on_behalf_of",
      "on_behalf_of.authority.user_id must equal on_behalf_of.user_id",
    );
  }
  const target = registry.get(body.operation_id);
  if (target) {
    const pathParams = body.request.path_params ?? {};
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

  // Step 3.
  if (!target) {
    throw new ApiError(422, "unknown_operation", `operation "${body.operation_id}" is not in the product's OpenAPI document`);
  }
  if (!target.background) {
    throw new ApiError(
      422,
      "operation_not_background",
      `operation "${body.operation_id}" does not carry the "background" tag, so it cannot be enqueued`,
    );
  }

  // Step 4.
  // Own keys only: an op named "constructor" or "__proto__" must not find Object.prototype's members.
  const allowedTargets = Object.hasOwn(config.triggers, assertion.op) ? config.triggers[assertion.op] : undefined;
  if (!(allowedTargets ?? []).includes(target.operationId)) {
    throw new ApiError(
      403,
      "trigger_not_allowed",
      `the trigger map does not let "${assertion.op}" enqueue "${target.operationId}"`,
    );
  }
  if (onBehalfOf) {
    if (parent) {
      throw new ApiError(403, "on_behalf_of_not_allowed", "a chained enqueue inherits its chain's authority; on_behalf_of is refused");
    }
    if (!config.on_behalf_of.includes(assertion.op)) {
      throw new ApiError(403, "on_behalf_of_not_allowed", `"${assertion.op}" is not allowed to send on_behalf_of`);
    }
  }
  if (parent) {
    if (parent.operationId !== assertion.op) {
      throw new ApiError(
        403,
        "chain_mismatch",
        `job ${parent.id} runs "${parent.operationId}", but the assertion's op is "${assertion.op}"`,
      );
    }
    if (parent.userId !== assertion.sub) {
      throw new ApiError(403, "chain_mismatch", `job ${parent.id} runs as another user than the assertion's sub`);
    }
  }

  // Steps 5–7, atomically in the store.
  const chain = chainFields({ assertion, parent, onBehalfOf });
  const operationOverride = config.operations[target.operationId];
  const outcome = await store.jobInsert({
    id: newJobId(),
    operationId: target.operationId,
    priority: body.priority ?? 0,
    runTime,
    maxAttempts: operationOverride?.max_attempts ?? config.defaults.max_attempts,
    dedupeKey: body.dedupe_key ?? null,
    concurrencyKey: body.concurrency_key ?? null,
    enqueuedByOperationId: assertion.op,
    request: body.request,
    spawnCap: config.limits.spawn_cap,
    ...chain,
  });
  switch (outcome.kind) {
    case "created":
      return { statusCode: 201, job: outcome.job };
    case "deduplicated":
      return { statusCode: 200, job: outcome.job };
    case "dedupe_conflict": {
      const { holder } = outcome;
      const why =
        holder.operationId !== target.operationId
          ? `of operation "${holder.operationId}"`
          : "that runs as another user or under another kind of authority (an upsert keeps the holder's authority)";
      throw new ApiError(409, "dedupe_conflict", `dedupe key is held by job ${holder.id} ${why}`);
    }
    case "spawn_cap_exceeded":
      throw new ApiError(
        429,
        "spawn_cap_exceeded",
        `chain "${chain.originalRequestId}" has already created ${config.limits.spawn_cap} jobs, the spawn cap`,
      );
  }
}

/** How an accepted enqueue ended, for telemetry. */
export function enqueueOutcome(statusCode: 200 | 201, job: JobRow): "created" | "deduplicated" | "cancelled-by-chain" {
  if (statusCode === 200) return "deduplicated";
  return job.status === "cancelled" ? "cancelled-by-chain" : "created";
}

/**
 * The checks of step 2 after the schema and before `on_behalf_of`'s (CONTRACT §3): nesting, storable text and the
 * payload's size, each a 400. A schema error inside `on_behalf_of` answers only once these pass (error-handler.ts).
 */
export function checkPayload(body: EnqueueBody): void {
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

/** The error of the step-2 checks before `on_behalf_of`'s, for a body whose schema failed only there; if any. */
export function payloadErrorBeforeOnBehalfOf(body: unknown): ApiError | undefined {
  try {
    const candidate = body as EnqueueBody;
    runTimeOf(candidate);
    checkPayload(candidate);
  } catch (error) {
    if (error instanceof ApiError) return error;
  }
  return undefined;
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

/** Who the job runs as, and in which chain: copied verbatim from the parent, or taken from this call. */
function chainFields(options: {
  assertion: EnqueueAssertion;
  parent: JobRow | undefined;
  onBehalfOf: EnqueueBody["on_behalf_of"];
}): { originalRequestId: string; parentJobId: string | null; userId: string; authority: StoredAuthority } {
  const { assertion, parent, onBehalfOf } = options;
  if (parent) {
    return {
      originalRequestId: parent.originalRequestId,
      parentJobId: parent.id,
      userId: parent.userId,
      authority: parent.authority,
    };
  }
  // The verifier guarantees rid on a root call (no job claim).
  const rid = assertion.rid ?? "";
  if (onBehalfOf) {
    return {
      originalRequestId: rid,
      parentJobId: null,
      userId: onBehalfOf.user_id,
      authority: { ...onBehalfOf.authority, assertion: assertion.token },
    };
  }
  return {
    originalRequestId: rid,
    parentJobId: null,
    userId: assertion.sub,
    authority: { kind: "request", request_id: rid, user_id: assertion.sub, assertion: assertion.token },
  };
}

/**
 * enqueueJob, the use case: steps 3 to 7 of the contract (docs/api.md, "Enqueue, step by step") for a caller whose
 * assertion checked out (step 1, the HTTP layer, which reads the parent job once) and a body that passed step 2
 * (`checkEnqueueBody`). The first failing step answers; each throws its `ApiError`.
 *
 *   3. 422 unknown target, or one without the `background` tag
 *   4. 403 trigger map, on_behalf_of, chain
 *   5–7.   idempotency key, dedupe upsert, spawn cap, insert: one atomic store call
 *
 * `enqueueJobs` runs the same steps for every item of a batch (`POST /jobs/batch`), the store call for all of them at
 * once: one commit. An item the store failed to insert is answered alone (503 or 500); the others stand.
 *
 * Both speak in outcomes (`created`, `deduplicated`, `replayed`), not HTTP statuses: the routes map them to 201 and 200.
 */
import { createHash } from "node:crypto";
import type { EnqueueAssertion } from "../auth/tokens.js";
import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { WorkNotifier } from "../work-notifier.js";
import { ApiError } from "../errors.js";
import type { JobRow, RunTime, StoredAuthority } from "../job/job.js";
import { newJobId } from "../job/job-id.js";
import { CALLBACK_FIELDS, type EnqueueBody } from "../job/schemas.js";
import type { PerOperationSettings } from "../operations/settings.js";
import {
  StoreUnavailableError,
  type EnqueueStore,
  type JobInsertOutcome,
  type JobInsertParams,
} from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";
import type { CheckedEnqueueBody } from "./body-checks.js";
import { checkTarget } from "./target.js";

/** What enqueueing needs from the running service. */
export interface EnqueueDeps {
  config: Pick<Config, "triggers" | "on_behalf_of" | "limits" | "idempotency" | "worker">;
  settings: PerOperationSettings;
  store: EnqueueStore;
  telemetry: Telemetry;
  /** Told when a job becomes claimable, so an idle dispatcher wakes at once. */
  notifier: WorkNotifier;
  /** The service's clock, which tells whether a new job is due after every node's next poll (`announced`). */
  clock: Clock;
}

/** An authenticated enqueue call: the verified assertion and, for a chained call, the parent it names. */
export interface EnqueueCaller {
  assertion: EnqueueAssertion;
  parent: JobRow | undefined;
  /** The W3C trace context the call came with (docs/tracing.md), if valid. */
  traceparent?: string | undefined;
}

/**
 * An accepted enqueue: a new job (possibly created cancelled, its chain being cancelled), a dedupe upsert, or the job
 * an idempotency key already answered with.
 */
export interface EnqueueResult {
  kind: "created" | "deduplicated" | "replayed";
  job: JobRow;
}

/** How an accepted enqueue ended, as metrics count it. */
export type EnqueueOutcome = "created" | "deduplicated" | "cancelled-by-chain" | "replayed";

/** Runs steps 3 to 7; throws `ApiError` for every refusal. */
export async function enqueueJob(
  deps: EnqueueDeps,
  caller: EnqueueCaller,
  checked: CheckedEnqueueBody,
): Promise<EnqueueResult> {
  return enqueuePrepared(deps, insertParams(deps, caller, checked));
}

/**
 * Steps 5 to 7 for a job opqueue builds itself (a schedule's run now, docs/schedules.md), its target and authority
 * already checked: the insert, its refusals as `ApiError`, and the wake-up.
 */
export async function enqueuePrepared(deps: EnqueueDeps, params: JobInsertParams): Promise<EnqueueResult> {
  const result = settle(deps, params, await deps.store.jobInsert(params));
  announce(deps, result);
  return result;
}

/**
 * Runs steps 3 to 7 for each item of a batch, in order, committing every insert together; an item answers its own
 * result or refusal (`ApiError`), as `enqueueJob` would have one by one. An item given as an `ApiError` (its step 2
 * failed) is answered with it.
 */
export async function enqueueJobs(
  deps: EnqueueDeps,
  caller: EnqueueCaller,
  items: Array<CheckedEnqueueBody | ApiError>,
): Promise<Array<EnqueueResult | ApiError>> {
  const prepared = items.map((item): JobInsertParams | ApiError => {
    if (item instanceof ApiError) return item;
    try {
      return insertParams(deps, caller, item);
    } catch (error) {
      if (error instanceof ApiError) return error;
      throw error;
    }
  });
  const inserts = prepared.filter((item): item is JobInsertParams => !(item instanceof ApiError));
  const settled = inserts.length === 0 ? [] : await deps.store.jobInsertMany({ jobs: inserts });
  let next = 0;
  return prepared.map((item) => {
    if (item instanceof ApiError) return item;
    const answer = settled[next++];
    if (!answer) throw new Error("the store answered fewer inserts than it was given");
    if (!answer.ok) return failedInsert(answer.error);
    try {
      const result = settle(deps, item, answer.value);
      announce(deps, result);
      return result;
    } catch (error) {
      if (error instanceof ApiError) return error;
      throw error;
    }
  });
}

/**
 * The answer of a batch item whose insert failed for a reason of the service, not of the item. The other items may
 * have been committed beside it (each insert has a savepoint of its own), so it is answered alone, as `POST /jobs`
 * would have been: 503 `unavailable` when the database is, else 500 `internal`, its cause kept for the log.
 */
function failedInsert(error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  if (error instanceof StoreUnavailableError) {
    return new ApiError(
      503,
      "unavailable",
      "the database is unavailable; this item was not enqueued (try it again shortly)",
    );
  }
  const failure = new ApiError(
    500,
    "internal",
    "internal error; this item was not enqueued; the service log has the details",
  );
  failure.cause = error;
  return failure;
}

/** How an accepted enqueue ended, for telemetry. */
export function enqueueOutcome(result: EnqueueResult): EnqueueOutcome {
  if (result.kind !== "created") return result.kind;
  return result.job.status === "cancelled" ? "cancelled-by-chain" : "created";
}

/** Wakes a dispatcher for a job that may run, and reports the enqueue. */
function announce(deps: EnqueueDeps, result: EnqueueResult): void {
  const { job } = result;
  if (result.kind !== "replayed" && (job.status === "pending" || job.status === "retrying"))
    deps.notifier.notify(job.runAt);
  deps.telemetry.emit("job:enqueued", {
    operationId: job.operationId,
    outcome: enqueueOutcome(result),
    runAt: job.runAt,
  });
}

/**
 * Whether other nodes must hear of a new job (PostgreSQL's NOTIFY; docs/delivery.md, "Who hears of a new job"). Not
 * when it is due later than twice `worker.poll_ms` from now: every node polls at least that often, reads the next run
 * time and sets its timer to it, so each hears of it in time anyway. Nor when it is due now and a dispatcher of this
 * process takes it (`WorkNotifier.takesHere`). Each notification wakes every node, and each claims: with nodes that keep
 * up, a batch of a few jobs cost a claim on every one of them. A job due in between is announced.
 */
function announced(deps: EnqueueDeps, runTime: RunTime): boolean {
  const delay = "at" in runTime ? runTime.at - deps.clock.now() : runTime.delayMs;
  if (delay > 2 * deps.config.worker.poll_ms) return false;
  return delay > 0 || !deps.notifier.takesHere();
}

/** Steps 3 and 4, then the insert the store is to make (steps 5 to 7); throws `ApiError` for a refusal. */
function insertParams(deps: EnqueueDeps, caller: EnqueueCaller, checked: CheckedEnqueueBody): JobInsertParams {
  const { config, settings } = deps;
  const { assertion, parent } = caller;
  const { body, runTime } = checked;
  const onBehalfOf = body.on_behalf_of;

  // Steps 3 and 4: the target, and the trigger map; then step 4's other checks.
  const allowed = checkTarget({
    target: checked.target,
    operationId: body.operation_id,
    triggers: config.triggers,
    caller: assertion.op,
  });
  if (!allowed.ok) throw allowed.error;
  const { target } = allowed;
  if (onBehalfOf) {
    if (parent) {
      throw new ApiError(
        403,
        "on_behalf_of_not_allowed",
        "a chained enqueue inherits its chain's authority; on_behalf_of is refused",
      );
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

  checkCallbacks(config, checked, { chained: parent !== undefined });

  // Step 4a: the target's own schemas, checked only now that the caller may enqueue it (docs/api.md).
  checked.requestSchema?.check(body.request);

  // Steps 5–7 are the store's, atomically.
  const chain = chainFields({ assertion, parent, onBehalfOf });
  return {
    id: newJobId(),
    operationId: target.operationId,
    priority: body.priority ?? 0,
    runTime,
    announce: announced(deps, runTime),
    expiry: checked.expiry,
    maxAttempts: settings.of(target.operationId).maxAttempts,
    dedupeKey: body.dedupe_key ?? null,
    concurrencyKey: body.concurrency_key ?? null,
    rateKey: body.rate_key ?? null,
    enqueuedByOperationId: assertion.op,
    request: body.request,
    spawnCap: config.limits.spawn_cap,
    // A chained job carries its parent's trace context unless the call sends its own.
    traceparent: caller.traceparent ?? parent?.traceparent ?? null,
    callbacks:
      body.on_complete === undefined && body.on_dead === undefined
        ? null
        : {
            ...(body.on_complete ? { on_complete: body.on_complete } : {}),
            ...(body.on_dead ? { on_dead: body.on_dead } : {}),
          },
    onSettled: body.on_settled,
    idempotency:
      checked.idempotencyKey === undefined
        ? undefined
        : {
            scope: JSON.stringify([assertion.op, assertion.sub]),
            key: checked.idempotencyKey,
            fingerprint: fingerprintOf(body),
            windowMs: config.idempotency.window_ms,
          },
    ...chain,
  };
}

/** What the store did with an insert, as the enqueue's result; throws `ApiError` for a refusal. */
function settle(deps: EnqueueDeps, params: JobInsertParams, outcome: JobInsertOutcome): EnqueueResult {
  switch (outcome.kind) {
    case "created":
    case "deduplicated":
      return { kind: outcome.kind, job: outcome.job };
    case "idempotent_replay":
      return { kind: "replayed", job: outcome.job };
    case "idempotency_conflict":
      throw new ApiError(
        422,
        "idempotency_key_reused",
        `idempotency key "${params.idempotency?.key ?? ""}" was used with another request (job ${outcome.job.id}) within its window`,
      );
    case "dedupe_conflict": {
      const { holder } = outcome;
      const why =
        holder.operationId !== params.operationId
          ? `of operation "${holder.operationId}"`
          : "that runs as another user or under another kind of authority (an upsert keeps the holder's authority)";
      throw new ApiError(409, "dedupe_conflict", `dedupe key is held by job ${holder.id} ${why}`);
    }
    case "spawn_cap_exceeded":
      throw new ApiError(
        429,
        "spawn_cap_exceeded",
        `chain "${params.originalRequestId}" has already created ${deps.config.limits.spawn_cap} jobs, the spawn cap`,
      );
    case "chain_exists":
      throw new ApiError(
        409,
        "chain_exists",
        `chain "${params.originalRequestId}" has jobs already: on_settled comes with a chain's first job`,
      );
  }
}

/**
 * Steps 3 and 4 for the job's callbacks (docs/chains.md, "Callbacks"): each names a background operation that the
 * job's own operation may enqueue (the callback is a chained job of it), and on_settled comes with a root call.
 */
function checkCallbacks(
  config: EnqueueDeps["config"],
  checked: CheckedEnqueueBody,
  options: { chained: boolean },
): void {
  const { body, callbackTargets } = checked;
  const caller = body.operation_id;
  for (const field of CALLBACK_FIELDS) {
    const callback = body[field];
    if (callback === undefined) continue;
    const allowed = checkTarget({
      target: callbackTargets[field],
      operationId: callback.operation_id,
      triggers: config.triggers,
      caller,
      prefix: `${field}: `,
      triggerHint: " (a callback is a chained job of the job it follows)",
    });
    if (!allowed.ok) throw allowed.error;
  }
  if (body.on_settled !== undefined && options.chained) {
    throw new ApiError(
      400,
      "invalid_request",
      "on_settled comes with a chain's first job, from a root call; this call is chained",
    );
  }
}

/**
 * A digest of an enqueue body, its idempotency key aside, with object keys sorted: the same request sent again with
 * its fields in another order is the same request.
 */
function fingerprintOf(body: EnqueueBody): string {
  const { idempotency_key: _key, ...rest } = body;
  return createHash("sha256").update(canonicalJson(rest)).digest("base64url");
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, member]) => member !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([key, member]) => `${JSON.stringify(key)}:${canonicalJson(member)}`).join(",")}}`;
  }
  return JSON.stringify(value);
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

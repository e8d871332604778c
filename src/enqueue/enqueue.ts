/**
 * enqueueJob, the use case: steps 3 to 7 of the contract (docs/api.md, "Enqueue, step by step") for a caller whose
 * assertion checked out (step 1, the HTTP layer, which reads the parent job once) and a body that passed step 2
 * (`checkEnqueueBody`). The first failing step answers; each throws its `ApiError`.
 *
 *   3. 422 unknown target, or one without the `background` tag
 *   4. 403 trigger map, on_behalf_of, chain
 *   5–7.   dedupe upsert, spawn cap, insert: one atomic store call
 *
 * It speaks in outcomes (`created`, `deduplicated`), not HTTP statuses: the route maps them to 201 and 200.
 */
import type { EnqueueAssertion } from "../auth/tokens.js";
import type { Config } from "../config.js";
import type { WorkNotifier } from "../dispatcher/notifier.js";
import { ApiError } from "../errors.js";
import type { JobRow, StoredAuthority } from "../job/job.js";
import { newJobId } from "../job/job-id.js";
import type { EnqueueBody } from "../job/schemas.js";
import type { PerOperationSettings } from "../operations/settings.js";
import type { Store } from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";
import type { CheckedEnqueueBody } from "./body-checks.js";

/** What enqueueing needs from the running service. */
export interface EnqueueDeps {
  config: Pick<Config, "triggers" | "on_behalf_of" | "limits">;
  settings: PerOperationSettings;
  store: Store;
  telemetry: Telemetry;
  /** Told when a job becomes claimable, so an idle dispatcher wakes at once. */
  notifier: WorkNotifier;
}

/** An authenticated enqueue call: the verified assertion and, for a chained call, the parent it names. */
export interface EnqueueCaller {
  assertion: EnqueueAssertion;
  parent: JobRow | undefined;
}

/** An accepted enqueue: a new job (possibly created cancelled, its chain being cancelled), or a dedupe upsert. */
export interface EnqueueResult {
  kind: "created" | "deduplicated";
  job: JobRow;
}

/** How an accepted enqueue ended, as metrics count it. */
export type EnqueueOutcome = "created" | "deduplicated" | "cancelled-by-chain";

/** Runs steps 3 to 7; throws `ApiError` for every refusal. */
export async function enqueueJob(deps: EnqueueDeps, caller: EnqueueCaller, checked: CheckedEnqueueBody): Promise<EnqueueResult> {
  const result = await enqueue(deps, caller, checked);
  const { job } = result;
  if (job.status === "pending" || job.status === "retrying") deps.notifier.notify(job.runAt);
  deps.telemetry.emit("job:enqueued", { operationId: job.operationId, outcome: enqueueOutcome(result), runAt: job.runAt });
  return result;
}

/** How an accepted enqueue ended, for telemetry. */
export function enqueueOutcome(result: EnqueueResult): EnqueueOutcome {
  if (result.kind === "deduplicated") return "deduplicated";
  return result.job.status === "cancelled" ? "cancelled-by-chain" : "created";
}

async function enqueue(deps: EnqueueDeps, caller: EnqueueCaller, checked: CheckedEnqueueBody): Promise<EnqueueResult> {
  const { config, settings, store } = deps;
  const { assertion, parent } = caller;
  const { body, runTime, target } = checked;
  const onBehalfOf = body.on_behalf_of;

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

  // Step 4a: the target's own schemas, checked only now that the caller may enqueue it (docs/api.md).
  checked.requestSchema?.check(body.request);

  // Steps 5–7, atomically in the store.
  const chain = chainFields({ assertion, parent, onBehalfOf });
  const outcome = await store.jobInsert({
    id: newJobId(),
    operationId: target.operationId,
    priority: body.priority ?? 0,
    runTime,
    maxAttempts: settings.of(target.operationId).maxAttempts,
    dedupeKey: body.dedupe_key ?? null,
    concurrencyKey: body.concurrency_key ?? null,
    rateKey: body.rate_key ?? null,
    enqueuedByOperationId: assertion.op,
    request: body.request,
    spawnCap: config.limits.spawn_cap,
    ...chain,
  });
  switch (outcome.kind) {
    case "created":
    case "deduplicated":
      return { kind: outcome.kind, job: outcome.job };
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

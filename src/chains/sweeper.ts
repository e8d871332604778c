/**
 * Callbacks and settling (docs/chains.md): the chain sweeper's passes. A job's on_complete or on_dead, and a chain's
 * on_settled, is enqueued as a chained job once the job (or chain) reaches that state, **exactly once**: the store
 * clears the pending callback (or records on_settled fired) in the same transaction that inserts the callback job,
 * and only if it was still pending, so two nodes sweeping at once, or a node killed between the outcome and the
 * callback, make one callback job, never two or none. Every node sweeps; whichever comes first enqueues.
 *
 * A callback is a chained job of the job it follows: same chain, same authority, its operation the enqueuer; the
 * spawn cap is charged when it is created (a chain at its cap gets no callback: `callback:refused`). The trigger map
 * was checked when the job was enqueued (docs/api.md, "Enqueue, step by step").
 */
import type { Config } from "../config.js";
import type { WorkNotifier } from "../work-notifier.js";
import { newJobId } from "../job/job-id.js";
import type { CallbackSpec, JobRow } from "../job/job.js";
import type { JobStatus } from "../job/statuses.js";
import { toWireJob } from "../job/wire.js";
import type { PerOperationSettings } from "../operations/settings.js";
import type {
  ChainJobCounts,
  ChainRow,
  ChainStore,
  JobInsertOutcome,
  JobInsertParams,
  JobReadStore,
} from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";
import { UNREDACTED } from "../job/redaction.js";

/** What the sweeper needs of the running service. */
export interface ChainSweepDeps {
  config: Pick<Config, "limits">;
  settings: PerOperationSettings;
  store: Omit<ChainStore, "chainGet"> & Pick<JobReadStore, "jobGet">;
  telemetry: Telemetry;
  notifier: WorkNotifier;
}

/** Most jobs or chains one pass handles; the next pass takes the rest. */
const BATCH = 200;
/** The settle sweep's cursor in the database. */
export const SETTLE_CURSOR = "chain-settle";

/** Which callback a state calls. */
const CALLBACK_OF: Partial<Record<JobStatus, "on_complete" | "on_dead">> = {
  succeeded: "on_complete",
  dead: "on_dead",
};

/** One pass: every due job callback, every due on_settled, and the chains that settled since the last pass. */
export async function sweepChains(deps: ChainSweepDeps): Promise<void> {
  await fireJobCallbacks(deps);
  await fireSettledCallbacks(deps);
  await observeSettledChains(deps);
}

/** Enqueues the on_complete / on_dead of finished jobs whose callback is due. */
export async function fireJobCallbacks(deps: ChainSweepDeps): Promise<number> {
  let fired = 0;
  for (const job of await deps.store.jobCallbackDueList({ limit: BATCH })) {
    const field = CALLBACK_OF[job.status];
    const spec = field === undefined ? undefined : job.callbacks?.[field];
    if (field === undefined || spec === undefined) {
      // Pending for a state it has no callback for (on_complete only, and it died): nothing to enqueue, only to clear.
      await deps.store.jobCallbackEnqueue({ jobId: job.id, status: job.status as "succeeded" | "dead", insert: null });
      continue;
    }
    const outcome = await deps.store.jobCallbackEnqueue({
      jobId: job.id,
      status: job.status as "succeeded" | "dead",
      insert: callbackInsert(deps, job, spec, jobOutcomeBody(job)),
    });
    if (report(deps, { kind: field, of: job.id, outcome })) fired++;
  }
  return fired;
}

/** Enqueues the on_settled of chains that settled. */
export async function fireSettledCallbacks(deps: ChainSweepDeps): Promise<number> {
  let fired = 0;
  for (const chain of await deps.store.chainSettledDueList({ limit: BATCH })) {
    const spec = chain.onSettled;
    if (!spec) continue;
    const setter = await deps.store.jobGet({ id: spec.job_id });
    if (!setter) {
      // The job that set it, whose authority the callback runs under, was deleted by retention: nothing can be
      // enqueued. Recorded as fired all the same, or the chain would stay due forever and crowd out the others.
      const outcome = await deps.store.chainOnSettledEnqueue({
        originalRequestId: chain.originalRequestId,
        insert: null,
      });
      if (outcome.kind === "cleared") {
        deps.telemetry.emit("callback:refused", {
          kind: "on_settled",
          of: chain.originalRequestId,
          reason: "setter_deleted",
        });
      }
      continue;
    }
    const counts = await deps.store.chainJobCounts({ originalRequestId: chain.originalRequestId });
    const outcome = await deps.store.chainOnSettledEnqueue({
      originalRequestId: chain.originalRequestId,
      insert: callbackInsert(deps, setter, spec, chainOutcomeBody(chain, counts)),
    });
    if (report(deps, { kind: "on_settled", of: chain.originalRequestId, outcome })) fired++;
  }
  return fired;
}

/** Most reads of settled chains in one pass: a pass ends even if jobs finish faster than it reads them. */
const SETTLE_READS = 20;

/** Reports the chains that settled since the last pass (their time from first enqueue to settling). */
export async function observeSettledChains(deps: ChainSweepDeps): Promise<number> {
  let seen = 0;
  for (let read = 0; read < SETTLE_READS; read++) {
    const settled = await deps.store.chainSettledSince({ cursor: SETTLE_CURSOR, limit: 1000 });
    for (const chain of settled) {
      deps.telemetry.emit("chain:settled", {
        originalRequestId: chain.originalRequestId,
        seconds: (chain.settledAt - chain.startedAt) / 1000,
      });
    }
    seen += settled.length;
    if (settled.length === 0) break;
  }
  return seen;
}

/** Reports an enqueued (or refused) callback; true when a job was enqueued. */
function report(
  deps: ChainSweepDeps,
  options: {
    kind: "on_complete" | "on_dead" | "on_settled";
    of: string;
    outcome: JobInsertOutcome | { kind: "skipped" } | { kind: "cleared" };
  },
): boolean {
  const { outcome } = options;
  if (outcome.kind === "skipped" || outcome.kind === "cleared") return false;
  if (outcome.kind === "created") {
    if (outcome.job.status === "pending") deps.notifier.notify(outcome.job.runAt);
    deps.telemetry.emit("callback:enqueued", {
      kind: options.kind,
      of: options.of,
      jobId: outcome.job.id,
      operationId: outcome.job.operationId,
      outcome: outcome.job.status === "cancelled" ? "cancelled-by-chain" : "created",
    });
    return true;
  }
  deps.telemetry.emit("callback:refused", { kind: options.kind, of: options.of, reason: outcome.kind });
  return false;
}

/** A callback job of `job`: a chained job of it, in its chain, under its authority, due at once. */
function callbackInsert(deps: ChainSweepDeps, job: JobRow, spec: CallbackSpec, body: unknown): JobInsertParams {
  return {
    id: newJobId(),
    operationId: spec.operation_id,
    priority: job.priority,
    runTime: { delayMs: 0 },
    expiry: null,
    maxAttempts: deps.settings.of(spec.operation_id).maxAttempts,
    dedupeKey: null,
    concurrencyKey: null,
    rateKey: null,
    enqueuedByOperationId: job.operationId,
    parentJobId: job.id,
    originalRequestId: job.originalRequestId,
    userId: job.userId,
    authority: job.authority,
    request: {
      ...(spec.request?.path_params === undefined ? {} : { path_params: spec.request.path_params }),
      ...(spec.request?.query === undefined ? {} : { query: spec.request.query }),
      body,
    },
    spawnCap: deps.config.limits.spawn_cap,
    traceparent: job.traceparent,
    callbacks: null,
  };
}

/** The body of a job's callback: the job as it ended (its result: status code, terminal reason, capped body). */
export function jobOutcomeBody(job: JobRow): unknown {
  // The product receives this body, as it receives deliveries; it carries no request anyway.
  const wire = toWireJob(job, UNREDACTED);
  return {
    job_id: wire.id,
    operation_id: wire.operation_id,
    status: wire.status,
    attempt: wire.attempt,
    original_request_id: wire.original_request_id,
    finished_at: wire.finished_at,
    result: wire.result,
  };
}

/** The body of a chain's on_settled: how its jobs ended, and when it began and settled. */
export function chainOutcomeBody(chain: ChainRow, jobs: ChainJobCounts): unknown {
  const startedAt = chain.createdAt ?? jobs.firstCreatedAt;
  return {
    original_request_id: chain.originalRequestId,
    jobs: jobs.jobs,
    counts: { succeeded: 0, dead: 0, cancelled: 0, ...jobs.byStatus },
    started_at:
      startedAt === null ? null : new Date(Math.min(startedAt, jobs.firstCreatedAt ?? startedAt)).toISOString(),
    settled_at: jobs.lastFinishedAt === null ? null : new Date(jobs.lastFinishedAt).toISOString(),
  };
}

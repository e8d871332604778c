/**
 * The administrators' writes of the SQLite engine, inside the caller's transaction: each conditional on the state it
 * expects to leave, and each change recorded with who made it (admin_actions, migration 0003); and the read of those
 * records (statements in sql/jobs.ts).
 */
import type { JobRow } from "../../job/job.js";
import type { AdminAction } from "../../job/statuses.js";
import { ABORTED_ATTEMPT } from "../aborted.js";
import type {
  AdminActionRow,
  AdminActor,
  DeadJobFilter,
  JobCancelFilter,
  JobCancelOutcome,
  JobRetryOutcome,
  JobRunNowOutcome,
} from "../store.js";
import { toJobRow } from "./rows.js";
import type { Statements } from "./statements.js";

/** An administrator's write: who, with which role, and the time it is written at. */
type Acting = AdminActor & { now: number };

function record(s: Statements, action: AdminAction, jobId: string, acting: Acting): void {
  s.recordAction.run({ at: acting.now, actor: acting.actor, role: acting.role, action, job_id: jobId });
}

/** `pending`/`retrying` (and `running`, with `abortRunning`) → `cancelled` (`cancelled-by-admin`). */
export function cancelJob(
  s: Statements,
  params: { id: string; abortRunning?: boolean | undefined } & Acting,
  action: AdminAction = "cancel",
): JobCancelOutcome {
  const cancelled = s.cancel.get({ id: params.id, now: params.now });
  if (cancelled) {
    record(s, action, params.id, params);
    return { kind: "cancelled", job: toJobRow(cancelled), wasRunning: false };
  }
  if (params.abortRunning) {
    const aborted = s.cancelRunning.get({ id: params.id, now: params.now });
    if (aborted) {
      const minute = Math.floor(params.now / 60_000) * 60_000;
      s.recordAbortedAttempt.run({ id: params.id, now: params.now, error: ABORTED_ATTEMPT });
      s.countAttempt.run({ id: params.id, minute });
      record(s, action, params.id, params);
      return { kind: "cancelled", job: toJobRow(aborted), wasRunning: true };
    }
  }
  const row = s.getById.get(params.id);
  if (!row) return { kind: "not_found" };
  return row.status === "running"
    ? { kind: "running", job: toJobRow(row) }
    : { kind: "not_cancellable", job: toJobRow(row) };
}

/** Cancels up to `limit` jobs matching `filter`, newest first. */
export function cancelMany(
  s: Statements,
  params: { filter: JobCancelFilter; limit: number } & Acting,
): Array<{ job: JobRow; wasRunning: boolean }> {
  const { filter } = params;
  const candidates = s.cancelCandidates.all({
    statuses: JSON.stringify(filter.statuses),
    operation_id: filter.operationId ?? null,
    original_request_id: filter.originalRequestId ?? null,
    user_id: filter.userId ?? null,
    dedupe_key: filter.dedupeKey ?? null,
    created_from: filter.createdFrom ?? null,
    created_before: filter.createdBefore ?? null,
    limit: Math.max(0, params.limit),
  });
  const cancelled: Array<{ job: JobRow; wasRunning: boolean }> = [];
  for (const candidate of candidates) {
    const outcome = cancelJob(
      s,
      {
        id: candidate.id,
        abortRunning: candidate.status === "running",
        actor: params.actor,
        role: params.role,
        now: params.now,
      },
      "cancel-many",
    );
    if (outcome.kind === "cancelled") cancelled.push({ job: outcome.job, wasRunning: outcome.wasRunning });
  }
  return cancelled;
}

/** `dead`/`cancelled` → `pending` with attempt 0 and run time now. */
export function retryJob(s: Statements, params: { id: string } & Acting): JobRetryOutcome {
  const row = s.getById.get(params.id);
  if (!row) return { kind: "not_found" };
  if (row.status !== "dead" && row.status !== "cancelled") return { kind: "not_retryable", job: toJobRow(row) };
  if (row.dedupe_key !== null) {
    const holder = s.dedupeHolder.get(row.dedupe_key);
    if (holder) return { kind: "dedupe_conflict", holder: toJobRow(holder) };
  }
  const retried = s.retry.get({ id: params.id, now: params.now });
  if (!retried) throw new Error(`job ${params.id} changed inside its transaction`);
  record(s, "retry", params.id, params);
  return { kind: "retried", job: toJobRow(retried) };
}

/** Marks the chain cancelled and cancels its claimable jobs; returns them, newest first. */
export function cancelChain(s: Statements, params: { originalRequestId: string } & Acting): JobRow[] {
  const { originalRequestId: rid, now, actor } = params;
  s.markChainCancelled.run({ rid, now, actor });
  const cancelled = s.cancelChainJobs.all({ rid, now }).map(toJobRow);
  for (const job of cancelled) record(s, "cancel-chain", job.id, params);
  return cancelled.sort((a, b) => b.seq - a.seq);
}

/** A waiting job due now. */
export function runNow(s: Statements, params: { id: string } & Acting): JobRunNowOutcome {
  const moved = s.runNow.get({ id: params.id, now: params.now });
  if (moved) {
    record(s, "run-now", params.id, params);
    return { kind: "moved", job: toJobRow(moved) };
  }
  const row = s.getById.get(params.id);
  return row ? { kind: "not_waiting", job: toJobRow(row) } : { kind: "not_found" };
}

/** Re-queues up to `limit` dead jobs matching the filter, newest first, skipping those whose dedupe key is held. */
export function retryDeadMany(s: Statements, params: { filter: DeadJobFilter; limit: number } & Acting): JobRow[] {
  const candidates = s.deadJobs.all({
    operation_id: params.filter.operationId ?? null,
    original_request_id: params.filter.originalRequestId ?? null,
    user_id: params.filter.userId ?? null,
    limit: Math.max(0, params.limit),
  });
  const retried: JobRow[] = [];
  for (const row of candidates) {
    if (row.dedupe_key !== null && s.dedupeHolder.get(row.dedupe_key)) continue;
    const updated = s.retry.get({ id: row.id, now: params.now });
    if (!updated) continue;
    record(s, "retry-dead", row.id, params);
    retried.push(toJobRow(updated));
  }
  return retried;
}

/** The administrators' actions on a job, oldest first. */
export function adminActionList(s: Statements, params: { jobId: string }): AdminActionRow[] {
  return s.actionsOf.all(params.jobId);
}

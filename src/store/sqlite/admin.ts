/**
 * The administrators' writes of the SQLite engine, inside the caller's transaction: each conditional on the state it
 * expects to leave, and each change recorded with who made it (admin_actions, migration 0003).
 */
import type { JobRow } from "../../job/job.js";
import type { AdminAction } from "../../job/statuses.js";
import { ABORTED_ATTEMPT } from "../aborted.js";
import type { DeadJobFilter, JobCancelFilter, JobCancelOutcome, JobRetryOutcome, JobRunNowOutcome } from "../store.js";
import { toJobRow } from "./rows.js";
import type { Statements } from "./statements.js";

/** An administrator's write: who, and the time it is written at. */
interface Acting {
  actor: string;
  now: number;
}

/** The engine's administrators' writes, over its prepared statements. */
export class AdminWrites {
  constructor(private readonly s: Statements) {}

  private record(action: AdminAction, jobId: string, acting: Acting): void {
    this.s.recordAction.run({ at: acting.now, actor: acting.actor, action, job_id: jobId });
  }

  /** `pending`/`retrying` (and `running`, with `abortRunning`) → `cancelled` (`cancelled-by-admin`). */
  cancelJob(
    params: { id: string; abortRunning?: boolean | undefined } & Acting,
    action: AdminAction = "cancel",
  ): JobCancelOutcome {
    const cancelled = this.s.cancel.get({ id: params.id, now: params.now });
    if (cancelled) {
      this.record(action, params.id, params);
      return { kind: "cancelled", job: toJobRow(cancelled), wasRunning: false };
    }
    if (params.abortRunning) {
      const aborted = this.s.cancelRunning.get({ id: params.id, now: params.now });
      if (aborted) {
        const minute = Math.floor(params.now / 60_000) * 60_000;
        this.s.recordAbortedAttempt.run({ id: params.id, now: params.now, error: ABORTED_ATTEMPT });
        this.s.countAttempt.run({ id: params.id, minute });
        this.record(action, params.id, params);
        return { kind: "cancelled", job: toJobRow(aborted), wasRunning: true };
      }
    }
    const row = this.s.getById.get(params.id);
    if (!row) return { kind: "not_found" };
    return row.status === "running"
      ? { kind: "running", job: toJobRow(row) }
      : { kind: "not_cancellable", job: toJobRow(row) };
  }

  /** Cancels up to `limit` jobs matching `filter`, newest first. */
  cancelMany(params: { filter: JobCancelFilter; limit: number } & Acting): Array<{ job: JobRow; wasRunning: boolean }> {
    const { filter } = params;
    const candidates = this.s.cancelCandidates.all({
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
      const outcome = this.cancelJob(
        { id: candidate.id, abortRunning: candidate.status === "running", actor: params.actor, now: params.now },
        "cancel-many",
      );
      if (outcome.kind === "cancelled") cancelled.push({ job: outcome.job, wasRunning: outcome.wasRunning });
    }
    return cancelled;
  }

  /** `dead`/`cancelled` → `pending` with attempt 0 and run time now. */
  retryJob(params: { id: string } & Acting): JobRetryOutcome {
    const row = this.s.getById.get(params.id);
    if (!row) return { kind: "not_found" };
    if (row.status !== "dead" && row.status !== "cancelled") return { kind: "not_retryable", job: toJobRow(row) };
    if (row.dedupe_key !== null) {
      const holder = this.s.dedupeHolder.get(row.dedupe_key);
      if (holder) return { kind: "dedupe_conflict", holder: toJobRow(holder) };
    }
    const retried = this.s.retry.get({ id: params.id, now: params.now });
    if (!retried) throw new Error(`job ${params.id} changed inside its transaction`);
    this.record("retry", params.id, params);
    return { kind: "retried", job: toJobRow(retried) };
  }

  /** Marks the chain cancelled and cancels its claimable jobs; returns them, newest first. */
  cancelChain(params: { originalRequestId: string } & Acting): JobRow[] {
    const { originalRequestId: rid, now, actor } = params;
    this.s.markChainCancelled.run({ rid, now, actor });
    const cancelled = this.s.cancelChainJobs.all({ rid, now }).map(toJobRow);
    for (const job of cancelled) this.record("cancel-chain", job.id, params);
    return cancelled.sort((a, b) => b.seq - a.seq);
  }

  /** A waiting job due now. */
  runNow(params: { id: string } & Acting): JobRunNowOutcome {
    const moved = this.s.runNow.get({ id: params.id, now: params.now });
    if (moved) {
      this.record("run-now", params.id, params);
      return { kind: "moved", job: toJobRow(moved) };
    }
    const row = this.s.getById.get(params.id);
    return row ? { kind: "not_waiting", job: toJobRow(row) } : { kind: "not_found" };
  }

  /** Re-queues up to `limit` dead jobs matching the filter, newest first, skipping those whose dedupe key is held. */
  retryDeadMany(params: { filter: DeadJobFilter; limit: number } & Acting): JobRow[] {
    const candidates = this.s.deadJobs.all({
      operation_id: params.filter.operationId ?? null,
      original_request_id: params.filter.originalRequestId ?? null,
      user_id: params.filter.userId ?? null,
      limit: Math.max(0, params.limit),
    });
    const retried: JobRow[] = [];
    for (const row of candidates) {
      if (row.dedupe_key !== null && this.s.dedupeHolder.get(row.dedupe_key)) continue;
      const updated = this.s.retry.get({ id: row.id, now: params.now });
      if (!updated) continue;
      this.record("retry-dead", row.id, params);
      retried.push(toJobRow(updated));
    }
    return retried;
  }
}

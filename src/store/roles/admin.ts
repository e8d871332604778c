/** The store's `AdminStore` role; src/store/store.ts composes the roles into `Store`. */
import type { JobRow } from "../../job/job.js";

/** The result of `jobCancel`. */
export type JobCancelOutcome =
  /** `wasRunning`: the job was `running` (cancelled with `abortRunning`); its node is to abort the delivery. */
  | { kind: "cancelled"; job: JobRow; wasRunning: boolean }
  | { kind: "not_found" }
  /** A running job, and `abortRunning` was not asked for: nothing changed. */
  | { kind: "running"; job: JobRow }
  | { kind: "not_cancellable"; job: JobRow };

/** The result of `jobRetry`. */
export type JobRetryOutcome =
  | { kind: "retried"; job: JobRow }
  | { kind: "not_found" }
  | { kind: "not_retryable"; job: JobRow }
  | { kind: "dedupe_conflict"; holder: JobRow };

/** The result of `jobRunNow`. */
export type JobRunNowOutcome =
  | { kind: "moved"; job: JobRow }
  | { kind: "not_found" }
  /** Running or finished: nothing waits to be moved. */
  | { kind: "not_waiting"; job: JobRow };

/** Filters of a bulk cancel; every given one must match, and at least one besides `statuses` is given. */
export interface JobCancelFilter {
  /** `pending`, `retrying` and `running` (this one aborts the delivery); default the first two. */
  statuses: Array<"pending" | "retrying" | "running">;
  operationId?: string | undefined;
  originalRequestId?: string | undefined;
  userId?: string | undefined;
  dedupeKey?: string | undefined;
  /** Created at or after this instant (ms since the epoch). */
  createdFrom?: number | undefined;
  /** Created before this instant. */
  createdBefore?: number | undefined;
}

/** Filters of a bulk retry of dead jobs. */
export interface DeadJobFilter {
  operationId?: string | undefined;
  originalRequestId?: string | undefined;
  userId?: string | undefined;
}

/**
 * Administrators' writes on jobs and chains (cancel, retry, run now, one or many), each recorded with who
 * made it in the same transaction.
 */
export interface AdminStore {
  /**
   * `pending`/`retrying` → `cancelled` (`cancelled-by-admin`). This and the administrators' writes after it record who
   * made them (`actor`, the admin token's `sub`) for every job they change, in the same transaction (`adminActionList`).
   */
  jobCancel(params: { id: string; actor: string; abortRunning?: boolean }): Promise<JobCancelOutcome>;
  /**
   * Cancels up to `limit` jobs matching `filter`, newest first, as `jobCancel` with `abortRunning` would; returns them
   * (each with whether it was running).
   */
  jobCancelMany(params: {
    filter: JobCancelFilter;
    limit: number;
    actor: string;
  }): Promise<Array<{ job: JobRow; wasRunning: boolean }>>;
  /** `dead`/`cancelled` → `pending` with attempt 0 and run time now. */
  jobRetry(params: { id: string; actor: string }): Promise<JobRetryOutcome>;
  /**
   * Re-queues up to `limit` dead jobs matching the filter, newest first, like `jobRetry`; a job whose dedupe key
   * another claimable job holds is skipped. Returns the jobs it re-queued.
   */
  jobRetryDeadMany(params: { filter: DeadJobFilter; limit: number; actor: string }): Promise<JobRow[]>;
  /** Marks the chain cancelled (remembering by whom) and cancels its claimable jobs; returns the jobs it cancelled. */
  chainCancel(params: { originalRequestId: string; actor: string }): Promise<JobRow[]>;
  /** A waiting job (`pending`/`retrying`) due now: its run time moves to now if later. */
  jobRunNow(params: { id: string; actor: string }): Promise<JobRunNowOutcome>;
}

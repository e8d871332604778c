/** The store's `AdminStore` role; src/store/store.ts composes the roles into `Store`. */
import type { JobRow } from "../../job/job.js";

/**
 * Who makes an administrator's write: the admin token's `sub` and its role (`operator` or `admin`), recorded with each
 * job the write changes (`adminActionList`).
 */
export interface AdminActor {
  actor: string;
  role: string;
}

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

/** What one call of `userErase` did, and what it left. */
export interface UserEraseOutcome {
  /** The jobs whose data it removed. */
  erased: number;
  /** The waiting jobs it cancelled first (with `cancelWaiting`); their data is removed too. */
  cancelled: number;
  /**
   * The user's jobs still waiting (pending or retrying) after the call: all of them, counted by the call that reached
   * the user's last job; before that, those the walk has seen.
   */
  waiting: number;
  /** The user's jobs being delivered, counted as `waiting` is: their data is removed once they finish, by a later call. */
  running: number;
  /** Whether a call now would do more: jobs not yet looked at, finished jobs not yet erased, or waiting ones to cancel. */
  more: boolean;
}

/**
 * Administrators' writes on jobs and chains (cancel, retry, run now, one or many), each recorded with who
 * made it in the same transaction.
 */
export interface AdminStore {
  /**
   * `pending`/`retrying` → `cancelled` (`cancelled-by-admin`). This and the administrators' writes after it record who
   * made them (`AdminActor`: the admin token's `sub` and role) for every job they change, in the same transaction
   * (`adminActionList`).
   */
  jobCancel(params: { id: string; abortRunning?: boolean } & AdminActor): Promise<JobCancelOutcome>;
  /**
   * Cancels up to `limit` jobs matching `filter`, newest first, as `jobCancel` with `abortRunning` would; returns them
   * (each with whether it was running).
   */
  jobCancelMany(
    params: { filter: JobCancelFilter; limit: number } & AdminActor,
  ): Promise<Array<{ job: JobRow; wasRunning: boolean }>>;
  /** `dead`/`cancelled` → `pending` with attempt 0 and run time now. */
  jobRetry(params: { id: string } & AdminActor): Promise<JobRetryOutcome>;
  /**
   * Re-queues up to `limit` dead jobs matching the filter, newest first, like `jobRetry`; a job whose dedupe key
   * another claimable job holds is skipped. Returns the jobs it re-queued.
   */
  jobRetryDeadMany(params: { filter: DeadJobFilter; limit: number } & AdminActor): Promise<JobRow[]>;
  /** Marks the chain cancelled (remembering by whom) and cancels its claimable jobs; returns the jobs it cancelled. */
  chainCancel(params: { originalRequestId: string } & AdminActor): Promise<JobRow[]>;
  /** A waiting job (`pending`/`retrying`) due now: its run time moves to now if later. */
  jobRunNow(params: { id: string } & AdminActor): Promise<JobRunNowOutcome>;
  /**
   * Erases the data of `userId`'s jobs (docs/api.md, "Erasing a user's data"), a page of their next `limit` jobs in
   * creation order a call, after where the last call of the same `subject` stopped (src/store/erasure-pass.ts). In
   * the page: with `cancelWaiting`, it first cancels the waiting jobs as a bulk cancel would (recorded as `actor`'s);
   * then each finished job not yet erased loses its request (left `{}`), its result's error and stored bodies, its
   * attempts' error bodies, its progress and its callbacks once fired, and is marked erased. Running jobs are left to
   * finish. Each call is recorded in `erasures` with `actor`, `role` and `subject` (a digest of the user id, never the
   * id), the counts and where it stopped. Idempotent: a call with nothing left to do erases nothing.
   */
  userErase(
    params: { userId: string; cancelWaiting: boolean; limit: number; subject: string } & AdminActor,
  ): Promise<UserEraseOutcome>;
}

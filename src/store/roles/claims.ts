/** The store's `ClaimStore` role; src/store/store.ts composes the roles into `Store`. */
import type { JobAttempt, JobOutcome, JobRow } from "../../job/job.js";

/** Whether an interrupted attempt put back to the queue still counts. */
export type AttemptRefund =
  /** A graceful shutdown: the attempt counts, but a job that was on its last attempt keeps one to run. */
  | "if-last"
  /** opqueue's own process could not send it (no file descriptor, no memory): the attempt never happened. */
  | "always";

/**
 * What the node running jobs does with them: claims them through the gates of flow control, renews their
 * leases, writes their outcomes, and puts back what it could not finish.
 */
export interface ClaimStore {
  /**
   * Claims up to `limit` due jobs, each becoming `running` with attempt + 1: in claim order (priority DESC, run_at,
   * creation) with lanes taking turns within a priority, and only as the gates let (docs/flow-control.md, "The
   * claim"): no paused operation or key, each operation within its max_concurrency and rate, each concurrency key
   * within its limit (one running job by default), each rate key within its operation's rate_per_key.
   */
  jobClaimMany(params: { limit: number }): Promise<JobRow[]>;
  /** Renews the lease of in-flight jobs (those still `running` with that attempt), in one statement. */
  jobHeartbeatMany(params: { jobs: JobAttempt[] }): Promise<void>;
  /**
   * Records that the target took a running attempt asynchronously (202 with `x-job-async: 1`), if the job still runs
   * that attempt of that claim: the attempt is bound to the delivery token it was sent with (`tokenHash`), and its lease
   * starts now. Returns whether it was written (false: the attempt ended first, by a target's call, a cancel or a
   * rescue).
   */
  jobMarkAsyncIfRunning(params: { job: JobAttempt; tokenHash: string }): Promise<boolean>;
  /**
   * Puts interrupted attempts back to `retrying`, due `delayMs` after the store's now, refunding the attempt as
   * `refund` says; a cancelled chain ends the job `cancelled-by-chain`. Returns how many were requeued.
   */
  jobRequeueMany(params: {
    jobs: JobAttempt[];
    delayMs: number;
    errorBody: string;
    refund: AttemptRefund;
  }): Promise<number>;
  /**
   * When a claim may next find a job, on the database's clock (compare it with `now`): the earliest `run_at` of a
   * claimable job whose gates are open, or the time a rate limit lets it start if later; null when nothing waits
   * that a claim could take (what a job's end, a resume or a change of limits opens, they wake the nodes for).
   */
  jobNextRunAt(): Promise<number | null>;
  /**
   * Sets each job's state from an attempt's outcome, if the job is still `running` that attempt of that claim:
   * `succeeded` and `dead` end it (a `dead` one of a cancelled chain ends `cancelled-by-chain`), `retrying` puts it
   * back in the queue (the completer's outcomes and the rescuer's alike). Returns, per outcome, whether it was written
   * (false: someone else, a rescue, a cancel or another node, decided first).
   */
  jobSetStateIfRunningMany(params: { outcomes: JobOutcome[] }): Promise<boolean[]>;
}

/** The store's `ChainStore` role; src/store/store.ts composes the roles into `Store`. */
import type { CallbackSpec, JobRow } from "../../job/job.js";
import type { JobStatus } from "../../job/statuses.js";
import type { JobInsertOutcome, JobInsertParams } from "./enqueue.js";

/** How the jobs of a chain stand, counted by the database: however many, without reading them. */
export interface ChainJobCounts {
  jobs: number;
  /** Jobs by status; a status no job has is absent. */
  byStatus: Partial<Record<JobStatus, number>>;
  /** When its first job was created, and its last finished job finished (null: none has). Ms since the epoch. */
  firstCreatedAt: number | null;
  lastFinishedAt: number | null;
}

/** A chain as the store keeps it (docs/chains.md). Times are ms since the epoch. */
export interface ChainRow {
  originalRequestId: string;
  /** Jobs ever created in it, cancelled or not (the spawn cap's count). */
  jobsCreated: number;
  /** When its first job was enqueued; null for chains older than version 6 of the schema. */
  createdAt: number | null;
  /** When it was last seen settled by the chain sweeper (null: not since its last job was enqueued). */
  settledAt: number | null;
  cancelledAt: number | null;
  cancelledBy: string | null;
  /** Its on_settled callback with the job that set it, or null. */
  onSettled: (CallbackSpec & { job_id: string }) | null;
  onSettledFiredAt: number | null;
}

/** The result of `jobCallbackEnqueue` and `chainOnSettledEnqueue`: the insert's, or why nothing was inserted. */
export type CallbackEnqueueOutcome = JobInsertOutcome | { kind: "skipped" } | { kind: "cleared" };

/**
 * Chains (docs/chains.md): firing each job's on_complete/on_dead callback and each chain's on_settled
 * exactly once, the sweep of settled chains, and what the chain view reads.
 */
export interface ChainStore {
  /** Finished jobs (`succeeded`, `dead`) whose callback for that state is still to be enqueued, oldest first. */
  jobCallbackDueList(params: { limit: number }): Promise<JobRow[]>;
  /**
   * Enqueues the callback job of job `jobId` for its terminal `status`, once: the job's pending callback is cleared
   * and `insert` inserted in one transaction, only if the job is still in `status` with its callback pending.
   * `skipped` when that is no longer so (another node fired it, or an administrator retried the job meanwhile). With
   * `insert` null (the job has no callback for that state) the pending callback is only cleared (`cleared`).
   */
  jobCallbackEnqueue(params: {
    jobId: string;
    status: "succeeded" | "dead";
    insert: JobInsertParams | null;
  }): Promise<CallbackEnqueueOutcome>;
  /** Chains whose on_settled callback is still to fire and that have settled (no job pending, running or retrying). */
  chainSettledDueList(params: { limit: number }): Promise<ChainRow[]>;
  /**
   * Fires a settled chain's on_settled once: records it fired and inserts `insert`, in one transaction, only if it
   * has not fired and the chain still has no waiting or running job. `skipped` otherwise. With `insert` null (the
   * callback cannot be built: the job that set it is gone), only records it fired: `cleared`.
   */
  chainOnSettledEnqueue(params: {
    originalRequestId: string;
    insert: JobInsertParams | null;
  }): Promise<CallbackEnqueueOutcome>;
  /**
   * The chains that settled among those with a job finished since the sweep named `cursor` last read (its first read
   * starts at the store's now), each once per settling: their start and settle times. Records how far it read. On
   * PostgreSQL one node at a time reads (the others answer `[]`).
   */
  chainSettledSince(params: {
    cursor: string;
    limit: number;
  }): Promise<Array<{ originalRequestId: string; startedAt: number; settledAt: number }>>;
  /** A chain's row, or undefined when it has none (no job was ever enqueued into it, and it was never cancelled). */
  chainGet(params: { originalRequestId: string }): Promise<ChainRow | undefined>;
  /** How the jobs of a chain stand (none: zero jobs), counted in the database. */
  chainJobCounts(params: { originalRequestId: string }): Promise<ChainJobCounts>;
}

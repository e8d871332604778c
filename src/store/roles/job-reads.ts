/** The store's `JobReadStore` role; src/store/store.ts composes the roles into `Store`. */
import type { JobAttemptRow, JobRow } from "../../job/job.js";
import type { AdminAction, JobStatus } from "../../job/statuses.js";

/** One administrator's action on one job. */
export interface AdminActionRow {
  /** When (ms since the epoch). */
  at: number;
  /** The admin token's `sub`. */
  actor: string;
  /** The admin token's role; null for actions recorded before roles were (SQLite migration 0011, PostgreSQL 0023). */
  role: string | null;
  action: AdminAction;
}

/** Filters of the job list; every given filter must match. */
export interface JobListParams {
  statuses?: JobStatus[] | undefined;
  operationId?: string | undefined;
  originalRequestId?: string | undefined;
  userId?: string | undefined;
  parentJobId?: string | undefined;
  /** The job's current `dedupe_key` (a job requeued without its key no longer matches). */
  dedupeKey?: string | undefined;
  /** Only jobs created before this `seq` (the cursor). */
  beforeSeq?: number | undefined;
  limit: number;
}

/** Finished attempts per time bucket, by the status they left their job in. */
export interface AttemptBucket {
  /** Start of the bucket (ms since the epoch). */
  start: number;
  succeeded: number;
  retrying: number;
  dead: number;
  cancelled: number;
}

/** What metrics and the dashboard read from the store. */
export interface JobStats {
  byStatus: Record<JobStatus, number>;
  /** Counts by operation and status (only pairs that exist); empty when asked without them. */
  byOperation: Array<{ operationId: string; status: JobStatus; count: number }>;
  /**
   * `run_at` of the oldest claimable job that is due now, or null. A job a pause holds (its operation or its
   * concurrency key is paused) is not claimable and is left out: it is counted in `pausedDue` instead.
   */
  oldestDueRunAt: number | null;
  /** Jobs due now (`pending`/`retrying`) that a pause of their operation or concurrency key holds, by operation, sorted. */
  pausedDue: Array<{ operationId: string; count: number }>;
}

/**
 * What administrators, the dashboard and metrics read: jobs, their attempts and administrators' actions on
 * them, and counts.
 */
export interface JobReadStore {
  /** One job by id. */
  jobGet(params: { id: string }): Promise<JobRow | undefined>;
  /** Jobs matching the filters, newest first, at most `limit`. */
  jobList(params: JobListParams): Promise<JobRow[]>;
  /** The finished attempts of one job, oldest first (admin retries restart the numbering; earlier ones stay). */
  jobAttemptList(params: { id: string }): Promise<JobAttemptRow[]>;
  /** The finished attempts of several jobs, by job id, each oldest first. */
  jobAttemptListMany(params: { ids: string[] }): Promise<Map<string, JobAttemptRow[]>>;
  /** Who acted on job `jobId`, and how, oldest first. */
  adminActionList(params: { jobId: string }): Promise<AdminActionRow[]>;
  /**
   * Job counts by status and by operation, and the run time of the oldest due claimable job. With
   * `byOperation: false` the counts by operation are left out (`[]`): on PostgreSQL the operation of a job sits in
   * another table than its status, so counting by status alone reads one narrow table (about 6× faster with a
   * million jobs). Metrics, scraped often, ask for that; the dashboard asks for both.
   */
  jobStats(params?: { byOperation?: boolean }): Promise<JobStats>;
  /**
   * Attempts finished since `since`, counted per `bucketMs` bucket (buckets aligned to `since`), oldest first. The
   * counts are kept per minute (a day of them), so `since` and `bucketMs` are whole minutes (else a RangeError).
   * They outlive the attempts themselves: retention deleting a job leaves its attempts counted.
   */
  attemptBuckets(params: { since: number; bucketMs: number }): Promise<AttemptBucket[]>;
}

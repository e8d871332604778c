/** Rows as better-sqlite3 returns them, turned into the engine-independent shapes of the Store. */
import type { JobAsyncState, JobAttemptRow, JobRow } from "../../job/job.js";
import type { JobResult } from "../../job/schemas.js";
import type { JobStatus } from "../../job/statuses.js";
import type { ChainRow, JobInsertParams } from "../store.js";

/** A row of `jobs` as better-sqlite3 returns it. */
export interface SqliteJobRow {
  seq: number;
  id: string;
  operation_id: string;
  status: JobStatus;
  attempt: number;
  max_attempts: number;
  priority: number;
  run_at: number;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  heartbeat_at: number | null;
  dedupe_key: string | null;
  concurrency_key: string | null;
  rate_key: string | null;
  enqueued_by_operation_id: string;
  parent_job_id: string | null;
  original_request_id: string;
  user_id: string;
  authority: string;
  request: string;
  result: string | null;
  traceparent: string | null;
  expires_at: number | null;
  callbacks: string | null;
  callbacks_pending: number;
  claim_count: number;
  held: number;
}

/** A row of `chains` as better-sqlite3 returns it. */
export interface SqliteChainRow {
  original_request_id: string;
  jobs_created: number;
  cancelled_at: number | null;
  cancelled_by: string | null;
  created_at: number | null;
  settled_at: number | null;
  on_settled: string | null;
  on_settled_fired_at: number | null;
}

/** A row of `chains` as a ChainRow. */
export function toChainRow(row: SqliteChainRow): ChainRow {
  return {
    originalRequestId: row.original_request_id,
    jobsCreated: row.jobs_created,
    createdAt: row.created_at,
    settledAt: row.settled_at,
    cancelledAt: row.cancelled_at,
    cancelledBy: row.cancelled_by,
    onSettled: row.on_settled === null ? null : (JSON.parse(row.on_settled) as ChainRow["onSettled"]),
    onSettledFiredAt: row.on_settled_fired_at,
  };
}

/** A row of `job_attempts` as better-sqlite3 returns it. */
export interface SqliteAttemptRow {
  attempt: number;
  started_at: number | null;
  finished_at: number;
  outcome: JobStatus;
  status_code: number | null;
  error_body: string | null;
}

/** The asynchronous side of a job (migration 0008) as better-sqlite3 returns it. */
export interface SqliteAsyncRow {
  async_attempt: number | null;
  async_started_at: number | null;
  async_at: number | null;
  progress: string | null;
  progress_at: number | null;
  progress_attempt: number | null;
}

/** The asynchronous side of a job as the Store gives it. */
export function toAsyncState(row: SqliteAsyncRow): JobAsyncState {
  const { async_attempt: attempt, async_started_at: startedAt, async_at: at } = row;
  const { progress_attempt: progressAttempt, progress_at: progressAt } = row;
  return {
    accepted: attempt === null || startedAt === null || at === null ? null : { attempt, startedAt, at },
    // Never reported: the columns are NULL. A heartbeat's JSON null is stored as the text "null", a value like any.
    progress:
      progressAttempt === null || progressAt === null || row.progress === null
        ? null
        : { attempt: progressAttempt, value: JSON.parse(row.progress) as unknown, at: progressAt },
  };
}

/** A row of `job_attempts`. */
export function toAttemptRow(row: SqliteAttemptRow): JobAttemptRow {
  return {
    attempt: row.attempt,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    outcome: row.outcome,
    statusCode: row.status_code,
    errorBody: row.error_body,
  };
}

/** A row of `jobs` as a JobRow. */
export function toJobRow(row: SqliteJobRow): JobRow {
  return {
    seq: row.seq,
    id: row.id,
    operationId: row.operation_id,
    status: row.status,
    attempt: row.attempt,
    maxAttempts: row.max_attempts,
    priority: row.priority,
    runAt: row.run_at,
    createdAt: row.created_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    heartbeatAt: row.heartbeat_at,
    dedupeKey: row.dedupe_key,
    concurrencyKey: row.concurrency_key,
    rateKey: row.rate_key,
    enqueuedByOperationId: row.enqueued_by_operation_id,
    parentJobId: row.parent_job_id,
    originalRequestId: row.original_request_id,
    userId: row.user_id,
    authority: JSON.parse(row.authority) as JobRow["authority"],
    request: JSON.parse(row.request) as JobRow["request"],
    result: row.result === null ? null : (JSON.parse(row.result) as JobResult),
    traceparent: row.traceparent,
    expiresAt: row.expires_at,
    callbacks: row.callbacks === null ? null : (JSON.parse(row.callbacks) as JobRow["callbacks"]),
    claimCount: row.claim_count,
  };
}

/**
 * Whether a new job may take over the claimable job holding its dedupe key: same operation, and the same user under
 * the same kind of authority. Otherwise the upsert would run one user's request under another's authority.
 */
export function mayUpsert(holder: SqliteJobRow, params: JobInsertParams): boolean {
  if (holder.operation_id !== params.operationId || holder.user_id !== params.userId) return false;
  return (JSON.parse(holder.authority) as { kind: string }).kind === params.authority.kind;
}

/**
 * The PostgreSQL engine's reads of jobs for the API and the dashboard: a job, a page of jobs, their attempts, the
 * counts by status and operation, and the attempts' outcomes per time slot. The administrators' actions on a job
 * are read in admin.ts, beside the writes that record them.
 */
import type { JobAttemptRow, JobRow } from "../../job/job.js";
import { JOB_STATUSES, type JobStatus } from "../../job/statuses.js";
import { requireWholeMinutes, toBuckets } from "../attempt-buckets.js";
import type { AttemptBucket, JobListParams, JobStats } from "../store.js";
import type { PgConnection } from "./connection.js";
import { unstorable } from "./errors.js";
import { toAttemptRow, toJobRow, toMs } from "./rows.js";
import { ATTEMPT_LIST, JOB_GET, jobListQuery } from "./sql/jobs.js";
import {
  ATTEMPT_BUCKETS,
  ATTEMPT_LIST_MANY,
  COUNT_BY_OPERATION,
  COUNT_BY_STATUS,
  OLDEST_DUE,
  PAUSED_DUE,
} from "./sql/maintenance.js";

/** A job, or undefined. */
export async function jobGet(db: PgConnection, params: { id: string }): Promise<JobRow | undefined> {
  if (unstorable(params.id)) return db.answerIfOpen(undefined);
  const rows = await db.query(JOB_GET, [params.id], "opqueue_job_get");
  return rows[0] ? toJobRow(rows[0]) : undefined;
}

/** A page of jobs, as `jobListQuery` filters and orders them. */
export async function jobList(db: PgConnection, params: JobListParams): Promise<JobRow[]> {
  if (unstorable(params.operationId, params.originalRequestId, params.userId, params.parentJobId, params.dedupeKey)) {
    return db.answerIfOpen([]);
  }
  const { text, values } = jobListQuery(params);
  return (await db.query(text, values)).map(toJobRow);
}

/** A job's attempts. */
export async function attemptList(db: PgConnection, params: { id: string }): Promise<JobAttemptRow[]> {
  if (unstorable(params.id)) return db.answerIfOpen([]);
  return (await db.query(ATTEMPT_LIST, [params.id])).map(toAttemptRow);
}

/** The attempts of each job of `ids`, by job (an entry for every id, empty for a job with none or no job). */
export async function attemptListMany(
  db: PgConnection,
  params: { ids: string[] },
): Promise<Map<string, JobAttemptRow[]>> {
  const attempts = new Map<string, JobAttemptRow[]>(params.ids.map((id) => [id, []]));
  const ids = params.ids.filter((id) => !unstorable(id));
  if (ids.length === 0) return db.answerIfOpen(attempts);
  for (const row of await db.query(ATTEMPT_LIST_MANY, [ids]))
    attempts.get(row["job_id"] as string)?.push(toAttemptRow(row));
  return attempts;
}

/** The jobs counted by status (and by operation, unless `byOperation` is false), the oldest due, the paused due. */
export async function stats(db: PgConnection, params: { byOperation: boolean; now: Date | "now" }): Promise<JobStats> {
  const { byOperation: withOperations, now } = params;
  const [counts, due, paused] = await Promise.all([
    withOperations
      ? db.query(COUNT_BY_OPERATION, [], "opqueue_stats_counts")
      : db.query(COUNT_BY_STATUS, [], "opqueue_stats_status_counts"),
    db.query(OLDEST_DUE, [now], "opqueue_stats_due"),
    db.query(PAUSED_DUE, [now], "opqueue_stats_paused_due"),
  ]);
  const byStatus = Object.fromEntries(JOB_STATUSES.map((status) => [status, 0])) as Record<JobStatus, number>;
  for (const row of counts) byStatus[row["status"] as JobStatus] += Number(row["count"]);
  const byOperation = withOperations
    ? counts.map((row) => ({
        operationId: row["operation_id"] as string,
        status: row["status"] as JobStatus,
        count: Number(row["count"]),
      }))
    : [];
  const pausedDue = paused.map((row) => ({
    operationId: row["operation_id"] as string,
    count: Number(row["count"]),
  }));
  return { byStatus, byOperation, oldestDueRunAt: toMs(due[0]?.["oldest"]), pausedDue };
}

/** The attempts' outcomes since `since`, per slot of `bucketMs`, up to the store's now (`nowMs`, asked once read). */
export async function attemptBuckets(
  db: PgConnection,
  params: { since: number; bucketMs: number; nowMs: () => number },
): Promise<AttemptBucket[]> {
  const { since, bucketMs } = params;
  requireWholeMinutes({ since, bucketMs });
  const rows = await db.query(ATTEMPT_BUCKETS, [new Date(since), since, bucketMs]);
  return toBuckets({
    since,
    bucketMs,
    now: params.nowMs(),
    rows: rows.map((row) => ({
      slot: Number(row["slot"]),
      outcome: String(row["outcome"]),
      count: Number(row["count"]),
    })),
  });
}

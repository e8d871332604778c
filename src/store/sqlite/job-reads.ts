/**
 * The SQLite engine's reads of jobs for the API and the dashboard: a job, a page of jobs, their attempts, the counts
 * by status and operation, and the attempts' outcomes per time slot (statements in sql/jobs.ts and
 * sql/maintenance.ts). The administrators' actions on a job are read in admin.ts, beside the writes that record them.
 */
import type Database from "better-sqlite3";
import type { JobAttemptRow, JobRow } from "../../job/job.js";
import { JOB_STATUSES, type JobStatus } from "../../job/statuses.js";
import { toBuckets } from "../attempt-buckets.js";
import type { AttemptBucket, JobListParams, JobStats } from "../store.js";
import { toAttemptRow, toJobRow, type SqliteJobRow } from "./rows.js";
import { jobListQuery } from "./sql/jobs.js";
import type { Statements } from "./statements.js";

/** The job list's statements, one per shape of filter, each prepared on first use and kept for the connection. */
export class JobListStatements {
  private readonly prepared = new Map<string, Database.Statement>();

  constructor(private readonly db: Database.Database) {}

  /** The statement of `sql`, prepared once. */
  statementOf(sql: string): Database.Statement {
    let statement = this.prepared.get(sql);
    if (!statement) {
      statement = this.db.prepare(sql);
      this.prepared.set(sql, statement);
    }
    return statement;
  }
}

/** One job by id. */
export function jobGet(s: Statements, params: { id: string }): JobRow | undefined {
  const row = s.getById.get(params.id);
  return row ? toJobRow(row) : undefined;
}

/** A page of jobs, newest first, every given filter matching. */
export function jobList(lists: JobListStatements, params: JobListParams): JobRow[] {
  const { sql, values } = jobListQuery(params);
  return (lists.statementOf(sql).all(values) as SqliteJobRow[]).map(toJobRow);
}

/** A job's attempts, in order. */
export function attemptList(s: Statements, params: { id: string }): JobAttemptRow[] {
  return s.attemptsOf.all(params.id).map(toAttemptRow);
}

/** The attempts of each of `ids`, in order; a job without any (or unknown) has an empty list. */
export function attemptListMany(s: Statements, params: { ids: string[] }): Map<string, JobAttemptRow[]> {
  const attempts = new Map<string, JobAttemptRow[]>(params.ids.map((id) => [id, []]));
  for (const row of s.attemptsOfMany.all(JSON.stringify(params.ids))) {
    attempts.get(row.job_id)?.push(toAttemptRow(row));
  }
  return attempts;
}

/** The counts of jobs by status (and by operation), the oldest due run time, and what pauses hold. */
export function stats(s: Statements, params: { byOperation: boolean; now: number }): JobStats {
  const byStatus = Object.fromEntries(JOB_STATUSES.map((status) => [status, 0])) as Record<JobStatus, number>;
  for (const row of s.countByStatus.all()) byStatus[row.status] = row.count;
  const byOperation = params.byOperation
    ? s.countByOperation.all().map((row) => ({ operationId: row.operation_id, status: row.status, count: row.count }))
    : [];
  const { now } = params;
  const pausedDue = s.pausedDue.all(now).map((row) => ({ operationId: row.operation_id, count: row.count }));
  return { byStatus, byOperation, oldestDueRunAt: s.oldestDue.get(now) ?? null, pausedDue };
}

/** The attempts' outcomes per slot of `bucketMs` since `since`. */
export function attemptBuckets(
  s: Statements,
  params: { since: number; bucketMs: number; now: number },
): AttemptBucket[] {
  const rows = s.attemptBuckets.all({ since: params.since, bucket: params.bucketMs });
  return toBuckets({ ...params, rows });
}

/**
 * Reads of jobs, and the administrators' writes (docs/api.md): cancel, cancel many, retry, run now, cancel a chain,
 * retry the dead, each recorded in admin_actions (migration 0003); a job's attempt history; and the job list's text.
 */
import type Database from "better-sqlite3";
import type { AdminAction } from "../../../job/statuses.js";
import type { JobListParams } from "../../store.js";
import { prepare } from "../prepared.js";
import type { SqliteAttemptRow, SqliteJobRow } from "../rows.js";
import { CLAIMABLE } from "./common.js";

/**
 * The job list: every given filter must match, newest first. One text per shape of filter, with its named values;
 * job-reads.ts prepares each text once.
 */
export function jobListQuery(params: JobListParams): { sql: string; values: Record<string, unknown> } {
  const where: string[] = [];
  const values: Record<string, unknown> = { limit: params.limit };
  if (params.statuses && params.statuses.length > 0) {
    const names = params.statuses.map((status, i) => {
      values[`status${i}`] = status;
      return `:status${i}`;
    });
    where.push(`status IN (${names.join(", ")})`);
  }
  const filters: Array<[keyof JobListParams, string]> = [
    ["operationId", "operation_id"],
    ["originalRequestId", "original_request_id"],
    ["userId", "user_id"],
    ["parentJobId", "parent_job_id"],
    ["dedupeKey", "dedupe_key"],
  ];
  for (const [param, column] of filters) {
    const value = params[param];
    if (value !== undefined) {
      where.push(`${column} = :${column}`);
      values[column] = value;
    }
  }
  if (params.beforeSeq !== undefined) {
    where.push("seq < :before_seq");
    values["before_seq"] = params.beforeSeq;
  }
  const sql =
    `SELECT * FROM jobs ${where.length > 0 ? `WHERE ${where.join(" AND ")}` : ""} ` + "ORDER BY seq DESC LIMIT :limit";
  return { sql, values };
}

/** Prepares the jobs' reads and the administrators' writes on `db`. */
export function prepareJobsStatements(db: Database.Database) {
  return {
    getById: prepare<[string], SqliteJobRow>(db, "SELECT * FROM jobs WHERE id = ?"),
    dedupeHolder: prepare<[string], SqliteJobRow>(db, `SELECT * FROM jobs WHERE dedupe_key = ? AND ${CLAIMABLE}`),
    cancel: prepare<{ id: string; now: number }, SqliteJobRow>(
      db,
      `UPDATE jobs SET status = 'cancelled', finished_at = :now,
         result = json_set(coalesce(result, '{"error_body":null}'), '$.terminal_reason', 'cancelled-by-admin')
       WHERE id = :id AND ${CLAIMABLE} RETURNING *`,
    ),
    // A running job cancelled by an administrator: its node aborts the delivery, whose outcome then finds it no
    // longer running. The interrupted attempt is recorded (recordAbortedAttempt).
    cancelRunning: prepare<{ id: string; now: number }, SqliteJobRow>(
      db,
      `UPDATE jobs SET status = 'cancelled', finished_at = :now, heartbeat_at = NULL,
         result = json_set(coalesce(result, '{"error_body":null}'), '$.terminal_reason', 'cancelled-by-admin')
       WHERE id = :id AND status = 'running' RETURNING *`,
    ),
    recordAbortedAttempt: prepare<{ id: string; now: number; error: string }>(
      db,
      `INSERT INTO job_attempts (job_id, attempt, started_at, finished_at, outcome, status_code, error_body)
       SELECT id, attempt, started_at, :now, 'cancelled', NULL, :error FROM jobs WHERE id = :id`,
    ),
    // The jobs a bulk cancel takes, newest first (docs/flow-control.md, "Cancelling many jobs").
    cancelCandidates: prepare<Record<string, unknown>, { id: string; status: string }>(
      db,
      `SELECT id, status FROM jobs
       WHERE status IN (SELECT value FROM json_each(:statuses))
         AND (:operation_id IS NULL OR operation_id = :operation_id)
         AND (:original_request_id IS NULL OR original_request_id = :original_request_id)
         AND (:user_id IS NULL OR user_id = :user_id)
         AND (:dedupe_key IS NULL OR dedupe_key = :dedupe_key)
         AND (:created_from IS NULL OR created_at >= :created_from)
         AND (:created_before IS NULL OR created_at < :created_before)
       ORDER BY seq DESC LIMIT :limit`,
    ),
    // Attempts start again: the last claim's asynchronous mark goes (a new claim of attempt 1 in the same millisecond
    // must not read as taken asynchronously), and so does a hold.
    retry: prepare<{ id: string; now: number }, SqliteJobRow>(
      db,
      `UPDATE jobs SET status = 'pending', attempt = 0, result = NULL, started_at = NULL, finished_at = NULL,
         heartbeat_at = NULL, run_at = :now, expires_at = NULL, callbacks_pending = callbacks IS NOT NULL, held = 0,
         async_attempt = NULL, async_started_at = NULL, async_at = NULL, async_token_hash = NULL
       WHERE id = :id AND status IN ('dead', 'cancelled') RETURNING *`,
    ),
    markChainCancelled: prepare<{ rid: string; now: number; actor: string }>(
      db,
      `INSERT INTO chains (original_request_id, jobs_created, cancelled_at, cancelled_by) VALUES (:rid, 0, :now, :actor)
       ON CONFLICT (original_request_id) DO UPDATE SET cancelled_at = coalesce(cancelled_at, :now),
         cancelled_by = CASE WHEN cancelled_at IS NULL THEN :actor ELSE cancelled_by END`,
    ),
    // A waiting job due now; a job due already keeps its earlier run time (its place in the claim order).
    runNow: prepare<{ id: string; now: number }, SqliteJobRow>(
      db,
      `UPDATE jobs SET run_at = min(run_at, :now) WHERE id = :id AND ${CLAIMABLE} RETURNING *`,
    ),
    recordAction: prepare<{ at: number; actor: string; role: string; action: string; job_id: string }>(
      db,
      "INSERT INTO admin_actions (at, actor, role, action, job_id) VALUES (:at, :actor, :role, :action, :job_id)",
    ),
    actionsOf: prepare<[string], { at: number; actor: string; role: string | null; action: AdminAction }>(
      db,
      "SELECT at, actor, role, action FROM admin_actions WHERE job_id = ? ORDER BY id",
    ),
    cancelChainJobs: prepare<{ rid: string; now: number }, SqliteJobRow>(
      db,
      `UPDATE jobs SET status = 'cancelled', finished_at = :now,
         result = json_set(coalesce(result, '{"error_body":null}'), '$.terminal_reason', 'cancelled-by-chain')
       WHERE original_request_id = :rid AND ${CLAIMABLE} RETURNING *`,
    ),
    deadJobs: prepare<Record<string, unknown>, SqliteJobRow>(
      db,
      `SELECT * FROM jobs INDEXED BY jobs_status_seq WHERE status = 'dead'
         AND (:operation_id IS NULL OR operation_id = :operation_id)
         AND (:original_request_id IS NULL OR original_request_id = :original_request_id)
         AND (:user_id IS NULL OR user_id = :user_id)
       ORDER BY seq DESC LIMIT :limit`,
    ),
    attemptsOf: prepare<[string], SqliteAttemptRow>(
      db,
      "SELECT attempt, started_at, finished_at, outcome, status_code, error_body FROM job_attempts WHERE job_id = ? ORDER BY id",
    ),
  };
}

/** The jobs' reads and the administrators' writes, prepared. */
export type JobsStatements = ReturnType<typeof prepareJobsStatements>;

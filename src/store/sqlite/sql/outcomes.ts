/**
 * Outcome writes, requeues, heartbeats and the rescuer's read: everything that ends or renews a running attempt, and
 * the attempt log and counts each written outcome adds to.
 */
import type Database from "better-sqlite3";
import { prepare, preparePluck } from "../prepared.js";
import type { SqliteJobRow } from "../rows.js";
import { TAKEN_ASYNC } from "./common.js";

/** Prepares the outcome statements on `db`. */
export function prepareOutcomeStatements(db: Database.Database) {
  return {
    finish: prepare<{
      id: string;
      attempt: number;
      started_at: number | null;
      status: string;
      result: string;
      now: number;
    }>(
      db,
      `UPDATE jobs SET status = :status, result = :result, finished_at = :now, heartbeat_at = NULL
       WHERE id = :id AND status = 'running' AND attempt = :attempt
         AND (:started_at IS NULL OR started_at = :started_at)`,
    ),
    chainCancelledFor: preparePluck<[string], number | null>(
      db,
      `SELECT c.cancelled_at FROM jobs j JOIN chains c ON c.original_request_id = j.original_request_id
         WHERE j.id = ?`,
    ),
    // A job going back to the queue re-takes its dedupe key, unless a newer claimable job took it while
    // this one was running (running jobs do not hold keys): then it is retried without the key.
    // refund 'if-last' returns an interrupted last attempt, so the job keeps one attempt to run; 'always' returns
    // any attempt (it never reached the target); 'none' keeps it (an attempt's outcome).
    requeue: prepare<{
      id: string;
      attempt: number;
      started_at: number | null;
      run_at: number;
      result: string;
      refund: string;
    }>(
      db,
      `UPDATE jobs SET status = 'retrying', run_at = :run_at, result = :result, heartbeat_at = NULL,
         attempt = CASE
           WHEN :refund = 'always' THEN attempt - 1
           WHEN :refund = 'if-last' AND attempt >= max_attempts THEN max_attempts - 1
           ELSE attempt END,
         dedupe_key = CASE WHEN EXISTS (
           SELECT 1 FROM jobs other WHERE other.dedupe_key = jobs.dedupe_key
             AND other.status IN ('pending', 'retrying') AND other.id <> jobs.id)
           THEN NULL ELSE dedupe_key END
       WHERE id = :id AND status = 'running' AND attempt = :attempt
         AND (:started_at IS NULL OR started_at = :started_at)`,
    ),
    heartbeat: prepare<{ id: string; attempt: number; now: number }>(
      db,
      "UPDATE jobs SET heartbeat_at = :now WHERE id = :id AND status = 'running' AND attempt = :attempt",
    ),
    // Each job held to its own operation's lease (:leases, a JSON object by operation) before the limit, so jobs
    // still within a longer lease never crowd expired ones out of the batch; an attempt taken asynchronously to its
    // operation's asynchronous lease (:async_leases) when it has one.
    expired: prepare<
      { now: number; leases: string; async_leases: string; default_ms: number; limit: number },
      SqliteJobRow
    >(
      db,
      `SELECT jobs.* FROM jobs INDEXED BY jobs_running_heartbeat
         LEFT JOIN json_each(:leases) AS lease ON lease.key = jobs.operation_id
         LEFT JOIN json_each(:async_leases) AS async_lease ON async_lease.key = jobs.operation_id
           AND ${TAKEN_ASYNC}
       WHERE jobs.status = 'running'
         AND jobs.heartbeat_at < :now - coalesce(async_lease.value, lease.value, :default_ms)
       ORDER BY jobs.heartbeat_at LIMIT :limit`,
    ),
    // The attempt just written, copied from its job row: the status it left the job in, and its result.
    recordAttempt: prepare<{ id: string; attempt: number; now: number }>(
      db,
      `INSERT INTO job_attempts (job_id, attempt, started_at, finished_at, outcome, status_code, error_body)
       SELECT id, :attempt, started_at, :now, status, json_extract(result, '$.status_code'),
         json_extract(result, '$.error_body')
       FROM jobs WHERE id = :id`,
    ),
    // ...and counted for the dashboard's chart, in the minute it finished (migration 0002).
    countAttempt: prepare<{ id: string; minute: number }>(
      db,
      `INSERT INTO attempt_counts (minute, outcome, n) SELECT :minute, status, 1 FROM jobs WHERE id = :id
       ON CONFLICT (minute, outcome) DO UPDATE SET n = n + 1`,
    ),
  };
}

/** The outcome statements, prepared. */
export type OutcomeStatements = ReturnType<typeof prepareOutcomeStatements>;

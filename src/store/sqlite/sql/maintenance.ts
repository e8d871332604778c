/**
 * Retention, expiry, callbacks and chain settling (migration 0006, docs/chains.md), the figures metrics and the
 * dashboard read, and the engine's own checks.
 */
import type Database from "better-sqlite3";
import type { JobStatus } from "../../../job/statuses.js";
import { prepare, preparePluck } from "../prepared.js";
import type { SqliteAttemptRow, SqliteChainRow, SqliteJobRow } from "../rows.js";
import { CLAIMABLE } from "./common.js";

/** Prepares the maintenance statements on `db`. */
export function prepareMaintenanceStatements(db: Database.Database) {
  return {
    // Each name's newest tick stays: it is the last run a schedule's answer shows, however long ago.
    deleteTicks: prepare<{ before: number }>(
      db,
      `DELETE FROM cron_ticks WHERE tick_at < :before
         AND tick_at < (SELECT max(n.tick_at) FROM cron_ticks n WHERE n.name = cron_ticks.name)`,
    ),
    deleteFinished: prepare<
      { before: number; now: number; limit: number },
      { id: string; original_request_id: string }
    >(
      db,
      `DELETE FROM jobs WHERE seq IN (
         SELECT seq FROM jobs INDEXED BY jobs_finished_at
         WHERE finished_at < :before AND finished_at IS NOT NULL AND status IN ('succeeded', 'dead', 'cancelled')
           AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.job_id = jobs.id AND k.expires_at > :now)
         LIMIT :limit)
       RETURNING id, original_request_id`,
    ),
    // A chain row goes with its last job, unless it remembers a cancellation.
    deleteEmptyChain: prepare<[string]>(
      db,
      `DELETE FROM chains WHERE original_request_id = ? AND cancelled_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.original_request_id = chains.original_request_id)`,
    ),
    deleteAttempts: prepare<[string]>(db, "DELETE FROM job_attempts WHERE job_id = ?"),
    deleteActions: prepare<[string]>(db, "DELETE FROM admin_actions WHERE job_id = ?"),
    deleteAttemptCounts: prepare<{ before: number }>(db, "DELETE FROM attempt_counts WHERE minute < :before"),
    // Waiting jobs past their expiry (docs/api.md, "Expiry"), through their partial index: jobs without one are not in it.
    expire: prepare<{ now: number; limit: number }, SqliteJobRow>(
      db,
      `UPDATE jobs SET status = 'cancelled', finished_at = :now, heartbeat_at = NULL,
         result = json_set(coalesce(result, '{"error_body":null}'), '$.terminal_reason', 'expired')
       WHERE seq IN (
         SELECT seq FROM jobs INDEXED BY jobs_expiring
         WHERE expires_at <= :now AND expires_at IS NOT NULL AND ${CLAIMABLE}
         ORDER BY expires_at LIMIT :limit)
       RETURNING *`,
    ),
    deleteIdempotencyKeys: prepare<{ now: number; limit: number }>(
      db,
      `DELETE FROM idempotency_keys WHERE (scope, key) IN (
         SELECT scope, key FROM idempotency_keys INDEXED BY idempotency_keys_expires_at
         WHERE expires_at <= :now LIMIT :limit)`,
    ),
    countByStatus: prepare<[], { status: JobStatus; count: number }>(
      db,
      "SELECT status, count(*) AS count FROM jobs GROUP BY status",
    ),
    countByOperation: prepare<[], { operation_id: string; status: JobStatus; count: number }>(
      db,
      "SELECT operation_id, status, count(*) AS count FROM jobs GROUP BY operation_id, status ORDER BY operation_id, status",
    ),
    // The queue's lag leaves out the jobs a pause holds (docs/flow-control.md, "Metrics"): a pause is not the queue
    // falling behind. With nothing paused each NOT IN reads an empty table and the first row of jobs_run_at answers;
    // with a paused backlog older than the rest, the walk passes over it (one index step and two lookups a job).
    oldestDue: preparePluck<[number], number | null>(
      db,
      `SELECT run_at FROM jobs INDEXED BY jobs_run_at WHERE ${CLAIMABLE} AND run_at <= ?
         AND operation_id NOT IN (SELECT operation_id FROM operation_controls WHERE paused_at IS NOT NULL)
         AND (concurrency_key IS NULL OR concurrency_key NOT IN (SELECT concurrency_key FROM paused_keys))
       ORDER BY run_at LIMIT 1`,
    ),
    // The jobs due now that a pause holds, by operation. The first term does not depend on the row: SQLite checks it
    // once before the loop, so with nothing paused (the usual case) no job is read.
    pausedDue: prepare<[number], { operation_id: string; count: number }>(
      db,
      `SELECT operation_id, count(*) AS count FROM jobs INDEXED BY jobs_run_at
       WHERE (EXISTS (SELECT 1 FROM operation_controls WHERE paused_at IS NOT NULL) OR EXISTS (SELECT 1 FROM paused_keys))
         AND ${CLAIMABLE} AND run_at <= ?
         AND (operation_id IN (SELECT operation_id FROM operation_controls WHERE paused_at IS NOT NULL)
              OR concurrency_key IN (SELECT concurrency_key FROM paused_keys))
       GROUP BY operation_id ORDER BY operation_id`,
    ),
    attemptBuckets: prepare<{ since: number; bucket: number }, { slot: number; outcome: string; count: number }>(
      db,
      `SELECT (minute - :since) / :bucket AS slot, outcome, sum(n) AS count
       FROM attempt_counts WHERE minute >= :since GROUP BY slot, outcome`,
    ),
    // Callbacks and chains (migration 0006, docs/chains.md).
    callbacksDue: prepare<[number], SqliteJobRow>(
      db,
      `SELECT * FROM jobs INDEXED BY jobs_callbacks_due
       WHERE callbacks_pending = 1 AND status IN ('succeeded', 'dead') ORDER BY seq LIMIT ?`,
    ),
    clearCallback: prepare<{ id: string; status: string }>(
      db,
      "UPDATE jobs SET callbacks_pending = 0 WHERE id = :id AND status = :status AND callbacks_pending = 1",
    ),
    chain: prepare<[string], SqliteChainRow>(db, "SELECT * FROM chains WHERE original_request_id = ?"),
    chainJobCounts: prepare<
      [string],
      { status: string; jobs: number; first_created_at: number; last_finished_at: number | null }
    >(
      db,
      `SELECT status, count(*) AS jobs, min(created_at) AS first_created_at, max(finished_at) AS last_finished_at
       FROM jobs INDEXED BY jobs_chain_seq WHERE original_request_id = ? GROUP BY status`,
    ),
    settledDue: prepare<[number], SqliteChainRow>(
      db,
      `SELECT c.* FROM chains c INDEXED BY chains_on_settled_due
       WHERE c.on_settled IS NOT NULL AND c.on_settled_fired_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM jobs j INDEXED BY jobs_chain_seq
                         WHERE j.original_request_id = c.original_request_id AND j.status IN ('pending', 'running', 'retrying'))
       LIMIT ?`,
    ),
    fireOnSettled: prepare<{ rid: string; now: number }>(
      db,
      `UPDATE chains SET on_settled_fired_at = :now, settled_at = coalesce(settled_at, :now)
       WHERE original_request_id = :rid AND on_settled IS NOT NULL AND on_settled_fired_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM jobs j INDEXED BY jobs_chain_seq
                         WHERE j.original_request_id = :rid AND j.status IN ('pending', 'running', 'retrying'))`,
    ),
    cursor: prepare<[string], { at: number; seq: number }>(
      db,
      "SELECT at, seq FROM maintenance_cursors WHERE name = ?",
    ),
    setCursor: prepare<{ name: string; at: number; seq: number }>(
      db,
      `INSERT INTO maintenance_cursors (name, at, seq) VALUES (:name, :at, :seq)
       ON CONFLICT (name) DO UPDATE SET at = excluded.at, seq = excluded.seq`,
    ),
    // Jobs finished after the cursor (finished_at, then seq), in that order.
    finishedSince: prepare<
      { at: number; seq: number; limit: number },
      { seq: number; original_request_id: string; finished_at: number }
    >(
      db,
      `SELECT seq, original_request_id, finished_at FROM jobs INDEXED BY jobs_finished_at
       WHERE finished_at IS NOT NULL AND (finished_at > :at OR (finished_at = :at AND seq > :seq))
       ORDER BY finished_at, seq LIMIT :limit`,
    ),
    // Whether a chain has a job waiting or running, newest first: a chain being drained has them at its end, so the
    // walk stops at once; only a settled chain is read whole, once.
    chainActive: preparePluck<[string], number>(
      db,
      `SELECT 1 FROM jobs INDEXED BY jobs_chain_seq
       WHERE original_request_id = ? AND status IN ('pending', 'running', 'retrying') ORDER BY seq DESC LIMIT 1`,
    ),
    chainFirstCreated: preparePluck<[string], number>(
      db,
      "SELECT created_at FROM jobs INDEXED BY jobs_chain_seq WHERE original_request_id = ? ORDER BY seq LIMIT 1",
    ),
    markSettled: prepare<{ rid: string; at: number }>(
      db,
      "UPDATE chains SET settled_at = :at WHERE original_request_id = :rid AND settled_at IS NULL",
    ),
    attemptsOfMany: prepare<[string], SqliteAttemptRow & { job_id: string }>(
      db,
      `SELECT job_id, attempt, started_at, finished_at, outcome, status_code, error_body FROM job_attempts
       WHERE job_id IN (SELECT value FROM json_each(?)) ORDER BY id`,
    ),
    schemaVersion: preparePluck<[], number>(db, "PRAGMA user_version"),
  };
}

/** The maintenance statements, prepared. */
export type MaintenanceStatements = ReturnType<typeof prepareMaintenanceStatements>;

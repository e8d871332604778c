/**
 * Inserts (docs/api.md, "Idempotency" and the enqueue steps): the dedupe upsert, the chain's spawn cap, the row itself,
 * idempotency keys (migration 0005), and a cron tick with the job it enqueued.
 */
import type Database from "better-sqlite3";
import { prepare } from "../prepared.js";
import type { SqliteJobRow } from "../rows.js";
import { CLAIMABLE } from "./common.js";

/** Prepares the insert statements on `db`. */
export function prepareInsertStatements(db: Database.Database) {
  return {
    refreshDeduped: prepare<{ id: string; run_at: number; request: string; expires_at: number | null }, SqliteJobRow>(
      db,
      `UPDATE jobs SET run_at = :run_at, request = :request, expires_at = :expires_at
       WHERE id = :id AND ${CLAIMABLE} RETURNING *`,
    ),
    // Counts the job against its chain in the same statement that checks the cap: no row back means the
    // chain is full. A new chain starts at 1.
    // A new job of the chain also makes it unsettled again (settled_at is the last settling the sweeper saw).
    chargeChain: prepare<{ rid: string; cap: number; now: number }, { cancelled_at: number | null }>(
      db,
      `INSERT INTO chains (original_request_id, jobs_created, created_at) VALUES (:rid, 1, :now)
       ON CONFLICT (original_request_id) DO UPDATE SET jobs_created = jobs_created + 1, settled_at = NULL
         WHERE jobs_created < :cap
       RETURNING cancelled_at`,
    ),
    // A chain's first job with its on_settled: no row back means the chain exists already.
    startChainWithCallback: prepare<{ rid: string; now: number; on_settled: string }, { cancelled_at: number | null }>(
      db,
      `INSERT INTO chains (original_request_id, jobs_created, created_at, on_settled) VALUES (:rid, 1, :now, :on_settled)
       ON CONFLICT (original_request_id) DO NOTHING
       RETURNING cancelled_at`,
    ),
    insertJob: prepare<Record<string, unknown>>(
      db,
      `INSERT INTO jobs (id, operation_id, status, attempt, max_attempts, priority, run_at, created_at,
         finished_at, dedupe_key, concurrency_key, rate_key, enqueued_by_operation_id, parent_job_id,
         original_request_id, user_id, authority, request, result, traceparent, expires_at, callbacks,
         callbacks_pending)
       VALUES (:id, :operation_id, :status, 0, :max_attempts, :priority, :run_at, :created_at,
         :finished_at, :dedupe_key, :concurrency_key, :rate_key, :enqueued_by_operation_id, :parent_job_id,
         :original_request_id, :user_id, :authority, :request, :result, :traceparent, :expires_at, :callbacks,
         :callbacks IS NOT NULL)`,
    ),
    // Idempotency keys (migration 0005): a live one, taking one, pointing one at the job it answers, giving one back.
    idempotencyKey: prepare<{ scope: string; key: string; now: number }, { fingerprint: string; job_id: string }>(
      db,
      "SELECT fingerprint, job_id FROM idempotency_keys WHERE scope = :scope AND key = :key AND expires_at > :now",
    ),
    takeIdempotencyKey: prepare<Record<string, unknown>>(
      db,
      `INSERT INTO idempotency_keys (scope, key, fingerprint, job_id, created_at, expires_at)
       VALUES (:scope, :key, :fingerprint, :job_id, :now, :expires_at)
       ON CONFLICT (scope, key) DO UPDATE SET fingerprint = excluded.fingerprint, job_id = excluded.job_id,
         created_at = excluded.created_at, expires_at = excluded.expires_at`,
    ),
    recordTick: prepare<{ name: string; tick_at: number }>(
      db,
      "INSERT INTO cron_ticks (name, tick_at) VALUES (:name, :tick_at) ON CONFLICT DO NOTHING",
    ),
    tickJob: prepare<{ name: string; tick_at: number; job_id: string }>(
      db,
      "UPDATE cron_ticks SET job_id = :job_id WHERE name = :name AND tick_at = :tick_at",
    ),
  };
}

/** The insert statements, prepared. */
export type InsertStatements = ReturnType<typeof prepareInsertStatements>;

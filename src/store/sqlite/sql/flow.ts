/**
 * Flow control's statements (docs/flow-control.md): operation_controls, paused_keys and rate_buckets (migration 0004),
 * what the gates of a claim read of them (gates.ts), and the release of an operation's held lanes when its limits
 * change. Everything runs on the engine's one connection inside the caller's transaction: one writer, so a claim's
 * gates cannot change under it.
 */
import type Database from "better-sqlite3";
import type { ControlRow } from "../../control-rows.js";
import { prepare, preparePluck } from "../prepared.js";

/** The columns a limit-setting statement writes. */
const SET_LIMITS = `rate_limit = excluded.rate_limit, rate_period_ms = excluded.rate_period_ms,
  rate_burst = excluded.rate_burst, key_rate_limit = excluded.key_rate_limit,
  key_rate_period_ms = excluded.key_rate_period_ms, key_rate_burst = excluded.key_rate_burst,
  max_concurrency = excluded.max_concurrency, concurrency_limit = excluded.concurrency_limit`;

const LIMIT_VALUES = `:rate_limit, :rate_period_ms, :rate_burst, :key_rate_limit, :key_rate_period_ms, :key_rate_burst,
  :max_concurrency, :concurrency_limit`;

/** Prepares the flow control statements on `db`. */
export function prepareFlowStatements(db: Database.Database) {
  return {
    controlList: prepare<[], ControlRow>(db, "SELECT * FROM operation_controls ORDER BY operation_id"),
    control: prepare<[string], ControlRow>(db, "SELECT * FROM operation_controls WHERE operation_id = ?"),
    // Only the rows that gate anything: a claim reads them every time, and usually there are none.
    gatingControls: prepare<[], ControlRow>(
      db,
      `SELECT * FROM operation_controls WHERE paused_at IS NOT NULL OR rate_limit IS NOT NULL
         OR key_rate_limit IS NOT NULL OR max_concurrency IS NOT NULL OR concurrency_limit > 1`,
    ),
    pause: prepare<{ operation_id: string; at: number; by: string }>(
      db,
      `INSERT INTO operation_controls (operation_id, paused_at, paused_by) VALUES (:operation_id, :at, :by)
       ON CONFLICT (operation_id) DO UPDATE SET paused_at = excluded.paused_at, paused_by = excluded.paused_by
         WHERE operation_controls.paused_at IS NULL`,
    ),
    resume: prepare<[string]>(
      db,
      "UPDATE operation_controls SET paused_at = NULL, paused_by = NULL WHERE operation_id = ?",
    ),
    setLimits: prepare<Record<string, unknown>>(
      db,
      `INSERT INTO operation_controls (operation_id, rate_limit, rate_period_ms, rate_burst, key_rate_limit,
         key_rate_period_ms, key_rate_burst, max_concurrency, concurrency_limit, limits_source, limits_set_at,
         limits_set_by)
       VALUES (:operation_id, ${LIMIT_VALUES}, :source, :set_at, :set_by)
       ON CONFLICT (operation_id) DO UPDATE SET ${SET_LIMITS}, limits_source = excluded.limits_source,
         limits_set_at = excluded.limits_set_at, limits_set_by = excluded.limits_set_by`,
    ),
    // The configuration's limits, unless an administrator's are in force.
    configureLimits: prepare<Record<string, unknown>>(
      db,
      `INSERT INTO operation_controls (operation_id, rate_limit, rate_period_ms, rate_burst, key_rate_limit,
         key_rate_period_ms, key_rate_burst, max_concurrency, concurrency_limit)
       VALUES (:operation_id, ${LIMIT_VALUES})
       ON CONFLICT (operation_id) DO UPDATE SET ${SET_LIMITS} WHERE operation_controls.limits_source = 'config'`,
    ),
    // Operations the configuration no longer limits lose the limits it gave them; then rows that say nothing go.
    unconfigureLimits: prepare<[string]>(
      db,
      `UPDATE operation_controls SET rate_limit = NULL, rate_period_ms = NULL, rate_burst = NULL,
         key_rate_limit = NULL, key_rate_period_ms = NULL, key_rate_burst = NULL, max_concurrency = NULL,
         concurrency_limit = 1
       WHERE limits_source = 'config' AND operation_id NOT IN (SELECT value FROM json_each(?))`,
    ),
    deleteIdleControls: prepare(
      db,
      `DELETE FROM operation_controls WHERE paused_at IS NULL AND limits_source = 'config' AND rate_limit IS NULL
         AND key_rate_limit IS NULL AND max_concurrency IS NULL AND concurrency_limit = 1`,
    ),
    pauseKey: prepare<{ key: string; at: number; by: string }>(
      db,
      `INSERT INTO paused_keys (concurrency_key, paused_at, paused_by) VALUES (:key, :at, :by)
       ON CONFLICT (concurrency_key) DO NOTHING`,
    ),
    pausedKey: prepare<[string], { concurrency_key: string; paused_at: number; paused_by: string }>(
      db,
      "SELECT * FROM paused_keys WHERE concurrency_key = ?",
    ),
    resumeKey: prepare<[string]>(db, "DELETE FROM paused_keys WHERE concurrency_key = ?"),
    pausedKeys: prepare<[], { concurrency_key: string; paused_at: number; paused_by: string }>(
      db,
      "SELECT * FROM paused_keys ORDER BY concurrency_key",
    ),
    runningByKey: prepare<[], { key: string; running: number }>(
      db,
      `SELECT concurrency_key AS key, count(*) AS running FROM jobs INDEXED BY jobs_running_concurrency_key
       WHERE concurrency_key IS NOT NULL AND status = 'running' GROUP BY concurrency_key`,
    ),
    runningOfOperation: preparePluck<[string], number>(
      db,
      "SELECT count(*) FROM jobs INDEXED BY jobs_running_heartbeat WHERE status = 'running' AND operation_id = ?",
    ),
    bucket: preparePluck<[string, string], number>(
      db,
      "SELECT tat FROM rate_buckets WHERE operation_id = ? AND rate_key = ?",
    ),
    setBucket: prepare<{ operation_id: string; rate_key: string; tat: number }>(
      db,
      `INSERT INTO rate_buckets (operation_id, rate_key, tat) VALUES (:operation_id, :rate_key, :tat)
       ON CONFLICT (operation_id, rate_key) DO UPDATE SET tat = excluded.tat`,
    ),
    deleteBuckets: prepare<[number]>(db, "DELETE FROM rate_buckets WHERE tat < ?"),
    // Every hold of an operation goes when its limits change: a hold's instant was worked out under the old ones.
    releaseOperation: prepare<[string]>(
      db,
      `UPDATE jobs INDEXED BY jobs_held SET held = 0
       WHERE status IN ('pending', 'retrying') AND held = 1 AND operation_id = ?`,
    ),
    deleteOperationHolds: prepare<[string]>(db, "DELETE FROM rate_holds WHERE operation_id = ?"),
    allHeldOperations: preparePluck<[], string>(db, "SELECT DISTINCT operation_id FROM rate_holds"),
  };
}

/** The flow control statements, prepared. */
export type FlowStatements = ReturnType<typeof prepareFlowStatements>;

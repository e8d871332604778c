/**
 * Flow control's statements (docs/flow-control.md): operation_controls, paused_keys and rate_buckets (migration 0010).
 * A pause or a change of an operation's limits takes the operation's advisory lock exclusively, which every claim
 * that may take its jobs holds (shared, or exclusive when it counts against its limits) until it commits: once the
 * write returns, no claim still in flight read the gates as they were. A key's pause likewise takes the key's lock,
 * which a claim taking a job of the key holds.
 */

/** An operation's advisory lock, exclusive for the rest of the transaction. $1 operation id. */
export const LOCK_OPERATION = "SELECT pg_advisory_xact_lock(hashtext('opqueue.operation:' || $1))";

/**
 * The lock of an operation's held lanes (migration 0016), exclusive for the rest of the transaction. $1 operation id.
 * Taken before the operation's own lock by a change of limits; a claim only ever tries it, shared, to hold a lane.
 */
export const LOCK_HOLDS = "SELECT pg_advisory_xact_lock(hashtext('opqueue.holds:' || $1))";

/** The operations with held lanes. */
export const HELD_OPERATIONS = "SELECT DISTINCT operation_id FROM rate_holds";

/** Lets every held lane of an operation go: its holds' instants were worked out under limits that changed. $1 id. */
export const RELEASE_HOLDS = `WITH gone AS (DELETE FROM rate_holds WHERE operation_id = $1 RETURNING 1)
  UPDATE job_state SET held = false WHERE status IN ('pending', 'retrying') AND held AND operation_id = $1`;

/** A concurrency key's advisory lock, exclusive for the rest of the transaction. $1 key. */
export const LOCK_KEY = "SELECT pg_advisory_xact_lock(hashtext('opqueue.key:' || $1))";

/** An operation_controls row with its times in ms. */
const CONTROL_COLUMNS = `operation_id, floor(extract(epoch FROM paused_at) * 1000)::float8 AS paused_at, paused_by,
  rate_limit, rate_period_ms, rate_burst, key_rate_limit, key_rate_period_ms, key_rate_burst, max_concurrency,
  concurrency_limit, limits_source, floor(extract(epoch FROM limits_set_at) * 1000)::float8 AS limits_set_at,
  limits_set_by`;

export const CONTROL_LIST = `SELECT ${CONTROL_COLUMNS} FROM operation_controls ORDER BY operation_id`;

/** $1 operation id. */
export const CONTROL_GET = `SELECT ${CONTROL_COLUMNS} FROM operation_controls WHERE operation_id = $1`;

/** Pauses an operation, kept as it was if already paused. $1 operation id, $2 now, $3 actor. */
export const PAUSE = `INSERT INTO operation_controls (operation_id, paused_at, paused_by) VALUES ($1, $2, $3)
  ON CONFLICT (operation_id) DO UPDATE SET paused_at = excluded.paused_at, paused_by = excluded.paused_by
    WHERE operation_controls.paused_at IS NULL`;

/** $1 operation id. */
export const RESUME = "UPDATE operation_controls SET paused_at = NULL, paused_by = NULL WHERE operation_id = $1";

/** The limits' columns, $2 to $9, in the order `limitValues` gives them. */
const LIMIT_COLUMNS = `rate_limit, rate_period_ms, rate_burst, key_rate_limit, key_rate_period_ms, key_rate_burst,
  max_concurrency, concurrency_limit`;

const SET_LIMITS = `rate_limit = excluded.rate_limit, rate_period_ms = excluded.rate_period_ms,
  rate_burst = excluded.rate_burst, key_rate_limit = excluded.key_rate_limit,
  key_rate_period_ms = excluded.key_rate_period_ms, key_rate_burst = excluded.key_rate_burst,
  max_concurrency = excluded.max_concurrency, concurrency_limit = excluded.concurrency_limit`;

/** Sets an operation's limits and their source. $1 operation id, $2–$9 limits, $10 source, $11 set at, $12 set by. */
export const SET_OPERATION_LIMITS = `INSERT INTO operation_controls (operation_id, ${LIMIT_COLUMNS}, limits_source,
    limits_set_at, limits_set_by)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
  ON CONFLICT (operation_id) DO UPDATE SET ${SET_LIMITS}, limits_source = excluded.limits_source,
    limits_set_at = excluded.limits_set_at, limits_set_by = excluded.limits_set_by`;

/** The configuration's limits of one operation, unless an administrator's are in force. $1 operation id, $2–$9. */
export const CONFIGURE_LIMITS = `INSERT INTO operation_controls (operation_id, ${LIMIT_COLUMNS})
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
  ON CONFLICT (operation_id) DO UPDATE SET ${SET_LIMITS} WHERE operation_controls.limits_source = 'config'`;

/** The operations the configuration no longer lists lose the limits it gave them. $1 the listed operations. */
export const UNCONFIGURE_LIMITS = `UPDATE operation_controls SET rate_limit = NULL, rate_period_ms = NULL,
    rate_burst = NULL, key_rate_limit = NULL, key_rate_period_ms = NULL, key_rate_burst = NULL, max_concurrency = NULL,
    concurrency_limit = 1
  WHERE limits_source = 'config' AND NOT (operation_id = ANY ($1::text[]))
    AND (rate_limit IS NOT NULL OR key_rate_limit IS NOT NULL OR max_concurrency IS NOT NULL OR concurrency_limit <> 1)`;

/** Rows that say nothing (no pause, the configuration's "no limits") go. */
export const DELETE_IDLE_CONTROLS = `DELETE FROM operation_controls WHERE paused_at IS NULL AND limits_source = 'config'
  AND rate_limit IS NULL AND key_rate_limit IS NULL AND max_concurrency IS NULL AND concurrency_limit = 1`;

/** $1 key, $2 now, $3 actor. */
export const PAUSE_KEY = `INSERT INTO paused_keys (concurrency_key, paused_at, paused_by) VALUES ($1, $2, $3)
  ON CONFLICT (concurrency_key) DO NOTHING`;

const PAUSED_KEY_COLUMNS =
  "concurrency_key, floor(extract(epoch FROM paused_at) * 1000)::float8 AS paused_at, paused_by";

/** $1 key. */
export const PAUSED_KEY_GET = `SELECT ${PAUSED_KEY_COLUMNS} FROM paused_keys WHERE concurrency_key = $1`;

/** $1 key. */
export const RESUME_KEY = "DELETE FROM paused_keys WHERE concurrency_key = $1";

export const PAUSED_KEY_LIST = `SELECT ${PAUSED_KEY_COLUMNS} FROM paused_keys ORDER BY concurrency_key`;

/** The buckets whose time has passed. $1 now. */
export const DELETE_BUCKETS = "DELETE FROM rate_buckets WHERE tat < extract(epoch FROM $1::timestamptz) * 1000";

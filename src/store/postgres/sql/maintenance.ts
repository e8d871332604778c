/** Retention, expiry, the figures metrics and the dashboard read, and the engine's own checks. */
import { CLAIMABLE, JOB_COLUMNS } from "./common.js";

/**
 * Forgets cron ticks older than $2 ms before $1 (now), but the newest of each name: the last run a schedule's answer
 * shows, however long ago.
 */
export const CRON_TICK_DELETE = `DELETE FROM cron_ticks t WHERE t.tick_at < $1::timestamptz - $2 * interval '1 millisecond'
  AND EXISTS (SELECT 1 FROM cron_ticks n WHERE n.name = t.name AND n.tick_at > t.tick_at)
  RETURNING 1`;

/** Forgets attempt counts of minutes older than $2 ms before $1 (now). */
export const ATTEMPT_COUNT_DELETE =
  "DELETE FROM attempt_counts WHERE minute < $1::timestamptz - $2 * interval '1 millisecond' RETURNING 1";

/** Deletes up to $2 terminal jobs finished more than $3 ms before $1 (now), both of their rows. */
export const DELETE_FINISHED = `WITH gone AS (
    DELETE FROM job_state WHERE seq IN (
      SELECT s.seq FROM job_state s
      WHERE s.finished_at < $1::timestamptz - $3 * interval '1 millisecond'
        AND s.status IN ('succeeded', 'dead', 'cancelled')
        AND NOT EXISTS (SELECT 1 FROM job_specs j JOIN idempotency_keys k ON k.job_id = j.id
                        WHERE j.seq = s.seq AND k.expires_at > $1::timestamptz)
      LIMIT $2)
    RETURNING seq)
  DELETE FROM job_specs j USING gone WHERE j.seq = gone.seq
  RETURNING j.id, j.original_request_id`;

/** The attempt history of deleted jobs. $1 job ids. */
export const DELETE_ATTEMPTS = "DELETE FROM job_attempts WHERE job_id = ANY($1::text[])";

/** The administrators' actions on deleted jobs. $1 job ids. */
export const DELETE_ACTIONS = "DELETE FROM admin_actions WHERE job_id = ANY($1::text[])";

/** A chain row goes with its last job, unless it remembers a cancellation. $1 original request ids. */
export const DELETE_EMPTY_CHAINS = `DELETE FROM chains c WHERE c.original_request_id = ANY($1::text[]) AND c.cancelled_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM job_specs j WHERE j.original_request_id = c.original_request_id)`;

/** Job counts by operation and status (reads both tables). */
export const COUNT_BY_OPERATION =
  "SELECT operation_id, status, count(*) AS count FROM jobs GROUP BY operation_id, status ORDER BY operation_id, status";

/** Job counts by status alone: one narrow table, about 6× faster than by operation with a million jobs. */
export const COUNT_BY_STATUS = "SELECT status, count(*) AS count FROM job_state GROUP BY status";

/** The run time of the oldest claimable job that is due at $1 (now). */
export const OLDEST_DUE = `SELECT min(run_at) AS oldest FROM job_state WHERE ${CLAIMABLE} AND run_at <= $1`;

/** Attempts per bucket since $1 ($2 the same in ms), buckets of $3 ms. */
export const ATTEMPT_BUCKETS = `SELECT floor((extract(epoch FROM minute) * 1000 - $2) / $3) AS slot, outcome, sum(n) AS count
  FROM attempt_counts WHERE minute >= $1 GROUP BY slot, outcome`;

/** The schema's version, for readiness. */
export const SCHEMA_VERSION = "SELECT max(version) AS version FROM schema_migrations";

/** The database's clock, read as late as possible in the statement (clock_timestamp, not the transaction's now). */
export const DATABASE_CLOCK = "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::float8 AS now";

/**
 * Waiting jobs whose expiry has passed → `cancelled`, terminal reason `expired`, the last attempt's status code and
 * error body kept (docs/api.md, "Expiry"). A claim holding one of them locked is left to win: it filtered expired
 * jobs out already, so what it holds was not expired when it read it. $1 now, $2 limit.
 */
export const EXPIRE_MANY = `WITH expired AS (
    SELECT seq FROM job_state
    WHERE expires_at <= $1::timestamptz AND expires_at IS NOT NULL AND status IN ('pending', 'retrying')
    ORDER BY expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
  )
  UPDATE job_state s SET status = 'cancelled', finished_at = $1::timestamptz, heartbeat_at = NULL,
    result = (coalesce(s.result::jsonb, '{"error_body":null}'::jsonb) || '{"terminal_reason":"expired"}'::jsonb)::json
  FROM expired, job_specs j
  WHERE s.seq = expired.seq AND j.seq = s.seq AND s.status IN ('pending', 'retrying')
  RETURNING ${JOB_COLUMNS}`;

/** Idempotency keys whose window has passed. $1 now, $2 limit. */
export const IDEMPOTENCY_KEY_DELETE = `DELETE FROM idempotency_keys WHERE ctid IN (
    SELECT ctid FROM idempotency_keys WHERE expires_at <= $1::timestamptz LIMIT $2) RETURNING 1`;

/** Retention, expiry, the figures metrics and the dashboard read, and the engine's own checks. */
import { CLAIMABLE, epochMs, JOB_COLUMNS } from "./common.js";

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

/**
 * Deletes up to $2 terminal jobs finished more than $3 ms before $1 (now), both of their rows, oldest first, by the
 * index of finish times. A job an idempotency key still answers with stays: the key is looked up per job, by the job's
 * id (a subquery the planner cannot turn into a join). As a join, with a million finished jobs in the statistics, each
 * batch was planned as a merge anti-join walking every job of both tables: 0.75–1.2 s a batch of 1,000.
 */
export const DELETE_FINISHED = `WITH gone AS (
    DELETE FROM job_state WHERE seq IN (
      SELECT s.seq FROM job_state s
      WHERE s.finished_at < $1::timestamptz - $3 * interval '1 millisecond'
        AND s.status IN ('succeeded', 'dead', 'cancelled')
        AND NOT EXISTS (SELECT 1 FROM idempotency_keys k
                        WHERE k.job_id = (SELECT j.id FROM job_specs j WHERE j.seq = s.seq)
                          AND k.expires_at > $1::timestamptz)
      ORDER BY s.finished_at
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

/**
 * The run time of the oldest claimable job that is due at $1 (now), leaving out the jobs a pause holds (their
 * operation or concurrency key is paused): a pause is not the queue falling behind. Written as ORDER BY ... LIMIT 1,
 * not min(): with the anti-joins min() would not be planned as a walk of job_state_run_at. With nothing paused the
 * walk stops at its first row; with a paused backlog older than the rest, it passes over it.
 */
export const OLDEST_DUE = `SELECT s.run_at AS oldest FROM job_state s WHERE s.${CLAIMABLE} AND s.run_at <= $1
  AND NOT EXISTS (SELECT 1 FROM operation_controls c WHERE c.operation_id = s.operation_id AND c.paused_at IS NOT NULL)
  AND NOT EXISTS (SELECT 1 FROM paused_keys k WHERE k.concurrency_key = s.concurrency_key)
  ORDER BY s.run_at LIMIT 1`;

/**
 * The jobs due at $1 (now) that a pause holds, by operation. The first condition does not depend on the row: it is
 * planned as a one-time filter, so with nothing paused (the usual case) no job is read.
 */
export const PAUSED_DUE = `SELECT s.operation_id, count(*) AS count FROM job_state s
  WHERE (EXISTS (SELECT 1 FROM operation_controls WHERE paused_at IS NOT NULL) OR EXISTS (SELECT 1 FROM paused_keys))
    AND s.${CLAIMABLE} AND s.run_at <= $1
    AND (EXISTS (SELECT 1 FROM operation_controls c WHERE c.operation_id = s.operation_id AND c.paused_at IS NOT NULL)
         OR EXISTS (SELECT 1 FROM paused_keys k WHERE k.concurrency_key = s.concurrency_key))
  GROUP BY s.operation_id ORDER BY s.operation_id`;

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

// Callbacks and chains (migration 0012, docs/chains.md).

/** Finished jobs whose callback for that state is still to be enqueued, oldest first. $1 limit. */
export const CALLBACKS_DUE = `SELECT ${JOB_COLUMNS} FROM job_state s JOIN job_specs j ON j.seq = s.seq
  WHERE s.callbacks_pending AND s.status IN ('succeeded', 'dead') ORDER BY s.seq LIMIT $1`;

/**
 * Whether any job's callback is due: one probe of CALLBACKS_DUE's partial index, without parameters, so its plan is
 * made once per connection. An idle sweep asks this alone; the list, whose planning costs several times its
 * execution, is read only when it has something.
 */
export const CALLBACKS_ANY = `SELECT EXISTS (SELECT 1 FROM job_state s
  WHERE s.callbacks_pending AND s.status IN ('succeeded', 'dead')) AS due`;

/** Clears a job's pending callback, if it is still in status $2 with one pending. $1 job id. */
export const CLEAR_CALLBACK = `UPDATE job_state s SET callbacks_pending = false FROM job_specs j
  WHERE j.id = $1 AND s.seq = j.seq AND s.status = $2 AND s.callbacks_pending RETURNING 1`;

/** A chain's row. $1 original request id. */
export const CHAIN_GET = "SELECT * FROM chains WHERE original_request_id = $1";

/** A chain's jobs grouped by status: how many, the first created, the last finished. $1 original request id. */
export const CHAIN_JOB_COUNTS = `SELECT s.status, count(*)::int AS jobs, min(j.created_at) AS first_created_at,
    max(s.finished_at) AS last_finished_at
  FROM job_specs j JOIN job_state s ON s.seq = j.seq WHERE j.original_request_id = $1 GROUP BY s.status`;

/** The jobs of a chain still waiting or running: none means it has settled. */
function ACTIVE_IN_CHAIN(rid: string): string {
  return `EXISTS (SELECT 1 FROM job_specs j JOIN job_state s ON s.seq = j.seq
    WHERE j.original_request_id = ${rid} AND s.status IN ('pending', 'running', 'retrying'))`;
}

/**
 * A job of chain `rid` waiting or running, newest first, joined as `a` (a.active is null when there is none): a LATERAL
 * with a LIMIT, which the planner never turns into an anti-join or a hash over every job. A chain being drained has such
 * jobs at its end, so the walk stops at once.
 *
 * The probe can only walk the chain's index (jobs_chain_seq), newest first, and look each job's status up by its seq,
 * whatever the statistics say. The chain is matched as a range of one value, ordered chain first, an order only that
 * index gives (an equality would let the planner drop the chain from the order and take seq's from the primary key);
 * the status is a subquery per job, never a join the planner could start from job_state. Each was a plan that came
 * from skewed statistics: with one chain holding every job (a request that enqueued 2,000,000), a walk of every job
 * newest first looking for the chain's; with every job finished (1,000,000 past jobs), a scan of job_state for the
 * few waiting ones, for each chain. A pass then took 30 to 120 s, and its snapshot, held that long, kept the claims
 * from skipping the index entries of the jobs they had claimed: the drain fell to a third of its rate.
 */
function ACTIVE_JOB_PROBE(rid: string): string {
  return `LEFT JOIN LATERAL (
      SELECT 1 AS active FROM job_specs j
      WHERE j.original_request_id >= ${rid} AND j.original_request_id <= ${rid}
        AND (SELECT s.status FROM job_state s WHERE s.seq = j.seq) IN ('pending', 'running', 'retrying')
      ORDER BY j.original_request_id DESC, j.seq DESC LIMIT 1
    ) AS a ON true`;
}

/** Whether any chain has an on_settled not fired yet (SETTLED_DUE's candidates): the same probe as CALLBACKS_ANY. */
export const ON_SETTLED_ANY = `SELECT EXISTS (SELECT 1 FROM chains c
  WHERE c.on_settled IS NOT NULL AND c.on_settled_fired_at IS NULL) AS due`;

/**
 * Chains whose on_settled is still to fire and that have settled. $1 limit. Each such chain is checked by a probe of its
 * jobs, newest first (a LATERAL with a LIMIT, which the planner cannot turn into an anti-join): as NOT EXISTS, with the
 * chains table's statistics behind a burst of enqueues, it was planned as a hash anti-join reading every job of the
 * database on every pass of the sweeper.
 */
export const SETTLED_DUE = `SELECT c.* FROM chains c
  ${ACTIVE_JOB_PROBE("c.original_request_id")}
  WHERE c.on_settled IS NOT NULL AND c.on_settled_fired_at IS NULL AND a.active IS NULL
  LIMIT $1`;

/**
 * Fires a chain's on_settled once: its row locked first, so two nodes finishing its last jobs at once see each other's
 * commit before the check, which is a statement of its own (a fresh snapshot) after the lock. $1 original request id.
 */
export const LOCK_CHAIN = "SELECT 1 FROM chains WHERE original_request_id = $1 FOR UPDATE";
export const FIRE_ON_SETTLED = `UPDATE chains c SET on_settled_fired_at = $2::timestamptz, settled_at = coalesce(c.settled_at, $2::timestamptz)
  WHERE c.original_request_id = $1 AND c.on_settled IS NOT NULL AND c.on_settled_fired_at IS NULL
    AND NOT ${ACTIVE_IN_CHAIN("$1")}
  RETURNING 1`;

/**
 * Whether the settled-chains pass has anything to read: a job finished after cursor $1's place and by $2, or no cursor
 * yet. One probe of job_state_finished_at outside any transaction; an idle pass ends with it.
 */
export const FINISHED_SINCE_ANY = `SELECT coalesce((
    SELECT EXISTS (SELECT 1 FROM job_state s
      WHERE s.finished_at >= c.at AND (s.finished_at > c.at OR s.seq > c.seq) AND s.finished_at <= $2::timestamptz)
    FROM maintenance_cursors c WHERE c.name = $1), true) AS due`;

/** Only one node reads the finished jobs at a time; the others skip the pass. */
export const CHAIN_SWEEP_LOCK =
  "SELECT pg_try_advisory_xact_lock(hashtext('opqueue.chain-sweep:' || current_schema())) AS locked";
/** A cursor's place; its time as text, so that the microseconds a Date would drop survive the round trip. */
export const CURSOR_GET = "SELECT at::text AS at, seq FROM maintenance_cursors WHERE name = $1";
export const CURSOR_SET = `INSERT INTO maintenance_cursors (name, at, seq) VALUES ($1, $2, $3)
  ON CONFLICT (name) DO UPDATE SET at = excluded.at, seq = excluded.seq`;

/**
 * The chains that settled among those of the jobs finished after ($1, $2) (finished_at, then seq) and up to $3 (now
 * less a few seconds: an outcome's finished_at is its transaction's start, so one still committing may carry an
 * earlier time than a later commit), at most $4 jobs: each chain once per settling (a chain of one job settles with
 * it; a longer one's settled_at, cleared by the next job it gains, says whether it was reported). Answers the chains,
 * and the last job read as the next cursor.
 */
export const SETTLED_SINCE = `WITH f AS MATERIALIZED (
    SELECT s.seq, s.finished_at FROM job_state s
    WHERE s.finished_at >= $1::timestamptz AND (s.finished_at > $1::timestamptz OR s.seq > $2)
      AND s.finished_at <= $3::timestamptz
    ORDER BY s.finished_at, s.seq LIMIT $4
  ), rids AS (
    -- Each chain with its latest finish among the jobs read: if it settled, that was its last job. Each job's chain by
    -- its seq (a LATERAL with a LIMIT, never flattened into a join): planned as a join, the thousand jobs read could
    -- meet a hash of every job in the database (a custom plan on 20,000 jobs did: 6.6 ms a pass, against 2.0).
    SELECT j.original_request_id AS rid, max(f.finished_at) AS last
    FROM f CROSS JOIN LATERAL (SELECT j.original_request_id FROM job_specs j WHERE j.seq = f.seq LIMIT 1) AS j
    GROUP BY 1
  ), settled AS (
    SELECT c.original_request_id, c.jobs_created, coalesce(c.created_at, (
        SELECT j.created_at FROM job_specs j
        WHERE j.original_request_id >= c.original_request_id AND j.original_request_id <= c.original_request_id
        ORDER BY j.original_request_id, j.seq LIMIT 1
      )) AS started_at, r.last AS settled_at
    -- Each chain by its key (a LATERAL with a LIMIT, never flattened into a join): planned as a join, a hash of the
    -- few chains read here met a scan of every chain in the database, on every pass.
    FROM rids r CROSS JOIN LATERAL (SELECT * FROM chains c WHERE c.original_request_id = r.rid LIMIT 1) AS c
    ${ACTIVE_JOB_PROBE("r.rid")}
    WHERE a.active IS NULL
  ), marked AS (
    UPDATE chains c SET settled_at = st.settled_at FROM settled st
    WHERE c.original_request_id = st.original_request_id AND st.jobs_created > 1 AND c.settled_at IS NULL
    RETURNING c.original_request_id
  )
  SELECT 'chain' AS kind, st.original_request_id, ${epochMs("st.started_at")} AS started_at,
    (${epochMs("st.settled_at")})::text AS settled_at, NULL::bigint AS seq
  FROM settled st WHERE st.jobs_created = 1 OR st.original_request_id IN (SELECT original_request_id FROM marked)
  UNION ALL
  SELECT 'cursor', NULL, NULL, f.finished_at::text, f.seq FROM (SELECT * FROM f ORDER BY finished_at DESC, seq DESC LIMIT 1) f`;

/** The finished attempts of several jobs, oldest first. $1 job ids. */
export const ATTEMPT_LIST_MANY = `SELECT job_id, attempt, started_at, finished_at, outcome, status_code, error_body
  FROM job_attempts WHERE job_id = ANY($1::text[]) ORDER BY id`;

/** Outcome writes, requeues, heartbeats and the rescuer's read: everything that ends or renews a running attempt. */
import { BY_SEQ, CLAIMABLE, epochMs, JOB_COLUMNS, LAZY_COMMIT, SEQS_OF, TAKEN_ASYNC } from "./common.js";

/** Records the attempts a CTE named `source` just wrote (id, attempt, started_at, status, result). */
function LOG_ATTEMPTS_SQL(source: string, now: string, attemptColumn = "attempt"): string {
  return `INSERT INTO job_attempts (job_id, attempt, started_at, finished_at, outcome, status_code, error_body)
    SELECT id, ${attemptColumn}, started_at, ${now}, status, (result->>'status_code')::integer, result->>'error_body'
    FROM ${source}`;
}

/**
 * Adds the attempts a CTE named `source` just wrote to the dashboard's counts per minute (migration 0006), in this
 * connection's shard, so concurrent writers never wait on each other's row.
 */
function COUNT_ATTEMPTS_SQL(source: string, now: string): string {
  return `INSERT INTO attempt_counts AS c (minute, outcome, shard, n)
    SELECT date_trunc('minute', ${now}::timestamptz), status, pg_backend_pid() % 16, count(*) FROM ${source} GROUP BY status
    ON CONFLICT (minute, outcome, shard) DO UPDATE SET n = c.n + excluded.n`;
}

/**
 * Terminal outcomes (succeeded, dead) of running attempts, written by `opqueue_finish_many` (migration 0027), whose one
 * statement is planned once per connection: sent by the node, it was planned at every call of a batch of one job.
 * $1 ids, $2 attempts, $3 statuses, $4 results (JSON text), $5 now, $6 the claims' start times (ms, or null). A failure
 * of a job whose chain was cancelled ends it cancelled-by-chain; the chain is looked up for failures only. A chain
 * cancel committing meanwhile finds the job running and leaves it, as if the cancel came just after the outcome.
 * Answers the attempts it wrote. `lazy`: the commit does not wait for the WAL, for the outcomes no client waits on; the
 * function turns `synchronous_commit` off for its transaction itself, as `LAZY_COMMIT` does for the other statements.
 */
function finishManySql(options: { lazy: boolean }): string {
  return `SELECT job_id AS id, job_attempt AS attempt
  FROM opqueue_finish_many($1::text[], $2::int[], $3::text[], $4::text[], $5::timestamptz, $6::bigint[], ${options.lazy})`;
}

/** `finishManySql` for the completer and the rescuer: committed lazily. */
export const FINISH_MANY = finishManySql({ lazy: true });

/** `finishManySql` for a target's complete or fail, which the target is told of: committed durably. */
export const FINISH_MANY_DURABLY = finishManySql({ lazy: false });

/**
 * The chain rows of jobs going back to the queue, read FOR SHARE before the requeue: a chain cancel running at the
 * same time either finishes first (and is seen) or waits, and then finds the job `retrying` and cancels it. $1 ids.
 */
export const LOCK_CHAINS_OF_JOBS = `SELECT 1 FROM chains
  WHERE original_request_id IN (SELECT original_request_id FROM job_specs WHERE id = ANY($1::text[]))
  FOR SHARE`;

/**
 * Requeue of running attempts. $1 ids, $2 attempts, $3 delays (ms after now), $4 results (JSON text), $5 the refund
 * ('none': an attempt's outcome; 'if-last': give back an interrupted last attempt; 'always': give the attempt back),
 * $6 now, $7 the claims' start times (ms, or null). A job whose dedupe key a newer claimable job took while it ran
 * goes back without the key.
 */
const REQUEUE_SQL = `
WITH o AS (
  SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[], $4::text[], $7::bigint[])
    AS o(id, attempt, delay_ms, result, started_ms)
), w AS (
  SELECT o.*, j.seq, j.max_attempts, (c.cancelled_at IS NOT NULL) AS chain_cancelled,
    cur.dedupe_key AS held_key, (cur.status = 'running' AND cur.attempt = o.attempt
      AND (o.started_ms IS NULL OR ${epochMs("cur.started_at")} = o.started_ms)) AS current
  FROM o JOIN job_specs j ON j.id = o.id JOIN job_state cur ON cur.seq = j.seq
  LEFT JOIN chains c ON c.original_request_id = j.original_request_id
), x AS MATERIALIZED (
  -- Jobs of one dedupe key going back to the queue together (a cron's default key, a running job beside its newer
  -- namesake): the statement cannot see its own rows, so only the oldest keeps the key.
  SELECT w.*, row_number() OVER (
      PARTITION BY w.held_key ORDER BY (w.current AND NOT w.chain_cancelled) DESC, w.seq) AS key_rank
  FROM w
)
UPDATE job_state s SET
  status = CASE WHEN x.chain_cancelled THEN 'cancelled' ELSE 'retrying' END,
  run_at = CASE WHEN x.chain_cancelled THEN s.run_at ELSE $6::timestamptz + x.delay_ms * interval '1 millisecond' END,
  finished_at = CASE WHEN x.chain_cancelled THEN $6::timestamptz ELSE NULL END,
  result = CASE WHEN x.chain_cancelled
    THEN (x.result::jsonb || '{"terminal_reason":"cancelled-by-chain"}'::jsonb)::json ELSE x.result::json END,
  heartbeat_at = NULL,
  attempt = CASE
    WHEN x.chain_cancelled THEN s.attempt
    WHEN $5::text = 'always' THEN s.attempt - 1
    WHEN $5::text = 'if-last' AND s.attempt >= x.max_attempts THEN x.max_attempts - 1
    ELSE s.attempt END,
  dedupe_key = CASE WHEN NOT x.chain_cancelled AND (x.key_rank > 1 OR EXISTS (
      SELECT 1 FROM job_state other WHERE other.dedupe_key = s.dedupe_key AND other.${CLAIMABLE} AND other.seq <> s.seq))
    THEN NULL ELSE s.dedupe_key END
FROM x
WHERE s.seq = x.seq AND s.seq = ANY (${SEQS_OF("x")}) AND s.status = 'running' AND s.attempt = x.attempt
  AND (x.started_ms IS NULL OR ${epochMs("s.started_at")} = x.started_ms)
RETURNING x.id, x.attempt AS old_attempt, s.started_at, s.status, s.result`;

/** The requeue, its attempts logged and counted; answers the attempts it wrote (their attempt number before). */
export const REQUEUE_MANY = `WITH done AS (${REQUEUE_SQL}), logged AS (${LOG_ATTEMPTS_SQL("done", "$6::timestamptz", "old_attempt")}),
  counted AS (${COUNT_ATTEMPTS_SQL("done", "$6::timestamptz")})
  SELECT id, old_attempt FROM done`;

/** Renews the leases of running attempts. $1 ids, $2 attempts, $3 now. */
export const HEARTBEAT_MANY = `WITH ${LAZY_COMMIT}, o AS ${BY_SEQ("unnest($1::text[], $2::int[]) AS o(id, attempt)")}
  UPDATE job_state s SET heartbeat_at = $3
  FROM o, lazy_commit
  WHERE s.seq = o.seq AND s.seq = ANY (${SEQS_OF("o")}) AND s.status = 'running' AND s.attempt = o.attempt`;

/**
 * Running jobs whose lease has expired, oldest heartbeat first. Reads every running job through job_state_running
 * and sorts them here: no index reads heartbeat_at, so a heartbeat is a HOT update (migration 0005), and running jobs
 * are few. Each job is held to its operation's lease, on the database's clock, and an attempt its target took
 * asynchronously to its operation's asynchronous lease when it has one (migration 0014). $1 now, $2 the default lease
 * (ms), $3 operations with a lease of their own, $4 their leases, $5 limit, $6 operations with an asynchronous lease of
 * their own, $7 those leases.
 */
export const LIST_EXPIRED = `SELECT ${JOB_COLUMNS} FROM job_state s JOIN job_specs j ON j.seq = s.seq
  LEFT JOIN unnest($3::text[], $4::bigint[]) AS l(operation_id, lease_ms) ON l.operation_id = j.operation_id
  LEFT JOIN unnest($6::text[], $7::bigint[]) AS a(operation_id, lease_ms) ON a.operation_id = j.operation_id
    AND ${TAKEN_ASYNC}
  WHERE s.status = 'running'
    AND s.heartbeat_at < $1::timestamptz - coalesce(a.lease_ms, l.lease_ms, $2) * interval '1 millisecond'
  ORDER BY s.heartbeat_at LIMIT $5`;

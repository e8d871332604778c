/**
 * SQL text shared by the PostgreSQL engine's statements: the claimable-status test, the job's columns, and the CTEs
 * that several statements start with. Every statement the engine runs lives under this folder, but its PL/pgSQL
 * functions: their current text is migrations/postgres/current/functions/*.sql, written from a migrated database by
 * `npm run pg-functions`; the numbered migrations hold their history.
 */

/** The statuses a job can be claimed in (and holds its dedupe key in). */
export const CLAIMABLE = "status IN ('pending', 'retrying')";

/**
 * The rows of `source` (attempts named by job id) with each job's seq, found first and materialized: a statement
 * that joins job_specs and job_state in one go may be planned (from statistics that saw no running job) as a walk
 * of every running job, looking up every item of `source` by id for each: 3,000 lookups for an outcome write of 32
 * jobs with 96 running. Written to job_state by seq afterwards, the rows cost one lookup each.
 */
export function BY_SEQ(source: string): string {
  return `MATERIALIZED (SELECT o.*, j.seq FROM ${source} JOIN job_specs j ON j.id = o.id)`;
}

/**
 * The seqs of the rows of the CTE `source`, as an array: an UPDATE of running jobs joined to `source` also names them
 * with `s.seq = ANY (${SEQS_OF("o")})`, so that it looks its own jobs up in job_state_running by seq. Joined only, it
 * may be planned (from statistics that saw no running job) as a hash join over every entry of job_state_running, and
 * until a vacuum those are the entries of every job claimed since, finished or not (migration 0019).
 */
export function SEQS_OF(source: string): string {
  return `ARRAY(SELECT ${source}.seq FROM ${source})`;
}

/**
 * A whole job from a job_specs row `j` and its job_state row `s` (migration 0004), as the view `jobs` has it: for
 * RETURNING clauses of statements that change job_state (a view reading after them would see the rows as before).
 */
export const JOB_COLUMNS = `j.seq, j.id, j.operation_id, s.status, s.attempt, j.max_attempts, s.priority, s.run_at,
  j.created_at, s.started_at, s.finished_at, s.heartbeat_at, s.dedupe_key, s.concurrency_key, j.enqueued_by_operation_id,
  j.parent_job_id, j.original_request_id, j.user_id, j.authority, j.request, s.result, j.rate_key, j.traceparent,
  s.expires_at, j.callbacks, s.claim_count`;

/** A timestamptz column as whole milliseconds since the epoch (null stays null). */
export function epochMs(column: string): string {
  return `floor(extract(epoch FROM ${column}) * 1000)::bigint`;
}

/**
 * The CTE that makes a statement's commit lazy: `set_config(..., true)` sets `synchronous_commit = off` until the end
 * of the statement's own transaction, so its commit does not wait for the WAL to reach the disk (the WAL writer
 * flushes it within a few hundred milliseconds). Used by the writes no client waits on: claims, outcomes and
 * heartbeats, as the SQLite engine writes them with `synchronous = NORMAL`. A crash of the server may undo the last
 * of them (a claim or an outcome lost: the job is delivered again, which at-least-once allows; a lost heartbeat at
 * worst lets a lease expire), never an acknowledged write: a durable commit flushes the WAL up to itself, lazy
 * commits before it included, so nothing durable can rest on a lost lazy write. Statements join it with the rows
 * they write, so it is evaluated whenever they write anything (and a statement that writes nothing has nothing
 * to flush).
 */
export const LAZY_COMMIT = "lazy_commit AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))";

/**
 * The current attempt of the job_state row `s` is the one its target took asynchronously: the mark names this attempt
 * of this claim (migration 0014). Null, not false, for a job never marked.
 */
export const TAKEN_ASYNC = "(s.async_attempt = s.attempt AND s.async_started_at = s.started_at)";

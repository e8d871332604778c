/**
 * Attempts a target takes asynchronously (migration 0014; docs/delivery.md, "Long jobs"): the mark written when it
 * answers 202 with x-job-async: 1, and what its later calls (heartbeat, complete, fail) read and write.
 */
import { epochMs, JOB_COLUMNS, LAZY_COMMIT, TAKEN_ASYNC } from "./common.js";

/**
 * Marks the attempt of this claim as taken asynchronously, bound to the digest of its delivery token, its lease
 * starting now; committed lazily, like a heartbeat. $1 id, $2 attempt, $3 the claim's start (ms, or null), $4 now,
 * $5 the token's digest. Answers a row if it wrote.
 */
export const MARK_ASYNC = `WITH ${LAZY_COMMIT}, o AS MATERIALIZED (SELECT seq FROM job_specs WHERE id = $1)
  UPDATE job_state s SET async_attempt = s.attempt, async_started_at = s.started_at, async_at = $4,
    async_token_hash = $5, heartbeat_at = $4
  FROM o, lazy_commit
  WHERE s.seq = o.seq AND s.status = 'running' AND s.attempt = $2
    AND ($3::bigint IS NULL OR ${epochMs("s.started_at")} = $3)
  RETURNING s.seq`;

/**
 * The job a target's call names, its state row locked for the call's transaction, with whether its current attempt
 * was taken asynchronously and the token that attempt is bound to. $1 id.
 */
export const CALL_TARGET = `SELECT ${JOB_COLUMNS}, s.async_token_hash, coalesce(${TAKEN_ASYNC}, false) AS is_async
  FROM job_specs j JOIN job_state s ON s.seq = j.seq WHERE j.id = $1
  FOR UPDATE OF s`;

/**
 * A target's heartbeat, once CALL_TARGET's row passed: the lease renewed, the progress replaced when the heartbeat
 * carries one. $1 seq, $2 attempt, $3 now, $4 whether it carries progress, $5 the progress (JSON text). Answers the
 * heartbeat's time.
 */
export const HEARTBEAT_EXTERNAL = `UPDATE job_state s SET heartbeat_at = $3,
    progress = CASE WHEN $4::boolean THEN $5::json ELSE s.progress END,
    progress_at = CASE WHEN $4::boolean THEN $3::timestamptz ELSE s.progress_at END,
    progress_attempt = CASE WHEN $4::boolean THEN s.attempt ELSE s.progress_attempt END
  WHERE s.seq = $1 AND s.status = 'running' AND s.attempt = $2
  RETURNING s.heartbeat_at`;

/** The asynchronous side of a job: its latest mark and progress. $1 id. */
export const ASYNC_STATE = `SELECT s.async_attempt, s.async_started_at, s.async_at, s.progress, s.progress_at,
    s.progress_attempt
  FROM job_specs j JOIN job_state s ON s.seq = j.seq WHERE j.id = $1`;

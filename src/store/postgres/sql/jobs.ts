/** Reads of jobs, and the administrators' writes: cancel, retry, cancel a chain, retry the dead. */
import type { AdminAction } from "../../../job/statuses.js";
import type { JobListParams } from "../../store.js";
import { CLAIMABLE, JOB_COLUMNS } from "./common.js";

/** One job by id. $1 id. */
export const JOB_GET = "SELECT * FROM jobs WHERE id = $1";

/** The job list: every given filter must match, newest first. */
export function jobListQuery(params: JobListParams): { text: string; values: unknown[] } {
  const where: string[] = [];
  const values: unknown[] = [];
  const add = (sql: (placeholder: string) => string, value: unknown) => {
    values.push(value);
    where.push(sql(`$${values.length}`));
  };
  if (params.statuses && params.statuses.length > 0) add((p) => `status = ANY(${p}::text[])`, params.statuses);
  if (params.operationId !== undefined) add((p) => `operation_id = ${p}`, params.operationId);
  if (params.originalRequestId !== undefined) add((p) => `original_request_id = ${p}`, params.originalRequestId);
  if (params.userId !== undefined) add((p) => `user_id = ${p}`, params.userId);
  if (params.parentJobId !== undefined) add((p) => `parent_job_id = ${p}`, params.parentJobId);
  if (params.dedupeKey !== undefined) add((p) => `dedupe_key = ${p}`, params.dedupeKey);
  if (params.beforeSeq !== undefined) add((p) => `seq < ${p}`, params.beforeSeq);
  values.push(params.limit);
  const filter = where.length > 0 ? `WHERE ${where.join(" AND ")}` : "";
  return { text: `SELECT * FROM jobs ${filter} ORDER BY seq DESC LIMIT $${values.length}`, values };
}

/** Records, in the statement that made them, an administrator's changes to the jobs of CTE `done`, and the role. */
function recordActions(action: AdminAction, at: string, actor: string, role: string): string {
  return `logged AS (INSERT INTO admin_actions (at, actor, role, action, job_id)
    SELECT ${at}, ${actor}, ${role}, '${action}', id FROM done)`;
}

/**
 * Claimable jobs → `cancelled` (cancelled-by-admin), keeping a failed attempt's result, recorded as the actor's
 * `action` (a cancel, or a bulk cancel). $1 ids, $2 now, $3 actor, $4 role.
 */
export function jobCancelSql(action: Extract<AdminAction, "cancel" | "cancel-many">): string {
  return `WITH done AS (
    UPDATE job_state s SET status = 'cancelled', finished_at = $2,
      result = (coalesce(s.result::jsonb, '{"error_body":null}'::jsonb) || '{"terminal_reason":"cancelled-by-admin"}'::jsonb)::json
    FROM job_specs j
    WHERE j.id = ANY ($1::text[]) AND s.seq = j.seq AND s.${CLAIMABLE} RETURNING ${JOB_COLUMNS}
  ), ${recordActions(action, "$2::timestamptz", "$3", "$4")}
  SELECT * FROM done`;
}

/**
 * A running job → `cancelled` (cancelled-by-admin), its interrupted attempt recorded with `$4` as its error, and every
 * node told to abort the delivery (`abort:` and the job's id on the jobs channel; the node running it aborts). The
 * delivery's outcome then finds the job no longer running. $1 id, $2 now, $3 actor, $4 the attempt's error, $5 role.
 */
export function jobCancelRunningSql(action: Extract<AdminAction, "cancel" | "cancel-many">): string {
  return `WITH done AS (
    UPDATE job_state s SET status = 'cancelled', finished_at = $2, heartbeat_at = NULL,
      result = (coalesce(s.result::jsonb, '{"error_body":null}'::jsonb) || '{"terminal_reason":"cancelled-by-admin"}'::jsonb)::json
    FROM job_specs j
    WHERE j.id = $1 AND s.seq = j.seq AND s.status = 'running' RETURNING ${JOB_COLUMNS}
  ), ${recordActions(action, "$2::timestamptz", "$3", "$5")},
  attempt AS (
    INSERT INTO job_attempts (job_id, attempt, started_at, finished_at, outcome, status_code, error_body)
    SELECT id, attempt, started_at, $2, 'cancelled', NULL, $4 FROM done
  ), counted AS (
    INSERT INTO attempt_counts AS c (minute, outcome, shard, n)
    SELECT date_trunc('minute', $2::timestamptz), 'cancelled', pg_backend_pid() % 16, count(*) FROM done
    HAVING count(*) > 0
    ON CONFLICT (minute, outcome, shard) DO UPDATE SET n = c.n + excluded.n
  ), told AS (
    SELECT pg_notify('opqueue_jobs:' || current_schema(), 'abort:' || id) FROM done
  )
  SELECT done.*, (SELECT count(*) FROM told) AS told FROM done`;
}

/**
 * The jobs a bulk cancel takes, newest first (docs/flow-control.md, "Cancelling many jobs"). $1 statuses, $2 operation,
 * $3 original request id, $4 user, $5 dedupe key, $6 created from, $7 created before (each null for any), $8 limit.
 */
export const CANCEL_CANDIDATES = `SELECT j.id, s.status FROM job_specs j JOIN job_state s ON s.seq = j.seq
  WHERE s.status = ANY ($1::text[])
    AND ($2::text IS NULL OR j.operation_id = $2)
    AND ($3::text IS NULL OR j.original_request_id = $3)
    AND ($4::text IS NULL OR j.user_id = $4)
    AND ($5::text IS NULL OR s.dedupe_key = $5)
    AND ($6::timestamptz IS NULL OR j.created_at >= $6)
    AND ($7::timestamptz IS NULL OR j.created_at < $7)
  ORDER BY j.seq DESC LIMIT $8`;

/**
 * A waiting job due now (a job due already keeps its earlier run time, its place in the claim order), recorded as the
 * actor's. $1 id, $2 now, $3 actor, $4 role.
 */
export const JOB_RUN_NOW = `WITH done AS (
    UPDATE job_state s SET run_at = least(s.run_at, $2::timestamptz)
    FROM job_specs j
    WHERE j.id = $1 AND s.seq = j.seq AND s.${CLAIMABLE} RETURNING ${JOB_COLUMNS}
  ), ${recordActions("run-now", "$2::timestamptz", "$3", "$4")}
  SELECT * FROM done`;

/** One administrator's action on one job. $1 at, $2 actor, $3 role, $4 action, $5 job id. */
export const RECORD_ACTION = "INSERT INTO admin_actions (at, actor, role, action, job_id) VALUES ($1, $2, $3, $4, $5)";

/** Who acted on a job, with which role, oldest first. $1 job id. */
export const ACTIONS_OF = "SELECT at, actor, role, action FROM admin_actions WHERE job_id = $1 ORDER BY id";

/** A job to retry, its state row locked for the transaction. $1 id. */
export const JOB_LOCK_FOR_RETRY = `SELECT ${JOB_COLUMNS} FROM job_specs j JOIN job_state s ON s.seq = j.seq WHERE j.id = $1
  FOR UPDATE OF s`;

/** The claimable job holding a dedupe key. $1 key. */
export const DEDUPE_HOLDER = `SELECT * FROM jobs WHERE dedupe_key = $1 AND ${CLAIMABLE}`;

/** A job back to `pending`, attempt 0, due now, its holds and its last claim's asynchronous mark gone. $1 seq, $2 now. */
export const JOB_RETRY = `UPDATE job_state s SET status = 'pending', attempt = 0, result = NULL, started_at = NULL,
    finished_at = NULL, heartbeat_at = NULL, run_at = $2, expires_at = NULL, callbacks_pending = j.callbacks IS NOT NULL,
    held = false, async_attempt = NULL, async_started_at = NULL, async_at = NULL, async_token_hash = NULL
  FROM job_specs j WHERE j.seq = $1 AND s.seq = j.seq RETURNING ${JOB_COLUMNS}`;

/** Tells every listening node that a job becomes claimable at $1. */
export const NOTIFY = "SELECT opqueue_notify($1)";

/**
 * Marks a chain cancelled, and by whom (the first to). Run first in a chain cancel, it takes the chain's row lock: an
 * enqueue into the chain racing it waits and then creates its job cancelled; one that came first has committed its job,
 * which the update after sees. $1 original request id, $2 now, $3 actor.
 */
export const CHAIN_MARK_CANCELLED = `INSERT INTO chains AS c (original_request_id, jobs_created, cancelled_at, cancelled_by)
  VALUES ($1, 0, $2, $3)
  ON CONFLICT (original_request_id) DO UPDATE SET cancelled_at = coalesce(c.cancelled_at, $2),
    cancelled_by = CASE WHEN c.cancelled_at IS NULL THEN $3 ELSE c.cancelled_by END`;

/**
 * The claimable jobs of a chain → `cancelled` (cancelled-by-chain), recorded as the actor's. $1 original request id,
 * $2 now, $3 actor, $4 role.
 */
export const CHAIN_CANCEL_JOBS = `WITH done AS (
    UPDATE job_state s SET status = 'cancelled', finished_at = $2,
      result = (coalesce(s.result::jsonb, '{"error_body":null}'::jsonb) || '{"terminal_reason":"cancelled-by-chain"}'::jsonb)::json
    FROM job_specs j
    WHERE j.original_request_id = $1 AND s.seq = j.seq AND s.${CLAIMABLE} RETURNING ${JOB_COLUMNS}
  ), ${recordActions("cancel-chain", "$2::timestamptz", "$3", "$4")}
  SELECT * FROM done`;

/**
 * Dead jobs matching the filter back to `pending`, newest first. Of several dead jobs with one dedupe key, only the
 * newest goes back with it (the key's unique index allows one claimable holder); the others stay dead, as the SQLite
 * engine leaves them. Each recorded as the actor's. $1 operation, $2 original request id, $3 user (each null for
 * any), $4 limit, $5 now, $6 actor, $7 role.
 */
export const RETRY_DEAD_MANY = `WITH candidates AS (
    SELECT s.seq, s.dedupe_key FROM job_state s JOIN job_specs j ON j.seq = s.seq
    WHERE s.status = 'dead'
      AND ($1::text IS NULL OR j.operation_id = $1)
      AND ($2::text IS NULL OR j.original_request_id = $2)
      AND ($3::text IS NULL OR j.user_id = $3)
      AND (s.dedupe_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM job_state h WHERE h.dedupe_key = s.dedupe_key AND h.${CLAIMABLE}))
    ORDER BY s.seq DESC LIMIT $4
    FOR UPDATE OF s SKIP LOCKED
  ), picked AS (
    SELECT seq FROM (
      SELECT seq, dedupe_key, row_number() OVER (PARTITION BY dedupe_key ORDER BY seq DESC) AS key_rank
      FROM candidates) ranked
    WHERE dedupe_key IS NULL OR key_rank = 1
  ), done AS (
    UPDATE job_state s SET status = 'pending', attempt = 0, result = NULL, started_at = NULL, finished_at = NULL,
      heartbeat_at = NULL, run_at = $5, expires_at = NULL, callbacks_pending = j.callbacks IS NOT NULL, held = false,
      async_attempt = NULL, async_started_at = NULL, async_at = NULL, async_token_hash = NULL
    FROM picked, job_specs j WHERE s.seq = picked.seq AND j.seq = s.seq AND s.status = 'dead'
    RETURNING ${JOB_COLUMNS}
  ), ${recordActions("retry-dead", "$5::timestamptz", "$6", "$7")}
  SELECT * FROM done`;

/** A job's finished attempts, oldest first. $1 job id. */
export const ATTEMPT_LIST =
  "SELECT attempt, started_at, finished_at, outcome, status_code, error_body FROM job_attempts WHERE job_id = $1 ORDER BY id";

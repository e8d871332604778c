/**
 * Inserts: a batch of jobs in one call of `opqueue_insert_batch` (migrations/postgres/current/functions/), every step
 * of the contract's enqueue (dedupe upsert, spawn cap, cancelled chain) decided inside it; and a cron tick with its
 * job.
 */

/**
 * A batch of inserts: one round trip, one commit, one NOTIFY. $1 the jobs (`batchArgument`), $2 now, $3 how many of
 * the jobs lead the batch plain (`leadingPlain`), inserted by one statement.
 */
export const INSERT_JOBS = "SELECT opqueue_insert_batch($1::jsonb, $2, $3) AS outcome";

/** One insert, inside a transaction of the caller's. $1 the job (JSON), $2 now. */
export const INSERT_JOB = "SELECT opqueue_insert_job($1::json, $2) AS outcome";

/** Records a cron tick, unless some node already did. $1 name, $2 tick time. */
export const CRON_TICK_RECORD =
  "INSERT INTO cron_ticks (name, tick_at) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING name";

/** Links a recorded tick to the job it enqueued. $1 name, $2 tick time, $3 job id. */
export const CRON_TICK_SET_JOB = "UPDATE cron_ticks SET job_id = $3 WHERE name = $1 AND tick_at = $2";

-- opqueue_finish_many: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0027): a
-- change to it is a new migration that restates it, after which the script writes this file again, keeping the prose
-- under this paragraph.
--
-- Terminal outcomes (succeeded, dead) of running attempts, as src/store/postgres/sql/outcomes.ts `FINISH_MANY` calls
-- it: each outcome is written only if its job is still running that attempt of that claim, logged in job_attempts and
-- counted in its minute; a failure of a job whose chain was cancelled ends it cancelled-by-chain. Its statement keeps
-- the plan made without the values (plan_cache_mode), made once per connection, so a batch of one job is not planned
-- again at every call (0027).

CREATE OR REPLACE FUNCTION opqueue_finish_many(p_ids text[], p_attempts integer[], p_statuses text[], p_results text[], p_now timestamp with time zone, p_started_ms bigint[], p_lazy boolean)
 RETURNS TABLE(job_id text, job_attempt integer)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
BEGIN
  IF p_lazy THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  RETURN QUERY
  WITH o AS MATERIALIZED (
    SELECT o.*, j.seq, CASE WHEN o.status = 'dead' THEN EXISTS (
        SELECT 1 FROM chains c WHERE c.original_request_id = j.original_request_id AND c.cancelled_at IS NOT NULL)
      ELSE false END AS by_chain
    FROM unnest(p_ids, p_attempts, p_statuses, p_results, p_started_ms) AS o(id, attempt, status, result, started_ms)
    JOIN job_specs j ON j.id = o.id),
  done AS (
    UPDATE job_state s SET status = CASE WHEN o.by_chain THEN 'cancelled' ELSE o.status END,
      result = CASE WHEN o.by_chain
        THEN (o.result::jsonb || '{"terminal_reason":"cancelled-by-chain"}'::jsonb)::json ELSE o.result::json END,
      finished_at = p_now, heartbeat_at = NULL
    FROM o WHERE s.seq = o.seq AND s.seq = ANY (ARRAY(SELECT o.seq FROM o)) AND s.status = 'running'
      AND s.attempt = o.attempt
      AND (o.started_ms IS NULL OR floor(extract(epoch FROM s.started_at) * 1000)::bigint = o.started_ms)
    RETURNING o.id, s.attempt, s.started_at, s.status, s.result
  ), logged AS (
    INSERT INTO job_attempts (job_id, attempt, started_at, finished_at, outcome, status_code, error_body)
    SELECT d.id, d.attempt, d.started_at, p_now, d.status, (d.result->>'status_code')::integer, d.result->>'error_body'
    FROM done d
  ), counted AS (
    INSERT INTO attempt_counts AS c (minute, outcome, shard, n)
    SELECT date_trunc('minute', p_now), d.status, pg_backend_pid() % 16, count(*) FROM done d GROUP BY d.status
    ON CONFLICT (minute, outcome, shard) DO UPDATE SET n = c.n + excluded.n
  )
  SELECT d.id, d.attempt FROM done d;
END
$function$;

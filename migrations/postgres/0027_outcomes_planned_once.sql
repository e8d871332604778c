-- opqueue schema for PostgreSQL, version 27: a batch of terminal outcomes is written by a function whose statement is
-- planned once per connection.
--
-- Rolling upgrade: yes. Additive: a new function. Version 26's nodes go on sending the same statement themselves.
--
-- A node wrote its attempts' terminal outcomes (succeeded, dead) with one statement of its own, a prepared statement
-- whose arrays hold the batch. PostgreSQL plans such a statement for each call until a plan made without the values
-- looks no dearer than those made with them; for a batch of one job it never does, since it knows the arrays hold one
-- element. So on a quiet queue, where each job is claimed and finished alone, every outcome was planned again: at
-- 100 jobs/s (the latency benchmark, pg_stat_statements with track_planning) 413 µs of planning per outcome against
-- 117 µs of execution, about a fifth of the server's statement time per job. Here the statement is the body of a
-- function that forces the plan made without the values (as opqueue_next_run_at does): planned once per connection,
-- and planned again when the tables' statistics change. The statement is the one version 26's nodes send: `o`
-- materializes the batch with each job's seq, and the update names those seqs with `= ANY (ARRAY(...))` so that the
-- plan made without the values looks its jobs up by seq in job_state's primary key (migration 0019).
--
-- p_lazy: the commit does not wait for the WAL (synchronous_commit off for this transaction): the completer's and the
-- rescuer's outcomes, which no client waits on. A target's complete or fail is committed durably (false).

CREATE FUNCTION opqueue_finish_many(p_ids text[], p_attempts integer[], p_statuses text[], p_results text[],
  p_now timestamptz, p_started_ms bigint[], p_lazy boolean)
RETURNS TABLE (job_id text, job_attempt integer)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
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
$$;

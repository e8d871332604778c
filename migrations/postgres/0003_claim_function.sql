-- opqueue schema for PostgreSQL, version 3: the claim as a function with one plan per connection.
--
-- The claim statement (candidates locked with SKIP LOCKED, one per concurrency key, then the update) compares
-- run_at with a parameter, the caller's now. Sent as a prepared statement, PostgreSQL judged a plan made for each
-- call's values cheaper than one generic plan, and so planned the statement again on every call: about 0.25 ms
-- each, as much as a tenth of the database's time in a drain. The plan does not depend on the values (it always
-- walks jobs_claim from its start), so this function keeps one generic plan for the connection's life.
-- The statement is the one version 2's callers sent, with $1 now, $2 limit and $3 the candidates to lock.

CREATE FUNCTION opqueue_claim(p_now timestamptz, p_limit integer, p_candidates integer) RETURNS SETOF jobs
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
  RETURN QUERY
  WITH candidates AS (
    SELECT j.seq, j.concurrency_key, j.priority, j.run_at
    FROM jobs j
    WHERE j.status IN ('pending', 'retrying') AND j.run_at <= p_now
      AND (j.concurrency_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM jobs r WHERE r.concurrency_key = j.concurrency_key AND r.status = 'running'))
    ORDER BY j.priority DESC, j.run_at, j.seq
    LIMIT p_candidates
    FOR UPDATE SKIP LOCKED
  ), first_per_key AS (
    SELECT c.seq, c.concurrency_key, c.priority, c.run_at,
      row_number() OVER (PARTITION BY coalesce(c.concurrency_key, '#' || c.seq::text)
                         ORDER BY c.priority DESC, c.run_at, c.seq) AS rank
    FROM candidates c
  ), picked AS (
    SELECT f.seq FROM first_per_key f
    WHERE f.rank = 1
      AND (f.concurrency_key IS NULL OR pg_try_advisory_xact_lock(hashtext('opqueue.key:' || f.concurrency_key)))
    ORDER BY f.priority DESC, f.run_at, f.seq
    LIMIT p_limit
  )
  UPDATE jobs SET status = 'running', attempt = jobs.attempt + 1, started_at = p_now, heartbeat_at = p_now
  FROM picked WHERE jobs.seq = picked.seq
  RETURNING jobs.*;
END
$$;

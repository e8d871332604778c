-- opqueue schema for PostgreSQL, version 3: the claim as a function, with one plan per connection.
--
-- The claim compares run_at with a parameter, the caller's now. Sent as a prepared statement, it was planned again
-- on every call (PostgreSQL judged a plan made for each call's values cheaper than a generic one): about 0.7 ms of
-- a 2 ms claim of 32 jobs on a busy two-core machine. That per-call plan chose between two indexes: jobs_claim
-- (claim order) when many jobs were due, jobs_run_at (which stops at now) when few were due among many future
-- ones. One generic plan cannot make that choice: walking jobs_claim for the last few due jobs of a queue holding
-- a million future ones reads the whole index on every claim. So this function makes the choice itself, from a
-- bounded count of the due jobs, and its statement keeps one generic plan with both ways to the candidates, each
-- gated by that choice (a one-time filter: the other is never run):
--   - fewer due jobs than the candidates wanted: every one of them is a candidate, found by run time;
--   - otherwise: the first candidates in claim order.
-- A generic plan does not know how many rows `run_at <= p_now` selects and guesses a third of the table: over a
-- large backlog its estimated cost passes jit_above_cost, and compiling the plan on every call (about 12 ms) would
-- cost more than the claim itself, so JIT is off for this function.
-- Either way the candidates are locked with SKIP LOCKED, jobs whose key is running are left out, one job per key
-- is picked in claim order (with the key's transaction-scoped advisory lock), and the picked jobs are claimed.
-- $1 now, $2 limit and $3 the candidates to lock, as version 2's callers sent them.

CREATE FUNCTION opqueue_claim(p_now timestamptz, p_limit integer, p_candidates integer) RETURNS SETOF jobs
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_due integer;
  v_all_due boolean;
BEGIN
  -- jobs_run_at stops at p_now, and the count at p_candidates: a bounded read however long the queue.
  SELECT count(*) INTO v_due
  FROM (SELECT 1 FROM jobs WHERE status IN ('pending', 'retrying') AND run_at <= p_now LIMIT p_candidates) AS due;
  IF v_due = 0 THEN
    RETURN;
  END IF;
  v_all_due := v_due < p_candidates;

  RETURN QUERY
  WITH by_run_time AS (
    SELECT j.seq, j.concurrency_key, j.priority, j.run_at
    FROM jobs j
    WHERE v_all_due AND j.status IN ('pending', 'retrying') AND j.run_at <= p_now
      AND (j.concurrency_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM jobs r WHERE r.concurrency_key = j.concurrency_key AND r.status = 'running'))
    ORDER BY j.run_at
    LIMIT p_candidates
    FOR UPDATE SKIP LOCKED
  ), in_claim_order AS (
    SELECT j.seq, j.concurrency_key, j.priority, j.run_at
    FROM jobs j
    WHERE NOT v_all_due AND j.status IN ('pending', 'retrying') AND j.run_at <= p_now
      AND (j.concurrency_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM jobs r WHERE r.concurrency_key = j.concurrency_key AND r.status = 'running'))
    ORDER BY j.priority DESC, j.run_at, j.seq
    LIMIT p_candidates
    FOR UPDATE SKIP LOCKED
  ), candidates AS (
    SELECT * FROM by_run_time UNION ALL SELECT * FROM in_claim_order
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

-- opqueue schema for PostgreSQL, version 4: the claim never reads every due job.
--
-- Version 3's claim counted the due jobs (up to the candidates wanted) with a statement whose one generic plan is
-- made from the table's statistics when a connection first claims. Planned while few jobs were due, it became a
-- bitmap scan: every due job's index entry is read into a bitmap before the count stops at the limit. With 60,000
-- jobs due that cost up to 25 ms per claim, and a drain slowed as its queue grew (from 6,000 to 4,700 jobs/s over
-- a 60,000-job drain on a two-core machine; 11,000 jobs/s throughout with this version). Every read of the claim
-- is an ordered walk that stops early, never a bitmap: the count now asks for run time order, and bitmap scans are
-- off for the function (the concurrency key's check probes jobs_running_concurrency_key instead of collecting
-- every running job). The rest is version 3's claim unchanged.

CREATE OR REPLACE FUNCTION opqueue_claim(p_now timestamptz, p_limit integer, p_candidates integer) RETURNS SETOF jobs
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_bitmapscan = off
AS $$
DECLARE
  v_due integer;
  v_all_due boolean;
BEGIN
  -- jobs_run_at stops at p_now, and the count at p_candidates: a bounded read however long the queue. The order
  -- leaves a walk of jobs_run_at as the only plan that can stop early.
  SELECT count(*) INTO v_due
  FROM (SELECT 1 FROM jobs WHERE status IN ('pending', 'retrying') AND run_at <= p_now
        ORDER BY run_at LIMIT p_candidates) AS due;
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

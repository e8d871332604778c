-- opqueue_claim: its current text. Migrations hold its history (0003, 0004, 0007); this file is what a migrated database
-- holds now, checked by test/store/postgres-sql.test.ts. A change to it is a new migration that restates it.

CREATE OR REPLACE FUNCTION opqueue_claim(p_now timestamptz, p_limit integer, p_candidates integer) RETURNS SETOF jobs
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_bitmapscan = off
AS $$
DECLARE
  v_due integer;
  v_all_due boolean;
  v_claimed bigint[];
BEGIN
  -- job_state_run_at stops at p_now, and the count at p_candidates: a bounded read however long the queue. The
  -- order leaves a walk of job_state_run_at as the only plan that can stop early.
  SELECT count(*) INTO v_due
  FROM (SELECT 1 FROM job_state WHERE status IN ('pending', 'retrying') AND run_at <= p_now
        ORDER BY run_at LIMIT p_candidates) AS due;
  IF v_due = 0 THEN
    RETURN;
  END IF;
  v_all_due := v_due < p_candidates;

  WITH by_run_time AS (
    SELECT s.seq, s.concurrency_key, s.priority, s.run_at
    FROM job_state s
    WHERE v_all_due AND s.status IN ('pending', 'retrying') AND s.run_at <= p_now
      AND (s.concurrency_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM job_state r WHERE r.concurrency_key = s.concurrency_key AND r.status = 'running'))
    ORDER BY s.run_at
    LIMIT p_candidates
    FOR UPDATE SKIP LOCKED
  ), in_claim_order AS (
    SELECT s.seq, s.concurrency_key, s.priority, s.run_at
    FROM job_state s
    WHERE NOT v_all_due AND s.status IN ('pending', 'retrying') AND s.run_at <= p_now
      AND (s.concurrency_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM job_state r WHERE r.concurrency_key = s.concurrency_key AND r.status = 'running'))
    ORDER BY s.priority DESC, s.run_at, s.seq
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
  , claimed AS (
    UPDATE job_state s SET status = 'running', attempt = s.attempt + 1, started_at = p_now, heartbeat_at = p_now
    FROM picked
    WHERE s.seq = picked.seq
    RETURNING s.seq
  )
  SELECT array_agg(seq) INTO v_claimed FROM claimed;
  IF v_claimed IS NULL THEN
    RETURN;
  END IF;

  -- The claimed jobs, read by a statement of its own: its snapshot is taken after the claim got its row locks, so
  -- a dedupe upsert that committed while the claim was on its way is seen whole, its request with its run time.
  RETURN QUERY
  SELECT j.seq, j.id, j.operation_id, s.status, s.attempt, j.max_attempts, s.priority, s.run_at, j.created_at,
    s.started_at, s.finished_at, s.heartbeat_at, s.dedupe_key, s.concurrency_key, j.enqueued_by_operation_id,
    j.parent_job_id, j.original_request_id, j.user_id, j.authority, j.request, s.result
  FROM job_state s JOIN job_specs j ON j.seq = s.seq
  WHERE s.seq = ANY (v_claimed);
END
$$;

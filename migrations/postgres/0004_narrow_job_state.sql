-- opqueue schema for PostgreSQL, version 4: where a job is in its life moves to a narrow table of its own, and the
-- claim never reads every due job.
--
-- A job's row was rewritten whole at every step of its life (claimed, finished, retried), its authority and request
-- included, and none of those updates could be HOT: each changes `status`, which the partial indexes' predicates
-- and jobs_status_seq read. So every step inserted a new entry into every index whose predicate the new version
-- meets: seven for a claim and seven for a success, five of them the job list's indexes and the keys, whose
-- values never change. On a two-core machine draining jobs, the server spent most of its CPU there.
--
-- Now a job is two rows:
--   - job_specs: what was asked, written once (id, operation, lineage, user, authority, request), with the indexes of
--     the job list. Only a dedupe upsert ever updates it (the request).
--   - job_state: where the job is (status, attempt, priority, run time, lease, keys, result): a row of about a
--     hundred bytes whose indexes are those of claims, leases, keys, the status filter and retention.
-- A claim now writes one narrow row and three index entries (its key, its lease, its status), a success one row and
-- three entries. `jobs` becomes a view joining the two, with the columns (and their order) of version 3's table,
-- so every read, and every query an operator saved, goes on working; writes name the table they change.

-- The claim (version 3's, over job_state) never reads every due job either. Version 3 counted the due jobs (up to
-- the candidates wanted) with a statement whose one generic plan is made from the table's statistics, and made again
-- after each ANALYZE. Planned from statistics taken mid-drain (most jobs finished), it became a bitmap scan: every
-- due job's index entry read into a bitmap before the count stops at the limit. With 60,000 jobs due that cost up to
-- 25 ms per claim, and a drain slowed as its queue grew (from 6,000 to 4,700 jobs/s over a 60,000-job drain on a
-- two-core machine; about 11,000 jobs/s throughout without it). Every read of the claim is now an ordered walk that
-- stops early, never a bitmap: the count asks for run time order, and bitmap scans are off for the function (the
-- concurrency key's check probes job_state_running_concurrency_key instead of collecting every running job).

DROP FUNCTION opqueue_claim(timestamptz, integer, integer);

CREATE TABLE job_state (
  seq             bigint      PRIMARY KEY,
  status          text        NOT NULL
    CHECK (status IN ('pending', 'running', 'retrying', 'succeeded', 'dead', 'cancelled')),
  attempt         integer     NOT NULL DEFAULT 0,
  priority        integer     NOT NULL DEFAULT 0,
  run_at          timestamptz NOT NULL,
  started_at      timestamptz,
  finished_at     timestamptz,
  heartbeat_at    timestamptz,
  dedupe_key      text,
  concurrency_key text,
  result          json
);

-- The churn table now: version 1's reasons for early vacuum and a page's room for new versions apply to it.
ALTER TABLE job_state SET (
  autovacuum_vacuum_scale_factor = 0.01,
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_insert_scale_factor = 0.05,
  autovacuum_analyze_scale_factor = 0.02,
  autovacuum_vacuum_cost_delay = 0,
  fillfactor = 85
);

INSERT INTO job_state (seq, status, attempt, priority, run_at, started_at, finished_at, heartbeat_at, dedupe_key,
    concurrency_key, result)
  SELECT seq, status, attempt, priority, run_at, started_at, finished_at, heartbeat_at, dedupe_key, concurrency_key,
    result
  FROM jobs;

DROP INDEX jobs_dedupe_key, jobs_running_concurrency_key, jobs_claim, jobs_run_at, jobs_running_heartbeat,
  jobs_status_seq, jobs_finished_at;
ALTER TABLE jobs DROP COLUMN status, DROP COLUMN attempt, DROP COLUMN priority, DROP COLUMN run_at,
  DROP COLUMN started_at, DROP COLUMN finished_at, DROP COLUMN heartbeat_at, DROP COLUMN dedupe_key,
  DROP COLUMN concurrency_key, DROP COLUMN result;
ALTER TABLE jobs RENAME TO job_specs;
-- Written once and deleted by retention: nothing to leave room for.
ALTER TABLE job_specs SET (fillfactor = 100);

-- Version 1's indexes, on the table that now holds their columns.
CREATE UNIQUE INDEX job_state_dedupe_key ON job_state (dedupe_key)
  WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'retrying');
CREATE UNIQUE INDEX job_state_running_concurrency_key ON job_state (concurrency_key)
  WHERE concurrency_key IS NOT NULL AND status = 'running';
CREATE INDEX job_state_claim ON job_state (priority DESC, run_at, seq) WHERE status IN ('pending', 'retrying');
CREATE INDEX job_state_run_at ON job_state (run_at) WHERE status IN ('pending', 'retrying');
CREATE INDEX job_state_running_heartbeat ON job_state (heartbeat_at) WHERE status = 'running';
CREATE INDEX job_state_status_seq ON job_state (status, seq);
CREATE INDEX job_state_finished_at ON job_state (finished_at) WHERE finished_at IS NOT NULL;

CREATE VIEW jobs AS
  SELECT j.seq, j.id, j.operation_id, s.status, s.attempt, j.max_attempts, s.priority, s.run_at, j.created_at,
    s.started_at, s.finished_at, s.heartbeat_at, s.dedupe_key, s.concurrency_key, j.enqueued_by_operation_id,
    j.parent_job_id, j.original_request_id, j.user_id, j.authority, j.request, s.result
  FROM job_specs j JOIN job_state s ON s.seq = j.seq;

-- Version 2's insert, writing both rows. The dedupe upsert moves the run time (job_state) and replaces the request
-- (job_specs), and answers the whole job as the view has it.
CREATE OR REPLACE FUNCTION opqueue_insert_job(p json, p_now timestamptz) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  -- The scalars are read from a jsonb copy, parsed once: each ->> on a json value parses its text again.
  b jsonb := p::jsonb;
  v_seq bigint;
  v_job jobs;
  v_constraint text;
BEGIN
  IF b->>'dedupe_key' IS NULL THEN
    RETURN opqueue_create_job(p, b, p_now);
  END IF;
  -- With a dedupe key: two transactions may race for it; the loser's INSERT meets the unique index, and the loop
  -- goes round once more, now finding the winner's job to upsert. The chain charge sits inside the same sub-block
  -- as the insert, so a lost race never charges the chain.
  FOR i IN 1..5 LOOP
    SELECT seq INTO v_seq FROM job_state
      WHERE dedupe_key = b->>'dedupe_key' AND status IN ('pending', 'retrying')
      FOR UPDATE;
    IF FOUND THEN
      SELECT * INTO v_job FROM jobs WHERE seq = v_seq;
      IF v_job.operation_id <> b->>'operation_id' THEN
        RETURN json_build_object('kind', 'dedupe_conflict', 'job', row_to_json(v_job));
      END IF;
      UPDATE job_state SET run_at = (b->>'run_at')::timestamptz WHERE seq = v_seq;
      UPDATE job_specs SET request = p->'request' WHERE seq = v_seq;
      SELECT * INTO v_job FROM jobs WHERE seq = v_seq;
      RETURN json_build_object('kind', 'deduplicated', 'job', row_to_json(v_job));
    END IF;
    BEGIN
      RETURN opqueue_create_job(p, b, p_now);
    EXCEPTION WHEN unique_violation THEN
      GET STACKED DIAGNOSTICS v_constraint = CONSTRAINT_NAME;
      IF v_constraint IS DISTINCT FROM 'job_state_dedupe_key' THEN
        RAISE;
      END IF;
    END;
  END LOOP;
  RAISE EXCEPTION 'opqueue_insert_job: dedupe key % kept changing hands', b->>'dedupe_key';
END
$$;

CREATE OR REPLACE FUNCTION opqueue_create_job(p json, b jsonb, p_now timestamptz) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_seq bigint;
  v_cancelled_at timestamptz;
BEGIN
  INSERT INTO chains AS c (original_request_id, jobs_created) VALUES (b->>'original_request_id', 1)
    ON CONFLICT (original_request_id) DO UPDATE SET jobs_created = c.jobs_created + 1
      WHERE c.jobs_created < (b->>'spawn_cap')::integer
    RETURNING c.cancelled_at INTO v_cancelled_at;
  -- No row back: the chain is full (the upsert's WHERE refused the increment).
  IF NOT FOUND THEN
    RETURN json_build_object('kind', 'spawn_cap_exceeded');
  END IF;
  INSERT INTO job_specs (id, operation_id, max_attempts, created_at, enqueued_by_operation_id, parent_job_id,
      original_request_id, user_id, authority, request)
    VALUES (b->>'id', b->>'operation_id', (b->>'max_attempts')::integer, p_now, b->>'enqueued_by_operation_id',
      b->>'parent_job_id', b->>'original_request_id', b->>'user_id', p->'authority', p->'request')
    RETURNING seq INTO v_seq;
  INSERT INTO job_state (seq, status, attempt, priority, run_at, finished_at, dedupe_key, concurrency_key, result)
    VALUES (v_seq, CASE WHEN v_cancelled_at IS NULL THEN 'pending' ELSE 'cancelled' END, 0,
      (b->>'priority')::integer, (b->>'run_at')::timestamptz, CASE WHEN v_cancelled_at IS NULL THEN NULL ELSE p_now END,
      b->>'dedupe_key', b->>'concurrency_key',
      CASE WHEN v_cancelled_at IS NULL THEN NULL
        ELSE '{"error_body":null,"terminal_reason":"cancelled-by-chain"}'::json END);
  RETURN json_build_object('kind', 'created', 'seq', v_seq, 'chain_cancelled', v_cancelled_at IS NOT NULL);
END
$$;

-- Version 3's claim over job_state, answering whole jobs (the view's row type) joined from job_specs, never with a
-- bitmap (see above).
CREATE FUNCTION opqueue_claim(p_now timestamptz, p_limit integer, p_candidates integer) RETURNS SETOF jobs
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_bitmapscan = off
AS $$
DECLARE
  v_due integer;
  v_all_due boolean;
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

  RETURN QUERY
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
  UPDATE job_state s SET status = 'running', attempt = s.attempt + 1, started_at = p_now, heartbeat_at = p_now
  FROM picked, job_specs j
  WHERE s.seq = picked.seq AND j.seq = s.seq
  RETURNING j.seq, j.id, j.operation_id, s.status, s.attempt, j.max_attempts, s.priority, s.run_at, j.created_at,
    s.started_at, s.finished_at, s.heartbeat_at, s.dedupe_key, s.concurrency_key, j.enqueued_by_operation_id,
    j.parent_job_id, j.original_request_id, j.user_id, j.authority, j.request, s.result;
END
$$;

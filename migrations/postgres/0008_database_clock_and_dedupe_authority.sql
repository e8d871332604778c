-- opqueue schema for PostgreSQL, version 8: run times from the database's clock, and a dedupe upsert never crosses
-- users.
--
-- 1. A job asked to run after a delay (`delay_ms`, or no time at all) gets its run time from the database's clock
--    here, `p_now + delay`, instead of a time the node computed from its own clock: a node whose clock ran 120 s ahead
--    stamped its jobs 120 s in the future. An explicit `run_at` is kept as given. The node passes `'now'` as p_now,
--    which PostgreSQL reads as the transaction's timestamp (tests pass a time of their own).
-- 2. A dedupe upsert whose new job runs as another user, or under another kind of authority, than the job holding the
--    key is a `dedupe_conflict`, like one for another operation: an upsert replaces the held job's request but keeps
--    its authority, so it would run one user's request under another user's authority (CONTRACT §3, Revision 2).
-- 3. A created job is answered with its creation and run times too (milliseconds since the epoch), which the caller
--    can no longer compute.

-- The run time a new job (or a dedupe upsert) asks for: `run_at` as given, else `delay_ms` after p_now.
CREATE FUNCTION opqueue_run_time(b jsonb, p_now timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
  SELECT coalesce((b->>'run_at')::timestamptz, p_now + coalesce((b->>'delay_ms')::bigint, 0) * interval '1 millisecond');
$$;

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
      IF v_job.operation_id <> b->>'operation_id' OR v_job.user_id <> b->>'user_id'
          OR v_job.authority->>'kind' IS DISTINCT FROM b->'authority'->>'kind' THEN
        RETURN json_build_object('kind', 'dedupe_conflict', 'job', row_to_json(v_job));
      END IF;
      UPDATE job_state SET run_at = opqueue_run_time(b, p_now) WHERE seq = v_seq;
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
  v_run_at timestamptz := opqueue_run_time(b, p_now);
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
      (b->>'priority')::integer, v_run_at, CASE WHEN v_cancelled_at IS NULL THEN NULL ELSE p_now END,
      b->>'dedupe_key', b->>'concurrency_key',
      CASE WHEN v_cancelled_at IS NULL THEN NULL
        ELSE '{"error_body":null,"terminal_reason":"cancelled-by-chain"}'::json END);
  RETURN json_build_object('kind', 'created', 'seq', v_seq, 'chain_cancelled', v_cancelled_at IS NOT NULL,
    'created_at', floor(extract(epoch FROM p_now) * 1000)::bigint,
    'run_at', floor(extract(epoch FROM v_run_at) * 1000)::bigint);
END
$$;

-- As in version 2, with the run time of a created job computed as the job's own was.
CREATE OR REPLACE FUNCTION opqueue_insert_jobs(items json, p_now timestamptz) RETURNS SETOF json
LANGUAGE plpgsql AS $$
DECLARE
  item json;
  outcome json;
  v_earliest timestamptz;
  v_run_at timestamptz;
BEGIN
  FOR item IN SELECT value FROM json_array_elements(items) LOOP
    outcome := opqueue_insert_job(item, p_now);
    v_run_at := CASE
      WHEN outcome->>'kind' = 'created' AND NOT (outcome->>'chain_cancelled')::boolean
        THEN opqueue_run_time(item::jsonb, p_now)
      WHEN outcome->>'kind' = 'deduplicated' AND outcome->'job'->>'status' IN ('pending', 'retrying')
        THEN (outcome->'job'->>'run_at')::timestamptz
    END;
    IF v_run_at IS NOT NULL AND (v_earliest IS NULL OR v_run_at < v_earliest) THEN
      v_earliest := v_run_at;
    END IF;
    RETURN NEXT outcome;
  END LOOP;
  IF v_earliest IS NOT NULL THEN
    PERFORM opqueue_notify(v_earliest);
  END IF;
END
$$;

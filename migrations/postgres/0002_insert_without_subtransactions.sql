-- opqueue schema for PostgreSQL, version 2: a cheaper insert.
--
-- 1. A job without a dedupe key is inserted without a subtransaction. Version 1 wrapped every insert in a
--    BEGIN ... EXCEPTION block (a subtransaction, with its own transaction id once it writes) to retry a lost race
--    for a dedupe key; a job without a key cannot lose one, so it needs no such block. Besides its own cost, a batch
--    of more than 64 subtransactions overflows each backend's subtransaction cache, which makes every snapshot in
--    the cluster consult pg_subtrans.
-- 2. The scalars of a job are read from one jsonb copy of it: every ->> on a json value parses the whole text again
--    (version 1 parsed each job some twenty times). The authority and the request still come from the json, whose
--    text (key order included) is kept as sent.
-- 3. A created job is answered with what the caller cannot know (its seq, whether its chain was cancelled): the
--    caller already holds everything else it wrote, so the row is neither turned into JSON here nor parsed there.
--    Deduplicated jobs and dedupe conflicts still carry the whole row, which the caller does not have.

CREATE OR REPLACE FUNCTION opqueue_insert_job(p json, p_now timestamptz) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  -- The scalars are read from a jsonb copy, parsed once: each ->> on a json value parses its text again.
  b jsonb := p::jsonb;
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
    SELECT * INTO v_job FROM jobs
      WHERE dedupe_key = b->>'dedupe_key' AND status IN ('pending', 'retrying')
      FOR UPDATE;
    IF FOUND THEN
      IF v_job.operation_id <> b->>'operation_id' THEN
        RETURN json_build_object('kind', 'dedupe_conflict', 'job', row_to_json(v_job));
      END IF;
      UPDATE jobs SET run_at = (b->>'run_at')::timestamptz, request = p->'request'
        WHERE seq = v_job.seq RETURNING * INTO v_job;
      RETURN json_build_object('kind', 'deduplicated', 'job', row_to_json(v_job));
    END IF;
    BEGIN
      RETURN opqueue_create_job(p, b, p_now);
    EXCEPTION WHEN unique_violation THEN
      GET STACKED DIAGNOSTICS v_constraint = CONSTRAINT_NAME;
      IF v_constraint IS DISTINCT FROM 'jobs_dedupe_key' THEN
        RAISE;
      END IF;
    END;
  END LOOP;
  RAISE EXCEPTION 'opqueue_insert_job: dedupe key % kept changing hands', b->>'dedupe_key';
END
$$;

-- Charges the job to its chain and inserts it: `pending`, or `cancelled` (cancelled-by-chain) when its chain was
-- cancelled; nothing when the chain is full. Scalars come from `b` (the jsonb of `p`); the authority and the request
-- from `p`, so their text is kept as sent.
CREATE FUNCTION opqueue_create_job(p json, b jsonb, p_now timestamptz) RETURNS json
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
  INSERT INTO jobs (id, operation_id, status, attempt, max_attempts, priority, run_at, created_at, finished_at,
      dedupe_key, concurrency_key, enqueued_by_operation_id, parent_job_id, original_request_id, user_id,
      authority, request, result)
    VALUES (b->>'id', b->>'operation_id',
      CASE WHEN v_cancelled_at IS NULL THEN 'pending' ELSE 'cancelled' END,
      0, (b->>'max_attempts')::integer, (b->>'priority')::integer, (b->>'run_at')::timestamptz, p_now,
      CASE WHEN v_cancelled_at IS NULL THEN NULL ELSE p_now END,
      b->>'dedupe_key', b->>'concurrency_key', b->>'enqueued_by_operation_id', b->>'parent_job_id',
      b->>'original_request_id', b->>'user_id', p->'authority', p->'request',
      CASE WHEN v_cancelled_at IS NULL THEN NULL
        ELSE '{"error_body":null,"terminal_reason":"cancelled-by-chain"}'::json END)
    RETURNING seq INTO v_seq;
  RETURN json_build_object('kind', 'created', 'seq', v_seq, 'chain_cancelled', v_cancelled_at IS NOT NULL);
END
$$;

-- As in version 1 (one call, one commit, one NOTIFY per batch), reading the new answers: a created job becomes
-- claimable at its own run_at unless its chain was cancelled.
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
      WHEN outcome->>'kind' = 'created' AND NOT (outcome->>'chain_cancelled')::boolean THEN (item->>'run_at')::timestamptz
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

-- opqueue_create_job: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0002,
-- 0004, 0008, 0010, 0011, 0012): a change to it is a new migration that restates it, after which the script writes this
-- file again, keeping the prose under this paragraph.

CREATE OR REPLACE FUNCTION opqueue_create_job(p json, b jsonb, p_now timestamp with time zone)
 RETURNS json
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_seq bigint;
  v_cancelled_at timestamptz;
  v_run_at timestamptz := opqueue_run_time(b, p_now);
  v_expires_at timestamptz := opqueue_expiry_time(b, p_now);
BEGIN
  IF b ? 'on_settled' THEN
    -- The chain's first job, with the chain's on_settled: no row back means the chain exists already.
    INSERT INTO chains AS c (original_request_id, jobs_created, created_at, on_settled)
      VALUES (b->>'original_request_id', 1, p_now, b->'on_settled')
      ON CONFLICT (original_request_id) DO NOTHING
      RETURNING c.cancelled_at INTO v_cancelled_at;
    IF NOT FOUND THEN
      RETURN json_build_object('kind', 'chain_exists');
    END IF;
  ELSE
    -- A new job of the chain also makes it unsettled again (settled_at is the last settling the sweeper saw).
    INSERT INTO chains AS c (original_request_id, jobs_created, created_at) VALUES (b->>'original_request_id', 1, p_now)
      ON CONFLICT (original_request_id) DO UPDATE SET jobs_created = c.jobs_created + 1, settled_at = NULL
        WHERE c.jobs_created < (b->>'spawn_cap')::integer
      RETURNING c.cancelled_at INTO v_cancelled_at;
    -- No row back: the chain is full (the upsert's WHERE refused the increment).
    IF NOT FOUND THEN
      RETURN json_build_object('kind', 'spawn_cap_exceeded');
    END IF;
  END IF;
  INSERT INTO job_specs (id, operation_id, max_attempts, created_at, enqueued_by_operation_id, parent_job_id,
      original_request_id, user_id, authority, request, rate_key, traceparent, callbacks)
    VALUES (b->>'id', b->>'operation_id', (b->>'max_attempts')::integer, p_now, b->>'enqueued_by_operation_id',
      b->>'parent_job_id', b->>'original_request_id', b->>'user_id', p->'authority', p->'request', b->>'rate_key',
      b->>'traceparent', p->'callbacks')
    RETURNING seq INTO v_seq;
  INSERT INTO job_state (seq, status, attempt, priority, run_at, finished_at, dedupe_key, concurrency_key, result,
      operation_id, lane, expires_at, callbacks_pending)
    VALUES (v_seq, CASE WHEN v_cancelled_at IS NULL THEN 'pending' ELSE 'cancelled' END, 0,
      (b->>'priority')::integer, v_run_at, CASE WHEN v_cancelled_at IS NULL THEN NULL ELSE p_now END,
      b->>'dedupe_key', b->>'concurrency_key',
      CASE WHEN v_cancelled_at IS NULL THEN NULL
        ELSE '{"error_body":null,"terminal_reason":"cancelled-by-chain"}'::json END,
      b->>'operation_id',
      CASE WHEN b->>'rate_key' IS NULL THEN 'u:' || (b->>'user_id') ELSE 'r:' || (b->>'rate_key') END, v_expires_at,
      b ? 'callbacks');
  RETURN json_build_object('kind', 'created', 'seq', v_seq, 'chain_cancelled', v_cancelled_at IS NOT NULL,
    'created_at', floor(extract(epoch FROM p_now) * 1000)::bigint,
    'run_at', floor(extract(epoch FROM v_run_at) * 1000)::bigint,
    'expires_at', floor(extract(epoch FROM v_expires_at) * 1000)::bigint);
END
$function$;

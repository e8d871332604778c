-- opqueue schema for PostgreSQL, version 20: a batch of plain jobs is inserted by one statement, not job by job.
--
-- Rolling upgrade: yes. Only opqueue_insert_jobs changes; its arguments and its answers are version 19's, so nodes of
-- either version call it alike.
--
-- opqueue_insert_jobs called opqueue_insert_job once per item: three nested PL/pgSQL calls, the item's JSON read again
-- in each, and three single-row statements (the chain's charge, job_specs, job_state), each started and ended on its
-- own. With pg_stat_statements' track = all, about 65 µs of the 142 µs it took per job were that wrapping, not the
-- rows. Now the batch's leading plain items (no idempotency key, no dedupe key, not a chain's first job with
-- on_settled), which are most batches whole, are inserted by one statement:
-- - each chain among them is charged once for all its items, if it has room for all of them (the smallest spawn cap
--   among them);
-- - job_specs and job_state get their rows in two multi-row INSERTs, in the items' order, so their seqs keep it;
-- - the answers are opqueue_insert_job's ("created", with the same fields).
-- If a chain has no room for all its items, the statement is undone (it runs in a subtransaction, one per batch) and
-- every item goes through opqueue_insert_job, which meets the cap item by item. The items after the leading plain ones
-- go through opqueue_insert_job, in order, as before. Either way, every answer and every seq is the one the
-- item-by-item loop gave: the items are inserted in their order.

CREATE OR REPLACE FUNCTION opqueue_insert_jobs(items json, p_now timestamptz) RETURNS SETOF json
LANGUAGE plpgsql AS $$
DECLARE
  v_count integer := json_array_length(items);
  v_plain integer;
  v_answers json[];
  v_earliest timestamptz;
  v_run_at timestamptz;
  outcome json;
BEGIN
  -- The leading plain items.
  SELECT coalesce(min(e.ord) - 1, v_count) INTO v_plain
    FROM json_array_elements(items) WITH ORDINALITY AS e(value, ord)
    WHERE e.value->'idempotency' IS NOT NULL OR e.value->>'dedupe_key' IS NOT NULL OR e.value->'on_settled' IS NOT NULL;
  IF v_plain > 0 THEN
    BEGIN
      WITH item AS (
        SELECT e.ord::integer AS ord, e.value AS p, e.value::jsonb AS b
          FROM json_array_elements(items) WITH ORDINALITY AS e(value, ord)
          WHERE e.ord <= v_plain
      ),
      chain AS (
        SELECT b->>'original_request_id' AS rid, count(*)::integer AS n, min((b->>'spawn_cap')::integer) AS cap
          FROM item GROUP BY 1
      ),
      charged AS (
        -- A new job of a chain also makes it unsettled again, as opqueue_create_job does. No row back: no room.
        INSERT INTO chains AS c (original_request_id, jobs_created, created_at)
          SELECT rid, n, p_now FROM chain WHERE n <= cap
          ON CONFLICT (original_request_id) DO UPDATE SET jobs_created = c.jobs_created + excluded.jobs_created,
              settled_at = NULL
            WHERE c.jobs_created + excluded.jobs_created
              <= (SELECT cap FROM chain WHERE rid = excluded.original_request_id)
          RETURNING c.original_request_id AS rid, c.cancelled_at
      ),
      plain AS (
        SELECT item.ord, item.p, item.b, charged.cancelled_at, opqueue_run_time(item.b, p_now) AS run_at,
            opqueue_expiry_time(item.b, p_now) AS expires_at
          FROM item JOIN charged ON charged.rid = item.b->>'original_request_id'
      ),
      specs AS (
        INSERT INTO job_specs (id, operation_id, max_attempts, created_at, enqueued_by_operation_id, parent_job_id,
            original_request_id, user_id, authority, request, rate_key, traceparent, callbacks)
          SELECT b->>'id', b->>'operation_id', (b->>'max_attempts')::integer, p_now, b->>'enqueued_by_operation_id',
              b->>'parent_job_id', b->>'original_request_id', b->>'user_id', p->'authority', p->'request',
              b->>'rate_key', b->>'traceparent', p->'callbacks'
            FROM plain ORDER BY ord
          RETURNING seq, id
      ),
      state AS (
        INSERT INTO job_state (seq, status, attempt, priority, run_at, finished_at, dedupe_key, concurrency_key,
            result, operation_id, lane, expires_at, callbacks_pending)
          SELECT specs.seq, CASE WHEN cancelled_at IS NULL THEN 'pending' ELSE 'cancelled' END, 0,
              (b->>'priority')::integer, run_at, CASE WHEN cancelled_at IS NULL THEN NULL ELSE p_now END,
              NULL, b->>'concurrency_key',
              CASE WHEN cancelled_at IS NULL THEN NULL
                ELSE '{"error_body":null,"terminal_reason":"cancelled-by-chain"}'::json END,
              b->>'operation_id',
              CASE WHEN b->>'rate_key' IS NULL THEN 'u:' || (b->>'user_id') ELSE 'r:' || (b->>'rate_key') END,
              expires_at, b ? 'callbacks'
            FROM specs JOIN plain ON plain.b->>'id' = specs.id
            ORDER BY specs.seq
      )
      SELECT array_agg(json_build_object('kind', 'created', 'seq', specs.seq,
            'chain_cancelled', plain.cancelled_at IS NOT NULL,
            'created_at', floor(extract(epoch FROM p_now) * 1000)::bigint,
            'run_at', floor(extract(epoch FROM plain.run_at) * 1000)::bigint,
            'expires_at', floor(extract(epoch FROM plain.expires_at) * 1000)::bigint) ORDER BY plain.ord)
        INTO v_answers
        FROM plain JOIN specs ON specs.id = plain.b->>'id';
      IF coalesce(array_length(v_answers, 1), 0) < v_plain THEN
        -- A chain without room for all its items: undo, and take every item one by one.
        RAISE EXCEPTION USING ERRCODE = 'OQ001';
      END IF;
    EXCEPTION WHEN SQLSTATE 'OQ001' THEN
      v_answers := NULL;
      v_plain := 0;
    END;
  END IF;

  FOR i IN 1..v_count LOOP
    IF i > v_plain THEN
      v_answers[i] := opqueue_insert_job(items->(i - 1), p_now);
    END IF;
    outcome := v_answers[i];
    v_run_at := CASE
      WHEN outcome->>'kind' = 'created' AND NOT (outcome->>'chain_cancelled')::boolean
        THEN to_timestamp((outcome->>'run_at')::bigint / 1000.0)
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

-- opqueue schema for PostgreSQL, version 25: a batch of jobs takes its chains' rows in the order of their ids.
--
-- Rolling upgrade: yes. opqueue_insert_batch keeps its signature and its answers; only the order in which its one
-- statement for plain jobs charges their chains changes.
--
-- That statement charges each chain of the batch once, by an INSERT ... ON CONFLICT DO UPDATE over the batch's chains,
-- which locks each chain's row until the batch commits. The chains came in the order of the hash aggregate that
-- counted them, so two batches sharing two chains could take them in opposite orders and wait for each other until
-- the server's deadlock check (deadlock_timeout, a second by default) undid one of them, which its node then answered
-- 503. The group commit keeps several batches in flight, so jobs enqueued by the jobs of a few busy chains met this
-- under load. Taken in the order of their ids, the second batch waits for the first instead.
--
-- Items after the leading plain ones still take their chains one by one, in the items' order; the node sends a
-- statement the server undid to end a deadlock once more (src/store/postgres/connection.ts).

CREATE OR REPLACE FUNCTION opqueue_insert_batch(items jsonb, p_now timestamp with time zone, p_plain integer)
 RETURNS SETOF json
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_count integer := jsonb_array_length(items);
  v_plain integer := least(p_plain, v_count);
  v_answers json[];
  v_earliest timestamptz;
  v_run_at timestamptz;
  outcome json;
  v_item record;
  v_seqs regclass := pg_get_serial_sequence('job_specs', 'seq')::regclass;
BEGIN
  IF v_plain > 0 THEN
    BEGIN
      WITH item AS (
        -- The node's count, checked: an item that is not plain is left out, and the statement is undone below.
        SELECT e.ord::integer AS ord, e.value AS b, e.value->>'original_request_id' AS rid,
            (e.value->>'spawn_cap')::integer AS cap
          FROM jsonb_array_elements(items) WITH ORDINALITY AS e(value, ord)
          WHERE e.ord <= v_plain AND e.value->'idempotency' IS NULL AND e.value->>'dedupe_key' IS NULL
            AND NOT e.value ? 'on_settled'
      ),
      chain AS (
        SELECT rid, count(*)::integer AS n, min(cap) AS cap FROM item GROUP BY rid
      ),
      charged AS (
        -- A new job of a chain also makes it unsettled again, as opqueue_create_job does. No row back: no room. The
        -- batch's smallest cap stands for each chain's (every job has the config's spawn cap; a smaller one only
        -- sends the batch item by item). The chains are taken in the order of their ids, as every other batch takes
        -- them, so that two batches sharing chains queue one behind the other instead of deadlocking (0025).
        INSERT INTO chains AS c (original_request_id, jobs_created, created_at)
          SELECT rid, n, p_now FROM chain WHERE n <= cap
          ORDER BY rid
          ON CONFLICT (original_request_id) DO UPDATE SET jobs_created = c.jobs_created + excluded.jobs_created,
              settled_at = NULL
            WHERE c.jobs_created + excluded.jobs_created <= (SELECT min(cap) FROM chain)
          RETURNING c.original_request_id AS rid, c.cancelled_at
      ),
      plain AS (
        -- Each job's seq taken here, in the items' order, so that neither table's rows are matched up afterwards.
        SELECT ordered.*, nextval(v_seqs) AS seq
          FROM (SELECT item.ord, item.b, charged.cancelled_at, opqueue_run_time(item.b, p_now) AS run_at,
                    opqueue_expiry_time(item.b, p_now) AS expires_at
                  FROM item JOIN charged USING (rid)
                  ORDER BY item.ord
                  OFFSET 0) AS ordered
      ),
      specs AS (
        INSERT INTO job_specs (seq, id, operation_id, max_attempts, created_at, enqueued_by_operation_id,
            parent_job_id, original_request_id, user_id, authority, request, rate_key, traceparent, callbacks)
          OVERRIDING SYSTEM VALUE
          SELECT seq, b->>'id', b->>'operation_id', (b->>'max_attempts')::integer, p_now,
              b->>'enqueued_by_operation_id', b->>'parent_job_id', b->>'original_request_id', b->>'user_id',
              (b->>'authority')::json, (b->>'request')::json, b->>'rate_key', b->>'traceparent',
              (b->>'callbacks')::json
            FROM plain
      ),
      state AS (
        INSERT INTO job_state (seq, status, attempt, priority, run_at, finished_at, dedupe_key, concurrency_key,
            result, operation_id, lane, expires_at, callbacks_pending)
          SELECT seq, CASE WHEN cancelled_at IS NULL THEN 'pending' ELSE 'cancelled' END, 0,
              (b->>'priority')::integer, run_at, CASE WHEN cancelled_at IS NULL THEN NULL ELSE p_now END,
              NULL, b->>'concurrency_key',
              CASE WHEN cancelled_at IS NULL THEN NULL
                ELSE '{"error_body":null,"terminal_reason":"cancelled-by-chain"}'::json END,
              b->>'operation_id',
              CASE WHEN b->>'rate_key' IS NULL THEN 'u:' || (b->>'user_id') ELSE 'r:' || (b->>'rate_key') END,
              expires_at, b ? 'callbacks'
            FROM plain
      )
      SELECT array_agg(json_build_object('kind', 'created', 'seq', seq, 'chain_cancelled', cancelled_at IS NOT NULL,
            'created_at', floor(extract(epoch FROM p_now) * 1000)::bigint,
            'run_at', floor(extract(epoch FROM run_at) * 1000)::bigint,
            'expires_at', floor(extract(epoch FROM expires_at) * 1000)::bigint) ORDER BY ord),
          min(run_at) FILTER (WHERE cancelled_at IS NULL AND NOT b ? 'quiet')
        INTO v_answers, v_earliest
        FROM plain;
      IF coalesce(array_length(v_answers, 1), 0) < v_plain THEN
        -- A chain without room for all its items (or an item counted as plain that is not): undo, and take every
        -- item one by one.
        RAISE EXCEPTION USING ERRCODE = 'OQ001';
      END IF;
    EXCEPTION WHEN SQLSTATE 'OQ001' THEN
      v_answers := NULL;
      v_earliest := NULL;
      v_plain := 0;
    END;
  END IF;

  IF v_plain < v_count THEN
    FOR v_item IN
      SELECT e.ord::integer AS ord, e.value FROM jsonb_array_elements(items) WITH ORDINALITY AS e(value, ord)
      OFFSET v_plain
    LOOP
      -- opqueue_insert_job takes an item whose authority, request and callbacks are JSON, not strings of it: their
      -- texts are spliced in as they came, the scalars after them.
      outcome := opqueue_insert_job(('{"authority":' || (v_item.value->>'authority')
          || ',"request":' || (v_item.value->>'request')
          || coalesce(',"callbacks":' || (v_item.value->>'callbacks'), '') || ','
          || substr((v_item.value - 'authority' - 'request' - 'callbacks')::text, 2))::json, p_now);
      v_answers[v_item.ord] := outcome;
      v_run_at := CASE
        WHEN outcome->>'kind' = 'created' AND NOT (outcome->>'chain_cancelled')::boolean
          THEN opqueue_run_time(v_item.value, p_now)
        WHEN outcome->>'kind' = 'deduplicated' AND outcome->'job'->>'status' IN ('pending', 'retrying')
          THEN (outcome->'job'->>'run_at')::timestamptz
      END;
      IF v_run_at IS NOT NULL AND NOT v_item.value ? 'quiet' AND (v_earliest IS NULL OR v_run_at < v_earliest) THEN
        v_earliest := v_run_at;
      END IF;
    END LOOP;
  END IF;
  RETURN QUERY SELECT unnest(v_answers);
  IF v_earliest IS NOT NULL THEN
    PERFORM opqueue_notify(v_earliest);
  END IF;
END
$function$;

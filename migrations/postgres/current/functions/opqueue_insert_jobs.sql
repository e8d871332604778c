-- opqueue_insert_jobs: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0001,
-- 0002, 0008): a change to it is a new migration that restates it, after which the script writes this file again,
-- keeping the prose under this paragraph.

CREATE OR REPLACE FUNCTION opqueue_insert_jobs(items json, p_now timestamp with time zone)
 RETURNS SETOF json
 LANGUAGE plpgsql
AS $function$
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
$function$;

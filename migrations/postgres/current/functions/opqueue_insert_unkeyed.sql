-- opqueue_insert_unkeyed: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0011): a
-- change to it is a new migration that restates it, after which the script writes this file again, keeping the prose
-- under this paragraph.
--
-- The dedupe upsert, the spawn cap and the insert of one enqueue (docs/api.md, steps 5 to 7). With a dedupe key, two
-- transactions may race for it; the loser's INSERT meets the unique index, and the loop goes round once more, now
-- finding the winner's job to upsert. The chain charge sits inside the same sub-block as the insert, so a lost race
-- never charges the chain.

CREATE OR REPLACE FUNCTION opqueue_insert_unkeyed(p json, b jsonb, p_now timestamp with time zone)
 RETURNS json
 LANGUAGE plpgsql
AS $function$
DECLARE
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
      UPDATE job_state SET run_at = opqueue_run_time(b, p_now), expires_at = opqueue_expiry_time(b, p_now)
        WHERE seq = v_seq;
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
  RAISE EXCEPTION 'opqueue_insert_unkeyed: dedupe key % kept changing hands', b->>'dedupe_key';
END
$function$;

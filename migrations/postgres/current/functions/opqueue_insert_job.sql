-- opqueue_insert_job: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0001,
-- 0002, 0004, 0008, 0011): a change to it is a new migration that restates it, after which the script writes this file
-- again, keeping the prose under this paragraph.
--
-- One enqueue's steps 5 to 7 (docs/api.md), behind its idempotency key when it has one ("Idempotency"): a live key
-- answers with the job it holds (idempotent_replay, or idempotency_conflict for another body); a refused insert (spawn
-- cap, dedupe conflict) gives the key back. The steps themselves are opqueue_insert_unkeyed's.

CREATE OR REPLACE FUNCTION opqueue_insert_job(p json, p_now timestamp with time zone)
 RETURNS json
 LANGUAGE plpgsql
AS $function$
DECLARE
  -- The scalars are read from a jsonb copy, parsed once: each ->> on a json value parses its text again.
  b jsonb := p::jsonb;
  v_job jobs;
  v_key jsonb := b->'idempotency';
  v_held idempotency_keys;
  v_outcome json;
BEGIN
  IF v_key IS NULL THEN
    RETURN opqueue_insert_unkeyed(p, b, p_now);
  END IF;
  -- An idempotency key: take it (a new key, or one whose window passed), or answer with the job it holds. A
  -- concurrent call with the same key waits here for the first to commit, then finds its key taken.
  INSERT INTO idempotency_keys AS k (scope, key, fingerprint, job_id, created_at, expires_at)
    VALUES (v_key->>'scope', v_key->>'key', v_key->>'fingerprint', b->>'id', p_now,
      p_now + (v_key->>'window_ms')::bigint * interval '1 millisecond')
    ON CONFLICT (scope, key) DO UPDATE SET fingerprint = excluded.fingerprint, job_id = excluded.job_id,
        created_at = excluded.created_at, expires_at = excluded.expires_at
      WHERE k.expires_at <= p_now;
  IF NOT FOUND THEN
    SELECT * INTO v_held FROM idempotency_keys WHERE scope = v_key->>'scope' AND key = v_key->>'key';
    SELECT * INTO v_job FROM jobs WHERE id = v_held.job_id;
    IF FOUND THEN
      RETURN json_build_object('kind',
        CASE WHEN v_held.fingerprint = v_key->>'fingerprint' THEN 'idempotent_replay' ELSE 'idempotency_conflict' END,
        'job', row_to_json(v_job));
    END IF;
    -- The job it answered with is gone (deleted by hand): the key answers for this call's job instead.
    UPDATE idempotency_keys SET fingerprint = v_key->>'fingerprint', job_id = b->>'id', created_at = p_now,
        expires_at = p_now + (v_key->>'window_ms')::bigint * interval '1 millisecond'
      WHERE scope = v_key->>'scope' AND key = v_key->>'key';
  END IF;
  v_outcome := opqueue_insert_unkeyed(p, b, p_now);
  IF v_outcome->>'kind' = 'deduplicated' THEN
    UPDATE idempotency_keys SET job_id = v_outcome->'job'->>'id' WHERE scope = v_key->>'scope' AND key = v_key->>'key';
  ELSIF v_outcome->>'kind' <> 'created' THEN
    -- Refused: the key is not used up.
    DELETE FROM idempotency_keys WHERE scope = v_key->>'scope' AND key = v_key->>'key';
  END IF;
  RETURN v_outcome;
END
$function$;

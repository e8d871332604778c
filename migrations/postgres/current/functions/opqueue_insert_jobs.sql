-- opqueue_insert_jobs: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0001,
-- 0002, 0008, 0020): a change to it is a new migration that restates it, after which the script writes this file again,
-- keeping the prose under this paragraph.
--
-- Version 19's call of a batch of enqueues, kept for its nodes during a rolling upgrade: it counts the batch's leading
-- plain items itself and calls opqueue_insert_batch, which this version's nodes call directly.

CREATE OR REPLACE FUNCTION opqueue_insert_jobs(items json, p_now timestamp with time zone)
 RETURNS SETOF json
 LANGUAGE sql
AS $function$
  SELECT opqueue_insert_batch(items, p_now, (
    SELECT coalesce(min(e.ord) - 1, json_array_length(items))::integer
      FROM json_array_elements(items) WITH ORDINALITY AS e(value, ord)
      WHERE e.value->'idempotency' IS NOT NULL OR e.value->>'dedupe_key' IS NOT NULL
        OR e.value->'on_settled' IS NOT NULL));
$function$;

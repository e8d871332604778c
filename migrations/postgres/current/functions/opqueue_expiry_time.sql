-- opqueue_expiry_time: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0011): a
-- change to it is a new migration that restates it, after which the script writes this file again, keeping the prose
-- under this paragraph.
--
-- When a job being inserted expires: expires_in_ms after the database's now, else the instant expires_at, else never
-- (NULL). The relative form is worked out on the database's clock, as a delay is (opqueue_run_time).

CREATE OR REPLACE FUNCTION opqueue_expiry_time(b jsonb, p_now timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE
AS $function$
  SELECT coalesce(p_now + (b->>'expires_in_ms')::bigint * interval '1 millisecond', (b->>'expires_at')::timestamptz);
$function$;

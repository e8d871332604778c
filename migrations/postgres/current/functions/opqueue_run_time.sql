-- opqueue_run_time: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0008): a
-- change to it is a new migration that restates it, after which the script writes this file again, keeping the prose
-- under this paragraph.

CREATE OR REPLACE FUNCTION opqueue_run_time(b jsonb, p_now timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE
AS $function$
  SELECT coalesce((b->>'run_at')::timestamptz, p_now + coalesce((b->>'delay_ms')::bigint, 0) * interval '1 millisecond');
$function$;

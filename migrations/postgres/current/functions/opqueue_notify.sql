-- opqueue_notify: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0001): a
-- change to it is a new migration that restates it, after which the script writes this file again, keeping the prose
-- under this paragraph.

CREATE OR REPLACE FUNCTION opqueue_notify(p_run_at timestamp with time zone)
 RETURNS void
 LANGUAGE sql
AS $function$
  SELECT pg_notify('opqueue_jobs:' || current_schema(), floor(extract(epoch FROM p_run_at) * 1000)::bigint::text);
$function$;

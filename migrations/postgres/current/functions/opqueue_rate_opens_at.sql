-- opqueue_rate_opens_at: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0010): a
-- change to it is a new migration that restates it, after which the script writes this file again, keeping the prose
-- under this paragraph.
--
-- When (ms since the epoch) a rate limit whose bucket stands at p_tat lets a job start: its theoretical arrival time
-- less the tolerance (see opqueue_rate_allowance); NULL for a full bucket (at once).

CREATE OR REPLACE FUNCTION opqueue_rate_opens_at(p_tat double precision, p_limit integer, p_period_ms integer, p_burst integer)
 RETURNS double precision
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT p_tat - (p_burst - 1) * (p_period_ms::double precision / p_limit)
$function$;

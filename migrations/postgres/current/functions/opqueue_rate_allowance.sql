-- opqueue_rate_allowance: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0010,
-- 0028): a change to it is a new migration that restates it, after which the script writes this file again, keeping the
-- prose under this paragraph.
--
-- How many jobs a rate limit lets start at p_now_ms (ms since the epoch), by the generic cell rate algorithm: jobs are
-- spaced T = period / limit apart, with a tolerance of (burst - 1) T, and the bucket's state is one number, the
-- theoretical arrival time p_tat of its next job (NULL: the bucket is full). docs/flow-control.md says why.

CREATE OR REPLACE FUNCTION opqueue_rate_allowance(p_tat double precision, p_now_ms double precision, p_limit integer, p_period_ms integer, p_burst integer)
 RETURNS integer
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
DECLARE
  v_spacing double precision := p_period_ms::double precision / p_limit;
  v_tolerance double precision := (p_burst - 1) * v_spacing;
  v_ahead double precision := greatest(coalesce(p_tat, p_now_ms) - p_now_ms, 0);
BEGIN
  IF v_ahead > v_tolerance + 1e-6 THEN
    RETURN 0;
  END IF;
  RETURN floor((v_tolerance - v_ahead) / v_spacing + 1e-6)::integer + 1;
END;
$function$;

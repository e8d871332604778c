-- opqueue_operation_room: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0010,
-- 0028): a change to it is a new migration that restates it, after which the script writes this file again, keeping the
-- prose under this paragraph.
--
-- How many more jobs of an operation may start now, cluster-wide: 0 while it is paused, else the least of what its
-- max_concurrency (less its running jobs) and its rate limit allow; NULL when nothing limits it. A claim reads it
-- while holding the operation's advisory lock, so no other claim changes the counts meanwhile.

CREATE OR REPLACE FUNCTION opqueue_operation_room(p_operation_id text, p_now_ms double precision)
 RETURNS integer
 LANGUAGE plpgsql
 STABLE
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
  v_room integer;
BEGIN
  SELECT CASE
    WHEN oc.paused_at IS NOT NULL THEN 0
    ELSE greatest(least(
      oc.max_concurrency - (SELECT count(*) FROM job_state r
                            WHERE r.operation_id = oc.operation_id AND r.status = 'running')::integer,
      CASE WHEN oc.rate_limit IS NOT NULL THEN opqueue_rate_allowance(
        (SELECT b.tat FROM rate_buckets b WHERE b.operation_id = oc.operation_id AND b.rate_key = ''),
        p_now_ms, oc.rate_limit, oc.rate_period_ms, oc.rate_burst) END), 0)
    END
  INTO v_room
  FROM operation_controls oc
  WHERE oc.operation_id = p_operation_id
    AND (oc.paused_at IS NOT NULL OR oc.max_concurrency IS NOT NULL OR oc.rate_limit IS NOT NULL);
  RETURN v_room;
END;
$function$;

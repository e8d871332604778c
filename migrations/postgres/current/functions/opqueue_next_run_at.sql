-- opqueue_next_run_at: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0010,
-- 0011, 0016): a change to it is a new migration that restates it, after which the script writes this file again,
-- keeping the prose under this paragraph.
--
-- When a claim may next find a job: the earliest run time of a claimable job whose gates are open, or the time a rate
-- limit will let it start if that is later; NULL when nothing waits that a claim could take (a node then sleeps until
-- it is woken, or for worker.poll_ms). Jobs behind a concurrency key at its limit, a paused key or operation, or an
-- operation at its max_concurrency are left out: the end of a running job, a resume or a change of limits wakes the
-- nodes. Without gates, the walk of job_state_run_at stops at the first such job, as before; with gates it reads the
-- first 1,000 claimable jobs by run time (a bounded read: past them, a node finds the rest at its next poll), and the
-- first instant a held lane opens (0016), however many held jobs come first by run time.

CREATE OR REPLACE FUNCTION opqueue_next_run_at(p_now timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 STABLE
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
AS $function$
DECLARE
  v_now_ms double precision := extract(epoch FROM p_now) * 1000;
  v_next timestamptz;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM operation_controls WHERE paused_at IS NOT NULL OR rate_limit IS NOT NULL
                   OR key_rate_limit IS NOT NULL OR max_concurrency IS NOT NULL OR concurrency_limit > 1)
      AND NOT EXISTS (SELECT 1 FROM paused_keys) THEN
    SELECT s.run_at INTO v_next FROM job_state s
    WHERE s.status IN ('pending', 'retrying') AND (s.expires_at IS NULL OR s.expires_at > p_now)
      AND (s.concurrency_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM job_state r WHERE r.concurrency_key = s.concurrency_key AND r.status = 'running'))
    ORDER BY s.run_at
    LIMIT 1;
    RETURN v_next;
  END IF;

  WITH first AS (
    SELECT s.operation_id, s.lane, s.concurrency_key, extract(epoch FROM s.run_at) * 1000 AS run_at_ms
    FROM job_state s
    WHERE s.status IN ('pending', 'retrying') AND (s.expires_at IS NULL OR s.expires_at > p_now)
    ORDER BY s.run_at
    LIMIT 1000
  ), operation_gate AS MATERIALIZED (
    SELECT o.operation_id,
      coalesce(oc.paused_at IS NOT NULL OR oc.max_concurrency <= (
        SELECT count(*) FROM job_state r WHERE r.operation_id = o.operation_id AND r.status = 'running'), false) AS closed,
      CASE WHEN oc.rate_limit IS NOT NULL THEN opqueue_rate_opens_at(
        (SELECT b.tat FROM rate_buckets b WHERE b.operation_id = o.operation_id AND b.rate_key = ''),
        oc.rate_limit, oc.rate_period_ms, oc.rate_burst) END AS opens_at_ms,
      oc.key_rate_limit, oc.key_rate_period_ms, oc.key_rate_burst, coalesce(oc.concurrency_limit, 1) AS key_limit
    FROM (SELECT DISTINCT f.operation_id FROM first f) AS o
    LEFT JOIN operation_controls oc ON oc.operation_id = o.operation_id
  ), key_gate AS MATERIALIZED (
    SELECT k.key,
      (SELECT count(*) FROM job_state r WHERE r.concurrency_key = k.key AND r.status = 'running') AS running,
      EXISTS (SELECT 1 FROM paused_keys pk WHERE pk.concurrency_key = k.key) AS paused
    FROM (SELECT DISTINCT f.concurrency_key AS key FROM first f WHERE f.concurrency_key IS NOT NULL) AS k
  )
  SELECT to_timestamp(min(greatest(f.run_at_ms, g.opens_at_ms,
      CASE WHEN g.key_rate_limit IS NOT NULL AND f.lane LIKE 'r:%' THEN opqueue_rate_opens_at(
        (SELECT b.tat FROM rate_buckets b WHERE b.operation_id = f.operation_id AND b.rate_key = substr(f.lane, 3) COLLATE "default"),
        g.key_rate_limit, g.key_rate_period_ms, g.key_rate_burst) END)) / 1000)
  INTO v_next
  FROM first f
  JOIN operation_gate g ON g.operation_id = f.operation_id
  LEFT JOIN key_gate k ON k.key = f.concurrency_key
  WHERE NOT g.closed AND (f.concurrency_key IS NULL OR (NOT k.paused AND k.running < g.key_limit));
  RETURN least(v_next, (SELECT to_timestamp(min(h.open_at) / 1000) FROM rate_holds h));
END
$function$;

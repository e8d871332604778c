-- opqueue_claim: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0003,
-- 0004, 0007, 0010, 0011, 0012, 0015, 0016, 0017, 0018): a change to it is a new migration that restates it, after
-- which the script writes this file again, keeping the prose under this paragraph.
--
-- Version 17's claim, kept for its nodes during a rolling upgrade (migration 0018): opqueue_claim_batch's answer, each
-- job turned back into the JSON object version 17 reads. Nodes of this version never call it.

CREATE OR REPLACE FUNCTION opqueue_claim(p_now timestamp with time zone, p_limit integer, p_candidates integer, p_after_op text, p_after_lane text)
 RETURNS SETOF json
 LANGUAGE sql
AS $function$
  SELECT CASE WHEN json_typeof(c) = 'array' THEN json_build_object(
      'seq', c->0, 'id', c->1, 'operationId', c->2, 'status', c->3, 'attempt', c->4, 'maxAttempts', c->5,
      'priority', c->6, 'runAt', c->7, 'createdAt', c->8, 'startedAt', c->9, 'finishedAt', c->10,
      'heartbeatAt', c->11, 'dedupeKey', c->12, 'concurrencyKey', c->13, 'rateKey', c->14,
      'enqueuedByOperationId', c->15, 'parentJobId', c->16, 'originalRequestId', c->17, 'userId', c->18,
      'authority', c->19, 'request', c->20, 'result', c->21, 'traceparent', c->22, 'expiresAt', c->23,
      'callbacks', c->24, 'claimCount', c->25)
    ELSE c END
  FROM opqueue_claim_batch(p_now, p_limit, p_candidates, p_after_op, p_after_lane) AS c
$function$;

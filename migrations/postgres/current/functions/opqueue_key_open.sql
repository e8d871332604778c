-- opqueue_key_open: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0010): a
-- change to it is a new migration that restates it, after which the script writes this file again, keeping the prose
-- under this paragraph.
--
-- Whether a job of operation p_operation_id with concurrency key p_key may start as far as its key is concerned: no
-- key, or a key that is not paused and runs fewer jobs than the operation's concurrency_limit (1 by default). The
-- flags say whether any key is paused and whether any operation allows more than one per key. The claim calls it only
-- when one of them is set: otherwise it tests a key inline, one probe of job_state_running_concurrency_key, as before
-- flow control (a call of this function per candidate row cost about 25 µs, most of a claim's time).

CREATE OR REPLACE FUNCTION opqueue_key_open(p_key text, p_operation_id text, p_any_paused boolean, p_any_multi boolean)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
  SELECT p_key IS NULL OR (
    (NOT p_any_paused OR NOT EXISTS (SELECT 1 FROM paused_keys pk WHERE pk.concurrency_key = p_key))
    AND (NOT EXISTS (SELECT 1 FROM job_state r WHERE r.concurrency_key = p_key AND r.status = 'running')
      OR (p_any_multi
        AND (SELECT count(*) FROM job_state r WHERE r.concurrency_key = p_key AND r.status = 'running')
          < coalesce((SELECT oc.concurrency_limit FROM operation_controls oc WHERE oc.operation_id = p_operation_id), 1))))
$function$;

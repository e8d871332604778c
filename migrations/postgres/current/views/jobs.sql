-- The view jobs: its current text, as a migrated database holds it, written by `npm run pg-functions`
-- (scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history (0004,
-- 0010, 0011, 0012, 0016): a change to it is a new migration that restates it, after which the script writes this file
-- again, keeping the prose under this paragraph.
--
-- A job_specs row joined with its job_state row, the columns of version 3's table; every read goes through it, with
-- rate_key (migration 0010), then traceparent and expires_at (0011), then callbacks (0012), then claim_count (0016)
-- last, as a view's new columns must come.

CREATE OR REPLACE VIEW jobs AS
 SELECT j.seq,
    j.id,
    j.operation_id,
    s.status,
    s.attempt,
    j.max_attempts,
    s.priority,
    s.run_at,
    j.created_at,
    s.started_at,
    s.finished_at,
    s.heartbeat_at,
    s.dedupe_key,
    s.concurrency_key,
    j.enqueued_by_operation_id,
    j.parent_job_id,
    j.original_request_id,
    j.user_id,
    j.authority,
    j.request,
    s.result,
    j.rate_key,
    j.traceparent,
    s.expires_at,
    j.callbacks,
    s.claim_count
   FROM (job_specs j
     JOIN job_state s ON ((s.seq = j.seq)));

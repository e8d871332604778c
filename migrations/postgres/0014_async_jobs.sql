-- opqueue schema for PostgreSQL, version 14: attempts a target takes asynchronously (docs/delivery.md, "Long jobs").
--
-- Rolling upgrade: yes. Columns are added, nothing else changes: version 13's nodes go on working beside it. They read
-- a 202 with x-job-async: 1 as a plain success and do not serve the callback routes, so no target should answer
-- x-job-async: 1 before every node runs this version.
--
-- job_state gains, all null until used (a null costs a bit of the row's null bitmap, so the churn row stays narrow):
-- 1. The mark of the latest attempt whose target answered 202 with x-job-async: 1: the attempt and the claim it
--    belongs to (async_attempt, async_started_at: the job's attempt and started_at then), when (async_at), and a
--    digest of the delivery token that attempt was sent with (async_token_hash), the one token that may act on it
--    from then on. The mark applies only while the job's attempt and started_at are still those: a later claim leaves
--    it behind without a write, so neither the claim function nor the requeues change.
-- 2. The latest progress a heartbeat reported, when, and by which attempt. None is indexed, so a heartbeat that
--    reports progress is a HOT update like any other (migration 0005).
ALTER TABLE job_state
  ADD COLUMN async_attempt integer,
  ADD COLUMN async_started_at timestamptz,
  ADD COLUMN async_at timestamptz,
  ADD COLUMN async_token_hash text,
  ADD COLUMN progress json,
  ADD COLUMN progress_at timestamptz,
  ADD COLUMN progress_attempt integer;

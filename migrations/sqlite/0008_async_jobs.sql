-- opqueue schema for SQLite, version 8: attempts a target takes asynchronously (docs/delivery.md, "Long jobs").
--
-- 1. The mark of the latest attempt whose target answered 202 with x-job-async: 1: the attempt and the claim it
--    belongs to (async_attempt, async_started_at: the job's attempt and started_at then), when (async_at), and a
--    digest of the delivery token that attempt was sent with (async_token_hash), the one token that may act on it
--    from then on. The mark applies only while the job's attempt and started_at are still those: a later claim leaves
--    it behind without a write, so neither claims nor requeues need to clear it.
-- 2. The latest progress a heartbeat reported (JSON text), when, and by which attempt.
ALTER TABLE jobs ADD COLUMN async_attempt INTEGER;
ALTER TABLE jobs ADD COLUMN async_started_at INTEGER;
ALTER TABLE jobs ADD COLUMN async_at INTEGER;
ALTER TABLE jobs ADD COLUMN async_token_hash TEXT;
ALTER TABLE jobs ADD COLUMN progress TEXT;
ALTER TABLE jobs ADD COLUMN progress_at INTEGER;
ALTER TABLE jobs ADD COLUMN progress_attempt INTEGER;

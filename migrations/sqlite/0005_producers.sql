-- opqueue schema for SQLite, version 5: what producers send beyond the contract (docs/api.md, "Expiry",
-- "Idempotency"; docs/tracing.md).
--
-- 1. traceparent: the W3C trace context a job was enqueued with, sent on with its deliveries.
-- 2. expires_at: past it a waiting job is never started; the expirer ends it cancelled/expired. Its partial index
--    holds only the waiting jobs that have an expiry, so jobs without one cost nothing.
-- 3. idempotency_keys: a producer's key per caller (scope: calling operation and user), the job it answered with and
--    a digest of the body it came with, until its window passes; the cleaner then deletes it.
ALTER TABLE jobs ADD COLUMN traceparent TEXT;
ALTER TABLE jobs ADD COLUMN expires_at INTEGER;

CREATE INDEX jobs_expiring ON jobs (expires_at) WHERE expires_at IS NOT NULL AND status IN ('pending', 'retrying');

CREATE TABLE idempotency_keys (
  scope       TEXT    NOT NULL,
  key         TEXT    NOT NULL,
  fingerprint TEXT    NOT NULL,
  job_id      TEXT    NOT NULL,
  created_at  INTEGER NOT NULL,
  expires_at  INTEGER NOT NULL,
  PRIMARY KEY (scope, key)
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);
CREATE INDEX idempotency_keys_job ON idempotency_keys (job_id);

-- opqueue schema for SQLite, version 6: chains as a unit (docs/chains.md): callbacks, stored results, settling.
--
-- 1. callbacks: a job's on_complete / on_dead (JSON), and whether one is still to be enqueued for its current
--    terminal state (callbacks_pending, set at insert and by an administrator's retry, cleared when the callback job
--    is enqueued). The partial index holds only finished jobs whose callback is due, so jobs without callbacks cost
--    nothing; the callback sweeper reads it.
-- 2. chains: when the chain began (its first job), when it last settled (no job pending, running or retrying), and
--    its on_settled callback (JSON, set with the chain's first job) with when it fired. The partial index holds the
--    chains whose on_settled is still to fire.
-- 3. maintenance_cursors: how far a sweep has read (the chain sweeper's finished jobs).
-- A stored result (operations.X.store_result) is a field of the result JSON: no column.
ALTER TABLE jobs ADD COLUMN callbacks TEXT;
ALTER TABLE jobs ADD COLUMN callbacks_pending INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_callbacks_due ON jobs (seq) WHERE callbacks_pending = 1 AND status IN ('succeeded', 'dead');

ALTER TABLE chains ADD COLUMN created_at INTEGER;
ALTER TABLE chains ADD COLUMN settled_at INTEGER;
ALTER TABLE chains ADD COLUMN on_settled TEXT;
ALTER TABLE chains ADD COLUMN on_settled_fired_at INTEGER;
CREATE INDEX chains_on_settled_due ON chains (original_request_id)
  WHERE on_settled IS NOT NULL AND on_settled_fired_at IS NULL;

CREATE TABLE maintenance_cursors (
  name TEXT    PRIMARY KEY,
  at   INTEGER NOT NULL,
  seq  INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- opqueue schema for SQLite, version 3: who acted on a job, and when.
--
-- An administrator's cancel, retry, bulk retry, chain cancel or run-now is recorded, one row per job it changed, in
-- the same transaction as the change: the job's history (GET /jobs/{id}/history, the dashboard) shows who did it.
-- `at` is ms since the epoch. Rows go with their job when retention deletes it. A chain also remembers who cancelled it.
CREATE TABLE admin_actions (
  id     INTEGER PRIMARY KEY AUTOINCREMENT,
  at     INTEGER NOT NULL,
  actor  TEXT    NOT NULL,
  action TEXT    NOT NULL CHECK (action IN ('cancel', 'retry', 'retry-dead', 'cancel-chain', 'run-now')),
  job_id TEXT    NOT NULL
);
CREATE INDEX admin_actions_job ON admin_actions (job_id, id);

ALTER TABLE chains ADD COLUMN cancelled_by TEXT;

-- opqueue schema for PostgreSQL, version 9: who acted on a job, and when.
--
-- An administrator's cancel, retry, bulk retry, chain cancel or run-now is recorded, one row per job it changed, in
-- the same transaction as the change: the job's history (GET /jobs/{id}/history, the dashboard) shows who did it.
-- Rows go with their job when retention deletes it. A chain also remembers who cancelled it.
--
-- Rolling upgrade: yes. Additive: a new table and a nullable column. Version 8's statements name their columns, so
-- its nodes go on working beside this one (they record no administrators' actions, and their retention leaves the
-- actions of the jobs it deletes behind).
CREATE TABLE admin_actions (
  id     bigserial   PRIMARY KEY,
  at     timestamptz NOT NULL,
  actor  text        NOT NULL,
  action text        NOT NULL CHECK (action IN ('cancel', 'retry', 'retry-dead', 'cancel-chain', 'run-now')),
  job_id text        NOT NULL
);
CREATE INDEX admin_actions_job ON admin_actions (job_id, id);

ALTER TABLE chains ADD COLUMN cancelled_by text;

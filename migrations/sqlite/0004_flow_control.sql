-- opqueue schema for SQLite, version 4: flow control (docs/flow-control.md).
--
-- 1. A job may name a rate key (`rate_key`), limited by its operation's `rate_per_key`. Its lane, the unit claims
--    take turns between, is its rate key when it has one, else its user: 'r:' or 'u:' then the key. A lane is
--    computed, never stored apart from its sources; its index holds the claimable jobs of each operation and lane in
--    claim order, so a claim can visit lanes one after another without reading a long lane's backlog.
-- 2. A concurrency key may allow more than one running job (`concurrency_limit`): the index of running jobs by key
--    is no longer unique, and the claim counts them. Running jobs are also counted by operation (`max_concurrency`),
--    walking jobs_running_heartbeat: one node's deliveries in flight, a few hundred rows at most. An index of running
--    jobs by operation would cost every claim and outcome a write: it made a drain without flow control 15 % slower.
-- 3. operation_controls holds each operation's pause and limits in force; paused_keys the paused concurrency keys;
--    rate_buckets the state of each rate limit (GCRA: the theoretical arrival time of the next job, in ms). A bucket
--    whose time has passed says no more than a missing one, and the cleaner deletes it.
ALTER TABLE jobs ADD COLUMN rate_key TEXT;
ALTER TABLE jobs ADD COLUMN lane TEXT GENERATED ALWAYS AS (
  CASE WHEN rate_key IS NULL THEN 'u:' || user_id ELSE 'r:' || rate_key END) VIRTUAL;

CREATE INDEX jobs_lane ON jobs (operation_id, lane, priority DESC, run_at, seq)
  WHERE status IN ('pending', 'retrying');

DROP INDEX jobs_running_concurrency_key;
CREATE INDEX jobs_running_concurrency_key ON jobs (concurrency_key)
  WHERE concurrency_key IS NOT NULL AND status = 'running';

CREATE TABLE operation_controls (
  operation_id       TEXT    PRIMARY KEY,
  paused_at          INTEGER,
  paused_by          TEXT,
  -- The limits in force; NULL: no such limit.
  rate_limit         INTEGER,
  rate_period_ms     INTEGER,
  rate_burst         INTEGER,
  key_rate_limit     INTEGER,
  key_rate_period_ms INTEGER,
  key_rate_burst     INTEGER,
  max_concurrency    INTEGER,
  concurrency_limit  INTEGER NOT NULL DEFAULT 1,
  -- 'config': the configuration's values, rewritten by every node that starts; 'admin': set through the API, kept
  -- until an administrator resets them to the configuration's.
  limits_source      TEXT    NOT NULL DEFAULT 'config' CHECK (limits_source IN ('config', 'admin')),
  limits_set_at      INTEGER,
  limits_set_by      TEXT
) WITHOUT ROWID;

CREATE TABLE paused_keys (
  concurrency_key TEXT    PRIMARY KEY,
  paused_at       INTEGER NOT NULL,
  paused_by       TEXT    NOT NULL
) WITHOUT ROWID;

-- rate_key '' is the operation's own limit.
CREATE TABLE rate_buckets (
  operation_id TEXT    NOT NULL,
  rate_key     TEXT    NOT NULL,
  tat          REAL    NOT NULL,
  PRIMARY KEY (operation_id, rate_key)
) WITHOUT ROWID;

-- A bulk cancel is an administrator's action of its own, 'cancel-many'. SQLite changes a CHECK by rebuilding the table.
CREATE TABLE admin_actions_with_cancel_many (
  id     INTEGER PRIMARY KEY AUTOINCREMENT,
  at     INTEGER NOT NULL,
  actor  TEXT    NOT NULL,
  action TEXT    NOT NULL
    CHECK (action IN ('cancel', 'retry', 'retry-dead', 'cancel-chain', 'run-now', 'cancel-many')),
  job_id TEXT    NOT NULL
);
INSERT INTO admin_actions_with_cancel_many (id, at, actor, action, job_id)
  SELECT id, at, actor, action, job_id FROM admin_actions;
DROP TABLE admin_actions;
ALTER TABLE admin_actions_with_cancel_many RENAME TO admin_actions;
CREATE INDEX admin_actions_job ON admin_actions (job_id, id);

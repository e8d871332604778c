-- opqueue schema for SQLite, version 1.
-- Times are INTEGER milliseconds since the Unix epoch (UTC). JSON columns are TEXT.

CREATE TABLE jobs (
  -- Creation order: the FIFO tie-break of claims and the cursor of the job list.
  seq                      INTEGER PRIMARY KEY,
  id                       TEXT    NOT NULL UNIQUE,
  operation_id             TEXT    NOT NULL,
  status                   TEXT    NOT NULL CHECK (status IN ('pending', 'running', 'retrying', 'succeeded', 'dead', 'cancelled')),
  attempt                  INTEGER NOT NULL DEFAULT 0,
  max_attempts             INTEGER NOT NULL,
  priority                 INTEGER NOT NULL DEFAULT 0,
  run_at                   INTEGER NOT NULL,
  created_at               INTEGER NOT NULL,
  started_at               INTEGER,
  finished_at              INTEGER,
  heartbeat_at             INTEGER,
  dedupe_key               TEXT,
  concurrency_key          TEXT,
  enqueued_by_operation_id TEXT    NOT NULL,
  parent_job_id            TEXT,
  original_request_id      TEXT    NOT NULL,
  user_id                  TEXT    NOT NULL,
  -- The authority grant with its evidence (the enqueue assertion); the wire form drops the evidence.
  authority                TEXT    NOT NULL,
  request                  TEXT    NOT NULL,
  result                   TEXT
);

-- A dedupe key is held only by a claimable job: running and terminal jobs do not hold it.
CREATE UNIQUE INDEX jobs_dedupe_key ON jobs (dedupe_key)
  WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'retrying');

-- At most one running job per concurrency key: the database, not a node's memory, keeps this promise.
CREATE UNIQUE INDEX jobs_running_concurrency_key ON jobs (concurrency_key)
  WHERE concurrency_key IS NOT NULL AND status = 'running';

-- The claim order, over claimable jobs only, so finished jobs never slow a claim.
CREATE INDEX jobs_claim ON jobs (priority DESC, run_at, seq)
  WHERE status IN ('pending', 'retrying');

-- Next due time for the dispatcher's timer.
CREATE INDEX jobs_run_at ON jobs (run_at) WHERE status IN ('pending', 'retrying');

-- Lease checks look only at running jobs.
CREATE INDEX jobs_running_heartbeat ON jobs (heartbeat_at) WHERE status = 'running';

-- Filters of the job list, each newest first.
CREATE INDEX jobs_status_seq ON jobs (status, seq);
CREATE INDEX jobs_operation_seq ON jobs (operation_id, seq);
CREATE INDEX jobs_chain_seq ON jobs (original_request_id, seq);
CREATE INDEX jobs_user_seq ON jobs (user_id, seq);
CREATE INDEX jobs_parent_seq ON jobs (parent_job_id, seq) WHERE parent_job_id IS NOT NULL;

-- Retention deletes terminal jobs by age.
CREATE INDEX jobs_finished_at ON jobs (finished_at) WHERE finished_at IS NOT NULL;

-- One row per chain (original_request_id): makes the spawn cap O(1) and remembers a cancelled chain,
-- even one that has no jobs yet.
CREATE TABLE chains (
  original_request_id TEXT    PRIMARY KEY,
  jobs_created        INTEGER NOT NULL DEFAULT 0,
  cancelled_at        INTEGER
) WITHOUT ROWID;

-- Cron ticks already enqueued: a tick is inserted with its job in one transaction, so a restart or a second
-- scheduler on the same database cannot enqueue it twice.
CREATE TABLE cron_ticks (
  name    TEXT    NOT NULL,
  tick_at INTEGER NOT NULL,
  job_id  TEXT,
  PRIMARY KEY (name, tick_at)
) WITHOUT ROWID;

-- Every finished delivery attempt, for the job's history and the dashboard's throughput chart. `outcome` is the
-- status the attempt left the job in. Deleted with its job by retention.
CREATE TABLE job_attempts (
  id          INTEGER PRIMARY KEY,
  job_id      TEXT    NOT NULL,
  attempt     INTEGER NOT NULL,
  started_at  INTEGER,
  finished_at INTEGER NOT NULL,
  outcome     TEXT    NOT NULL,
  status_code INTEGER,
  error_body  TEXT
);
CREATE INDEX job_attempts_job ON job_attempts (job_id, id);
CREATE INDEX job_attempts_finished ON job_attempts (finished_at);

-- opqueue schema for PostgreSQL, version 1.
-- Times are timestamptz written with millisecond precision. JSON columns are `json`, not `jsonb`: opqueue never
-- looks inside a request or an authority, and `json` keeps the client's text as sent (key order included) and
-- costs no conversion on insert.

CREATE TABLE jobs (
  -- Creation order: the FIFO tie-break of claims and the cursor of the job list.
  seq                      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id                       text        NOT NULL UNIQUE,
  operation_id             text        NOT NULL,
  status                   text        NOT NULL CHECK (status IN ('pending', 'running', 'retrying', 'succeeded', 'dead', 'cancelled')),
  attempt                  integer     NOT NULL DEFAULT 0,
  max_attempts             integer     NOT NULL,
  priority                 integer     NOT NULL DEFAULT 0,
  run_at                   timestamptz NOT NULL,
  created_at               timestamptz NOT NULL,
  started_at               timestamptz,
  finished_at              timestamptz,
  heartbeat_at             timestamptz,
  dedupe_key               text,
  concurrency_key          text,
  enqueued_by_operation_id text        NOT NULL,
  parent_job_id            text,
  original_request_id      text        NOT NULL,
  user_id                  text        NOT NULL,
  -- The authority grant with its evidence (the enqueue assertion); the wire form drops the evidence.
  authority                json        NOT NULL,
  request                  json        NOT NULL,
  result                   json
);

-- A queue table is a churn table: every job is inserted, updated three or more times and finally deleted. The
-- default autovacuum trigger (20 % of the table dead) lets a large table bloat for hours, and dead rows in the
-- claim index slow every claim. Vacuum after 1 % (or 1,000 rows) instead, without the default cost sleep, and
-- analyze as often so the planner keeps choosing the partial indexes. A fillfactor below 100 leaves room on each
-- page for the new versions of updated rows.
ALTER TABLE jobs SET (
  autovacuum_vacuum_scale_factor = 0.01,
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_insert_scale_factor = 0.05,
  autovacuum_analyze_scale_factor = 0.02,
  autovacuum_vacuum_cost_delay = 0,
  fillfactor = 85
);

-- A dedupe key is held only by a claimable job: running and terminal jobs do not hold it.
CREATE UNIQUE INDEX jobs_dedupe_key ON jobs (dedupe_key)
  WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'retrying');

-- At most one running job per concurrency key, across every node: the database keeps this promise.
CREATE UNIQUE INDEX jobs_running_concurrency_key ON jobs (concurrency_key)
  WHERE concurrency_key IS NOT NULL AND status = 'running';

-- The claim order, over claimable jobs only.
CREATE INDEX jobs_claim ON jobs (priority DESC, run_at, seq) WHERE status IN ('pending', 'retrying');

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

-- One row per chain: makes the spawn cap O(1) and remembers a cancelled chain, even one without jobs.
CREATE TABLE chains (
  original_request_id text        PRIMARY KEY,
  jobs_created        integer     NOT NULL DEFAULT 0,
  cancelled_at        timestamptz
);

-- Cron ticks already enqueued, recorded with their job in one transaction: each tick once across all nodes.
CREATE TABLE cron_ticks (
  name    text        NOT NULL,
  tick_at timestamptz NOT NULL,
  job_id  text,
  PRIMARY KEY (name, tick_at)
);

-- Every finished delivery attempt, for the job's history and the dashboard's throughput chart. `outcome` is the
-- status the attempt left the job in. Deleted with its job by retention.
CREATE TABLE job_attempts (
  id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id      text        NOT NULL,
  attempt     integer     NOT NULL,
  started_at  timestamptz,
  finished_at timestamptz NOT NULL,
  outcome     text        NOT NULL,
  status_code integer,
  error_body  text
);
CREATE INDEX job_attempts_job ON job_attempts (job_id, id);
CREATE INDEX job_attempts_finished ON job_attempts (finished_at);

-- Inserts one job, or upserts the claimable job holding its dedupe key (CONTRACT §3 steps 5 to 7), atomically.
-- `p` holds the job's fields (snake_case, run_at as RFC 3339) and `spawn_cap`. Answers
-- {kind: created|deduplicated|dedupe_conflict|spawn_cap_exceeded, job?}.
--
-- Two transactions may race for one dedupe key: the loser's INSERT meets the unique index, and the loop goes
-- round once more, now finding the winner's job to upsert. The chain charge sits inside the same sub-block as the
-- insert, so a lost race never charges the chain.
CREATE FUNCTION opqueue_insert_job(p json, p_now timestamptz) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_job jobs;
  v_cancelled_at timestamptz;
  v_constraint text;
BEGIN
  FOR i IN 1..5 LOOP
    IF p->>'dedupe_key' IS NOT NULL THEN
      SELECT * INTO v_job FROM jobs
        WHERE dedupe_key = p->>'dedupe_key' AND status IN ('pending', 'retrying')
        FOR UPDATE;
      IF FOUND THEN
        IF v_job.operation_id <> p->>'operation_id' THEN
          RETURN json_build_object('kind', 'dedupe_conflict', 'job', row_to_json(v_job));
        END IF;
        UPDATE jobs SET run_at = (p->>'run_at')::timestamptz, request = p->'request'
          WHERE seq = v_job.seq RETURNING * INTO v_job;
        RETURN json_build_object('kind', 'deduplicated', 'job', row_to_json(v_job));
      END IF;
    END IF;
    BEGIN
      INSERT INTO chains AS c (original_request_id, jobs_created) VALUES (p->>'original_request_id', 1)
        ON CONFLICT (original_request_id) DO UPDATE SET jobs_created = c.jobs_created + 1
          WHERE c.jobs_created < (p->>'spawn_cap')::integer
        RETURNING c.cancelled_at INTO v_cancelled_at;
      -- No row back: the chain is full (the upsert's WHERE refused the increment).
      IF NOT FOUND THEN
        RETURN json_build_object('kind', 'spawn_cap_exceeded');
      END IF;
      INSERT INTO jobs (id, operation_id, status, attempt, max_attempts, priority, run_at, created_at, finished_at,
          dedupe_key, concurrency_key, enqueued_by_operation_id, parent_job_id, original_request_id, user_id,
          authority, request, result)
        VALUES (p->>'id', p->>'operation_id',
          CASE WHEN v_cancelled_at IS NULL THEN 'pending' ELSE 'cancelled' END,
          0, (p->>'max_attempts')::integer, (p->>'priority')::integer, (p->>'run_at')::timestamptz, p_now,
          CASE WHEN v_cancelled_at IS NULL THEN NULL ELSE p_now END,
          p->>'dedupe_key', p->>'concurrency_key', p->>'enqueued_by_operation_id', p->>'parent_job_id',
          p->>'original_request_id', p->>'user_id', p->'authority', p->'request',
          CASE WHEN v_cancelled_at IS NULL THEN NULL
            ELSE '{"error_body":null,"terminal_reason":"cancelled-by-chain"}'::json END)
        RETURNING * INTO v_job;
      RETURN json_build_object('kind', 'created', 'job', row_to_json(v_job));
    EXCEPTION WHEN unique_violation THEN
      GET STACKED DIAGNOSTICS v_constraint = CONSTRAINT_NAME;
      IF v_constraint IS DISTINCT FROM 'jobs_dedupe_key' THEN
        RAISE;
      END IF;
    END;
  END LOOP;
  RAISE EXCEPTION 'opqueue_insert_job: dedupe key % kept changing hands', p->>'dedupe_key';
END
$$;

-- Inserts a batch (a json array of opqueue_insert_job arguments) in one call: one round trip, one commit.
-- It also wakes the other nodes: one NOTIFY per batch (not per job) on the schema's channel, carrying the earliest
-- run time (epoch milliseconds) among the jobs that became claimable, sent when the transaction commits.
CREATE FUNCTION opqueue_insert_jobs(items json, p_now timestamptz) RETURNS SETOF json
LANGUAGE plpgsql AS $$
DECLARE
  item json;
  outcome json;
  v_earliest timestamptz;
  v_run_at timestamptz;
BEGIN
  FOR item IN SELECT value FROM json_array_elements(items) LOOP
    outcome := opqueue_insert_job(item, p_now);
    IF outcome->>'kind' IN ('created', 'deduplicated') AND outcome->'job'->>'status' IN ('pending', 'retrying') THEN
      v_run_at := (outcome->'job'->>'run_at')::timestamptz;
      IF v_earliest IS NULL OR v_run_at < v_earliest THEN
        v_earliest := v_run_at;
      END IF;
    END IF;
    RETURN NEXT outcome;
  END LOOP;
  IF v_earliest IS NOT NULL THEN
    PERFORM opqueue_notify(v_earliest);
  END IF;
END
$$;

-- Tells every listening node that a job becomes claimable at `p_run_at`.
CREATE FUNCTION opqueue_notify(p_run_at timestamptz) RETURNS void
LANGUAGE sql AS $$
  SELECT pg_notify('opqueue_jobs:' || current_schema(), floor(extract(epoch FROM p_run_at) * 1000)::bigint::text);
$$;

/**
 * Every statement of the SQLite engine, prepared once per connection. The hot queries name their partial index
 * (INDEXED BY): without statistics SQLite's planner prefers the broader jobs_status_seq and then sorts every claimable
 * row, which a large backlog makes ruinous. A hint that cannot be honoured fails loudly at prepare time instead of
 * quietly scanning.
 */
import type Database from "better-sqlite3";
import type { JobStatus } from "../../job/statuses.js";
import type { AdminAction } from "../../job/statuses.js";
import { prepareFlowStatements } from "./flow.js";
import { prepare, preparePluck } from "./prepared.js";
import type { SqliteAsyncRow, SqliteAttemptRow, SqliteChainRow, SqliteJobRow } from "./rows.js";
import { prepareScheduleStatements } from "./schedules.js";

/** The statuses a job can be claimed in (and holds its dedupe key in). */
export const CLAIMABLE = "status IN ('pending', 'retrying')";

/** The concurrency keys of running jobs, read through their partial index. */
const RUNNING_KEYS =
  "SELECT concurrency_key FROM jobs INDEXED BY jobs_running_concurrency_key WHERE concurrency_key IS NOT NULL AND status = 'running'";

/**
 * The job's current attempt is the one its target took asynchronously: the mark names this attempt of this claim
 * (migration 0008). Null, not false, for a job never marked.
 */
const TAKEN_ASYNC = "(jobs.async_attempt = jobs.attempt AND jobs.async_started_at = jobs.started_at)";

/** Prepares the engine's statements on `db`. */
export function prepareStatements(db: Database.Database) {
  return {
    ...prepareFlowStatements(db),
    ...prepareScheduleStatements(db),
    getById: prepare<[string], SqliteJobRow>(db, "SELECT * FROM jobs WHERE id = ?"),
    dedupeHolder: prepare<[string], SqliteJobRow>(db, `SELECT * FROM jobs WHERE dedupe_key = ? AND ${CLAIMABLE}`),
    refreshDeduped: prepare<{ id: string; run_at: number; request: string; expires_at: number | null }, SqliteJobRow>(
      db,
      `UPDATE jobs SET run_at = :run_at, request = :request, expires_at = :expires_at
       WHERE id = :id AND ${CLAIMABLE} RETURNING *`,
    ),
    // Counts the job against its chain in the same statement that checks the cap: no row back means the
    // chain is full. A new chain starts at 1.
    // A new job of the chain also makes it unsettled again (settled_at is the last settling the sweeper saw).
    chargeChain: prepare<{ rid: string; cap: number; now: number }, { cancelled_at: number | null }>(
      db,
      `INSERT INTO chains (original_request_id, jobs_created, created_at) VALUES (:rid, 1, :now)
       ON CONFLICT (original_request_id) DO UPDATE SET jobs_created = jobs_created + 1, settled_at = NULL
         WHERE jobs_created < :cap
       RETURNING cancelled_at`,
    ),
    // A chain's first job with its on_settled: no row back means the chain exists already.
    startChainWithCallback: prepare<{ rid: string; now: number; on_settled: string }, { cancelled_at: number | null }>(
      db,
      `INSERT INTO chains (original_request_id, jobs_created, created_at, on_settled) VALUES (:rid, 1, :now, :on_settled)
       ON CONFLICT (original_request_id) DO NOTHING
       RETURNING cancelled_at`,
    ),
    insertJob: prepare<Record<string, unknown>>(
      db,
      `INSERT INTO jobs (id, operation_id, status, attempt, max_attempts, priority, run_at, created_at,
         finished_at, dedupe_key, concurrency_key, rate_key, enqueued_by_operation_id, parent_job_id,
         original_request_id, user_id, authority, request, result, traceparent, expires_at, callbacks,
         callbacks_pending)
       VALUES (:id, :operation_id, :status, 0, :max_attempts, :priority, :run_at, :created_at,
         :finished_at, :dedupe_key, :concurrency_key, :rate_key, :enqueued_by_operation_id, :parent_job_id,
         :original_request_id, :user_id, :authority, :request, :result, :traceparent, :expires_at, :callbacks,
         :callbacks IS NOT NULL)`,
    ),
    cancel: prepare<{ id: string; now: number }, SqliteJobRow>(
      db,
      `UPDATE jobs SET status = 'cancelled', finished_at = :now,
         result = json_set(coalesce(result, '{"error_body":null}'), '$.terminal_reason', 'cancelled-by-admin')
       WHERE id = :id AND ${CLAIMABLE} RETURNING *`,
    ),
    // A running job cancelled by an administrator: its node aborts the delivery, whose outcome then finds it no
    // longer running. The interrupted attempt is recorded (recordAbortedAttempt).
    cancelRunning: prepare<{ id: string; now: number }, SqliteJobRow>(
      db,
      `UPDATE jobs SET status = 'cancelled', finished_at = :now, heartbeat_at = NULL,
         result = json_set(coalesce(result, '{"error_body":null}'), '$.terminal_reason', 'cancelled-by-admin')
       WHERE id = :id AND status = 'running' RETURNING *`,
    ),
    recordAbortedAttempt: prepare<{ id: string; now: number; error: string }>(
      db,
      `INSERT INTO job_attempts (job_id, attempt, started_at, finished_at, outcome, status_code, error_body)
       SELECT id, attempt, started_at, :now, 'cancelled', NULL, :error FROM jobs WHERE id = :id`,
    ),
    // The jobs a bulk cancel takes, newest first (docs/flow-control.md, "Cancelling many jobs").
    cancelCandidates: prepare<Record<string, unknown>, { id: string; status: string }>(
      db,
      `SELECT id, status FROM jobs
       WHERE status IN (SELECT value FROM json_each(:statuses))
         AND (:operation_id IS NULL OR operation_id = :operation_id)
         AND (:original_request_id IS NULL OR original_request_id = :original_request_id)
         AND (:user_id IS NULL OR user_id = :user_id)
         AND (:dedupe_key IS NULL OR dedupe_key = :dedupe_key)
         AND (:created_from IS NULL OR created_at >= :created_from)
         AND (:created_before IS NULL OR created_at < :created_before)
       ORDER BY seq DESC LIMIT :limit`,
    ),
    // Attempts start again: the last claim's asynchronous mark goes (a new claim of attempt 1 in the same millisecond
    // must not read as taken asynchronously), and so does a hold.
    retry: prepare<{ id: string; now: number }, SqliteJobRow>(
      db,
      `UPDATE jobs SET status = 'pending', attempt = 0, result = NULL, started_at = NULL, finished_at = NULL,
         heartbeat_at = NULL, run_at = :now, expires_at = NULL, callbacks_pending = callbacks IS NOT NULL, held = 0,
         async_attempt = NULL, async_started_at = NULL, async_at = NULL, async_token_hash = NULL
       WHERE id = :id AND status IN ('dead', 'cancelled') RETURNING *`,
    ),
    markChainCancelled: prepare<{ rid: string; now: number; actor: string }>(
      db,
      `INSERT INTO chains (original_request_id, jobs_created, cancelled_at, cancelled_by) VALUES (:rid, 0, :now, :actor)
       ON CONFLICT (original_request_id) DO UPDATE SET cancelled_at = coalesce(cancelled_at, :now),
         cancelled_by = CASE WHEN cancelled_at IS NULL THEN :actor ELSE cancelled_by END`,
    ),
    // A waiting job due now; a job due already keeps its earlier run time (its place in the claim order).
    runNow: prepare<{ id: string; now: number }, SqliteJobRow>(
      db,
      `UPDATE jobs SET run_at = min(run_at, :now) WHERE id = :id AND ${CLAIMABLE} RETURNING *`,
    ),
    recordAction: prepare<{ at: number; actor: string; action: string; job_id: string }>(
      db,
      "INSERT INTO admin_actions (at, actor, action, job_id) VALUES (:at, :actor, :action, :job_id)",
    ),
    actionsOf: prepare<[string], { at: number; actor: string; action: AdminAction }>(
      db,
      "SELECT at, actor, action FROM admin_actions WHERE job_id = ? ORDER BY id",
    ),
    deleteActions: prepare<[string]>(db, "DELETE FROM admin_actions WHERE job_id = ?"),
    cancelChainJobs: prepare<{ rid: string; now: number }, SqliteJobRow>(
      db,
      `UPDATE jobs SET status = 'cancelled', finished_at = :now,
         result = json_set(coalesce(result, '{"error_body":null}'), '$.terminal_reason', 'cancelled-by-chain')
       WHERE original_request_id = :rid AND ${CLAIMABLE} RETURNING *`,
    ),
    // Run, then read back by rowid (claimedJson): cheaper than RETURNING *.
    claimOne: prepare<{ seq: number; now: number }>(
      db,
      `UPDATE jobs SET status = 'running', attempt = attempt + 1, started_at = :now, heartbeat_at = :now, held = 0,
         claim_count = claim_count + 1
       WHERE seq = :seq AND ${CLAIMABLE}`,
    ),
    // A claimed row as the JSON of its JobRow, built by SQLite: one string per row rather than an object of 21
    // properties, and a string crosses to the calling thread as a copy, where an object graph is cloned.
    claimedJson: preparePluck<[number], string>(
      db,
      `SELECT json_object('seq', seq, 'id', id, 'operationId', operation_id, 'status', status, 'attempt', attempt,
           'maxAttempts', max_attempts, 'priority', priority, 'runAt', run_at, 'createdAt', created_at,
           'startedAt', started_at, 'finishedAt', finished_at, 'heartbeatAt', heartbeat_at, 'dedupeKey', dedupe_key,
           'concurrencyKey', concurrency_key, 'rateKey', rate_key, 'enqueuedByOperationId', enqueued_by_operation_id,
           'parentJobId', parent_job_id, 'originalRequestId', original_request_id, 'userId', user_id,
           'authority', json(authority), 'request', json(request), 'result', json(result),
           'traceparent', traceparent, 'expiresAt', expires_at, 'callbacks', json(callbacks),
           'claimCount', claim_count)
         FROM jobs WHERE seq = ?`,
    ),
    finish: prepare<{
      id: string;
      attempt: number;
      started_at: number | null;
      status: string;
      result: string;
      now: number;
    }>(
      db,
      `UPDATE jobs SET status = :status, result = :result, finished_at = :now, heartbeat_at = NULL
       WHERE id = :id AND status = 'running' AND attempt = :attempt
         AND (:started_at IS NULL OR started_at = :started_at)`,
    ),
    chainCancelledFor: preparePluck<[string], number | null>(
      db,
      `SELECT c.cancelled_at FROM jobs j JOIN chains c ON c.original_request_id = j.original_request_id
         WHERE j.id = ?`,
    ),
    // A job going back to the queue re-takes its dedupe key, unless a newer claimable job took it while
    // this one was running (running jobs do not hold keys): then it is retried without the key.
    // refund 'if-last' returns an interrupted last attempt, so the job keeps one attempt to run; 'always' returns
    // any attempt (it never reached the target); 'none' keeps it (an attempt's outcome).
    requeue: prepare<{
      id: string;
      attempt: number;
      started_at: number | null;
      run_at: number;
      result: string;
      refund: string;
    }>(
      db,
      `UPDATE jobs SET status = 'retrying', run_at = :run_at, result = :result, heartbeat_at = NULL,
         attempt = CASE
           WHEN :refund = 'always' THEN attempt - 1
           WHEN :refund = 'if-last' AND attempt >= max_attempts THEN max_attempts - 1
           ELSE attempt END,
         dedupe_key = CASE WHEN EXISTS (
           SELECT 1 FROM jobs other WHERE other.dedupe_key = jobs.dedupe_key
             AND other.status IN ('pending', 'retrying') AND other.id <> jobs.id)
           THEN NULL ELSE dedupe_key END
       WHERE id = :id AND status = 'running' AND attempt = :attempt
         AND (:started_at IS NULL OR started_at = :started_at)`,
    ),
    heartbeat: prepare<{ id: string; attempt: number; now: number }>(
      db,
      "UPDATE jobs SET heartbeat_at = :now WHERE id = :id AND status = 'running' AND attempt = :attempt",
    ),
    // Each job held to its own operation's lease (:leases, a JSON object by operation) before the limit, so jobs
    // still within a longer lease never crowd expired ones out of the batch; an attempt taken asynchronously to its
    // operation's asynchronous lease (:async_leases) when it has one.
    expired: prepare<
      { now: number; leases: string; async_leases: string; default_ms: number; limit: number },
      SqliteJobRow
    >(
      db,
      `SELECT jobs.* FROM jobs INDEXED BY jobs_running_heartbeat
         LEFT JOIN json_each(:leases) AS lease ON lease.key = jobs.operation_id
         LEFT JOIN json_each(:async_leases) AS async_lease ON async_lease.key = jobs.operation_id
           AND ${TAKEN_ASYNC}
       WHERE jobs.status = 'running'
         AND jobs.heartbeat_at < :now - coalesce(async_lease.value, lease.value, :default_ms)
       ORDER BY jobs.heartbeat_at LIMIT :limit`,
    ),
    // A target's call on an attempt (migration 0008): the job, whether its current attempt was taken asynchronously,
    // and the token that attempt is bound to. Read in the call's write transaction, then judged (external-calls.ts).
    callTarget: prepare<[string], SqliteJobRow & { is_async: number; async_token_hash: string | null }>(
      db,
      `SELECT *, coalesce(${TAKEN_ASYNC}, 0) AS is_async FROM jobs WHERE id = ?`,
    ),
    // The target answered 202 with x-job-async: 1: the attempt of this claim is marked, bound to its token, and its
    // lease starts now.
    markAsync: prepare<{ id: string; attempt: number; started_at: number | null; now: number; token_hash: string }>(
      db,
      `UPDATE jobs SET async_attempt = attempt, async_started_at = started_at, async_at = :now,
         async_token_hash = :token_hash, heartbeat_at = :now
       WHERE id = :id AND status = 'running' AND attempt = :attempt
         AND (:started_at IS NULL OR started_at = :started_at)`,
    ),
    // A target's heartbeat: the lease renewed, and the progress replaced when the heartbeat carries one.
    heartbeatExternal: prepare<{
      id: string;
      attempt: number;
      now: number;
      has_progress: number;
      progress: string | null;
    }>(
      db,
      `UPDATE jobs SET heartbeat_at = :now,
         progress = CASE WHEN :has_progress THEN :progress ELSE progress END,
         progress_at = CASE WHEN :has_progress THEN :now ELSE progress_at END,
         progress_attempt = CASE WHEN :has_progress THEN attempt ELSE progress_attempt END
       WHERE id = :id AND status = 'running' AND attempt = :attempt`,
    ),
    asyncState: prepare<[string], SqliteAsyncRow>(
      db,
      `SELECT async_attempt, async_started_at, async_at, progress, progress_at, progress_attempt FROM jobs WHERE id = ?`,
    ),
    // Jobs whose key is running are not claimable (docs/delivery.md, "Dispatch"), so they do not count: were they
    // counted, a due job behind a busy key would make the dispatcher's timer fire at once, again and again, until the
    // key is free. The delivery that frees the key wakes the dispatcher instead.
    nextRunAt: preparePluck<{ now: number }, number | null>(
      db,
      // ORDER BY ... LIMIT 1 walks the jobs_run_at index and stops at the first unblocked job.
      `SELECT run_at FROM jobs INDEXED BY jobs_run_at WHERE ${CLAIMABLE}
           AND (expires_at IS NULL OR expires_at > :now)
           AND (concurrency_key IS NULL OR concurrency_key NOT IN (
             ${RUNNING_KEYS}))
         ORDER BY run_at LIMIT 1`,
    ),
    recordTick: prepare<{ name: string; tick_at: number }>(
      db,
      "INSERT INTO cron_ticks (name, tick_at) VALUES (:name, :tick_at) ON CONFLICT DO NOTHING",
    ),
    tickJob: prepare<{ name: string; tick_at: number; job_id: string }>(
      db,
      "UPDATE cron_ticks SET job_id = :job_id WHERE name = :name AND tick_at = :tick_at",
    ),
    // Each name's newest tick stays: it is the last run a schedule's answer shows, however long ago.
    deleteTicks: prepare<{ before: number }>(
      db,
      `DELETE FROM cron_ticks WHERE tick_at < :before
         AND tick_at < (SELECT max(n.tick_at) FROM cron_ticks n WHERE n.name = cron_ticks.name)`,
    ),
    deleteFinished: prepare<
      { before: number; now: number; limit: number },
      { id: string; original_request_id: string }
    >(
      db,
      `DELETE FROM jobs WHERE seq IN (
         SELECT seq FROM jobs INDEXED BY jobs_finished_at
         WHERE finished_at < :before AND finished_at IS NOT NULL AND status IN ('succeeded', 'dead', 'cancelled')
           AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.job_id = jobs.id AND k.expires_at > :now)
         LIMIT :limit)
       RETURNING id, original_request_id`,
    ),
    // A chain row goes with its last job, unless it remembers a cancellation.
    deleteEmptyChain: prepare<[string]>(
      db,
      `DELETE FROM chains WHERE original_request_id = ? AND cancelled_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.original_request_id = chains.original_request_id)`,
    ),
    countByStatus: prepare<[], { status: JobStatus; count: number }>(
      db,
      "SELECT status, count(*) AS count FROM jobs GROUP BY status",
    ),
    // The queue's lag leaves out the jobs a pause holds (docs/flow-control.md, "Metrics"): a pause is not the queue
    // falling behind. With nothing paused each NOT IN reads an empty table and the first row of jobs_run_at answers;
    // with a paused backlog older than the rest, the walk passes over it (one index step and two lookups a job).
    oldestDue: preparePluck<[number], number | null>(
      db,
      `SELECT run_at FROM jobs INDEXED BY jobs_run_at WHERE ${CLAIMABLE} AND run_at <= ?
         AND operation_id NOT IN (SELECT operation_id FROM operation_controls WHERE paused_at IS NOT NULL)
         AND (concurrency_key IS NULL OR concurrency_key NOT IN (SELECT concurrency_key FROM paused_keys))
       ORDER BY run_at LIMIT 1`,
    ),
    // The jobs due now that a pause holds, by operation. The first term does not depend on the row: SQLite checks it
    // once before the loop, so with nothing paused (the usual case) no job is read.
    pausedDue: prepare<[number], { operation_id: string; count: number }>(
      db,
      `SELECT operation_id, count(*) AS count FROM jobs INDEXED BY jobs_run_at
       WHERE (EXISTS (SELECT 1 FROM operation_controls WHERE paused_at IS NOT NULL) OR EXISTS (SELECT 1 FROM paused_keys))
         AND ${CLAIMABLE} AND run_at <= ?
         AND (operation_id IN (SELECT operation_id FROM operation_controls WHERE paused_at IS NOT NULL)
              OR concurrency_key IN (SELECT concurrency_key FROM paused_keys))
       GROUP BY operation_id ORDER BY operation_id`,
    ),
    // The attempt just written, copied from its job row: the status it left the job in, and its result.
    recordAttempt: prepare<{ id: string; attempt: number; now: number }>(
      db,
      `INSERT INTO job_attempts (job_id, attempt, started_at, finished_at, outcome, status_code, error_body)
       SELECT id, :attempt, started_at, :now, status, json_extract(result, '$.status_code'),
         json_extract(result, '$.error_body')
       FROM jobs WHERE id = :id`,
    ),
    // ...and counted for the dashboard's chart, in the minute it finished (migration 0002).
    countAttempt: prepare<{ id: string; minute: number }>(
      db,
      `INSERT INTO attempt_counts (minute, outcome, n) SELECT :minute, status, 1 FROM jobs WHERE id = :id
       ON CONFLICT (minute, outcome) DO UPDATE SET n = n + 1`,
    ),
    attemptsOf: prepare<[string], SqliteAttemptRow>(
      db,
      "SELECT attempt, started_at, finished_at, outcome, status_code, error_body FROM job_attempts WHERE job_id = ? ORDER BY id",
    ),
    attemptBuckets: prepare<{ since: number; bucket: number }, { slot: number; outcome: string; count: number }>(
      db,
      `SELECT (minute - :since) / :bucket AS slot, outcome, sum(n) AS count
       FROM attempt_counts WHERE minute >= :since GROUP BY slot, outcome`,
    ),
    deleteAttemptCounts: prepare<{ before: number }>(db, "DELETE FROM attempt_counts WHERE minute < :before"),
    deleteAttempts: prepare<[string]>(db, "DELETE FROM job_attempts WHERE job_id = ?"),
    countByOperation: prepare<[], { operation_id: string; status: JobStatus; count: number }>(
      db,
      "SELECT operation_id, status, count(*) AS count FROM jobs GROUP BY operation_id, status ORDER BY operation_id, status",
    ),
    deadJobs: prepare<Record<string, unknown>, SqliteJobRow>(
      db,
      `SELECT * FROM jobs INDEXED BY jobs_status_seq WHERE status = 'dead'
         AND (:operation_id IS NULL OR operation_id = :operation_id)
         AND (:original_request_id IS NULL OR original_request_id = :original_request_id)
         AND (:user_id IS NULL OR user_id = :user_id)
       ORDER BY seq DESC LIMIT :limit`,
    ),
    // Waiting jobs past their expiry (docs/api.md, "Expiry"), through their partial index: jobs without one are not in it.
    expire: prepare<{ now: number; limit: number }, SqliteJobRow>(
      db,
      `UPDATE jobs SET status = 'cancelled', finished_at = :now, heartbeat_at = NULL,
         result = json_set(coalesce(result, '{"error_body":null}'), '$.terminal_reason', 'expired')
       WHERE seq IN (
         SELECT seq FROM jobs INDEXED BY jobs_expiring
         WHERE expires_at <= :now AND expires_at IS NOT NULL AND ${CLAIMABLE}
         ORDER BY expires_at LIMIT :limit)
       RETURNING *`,
    ),
    // Idempotency keys (migration 0005): a live one, taking one, pointing one at the job it answers, giving one back.
    idempotencyKey: prepare<{ scope: string; key: string; now: number }, { fingerprint: string; job_id: string }>(
      db,
      "SELECT fingerprint, job_id FROM idempotency_keys WHERE scope = :scope AND key = :key AND expires_at > :now",
    ),
    takeIdempotencyKey: prepare<Record<string, unknown>>(
      db,
      `INSERT INTO idempotency_keys (scope, key, fingerprint, job_id, created_at, expires_at)
       VALUES (:scope, :key, :fingerprint, :job_id, :now, :expires_at)
       ON CONFLICT (scope, key) DO UPDATE SET fingerprint = excluded.fingerprint, job_id = excluded.job_id,
         created_at = excluded.created_at, expires_at = excluded.expires_at`,
    ),
    deleteIdempotencyKeys: prepare<{ now: number; limit: number }>(
      db,
      `DELETE FROM idempotency_keys WHERE (scope, key) IN (
         SELECT scope, key FROM idempotency_keys INDEXED BY idempotency_keys_expires_at
         WHERE expires_at <= :now LIMIT :limit)`,
    ),
    // Callbacks and chains (migration 0006, docs/chains.md).
    callbacksDue: prepare<[number], SqliteJobRow>(
      db,
      `SELECT * FROM jobs INDEXED BY jobs_callbacks_due
       WHERE callbacks_pending = 1 AND status IN ('succeeded', 'dead') ORDER BY seq LIMIT ?`,
    ),
    clearCallback: prepare<{ id: string; status: string }>(
      db,
      "UPDATE jobs SET callbacks_pending = 0 WHERE id = :id AND status = :status AND callbacks_pending = 1",
    ),
    chain: prepare<[string], SqliteChainRow>(db, "SELECT * FROM chains WHERE original_request_id = ?"),
    chainJobCounts: prepare<
      [string],
      { status: string; jobs: number; first_created_at: number; last_finished_at: number | null }
    >(
      db,
      `SELECT status, count(*) AS jobs, min(created_at) AS first_created_at, max(finished_at) AS last_finished_at
       FROM jobs INDEXED BY jobs_chain_seq WHERE original_request_id = ? GROUP BY status`,
    ),
    settledDue: prepare<[number], SqliteChainRow>(
      db,
      `SELECT c.* FROM chains c INDEXED BY chains_on_settled_due
       WHERE c.on_settled IS NOT NULL AND c.on_settled_fired_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM jobs j INDEXED BY jobs_chain_seq
                         WHERE j.original_request_id = c.original_request_id AND j.status IN ('pending', 'running', 'retrying'))
       LIMIT ?`,
    ),
    fireOnSettled: prepare<{ rid: string; now: number }>(
      db,
      `UPDATE chains SET on_settled_fired_at = :now, settled_at = coalesce(settled_at, :now)
       WHERE original_request_id = :rid AND on_settled IS NOT NULL AND on_settled_fired_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM jobs j INDEXED BY jobs_chain_seq
                         WHERE j.original_request_id = :rid AND j.status IN ('pending', 'running', 'retrying'))`,
    ),
    cursor: prepare<[string], { at: number; seq: number }>(
      db,
      "SELECT at, seq FROM maintenance_cursors WHERE name = ?",
    ),
    setCursor: prepare<{ name: string; at: number; seq: number }>(
      db,
      `INSERT INTO maintenance_cursors (name, at, seq) VALUES (:name, :at, :seq)
       ON CONFLICT (name) DO UPDATE SET at = excluded.at, seq = excluded.seq`,
    ),
    // Jobs finished after the cursor (finished_at, then seq), in that order.
    finishedSince: prepare<
      { at: number; seq: number; limit: number },
      { seq: number; original_request_id: string; finished_at: number }
    >(
      db,
      `SELECT seq, original_request_id, finished_at FROM jobs INDEXED BY jobs_finished_at
       WHERE finished_at IS NOT NULL AND (finished_at > :at OR (finished_at = :at AND seq > :seq))
       ORDER BY finished_at, seq LIMIT :limit`,
    ),
    // Whether a chain has a job waiting or running, newest first: a chain being drained has them at its end, so the
    // walk stops at once; only a settled chain is read whole, once.
    chainActive: preparePluck<[string], number>(
      db,
      `SELECT 1 FROM jobs INDEXED BY jobs_chain_seq
       WHERE original_request_id = ? AND status IN ('pending', 'running', 'retrying') ORDER BY seq DESC LIMIT 1`,
    ),
    chainFirstCreated: preparePluck<[string], number>(
      db,
      "SELECT created_at FROM jobs INDEXED BY jobs_chain_seq WHERE original_request_id = ? ORDER BY seq LIMIT 1",
    ),
    markSettled: prepare<{ rid: string; at: number }>(
      db,
      "UPDATE chains SET settled_at = :at WHERE original_request_id = :rid AND settled_at IS NULL",
    ),
    attemptsOfMany: prepare<[string], SqliteAttemptRow & { job_id: string }>(
      db,
      `SELECT job_id, attempt, started_at, finished_at, outcome, status_code, error_body FROM job_attempts
       WHERE job_id IN (SELECT value FROM json_each(?)) ORDER BY id`,
    ),
    schemaVersion: preparePluck<[], number>(db, "PRAGMA user_version"),
  };
}

/** The engine's prepared statements. */
export type Statements = ReturnType<typeof prepareStatements>;

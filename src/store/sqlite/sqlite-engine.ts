/**
 * The embedded SQLite engine (better-sqlite3): one process, one connection, one writer. It runs on its own thread
 * (sqlite-thread.ts), behind the `SqliteStore` of sqlite-store.ts, so the event loop never waits for a disk:
 * every method here is synchronous, and `clock.now()` is the time the calling thread sent with the call.
 *
 * - Durability: WAL with `synchronous=FULL`, so a commit survives `kill -9` and power loss.
 * - One node: `locking_mode=EXCLUSIVE` makes the connection hold an OS-level lock on the file for its whole
 *   life, so a second process fails at once with SQLITE_BUSY (reported as `StoreLockedError`), and the lock dies
 *   with its process, so a restart after `kill -9` starts at once. (It also keeps the WAL index in heap memory.)
 * - Group commit: `jobInsertMany` commits a batch of inserts in one transaction (one fsync), each in its own
 *   savepoint so one failure fails only its own request. `SqliteStore` collects the batch.
 * - No `SKIP LOCKED`: SQLite has one writer, so a claim inside `BEGIN IMMEDIATE` cannot race another claim.
 */
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import Database from "better-sqlite3";
import type { Clock } from "../../clock.js";
import type { JobResult } from "../../job/schemas.js";
import { JOB_STATUSES, type JobStatus } from "../../job/statuses.js";
import { readMigrations } from "../migrations.js";
import {
  ATTEMPT_COUNT_MS,
  createdJobRow,
  StoreLockedError,
  StoreUnavailableError,
  type JobCancelOutcome,
  toBuckets,
  type AttemptBucket,
  type DeadJobFilter,
  type JobInsertOutcome,
  type JobInsertParams,
  type JobListParams,
  type JobRetryOutcome,
  type JobStats,
  type AttemptRefund,
} from "../store.js";
import { type LeaseLimits } from "../../job/job.js";
import { type JobAttempt, type JobAttemptRow, type JobOutcome, type JobRow, runTimeAt } from "../../job/job.js";

/** A row of `jobs` as better-sqlite3 returns it. */
interface SqliteJobRow {
  seq: number;
  id: string;
  operation_id: string;
  status: JobStatus;
  attempt: number;
  max_attempts: number;
  priority: number;
  run_at: number;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  heartbeat_at: number | null;
  dedupe_key: string | null;
  concurrency_key: string | null;
  enqueued_by_operation_id: string;
  parent_job_id: string | null;
  original_request_id: string;
  user_id: string;
  authority: string;
  request: string;
  result: string | null;
}

/** A row of `job_attempts` as better-sqlite3 returns it. */
interface SqliteAttemptRow {
  attempt: number;
  started_at: number | null;
  finished_at: number;
  outcome: JobStatus;
  status_code: number | null;
  error_body: string | null;
}

function toAttemptRow(row: SqliteAttemptRow): JobAttemptRow {
  return {
    attempt: row.attempt,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    outcome: row.outcome,
    statusCode: row.status_code,
    errorBody: row.error_body,
  };
}

function toJobRow(row: SqliteJobRow): JobRow {
  return {
    seq: row.seq,
    id: row.id,
    operationId: row.operation_id,
    status: row.status,
    attempt: row.attempt,
    maxAttempts: row.max_attempts,
    priority: row.priority,
    runAt: row.run_at,
    createdAt: row.created_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    heartbeatAt: row.heartbeat_at,
    dedupeKey: row.dedupe_key,
    concurrencyKey: row.concurrency_key,
    enqueuedByOperationId: row.enqueued_by_operation_id,
    parentJobId: row.parent_job_id,
    originalRequestId: row.original_request_id,
    userId: row.user_id,
    authority: JSON.parse(row.authority) as JobRow["authority"],
    request: JSON.parse(row.request) as JobRow["request"],
    result: row.result === null ? null : (JSON.parse(row.result) as JobResult),
  };
}

/**
 * Whether a new job may take over the claimable job holding its dedupe key: same operation, and the same user under
 * the same kind of authority. Otherwise the upsert would run one user's request under another's authority.
 */
function mayUpsert(holder: SqliteJobRow, params: JobInsertParams): boolean {
  if (holder.operation_id !== params.operationId || holder.user_id !== params.userId) return false;
  return (JSON.parse(holder.authority) as { kind: string }).kind === params.authority.kind;
}

/** SQLite result codes that mean "the database cannot serve now", not "this request is wrong". */
const UNAVAILABLE_CODES = /^SQLITE_(BUSY|LOCKED|FULL|IOERR|READONLY|CANTOPEN|NOMEM|PROTOCOL)/;

function mapError(error: unknown): unknown {
  if (error instanceof Database.SqliteError && UNAVAILABLE_CODES.test(error.code)) {
    return new StoreUnavailableError(`SQLite: ${error.message}`);
  }
  return error;
}

/** One insert of a batch: its outcome, or why it failed (the others are unaffected). */
export type InsertSettled = { ok: true; value: JobInsertOutcome } | { ok: false; error: unknown };

const CLAIMABLE = "status IN ('pending', 'retrying')";

/** The embedded engine, on the thread that owns the connection. Open it with `SqliteEngine.open`. */
export class SqliteEngine {
  private readonly db: Database.Database;
  private readonly clock: Clock;
  private readonly schemaVersion: number;
  private readonly statements;
  private readonly listStatements = new Map<string, Database.Statement>();
  /** The last claim found at least a page of due jobs: the next one goes straight to the claim order. */
  private backlogged = false;
  private closed = false;
  /** The connection's `synchronous` setting: FULL for durable writes, NORMAL for lazy ones (set at open: FULL). */
  private synchronous: "FULL" | "NORMAL" = "FULL";

  private constructor(options: { db: Database.Database; clock: Clock; schemaVersion: number }) {
    this.db = options.db;
    this.clock = options.clock;
    this.schemaVersion = options.schemaVersion;
    this.statements = this.prepareStatements();
  }

  /**
   * Opens (creating if needed) the database at `path` (`:memory:` for a throwaway one), takes the exclusive
   * lock and applies pending migrations. Throws `StoreLockedError` if another process holds the file.
   */
  static open(options: { path: string; clock: Clock }): SqliteEngine {
    const { path, clock } = options;
    if (path !== ":memory:") mkdirSync(dirname(path), { recursive: true });
    const db = new Database(path, { timeout: 0 });
    try {
      db.pragma("locking_mode = EXCLUSIVE");
      db.pragma("journal_mode = WAL");
      db.pragma("synchronous = FULL");
      // Checkpoint every ~40 MB of WAL rather than every 4 MB: a page written by many commits (the tail of every
      // index) is copied into the database once per checkpoint, so fewer checkpoints copy far fewer pages.
      db.pragma("wal_autocheckpoint = 10000");
      // Savepoints (one per insert of a batch) keep their undo pages in a statement journal, by default a temporary
      // file: in memory instead, an insert costs half as much (measured 42 → 24 µs). A statement journal only ever
      // serves a rollback inside the open transaction, so durability does not depend on it.
      db.pragma("temp_store = MEMORY");
      const schemaVersion = migrate(db);
      db.pragma("busy_timeout = 5000");
      return new SqliteEngine({ db, clock, schemaVersion });
    } catch (error) {
      db.close();
      if (error instanceof Database.SqliteError && /^SQLITE_BUSY/.test(error.code)) {
        throw new StoreLockedError(
          `the SQLite database ${path} is in use by another opqueue process; SQLite serves one node ` +
            "(stop the other process, or use PostgreSQL to run several nodes)",
        );
      }
      throw error;
    }
  }

  private prepareStatements() {
    const db = this.db;
    // The hot queries name their partial index (INDEXED BY): without statistics SQLite's planner prefers the
    // broader jobs_status_seq and then sorts every claimable row, which a large backlog makes ruinous. A hint
    // that cannot be honoured fails loudly at prepare time instead of quietly scanning.
    return {
      getById: db.prepare<[string], SqliteJobRow>("SELECT * FROM jobs WHERE id = ?"),
      dedupeHolder: db.prepare<[string], SqliteJobRow>(
        `SELECT * FROM jobs WHERE dedupe_key = ? AND ${CLAIMABLE}`,
      ),
      refreshDeduped: db.prepare<{ id: string; run_at: number; request: string }, SqliteJobRow>(
        `UPDATE jobs SET run_at = :run_at, request = :request WHERE id = :id AND ${CLAIMABLE} RETURNING *`,
      ),
      // Counts the job against its chain in the same statement that checks the cap: no row back means the
      // chain is full. A new chain starts at 1.
      chargeChain: db.prepare<{ rid: string; cap: number }, { cancelled_at: number | null }>(
        `INSERT INTO chains (original_request_id, jobs_created) VALUES (:rid, 1)
         ON CONFLICT (original_request_id) DO UPDATE SET jobs_created = jobs_created + 1
           WHERE jobs_created < :cap
         RETURNING cancelled_at`,
      ),
      insertJob: db.prepare<Record<string, unknown>>(
        `INSERT INTO jobs (id, operation_id, status, attempt, max_attempts, priority, run_at, created_at,
           finished_at, dedupe_key, concurrency_key, enqueued_by_operation_id, parent_job_id,
           original_request_id, user_id, authority, request, result)
         VALUES (:id, :operation_id, :status, 0, :max_attempts, :priority, :run_at, :created_at,
           :finished_at, :dedupe_key, :concurrency_key, :enqueued_by_operation_id, :parent_job_id,
           :original_request_id, :user_id, :authority, :request, :result)`,
      ),
      cancel: db.prepare<{ id: string; now: number }, SqliteJobRow>(
        `UPDATE jobs SET status = 'cancelled', finished_at = :now,
           result = json_set(coalesce(result, '{"error_body":null}'), '$.terminal_reason', 'cancelled-by-admin')
         WHERE id = :id AND ${CLAIMABLE} RETURNING *`,
      ),
      retry: db.prepare<{ id: string; now: number }, SqliteJobRow>(
        `UPDATE jobs SET status = 'pending', attempt = 0, result = NULL, started_at = NULL, finished_at = NULL,
           heartbeat_at = NULL, run_at = :now
         WHERE id = :id AND status IN ('dead', 'cancelled') RETURNING *`,
      ),
      markChainCancelled: db.prepare<{ rid: string; now: number }>(
        `INSERT INTO chains (original_request_id, jobs_created, cancelled_at) VALUES (:rid, 0, :now)
         ON CONFLICT (original_request_id) DO UPDATE SET cancelled_at = coalesce(cancelled_at, :now)`,
      ),
      cancelChainJobs: db.prepare<{ rid: string; now: number }, SqliteJobRow>(
        `UPDATE jobs SET status = 'cancelled', finished_at = :now,
           result = json_set(coalesce(result, '{"error_body":null}'), '$.terminal_reason', 'cancelled-by-chain')
         WHERE original_request_id = :rid AND ${CLAIMABLE} RETURNING *`,
      ),
      runningKeys: db
        .prepare<[], string>(
          "SELECT concurrency_key FROM jobs INDEXED BY jobs_running_concurrency_key WHERE concurrency_key IS NOT NULL AND status = 'running'",
        )
        .pluck(),
      // Uses the partial index jobs_claim, whose WHERE this query repeats word for word. Jobs whose key is
      // already running are left out here, in SQL, not only in the loop: otherwise a backlog of such jobs longer
      // than the bounded candidate pages would hide every claimable job behind it, for as long as the key runs.
      claimCandidates: db.prepare<{ now: number; limit: number; offset: number }, { seq: number; concurrency_key: string | null }>(
        `SELECT seq, concurrency_key FROM jobs INDEXED BY jobs_claim
         WHERE ${CLAIMABLE} AND run_at <= :now
           AND (concurrency_key IS NULL OR concurrency_key NOT IN (
             SELECT concurrency_key FROM jobs INDEXED BY jobs_running_concurrency_key WHERE concurrency_key IS NOT NULL AND status = 'running'))
         ORDER BY priority DESC, run_at, seq LIMIT :limit OFFSET :offset`,
      ),
      // The due jobs by run time (jobs_run_at stops at now), for when few are due among many future ones: the
      // claim-order index would walk every future job of higher priority to find them.
      dueCandidates: db.prepare<
        { now: number; limit: number },
        { seq: number; concurrency_key: string | null; priority: number; run_at: number }
      >(
        `SELECT seq, concurrency_key, priority, run_at FROM jobs INDEXED BY jobs_run_at
         WHERE ${CLAIMABLE} AND run_at <= :now
           AND (concurrency_key IS NULL OR concurrency_key NOT IN (
             SELECT concurrency_key FROM jobs INDEXED BY jobs_running_concurrency_key WHERE concurrency_key IS NOT NULL AND status = 'running'))
         ORDER BY run_at LIMIT :limit`,
      ),
      // Run, then read back by rowid (claimedJson): cheaper than RETURNING *.
      claimOne: db.prepare<{ seq: number; now: number }>(
        `UPDATE jobs SET status = 'running', attempt = attempt + 1, started_at = :now, heartbeat_at = :now
         WHERE seq = :seq AND ${CLAIMABLE}`,
      ),
      // A claimed row as the JSON of its JobRow, built by SQLite: one string per row rather than an object of 21
      // properties, and a string crosses to the calling thread as a copy, where an object graph is cloned.
      claimedJson: db
        .prepare<[number], string>(
          `SELECT json_object('seq', seq, 'id', id, 'operationId', operation_id, 'status', status, 'attempt', attempt,
             'maxAttempts', max_attempts, 'priority', priority, 'runAt', run_at, 'createdAt', created_at,
             'startedAt', started_at, 'finishedAt', finished_at, 'heartbeatAt', heartbeat_at, 'dedupeKey', dedupe_key,
             'concurrencyKey', concurrency_key, 'enqueuedByOperationId', enqueued_by_operation_id,
             'parentJobId', parent_job_id, 'originalRequestId', original_request_id, 'userId', user_id,
             'authority', json(authority), 'request', json(request), 'result', json(result))
           FROM jobs WHERE seq = ?`,
        )
        .pluck(),
      finish: db.prepare<{ id: string; attempt: number; started_at: number | null; status: string; result: string; now: number }>(
        `UPDATE jobs SET status = :status, result = :result, finished_at = :now, heartbeat_at = NULL
         WHERE id = :id AND status = 'running' AND attempt = :attempt
           AND (:started_at IS NULL OR started_at = :started_at)`,
      ),
      chainCancelledFor: db
        .prepare<[string], number | null>(
          `SELECT c.cancelled_at FROM jobs j JOIN chains c ON c.original_request_id = j.original_request_id
           WHERE j.id = ?`,
        )
        .pluck(),
      // A job going back to the queue re-takes its dedupe key, unless a newer claimable job took it while
      // this one was running (running jobs do not hold keys): then it is retried without the key.
      // refund 'if-last' returns an interrupted last attempt, so the job keeps one attempt to run; 'always' returns
      // any attempt (it never reached the target); 'none' keeps it (an attempt's outcome).
      requeue: db.prepare<{ id: string; attempt: number; started_at: number | null; run_at: number; result: string; refund: string }>(
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
      heartbeat: db.prepare<{ id: string; attempt: number; now: number }>(
        "UPDATE jobs SET heartbeat_at = :now WHERE id = :id AND status = 'running' AND attempt = :attempt",
      ),
      // Each job held to its own operation's lease (:leases, a JSON object by operation) before the limit, so jobs
      // still within a longer lease never crowd expired ones out of the batch.
      expired: db.prepare<{ now: number; leases: string; default_ms: number; limit: number }, SqliteJobRow>(
        `SELECT jobs.* FROM jobs INDEXED BY jobs_running_heartbeat
           LEFT JOIN json_each(:leases) AS lease ON lease.key = jobs.operation_id
         WHERE jobs.status = 'running' AND jobs.heartbeat_at < :now - coalesce(lease.value, :default_ms)
         ORDER BY jobs.heartbeat_at LIMIT :limit`,
      ),
      // Jobs whose key is running are not claimable (CONTRACT §4), so they do not count: were they counted, a due
      // job behind a busy key would make the dispatcher's timer fire at once, again and again, until the key is
      // free. The delivery that frees the key wakes the dispatcher instead.
      nextRunAt: db
        .prepare<[], number | null>(
          // ORDER BY ... LIMIT 1 walks the jobs_run_at index and stops at the first unblocked job.
          `SELECT run_at FROM jobs INDEXED BY jobs_run_at WHERE ${CLAIMABLE}
             AND (concurrency_key IS NULL OR concurrency_key NOT IN (
               SELECT concurrency_key FROM jobs INDEXED BY jobs_running_concurrency_key WHERE concurrency_key IS NOT NULL AND status = 'running'))
           ORDER BY run_at LIMIT 1`,
        )
        .pluck(),
      recordTick: db.prepare<{ name: string; tick_at: number }>(
        "INSERT INTO cron_ticks (name, tick_at) VALUES (:name, :tick_at) ON CONFLICT DO NOTHING",
      ),
      tickJob: db.prepare<{ name: string; tick_at: number; job_id: string }>(
        "UPDATE cron_ticks SET job_id = :job_id WHERE name = :name AND tick_at = :tick_at",
      ),
      deleteTicks: db.prepare<{ before: number }>("DELETE FROM cron_ticks WHERE tick_at < :before"),
      deleteFinished: db.prepare<{ before: number; limit: number }, { id: string; original_request_id: string }>(
        `DELETE FROM jobs WHERE seq IN (
           SELECT seq FROM jobs INDEXED BY jobs_finished_at
           WHERE finished_at < :before AND finished_at IS NOT NULL AND status IN ('succeeded', 'dead', 'cancelled')
           LIMIT :limit)
         RETURNING id, original_request_id`,
      ),
      // A chain row goes with its last job, unless it remembers a cancellation.
      deleteEmptyChain: db.prepare<[string]>(
        `DELETE FROM chains WHERE original_request_id = ? AND cancelled_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.original_request_id = chains.original_request_id)`,
      ),
      countByStatus: db.prepare<[], { status: JobStatus; count: number }>(
        "SELECT status, count(*) AS count FROM jobs GROUP BY status",
      ),
      oldestDue: db.prepare<[number], number | null>(
        `SELECT run_at FROM jobs INDEXED BY jobs_run_at WHERE ${CLAIMABLE} AND run_at <= ? ORDER BY run_at LIMIT 1`,
      ).pluck(),
      // The attempt just written, copied from its job row: the status it left the job in, and its result.
      recordAttempt: db.prepare<{ id: string; attempt: number; now: number }>(
        `INSERT INTO job_attempts (job_id, attempt, started_at, finished_at, outcome, status_code, error_body)
         SELECT id, :attempt, started_at, :now, status, json_extract(result, '$.status_code'),
           json_extract(result, '$.error_body')
         FROM jobs WHERE id = :id`,
      ),
      // ...and counted for the dashboard's chart, in the minute it finished (migration 0002).
      countAttempt: db.prepare<{ id: string; minute: number }>(
        `INSERT INTO attempt_counts (minute, outcome, n) SELECT :minute, status, 1 FROM jobs WHERE id = :id
         ON CONFLICT (minute, outcome) DO UPDATE SET n = n + 1`,
      ),
      attemptsOf: db.prepare<[string], SqliteAttemptRow>(
        "SELECT attempt, started_at, finished_at, outcome, status_code, error_body FROM job_attempts WHERE job_id = ? ORDER BY id",
      ),
      attemptBuckets: db.prepare<{ since: number; bucket: number }, { slot: number; outcome: string; count: number }>(
        `SELECT (minute - :since) / :bucket AS slot, outcome, sum(n) AS count
         FROM attempt_counts WHERE minute >= :since GROUP BY slot, outcome`,
      ),
      deleteAttemptCounts: db.prepare<{ before: number }>("DELETE FROM attempt_counts WHERE minute < :before"),
      deleteAttempts: db.prepare<[string]>("DELETE FROM job_attempts WHERE job_id = ?"),
      countByOperation: db.prepare<[], { operation_id: string; status: JobStatus; count: number }>(
        "SELECT operation_id, status, count(*) AS count FROM jobs GROUP BY operation_id, status ORDER BY operation_id, status",
      ),
      deadJobs: db.prepare<Record<string, unknown>, SqliteJobRow>(
        `SELECT * FROM jobs INDEXED BY jobs_status_seq WHERE status = 'dead'
           AND (:operation_id IS NULL OR operation_id = :operation_id)
           AND (:original_request_id IS NULL OR original_request_id = :original_request_id)
           AND (:user_id IS NULL OR user_id = :user_id)
         ORDER BY seq DESC LIMIT :limit`,
      ),
      schemaVersion: db.prepare<[], number>("PRAGMA user_version").pluck(),
    };
  }

  private assertOpen(): void {
    if (this.closed) throw new StoreUnavailableError("the store is closed");
  }

  /** Runs `fn` in a durable write transaction (`synchronous=FULL`: the commit waits for an fsync). */
  private write<T>(fn: () => T): T {
    this.setSynchronous("FULL");
    return this.transact(fn);
  }

  /**
   * A write nobody is promised will survive a power loss (a claim, a heartbeat, an outcome): committed without an fsync
   * (`synchronous=NORMAL`, per transaction). It survives a crash of the process all the same, and the next
   * durable commit fsyncs the WAL, which holds it. Losing it to a power cut only returns a claimed job to the
   * queue, which at-least-once delivery allows.
   */
  private writeLazily<T>(fn: () => T): T {
    this.setSynchronous("NORMAL");
    return this.transact(fn);
  }

  /** Switches the connection's commit mode only when it changes: claims and outcomes come in runs. */
  private setSynchronous(mode: "FULL" | "NORMAL"): void {
    this.assertOpen();
    if (this.synchronous === mode) return;
    this.db.pragma(`synchronous = ${mode}`);
    this.synchronous = mode;
  }

  /** Runs `fn` in a write transaction, turning "cannot serve now" failures into `StoreUnavailableError`. */
  private transact<T>(fn: () => T): T {
    this.assertOpen();
    try {
      return this.db.transaction(fn).immediate();
    } catch (error) {
      throw mapError(error);
    }
  }

  private read<T>(fn: () => T): T {
    this.assertOpen();
    try {
      return fn();
    } catch (error) {
      throw mapError(error);
    }
  }

  ping(): void {
    const version = this.read(() => this.statements.schemaVersion.get());
    if (version !== this.schemaVersion) {
      throw new StoreUnavailableError(`schema version ${String(version)}, expected ${this.schemaVersion}`);
    }
  }

  /**
   * Inserts a batch in one transaction (one fsync), each insert in its own savepoint, so one failing insert fails
   * only its own request. Nothing is acknowledged before this returns, that is, before the commit.
   */
  jobInsertMany(batch: JobInsertParams[]): InsertSettled[] {
    const settled: InsertSettled[] = [];
    const insertOne = this.db.transaction((params: JobInsertParams, now: number) => this.insertOne(params, now));
    this.write(() => {
      const now = this.clock.now();
      for (const params of batch) {
        try {
          settled.push({ ok: true, value: insertOne(params, now) });
        } catch (error) {
          settled.push({ ok: false, error: mapError(error) });
        }
      }
    });
    return settled;
  }

  private insertOne(params: JobInsertParams, now: number): JobInsertOutcome {
    const s = this.statements;
    if (params.dedupeKey !== null) {
      const holder = s.dedupeHolder.get(params.dedupeKey);
      if (holder) {
        if (!mayUpsert(holder, params)) return { kind: "dedupe_conflict", holder: toJobRow(holder) };
        const refreshed = s.refreshDeduped.get({
          id: holder.id,
          run_at: runTimeAt(params.runTime, now),
          request: JSON.stringify(params.request),
        });
        if (!refreshed) throw new Error(`dedupe holder ${holder.id} vanished inside its transaction`);
        return { kind: "deduplicated", job: toJobRow(refreshed) };
      }
    }
    const chain = s.chargeChain.get({ rid: params.originalRequestId, cap: params.spawnCap });
    if (!chain) return { kind: "spawn_cap_exceeded" };
    const chainCancelled = chain.cancelled_at !== null;
    const job = createdJobRow(params, { seq: 0, createdAt: now, runAt: runTimeAt(params.runTime, now), chainCancelled });
    // The row is built from what was written rather than read back (RETURNING * would cost a third of the insert).
    const info = s.insertJob.run({
      id: params.id,
      operation_id: params.operationId,
      status: job.status,
      max_attempts: params.maxAttempts,
      priority: params.priority,
      run_at: job.runAt,
      created_at: now,
      finished_at: job.finishedAt,
      dedupe_key: params.dedupeKey,
      concurrency_key: params.concurrencyKey,
      enqueued_by_operation_id: params.enqueuedByOperationId,
      parent_job_id: params.parentJobId,
      original_request_id: params.originalRequestId,
      user_id: params.userId,
      authority: JSON.stringify(params.authority),
      request: JSON.stringify(params.request),
      result: job.result === null ? null : JSON.stringify(job.result),
    });
    job.seq = Number(info.lastInsertRowid);
    return { kind: "created", job };
  }

  jobGet(params: { id: string }): JobRow | undefined {
    const row = this.read(() => this.statements.getById.get(params.id));
    return row ? toJobRow(row) : undefined;
  }

  jobList(params: JobListParams): JobRow[] {
    const where: string[] = [];
    const values: Record<string, unknown> = { limit: params.limit };
    if (params.statuses && params.statuses.length > 0) {
      const names = params.statuses.map((status, i) => {
        values[`status${i}`] = status;
        return `:status${i}`;
      });
      where.push(`status IN (${names.join(", ")})`);
    }
    const filters: Array<[keyof JobListParams, string]> = [
      ["operationId", "operation_id"],
      ["originalRequestId", "original_request_id"],
      ["userId", "user_id"],
      ["parentJobId", "parent_job_id"],
      ["dedupeKey", "dedupe_key"],
    ];
    for (const [param, column] of filters) {
      const value = params[param];
      if (value !== undefined) {
        where.push(`${column} = :${column}`);
        values[column] = value;
      }
    }
    if (params.beforeSeq !== undefined) {
      where.push("seq < :before_seq");
      values["before_seq"] = params.beforeSeq;
    }
    const sql =
      `SELECT * FROM jobs ${where.length > 0 ? `WHERE ${where.join(" AND ")}` : ""} ` +
      "ORDER BY seq DESC LIMIT :limit";
    const rows = this.read(() => {
      let statement = this.listStatements.get(sql);
      if (!statement) {
        statement = this.db.prepare(sql);
        this.listStatements.set(sql, statement);
      }
      return statement.all(values) as SqliteJobRow[];
    });
    return rows.map(toJobRow);
  }

  jobCancel(params: { id: string }): JobCancelOutcome {
    return this.write(() => {
      const cancelled = this.statements.cancel.get({ id: params.id, now: this.clock.now() });
      if (cancelled) return { kind: "cancelled", job: toJobRow(cancelled) };
      const row = this.statements.getById.get(params.id);
      if (!row) return { kind: "not_found" };
      return row.status === "running"
        ? { kind: "running", job: toJobRow(row) }
        : { kind: "not_cancellable", job: toJobRow(row) };
    });
  }

  jobRetry(params: { id: string }): JobRetryOutcome {
    return this.write(() => {
      const row = this.statements.getById.get(params.id);
      if (!row) return { kind: "not_found" };
      if (row.status !== "dead" && row.status !== "cancelled") return { kind: "not_retryable", job: toJobRow(row) };
      if (row.dedupe_key !== null) {
        const holder = this.statements.dedupeHolder.get(row.dedupe_key);
        if (holder) return { kind: "dedupe_conflict", holder: toJobRow(holder) };
      }
      const retried = this.statements.retry.get({ id: params.id, now: this.clock.now() });
      if (!retried) throw new Error(`job ${params.id} changed inside its transaction`);
      return { kind: "retried", job: toJobRow(retried) };
    });
  }

  chainCancel(params: { originalRequestId: string }): JobRow[] {
    return this.write(() => {
      const now = this.clock.now();
      this.statements.markChainCancelled.run({ rid: params.originalRequestId, now });
      return this.statements.cancelChainJobs
        .all({ rid: params.originalRequestId, now })
        .map(toJobRow)
        .sort((a, b) => b.seq - a.seq);
    });
  }

  /** Claims up to `limit` due jobs; the answer is the JSON text of their `JobRow`s, in claim order. */
  jobClaimManyJson(params: { limit: number }): string {
    if (params.limit <= 0) return "[]";
    return this.writeLazily(() => {
      const now = this.clock.now();
      const s = this.statements;
      const heldKeys = new Set(s.runningKeys.all());
      const chosen: number[] = [];
      // Candidates come in claim order; skipping a held key keeps looking further down, in bounded pages,
      // so a long run of jobs for one busy key cannot starve the others.
      const pageSize = Math.max(16, params.limit * 2);
      const take = (candidates: Array<{ seq: number; concurrency_key: string | null }>) => {
        for (const candidate of candidates) {
          if (chosen.length === params.limit) return;
          if (candidate.concurrency_key !== null) {
            if (heldKeys.has(candidate.concurrency_key)) continue;
            heldKeys.add(candidate.concurrency_key);
          }
          chosen.push(candidate.seq);
        }
      };
      // Fewer due jobs than a page: that is all of them, so put them in claim order here. While a backlog lasts
      // (the last claim found a full page due), that look is skipped: it would find a full page again.
      const due = this.backlogged ? undefined : s.dueCandidates.all({ now, limit: pageSize });
      if (due !== undefined && due.length < pageSize) {
        take(due.sort((a, b) => b.priority - a.priority || a.run_at - b.run_at || a.seq - b.seq));
      } else {
        this.backlogged = true;
        for (let page = 0; page < 16 && chosen.length < params.limit; page++) {
          const candidates = s.claimCandidates.all({ now, limit: pageSize, offset: page * pageSize });
          take(candidates);
          if (candidates.length < pageSize) {
            if (page === 0) this.backlogged = false;
            break;
          }
        }
      }
      const claimed: string[] = [];
      for (const seq of chosen) {
        if (s.claimOne.run({ seq, now }).changes === 0) continue;
        const row = s.claimedJson.get(seq);
        if (row !== undefined) claimed.push(row);
      }
      return `[${claimed.join(",")}]`;
    });
  }

  jobCompleteMany(params: { outcomes: JobOutcome[] }): boolean[] {
    if (params.outcomes.length === 0) return [];
    // No client waits on an outcome: losing one to a power cut means one more delivery, which at-least-once allows.
    return this.writeLazily(() => {
      const now = this.clock.now();
      return params.outcomes.map((outcome) => {
        if (outcome.status === "retrying") {
          return this.requeueOne({ ...outcome, runAt: now + outcome.delayMs, now, refund: "none" });
        }
        const { id, attempt } = outcome;
        const startedAt = outcome.startedAt ?? null;
        if (outcome.status === "dead" && this.chainCancelled(id)) {
          return this.endByChain({ id, attempt, startedAt, result: outcome.result, now });
        }
        return this.finishOne({ id, attempt, startedAt, status: outcome.status, result: outcome.result, now });
      });
    });
  }

  /** Whether the chain of job `id` was cancelled: a failed attempt of it is then not retried (CONTRACT §3). */
  private chainCancelled(id: string): boolean {
    return this.statements.chainCancelledFor.get(id) != null;
  }

  /** Ends a failed attempt of a job whose chain was cancelled: `cancelled`, keeping what the attempt answered. */
  private endByChain(options: { id: string; attempt: number; startedAt: number | null; result: JobResult; now: number }): boolean {
    const result: JobResult = { ...options.result, terminal_reason: "cancelled-by-chain" };
    return this.finishOne({ ...options, status: "cancelled", result });
  }

  /** Ends a running attempt with a terminal status, and records the attempt. */
  private finishOne(options: {
    id: string;
    attempt: number;
    startedAt: number | null;
    status: string;
    result: JobResult;
    now: number;
  }): boolean {
    const { id, attempt, now } = options;
    const written = writeChanged(
      this.statements.finish.run({
        id,
        attempt,
        started_at: options.startedAt,
        status: options.status,
        result: JSON.stringify(options.result),
        now,
      }),
    );
    if (written) this.recordAttempt({ id, attempt, now });
    return written;
  }

  /** Logs the attempt a job row just ended, and counts it in its minute. */
  private recordAttempt(options: { id: string; attempt: number; now: number }): void {
    this.statements.recordAttempt.run(options);
    this.statements.countAttempt.run({ id: options.id, minute: options.now - (options.now % ATTEMPT_COUNT_MS) });
  }

  /** Sends a running attempt back to the queue, or ends it `cancelled-by-chain` if its chain was cancelled. */
  private requeueOne(options: {
    id: string;
    attempt: number;
    startedAt?: number | null;
    runAt: number;
    result: JobResult;
    now: number;
    refund: AttemptRefund | "none";
  }): boolean {
    const s = this.statements;
    const { id, attempt, now } = options;
    const startedAt = options.startedAt ?? null;
    if (this.chainCancelled(id)) return this.endByChain({ id, attempt, startedAt, result: options.result, now });
    const written = writeChanged(
      s.requeue.run({
        id,
        attempt,
        started_at: startedAt,
        run_at: options.runAt,
        result: JSON.stringify(options.result),
        refund: options.refund,
      }),
    );
    if (written) this.recordAttempt({ id, attempt, now });
    return written;
  }

  jobHeartbeatMany(params: { jobs: JobAttempt[] }): void {
    if (params.jobs.length === 0) return;
    this.writeLazily(() => {
      const now = this.clock.now();
      for (const job of params.jobs) this.statements.heartbeat.run({ id: job.id, attempt: job.attempt, now });
    });
  }

  jobListExpired(params: { lease: LeaseLimits; limit: number }): JobRow[] {
    const { lease } = params;
    return this.read(() =>
      this.statements.expired
        .all({
          now: this.clock.now(),
          leases: JSON.stringify(lease.byOperation),
          default_ms: lease.defaultMs,
          limit: params.limit,
        })
        .map(toJobRow),
    );
  }

  jobRequeueMany(params: { jobs: JobAttempt[]; delayMs: number; errorBody: string; refund: AttemptRefund }): number {
    if (params.jobs.length === 0) return 0;
    return this.write(() => {
      const now = this.clock.now();
      const result: JobResult = { error_body: params.errorBody, terminal_reason: null };
      const runAt = now + params.delayMs;
      return params.jobs.filter((job) => this.requeueOne({ ...job, runAt, result, now, refund: params.refund })).length;
    });
  }

  jobNextRunAt(): number | null {
    return this.read(() => this.statements.nextRunAt.get() ?? null);
  }

  cronTickInsert(params: {
    name: string;
    tickAt: number;
    job: JobInsertParams;
  }): JobInsertOutcome | { kind: "already_enqueued" } {
    return this.write(() => {
      const s = this.statements;
      if (s.recordTick.run({ name: params.name, tick_at: params.tickAt }).changes === 0) {
        return { kind: "already_enqueued" };
      }
      const outcome = this.insertOne(params.job, this.clock.now());
      if (outcome.kind === "created" || outcome.kind === "deduplicated") {
        s.tickJob.run({ name: params.name, tick_at: params.tickAt, job_id: outcome.job.id });
      }
      return outcome;
    });
  }

  cronTickDeleteMany(params: { olderThanMs: number }): number {
    return this.write(() => this.statements.deleteTicks.run({ before: this.clock.now() - params.olderThanMs }).changes);
  }

  attemptCountDeleteMany(params: { olderThanMs: number }): number {
    return this.write(
      () => this.statements.deleteAttemptCounts.run({ before: this.clock.now() - params.olderThanMs }).changes,
    );
  }

  jobDeleteFinishedMany(params: { olderThanMs: number; limit: number }): number {
    return this.write(() => {
      const before = this.clock.now() - params.olderThanMs;
      const deleted = this.statements.deleteFinished.all({ before, limit: params.limit });
      for (const row of deleted) this.statements.deleteAttempts.run(row.id);
      for (const rid of new Set(deleted.map((row) => row.original_request_id))) {
        this.statements.deleteEmptyChain.run(rid);
      }
      return deleted.length;
    });
  }

  jobStats(params: { byOperation?: boolean } = {}): JobStats {
    return this.read(() => {
      const byStatus = Object.fromEntries(JOB_STATUSES.map((status) => [status, 0])) as Record<JobStatus, number>;
      for (const row of this.statements.countByStatus.all()) byStatus[row.status] = row.count;
      const byOperation =
        (params.byOperation ?? true)
          ? this.statements.countByOperation.all().map((row) => ({ operationId: row.operation_id, status: row.status, count: row.count }))
          : [];
      return { byStatus, byOperation, oldestDueRunAt: this.statements.oldestDue.get(this.clock.now()) ?? null };
    });
  }

  jobAttemptList(params: { id: string }): JobAttemptRow[] {
    return this.read(() => this.statements.attemptsOf.all(params.id).map(toAttemptRow));
  }

  attemptBuckets(params: { since: number; bucketMs: number }): AttemptBucket[] {
    const rows = this.read(() => this.statements.attemptBuckets.all({ since: params.since, bucket: params.bucketMs }));
    return toBuckets({ ...params, now: this.clock.now(), rows });
  }

  jobRetryDeadMany(params: { filter: DeadJobFilter; limit: number }): JobRow[] {
    return this.write(() => {
      const now = this.clock.now();
      const candidates = this.statements.deadJobs.all({
        operation_id: params.filter.operationId ?? null,
        original_request_id: params.filter.originalRequestId ?? null,
        user_id: params.filter.userId ?? null,
        limit: Math.max(0, params.limit),
      });
      const retried: JobRow[] = [];
      for (const row of candidates) {
        if (row.dedupe_key !== null && this.statements.dedupeHolder.get(row.dedupe_key)) continue;
        const updated = this.statements.retry.get({ id: row.id, now });
        if (updated) retried.push(toJobRow(updated));
      }
      return retried;
    });
  }

  /** The connection's own settings, which cannot be read from another connection (for tests). */
  connectionSettings(): { synchronous: number; lockingMode: string } {
    return {
      synchronous: this.db.pragma("synchronous", { simple: true }) as number,
      lockingMode: this.db.pragma("locking_mode", { simple: true }) as string,
    };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.db.close();
  }
}

function writeChanged(info: Database.RunResult): boolean {
  return info.changes > 0;
}

/**
 * Applies pending migrations in one transaction and records the version in `user_version`. The version is
 * written even when nothing is pending: that write is what takes the exclusive lock at once.
 */
function migrate(db: Database.Database): number {
  const migrations = readMigrations("sqlite");
  const latest = migrations.length;
  db.transaction(() => {
    const current = db.pragma("user_version", { simple: true }) as number;
    if (current > latest) {
      throw new Error(`the database schema (version ${current}) is newer than this opqueue (version ${latest})`);
    }
    for (const migration of migrations.slice(current)) db.exec(migration.sql);
    db.pragma(`user_version = ${latest}`);
  }).immediate();
  return latest;
}

/**
 * The embedded SQLite engine (better-sqlite3): one process, one connection, one writer. It runs on its own thread
 * (sqlite-thread.ts), behind the `SqliteStore` of sqlite-store.ts, so the event loop never waits for a disk:
 * every method here but `databaseBackup` is synchronous, and `clock.now()` is the time the calling thread sent with
 * the call.
 *
 * - Durability: WAL with `synchronous=FULL`, so a commit survives `kill -9` and power loss.
 * - One node: `locking_mode=EXCLUSIVE` makes the connection hold an OS-level lock on the file for its whole
 *   life, so a second process fails at once with SQLITE_BUSY (reported as `StoreLockedError`), and the lock dies
 *   with its process, so a restart after `kill -9` starts at once. (It also keeps the WAL index in heap memory.)
 * - Group commit: `jobInsertMany` commits a batch of inserts in one transaction (one fsync), each in its own
 *   savepoint so one failure fails only its own request. `SqliteStore` collects the batch.
 * - No `SKIP LOCKED`: SQLite has one writer, so a claim inside `BEGIN IMMEDIATE` cannot race another claim.
 * - Online backup: the lock shuts out `sqlite3 .backup`, so `databaseBackup` copies the database on this connection,
 *   a batch of pages at a time, serving other calls between batches (online-backup.ts).
 */
import Database from "better-sqlite3";
import type { Clock } from "../../clock.js";
import type { LimitsSource, OperationControl, OperationLimits, PausedKey } from "../../flow/limits.js";
import type { CronTick, ScheduleFields, ScheduleRow } from "../../schedules/schedule.js";
import {
  type AttemptToken,
  type JobAsyncState,
  type JobAttempt,
  type JobAttemptRow,
  type JobOutcome,
  type JobRow,
  type LeaseLimits,
} from "../../job/job.js";
import { JOB_STATUSES, type JobStatus } from "../../job/statuses.js";
import { toBuckets } from "../attempt-buckets.js";
import { chainJobCountsOf } from "../chain-counts.js";
import { externalCallRefusal, type ExternalCallTarget } from "../external-calls.js";
import {
  StoreUnavailableError,
  type AttemptBucket,
  type AttemptRefund,
  type DatabaseBackupSummary,
  type DeadJobFilter,
  type ExternalHeartbeatOutcome,
  type ExternalSetStateOutcome,
  type JobCancelFilter,
  type JobCancelOutcome,
  type JobInsertOutcome,
  type JobInsertParams,
  type JobListParams,
  type JobRetryOutcome,
  type JobRunNowOutcome,
  type JobStats,
  type AdminActionRow,
  type ChainJobCounts,
  type ChainRow,
  type CronTickOutcome,
  type ScheduleCreateOutcome,
  type ScheduleUpdateOutcome,
  type ScheduleWriteOutcome,
} from "../store.js";
import { openFailure, prepareDatabasePath } from "./database-path.js";
import { lockedError, mapError } from "./errors.js";
import { migrate } from "./migrate.js";
import { toAsyncState, toAttemptRow, toChainRow, toJobRow, type SqliteJobRow } from "./rows.js";
import { AdminWrites } from "./admin.js";
import * as claims from "./claims.js";
import type { LaneCursor } from "./claims.js";
import * as flow from "./flow.js";
import { copyDatabase } from "./online-backup.js";
import { setStateIfRunning, setStateIfRunningMany } from "./outcomes.js";
import * as schedules from "./schedules.js";
import { insertMany, insertOne, type InsertSettled } from "./insert.js";
import { prepareStatements, type Statements } from "./statements.js";

/** The embedded engine, on the thread that owns the connection. Open it with `SqliteEngine.open`. */
export class SqliteEngine {
  private readonly db: Database.Database;
  private readonly clock: Clock;
  private readonly schemaVersion: number;
  private readonly statements: Statements;
  private readonly admin: AdminWrites;
  /** Where the last claim stopped visiting lanes (claims.ts). */
  private laneCursor: LaneCursor = { operationId: "", lane: "" };
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
    this.statements = prepareStatements(this.db);
    this.admin = new AdminWrites(this.statements);
  }

  /**
   * Opens (creating if needed) the database at `path` (`:memory:` for a throwaway one), takes the exclusive
   * lock and applies pending migrations. Throws `StoreLockedError` if another process holds the file.
   */
  static open(options: { path: string; clock: Clock }): SqliteEngine {
    const { path, clock } = options;
    if (path !== ":memory:") prepareDatabasePath(path);
    let db: Database.Database;
    try {
      db = new Database(path, { timeout: 0 });
    } catch (error) {
      throw openFailure(path, error) ?? error;
    }
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
      if (error instanceof Database.SqliteError && /^SQLITE_BUSY/.test(error.code)) throw lockedError(path);
      throw openFailure(path, error) ?? error;
    }
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
    return this.write(() => insertMany(this.db, this.statements, { batch, now: this.clock.now() }));
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

  jobCancel(params: { id: string; actor: string; abortRunning?: boolean }): JobCancelOutcome {
    return this.write(() => this.admin.cancelJob({ ...params, now: this.clock.now() }));
  }

  jobCancelMany(params: {
    filter: JobCancelFilter;
    limit: number;
    actor: string;
  }): Array<{ job: JobRow; wasRunning: boolean }> {
    return this.write(() => this.admin.cancelMany({ ...params, now: this.clock.now() }));
  }

  jobRetry(params: { id: string; actor: string }): JobRetryOutcome {
    return this.write(() => this.admin.retryJob({ ...params, now: this.clock.now() }));
  }

  chainCancel(params: { originalRequestId: string; actor: string }): JobRow[] {
    return this.write(() => this.admin.cancelChain({ ...params, now: this.clock.now() }));
  }

  jobRunNow(params: { id: string; actor: string }): JobRunNowOutcome {
    return this.write(() => this.admin.runNow({ ...params, now: this.clock.now() }));
  }

  adminActionList(params: { jobId: string }): AdminActionRow[] {
    return this.read(() => this.statements.actionsOf.all(params.jobId));
  }

  /** Claims up to `limit` due jobs; the answer is the JSON text of their `JobRow`s, in claim order. */
  jobClaimMany(params: { limit: number }): string {
    if (params.limit <= 0) return "[]";
    return this.writeLazily(() => {
      const { json, backlogged, cursor } = claims.claimMany(this.statements, {
        limit: params.limit,
        now: this.clock.now(),
        backlogged: this.backlogged,
        cursor: this.laneCursor,
      });
      this.backlogged = backlogged;
      this.laneCursor = cursor;
      return json;
    });
  }

  jobSetStateIfRunningMany(params: { outcomes: JobOutcome[] }): boolean[] {
    if (params.outcomes.length === 0) return [];
    // No client waits on an outcome: losing one to a power cut means one more delivery, which at-least-once allows.
    return this.writeLazily(() =>
      setStateIfRunningMany(this.statements, { outcomes: params.outcomes, now: this.clock.now() }),
    );
  }

  jobHeartbeatMany(params: { jobs: JobAttempt[] }): void {
    if (params.jobs.length === 0) return;
    this.writeLazily(() => claims.heartbeatMany(this.statements, { jobs: params.jobs, now: this.clock.now() }));
  }

  jobListExpired(params: { lease: LeaseLimits; limit: number }): JobRow[] {
    const { lease } = params;
    return this.read(() =>
      this.statements.expired
        .all({
          now: this.clock.now(),
          leases: JSON.stringify(lease.byOperation),
          async_leases: JSON.stringify(lease.asyncByOperation ?? {}),
          default_ms: lease.defaultMs,
          limit: params.limit,
        })
        .map(toJobRow),
    );
  }

  jobMarkAsyncIfRunning(params: { job: JobAttempt; tokenHash: string }): boolean {
    const { job } = params;
    // Lazy like a heartbeat: a mark lost to a power cut leaves the attempt's lease to expire, and the job is retried.
    return this.writeLazily(
      () =>
        this.statements.markAsync.run({
          id: job.id,
          attempt: job.attempt,
          started_at: job.startedAt ?? null,
          now: this.clock.now(),
          token_hash: params.tokenHash,
        }).changes > 0,
    );
  }

  /** The job a target's call names, as `externalCallRefusal` judges it; undefined if there is none. */
  private callTarget(id: string): ExternalCallTarget | undefined {
    const row = this.statements.callTarget.get(id);
    if (row === undefined) return undefined;
    return { job: toJobRow(row), async: row.is_async === 1, asyncTokenHash: row.async_token_hash };
  }

  jobHeartbeatExternal(params: {
    id: string;
    attempt: number;
    token: AttemptToken;
    progressJson?: string | undefined;
  }): ExternalHeartbeatOutcome {
    return this.writeLazily(() => {
      const target = this.callTarget(params.id);
      const refusal = externalCallRefusal({ target, attempt: params.attempt, token: params.token });
      if (refusal !== undefined || target === undefined) return refusal ?? { kind: "not_found" };
      const now = this.clock.now();
      this.statements.heartbeatExternal.run({
        id: params.id,
        attempt: params.attempt,
        now,
        has_progress: params.progressJson === undefined ? 0 : 1,
        progress: params.progressJson ?? null,
      });
      return { kind: "renewed", heartbeatAt: now, async: target.async };
    });
  }

  jobSetStateExternal(params: { outcome: JobOutcome; token: AttemptToken }): ExternalSetStateOutcome {
    const { outcome, token } = params;
    // Durable: the target is told its outcome is recorded, and may forget its work once it hears so.
    return this.write(() => {
      const target = this.callTarget(outcome.id);
      const refusal = externalCallRefusal({ target, attempt: outcome.attempt, startedAt: outcome.startedAt, token });
      if (refusal !== undefined) return refusal;
      if (!setStateIfRunning(this.statements, { outcome, now: this.clock.now() })) {
        throw new Error(`job ${outcome.id} changed inside the transaction of a target's call`);
      }
      const row = this.statements.getById.get(outcome.id);
      if (!row) throw new Error(`job ${outcome.id} vanished inside the transaction of a target's call`);
      return { kind: "written", job: toJobRow(row) };
    });
  }

  jobAsyncStateGet(params: { id: string }): JobAsyncState | undefined {
    const row = this.read(() => this.statements.asyncState.get(params.id));
    return row === undefined ? undefined : toAsyncState(row);
  }

  jobRequeueMany(params: { jobs: JobAttempt[]; delayMs: number; errorBody: string; refund: AttemptRefund }): number {
    if (params.jobs.length === 0) return 0;
    return this.write(() => claims.requeueWithError(this.statements, { ...params, now: this.clock.now() }));
  }

  jobNextRunAt(): number | null {
    return this.read(() => claims.nextRunAt(this.statements, { now: this.clock.now() }));
  }

  cronTickInsert(params: {
    name: string;
    tickAt: number;
    job: JobInsertParams;
    scheduleRevision?: string | undefined;
  }): CronTickOutcome {
    return this.write(() => schedules.insertTick(this.statements, { ...params, now: this.clock.now() }));
  }

  cronTickLatestMany(params: { names: string[] }): CronTick[] {
    if (params.names.length === 0) return [];
    return this.read(() => schedules.latestTicks(this.statements, params.names));
  }

  cronTickDeleteMany(params: { olderThanMs: number }): number {
    return this.write(() => this.statements.deleteTicks.run({ before: this.clock.now() - params.olderThanMs }).changes);
  }

  attemptCountDeleteMany(params: { olderThanMs: number }): number {
    return this.write(
      () => this.statements.deleteAttemptCounts.run({ before: this.clock.now() - params.olderThanMs }).changes,
    );
  }

  jobExpireMany(params: { limit: number }): JobRow[] {
    return this.write(() => this.statements.expire.all({ now: this.clock.now(), limit: params.limit }).map(toJobRow));
  }

  idempotencyKeyDeleteMany(params: { limit: number }): number {
    return this.writeLazily(
      () => this.statements.deleteIdempotencyKeys.run({ now: this.clock.now(), limit: params.limit }).changes,
    );
  }

  jobDeleteFinishedMany(params: { olderThanMs: number; limit: number }): number {
    return this.write(() => {
      const before = this.clock.now() - params.olderThanMs;
      const deleted = this.statements.deleteFinished.all({ before, now: this.clock.now(), limit: params.limit });
      for (const row of deleted) {
        this.statements.deleteAttempts.run(row.id);
        this.statements.deleteActions.run(row.id);
      }
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
          ? this.statements.countByOperation
              .all()
              .map((row) => ({ operationId: row.operation_id, status: row.status, count: row.count }))
          : [];
      const now = this.clock.now();
      const pausedDue = this.statements.pausedDue
        .all(now)
        .map((row) => ({ operationId: row.operation_id, count: row.count }));
      return { byStatus, byOperation, oldestDueRunAt: this.statements.oldestDue.get(now) ?? null, pausedDue };
    });
  }

  jobAttemptList(params: { id: string }): JobAttemptRow[] {
    return this.read(() => this.statements.attemptsOf.all(params.id).map(toAttemptRow));
  }

  jobAttemptListMany(params: { ids: string[] }): Map<string, JobAttemptRow[]> {
    const attempts = new Map<string, JobAttemptRow[]>(params.ids.map((id) => [id, []]));
    for (const row of this.read(() => this.statements.attemptsOfMany.all(JSON.stringify(params.ids)))) {
      attempts.get(row.job_id)?.push(toAttemptRow(row));
    }
    return attempts;
  }

  jobCallbackDueList(params: { limit: number }): JobRow[] {
    return this.read(() => this.statements.callbacksDue.all(Math.max(0, params.limit)).map(toJobRow));
  }

  jobCallbackEnqueue(params: {
    jobId: string;
    status: "succeeded" | "dead";
    insert: JobInsertParams | null;
  }): JobInsertOutcome | { kind: "skipped" } | { kind: "cleared" } {
    return this.write(() => {
      if (this.statements.clearCallback.run({ id: params.jobId, status: params.status }).changes === 0)
        return { kind: "skipped" };
      return params.insert === null
        ? { kind: "cleared" }
        : insertOne(this.statements, { insert: params.insert, now: this.clock.now() });
    });
  }

  chainSettledDueList(params: { limit: number }): ChainRow[] {
    return this.read(() => this.statements.settledDue.all(Math.max(0, params.limit)).map(toChainRow));
  }

  chainOnSettledEnqueue(params: {
    originalRequestId: string;
    insert: JobInsertParams | null;
  }): JobInsertOutcome | { kind: "skipped" } | { kind: "cleared" } {
    return this.write(() => {
      const now = this.clock.now();
      if (this.statements.fireOnSettled.run({ rid: params.originalRequestId, now }).changes === 0)
        return { kind: "skipped" };
      return params.insert === null ? { kind: "cleared" } : insertOne(this.statements, { insert: params.insert, now });
    });
  }

  chainSettledSince(params: {
    cursor: string;
    limit: number;
  }): Array<{ originalRequestId: string; startedAt: number; settledAt: number }> {
    return this.writeLazily(() => {
      const s = this.statements;
      const from = s.cursor.get(params.cursor) ?? { at: this.clock.now(), seq: 0 };
      const finished = s.finishedSince.all({ at: from.at, seq: from.seq, limit: Math.max(1, params.limit) });
      const last = finished.at(-1);
      s.setCursor.run({ name: params.cursor, at: last?.finished_at ?? from.at, seq: last?.seq ?? from.seq });
      // The chains of the jobs read, each with its latest finish among them: if it settled, that was its last job.
      const lastFinished = new Map<string, number>();
      for (const row of finished) {
        lastFinished.set(
          row.original_request_id,
          Math.max(lastFinished.get(row.original_request_id) ?? 0, row.finished_at),
        );
      }
      const settled: Array<{ originalRequestId: string; startedAt: number; settledAt: number }> = [];
      for (const [rid, settledAt] of lastFinished) {
        if (s.chainActive.get(rid) !== undefined) continue;
        const chain = s.chain.get(rid);
        if (!chain) continue;
        // A chain of one job settles with it; a longer one is reported once per settling (its settled_at, cleared
        // by the next job it gains, says whether it was).
        if (chain.jobs_created > 1 && s.markSettled.run({ rid, at: settledAt }).changes === 0) continue;
        const startedAt = chain.created_at ?? s.chainFirstCreated.get(rid) ?? settledAt;
        settled.push({ originalRequestId: rid, startedAt, settledAt });
      }
      return settled;
    });
  }

  chainGet(params: { originalRequestId: string }): ChainRow | undefined {
    const row = this.read(() => this.statements.chain.get(params.originalRequestId));
    return row ? toChainRow(row) : undefined;
  }

  chainJobCounts(params: { originalRequestId: string }): ChainJobCounts {
    const groups = this.read(() => this.statements.chainJobCounts.all(params.originalRequestId));
    return chainJobCountsOf(
      groups.map((group) => ({
        status: group.status,
        jobs: group.jobs,
        firstCreatedAt: group.first_created_at,
        lastFinishedAt: group.last_finished_at,
      })),
    );
  }

  attemptBuckets(params: { since: number; bucketMs: number }): AttemptBucket[] {
    const rows = this.read(() => this.statements.attemptBuckets.all({ since: params.since, bucket: params.bucketMs }));
    return toBuckets({ ...params, now: this.clock.now(), rows });
  }

  jobRetryDeadMany(params: { filter: DeadJobFilter; limit: number; actor: string }): JobRow[] {
    return this.write(() => this.admin.retryDeadMany({ ...params, now: this.clock.now() }));
  }

  operationLimitsConfigure(params: { limits: Array<{ operationId: string; limits: OperationLimits }> }): void {
    this.write(() => flow.configureLimits(this.statements, params.limits));
  }

  operationControlList(): OperationControl[] {
    return this.read(() => flow.controlList(this.statements));
  }

  operationPause(params: { operationId: string; actor: string }): OperationControl {
    return this.write(() => flow.pause(this.statements, { ...params, now: this.clock.now() }));
  }

  operationResume(params: { operationId: string }): OperationControl {
    return this.write(() => flow.resume(this.statements, params));
  }

  operationLimitsSet(params: {
    operationId: string;
    limits: OperationLimits;
    source: LimitsSource;
    actor: string;
  }): OperationControl {
    return this.write(() => flow.setLimits(this.statements, { ...params, now: this.clock.now() }));
  }

  concurrencyKeyPause(params: { key: string; actor: string }): PausedKey {
    return this.write(() => flow.pauseKey(this.statements, { ...params, now: this.clock.now() }));
  }

  concurrencyKeyResume(params: { key: string }): boolean {
    return this.write(() => flow.resumeKey(this.statements, params));
  }

  pausedKeyList(): PausedKey[] {
    return this.read(() => flow.pausedKeyList(this.statements));
  }

  scheduleCreate(params: {
    schedule: ScheduleFields;
    revision: string;
    actor: string;
    maxSchedules: number;
  }): ScheduleCreateOutcome {
    return this.write(() => schedules.createSchedule(this.statements, { ...params, now: this.clock.now() }));
  }

  scheduleGet(params: { name: string }): ScheduleRow | undefined {
    return this.read(() => schedules.getSchedule(this.statements, params.name));
  }

  scheduleList(): ScheduleRow[] {
    return this.read(() => schedules.listSchedules(this.statements));
  }

  scheduleUpdate(params: {
    schedule: ScheduleFields;
    ifRevision: string;
    revision: string;
    actor: string;
  }): ScheduleUpdateOutcome {
    return this.write(() => schedules.updateSchedule(this.statements, { ...params, now: this.clock.now() }));
  }

  schedulePause(params: { name: string; actor: string }): ScheduleWriteOutcome<"paused"> {
    return this.write(() => schedules.pauseSchedule(this.statements, { ...params, now: this.clock.now() }));
  }

  scheduleResume(params: { name: string }): ScheduleWriteOutcome<"resumed"> {
    return this.write(() => schedules.resumeSchedule(this.statements, params));
  }

  scheduleDelete(params: { name: string }): ScheduleWriteOutcome<"deleted"> {
    return this.write(() => schedules.deleteSchedule(this.statements, params));
  }

  rateBucketDeleteMany(): number {
    return this.write(() => this.statements.deleteBuckets.run(this.clock.now()).changes);
  }

  /**
   * Copies the database into a new file at `to` (online-backup.ts). The answer comes once the copy is done; the thread
   * serves the calls that arrive meanwhile between the copy's batches.
   */
  async databaseBackup(params: { to: string }): Promise<DatabaseBackupSummary> {
    this.assertOpen();
    try {
      return await copyDatabase(this.db, params);
    } catch (error) {
      // Closing the connection mid-copy ends the copy (better-sqlite3 removes the partial file).
      if (this.closed) throw new StoreUnavailableError("the store is closed");
      throw mapError(error);
    }
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

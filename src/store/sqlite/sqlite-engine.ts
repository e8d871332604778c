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
import type {
  AttemptToken,
  JobAsyncState,
  JobAttempt,
  JobAttemptRow,
  JobOutcome,
  JobRow,
  LeaseLimits,
} from "../../job/job.js";
import type { CronTick, ScheduleFields, ScheduleRow } from "../../schedules/schedule.js";
import {
  StoreUnavailableError,
  type AdminActionRow,
  type AttemptBucket,
  type AttemptRefund,
  type ChainJobCounts,
  type ChainRow,
  type CronTickOutcome,
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
  type ScheduleCreateOutcome,
  type ScheduleUpdateOutcome,
  type ScheduleWriteOutcome,
} from "../store.js";
import * as admin from "./admin.js";
import * as asyncAttempts from "./async.js";
import * as chains from "./chains.js";
import * as claims from "./claims.js";
import type { LaneCursor } from "./claims.js";
import { openFailure, prepareDatabasePath } from "./database-path.js";
import { lockedError, mapError } from "./errors.js";
import * as flow from "./flow.js";
import { insertMany, type InsertSettled } from "./insert.js";
import * as reads from "./job-reads.js";
import { migrate } from "./migrate.js";
import { copyDatabase } from "./online-backup.js";
import { setStateIfRunningMany } from "./outcomes.js";
import * as schedules from "./schedules.js";
import { prepareStatements, type Statements } from "./statements.js";
import * as upkeep from "./upkeep.js";

/** The embedded engine, on the thread that owns the connection. Open it with `SqliteEngine.open`. */
export class SqliteEngine {
  private readonly db: Database.Database;
  private readonly clock: Clock;
  private readonly schemaVersion: number;
  private readonly statements: Statements;
  /** The job list's statements, one per shape of filter (job-reads.ts). */
  private readonly jobLists: reads.JobListStatements;
  /** Where the last claim stopped visiting lanes (claims.ts). */
  private laneCursor: LaneCursor = { operationId: "", lane: "" };
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
    this.jobLists = new reads.JobListStatements(this.db);
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

  // Enqueue.

  /**
   * Inserts a batch in one transaction (one fsync), each insert in its own savepoint, so one failing insert fails
   * only its own request. Nothing is acknowledged before this returns, that is, before the commit.
   */
  jobInsertMany(batch: JobInsertParams[]): InsertSettled[] {
    return this.write(() => insertMany(this.db, this.statements, { batch, now: this.clock.now() }));
  }

  // Job reads.

  jobGet(params: { id: string }): JobRow | undefined {
    return this.read(() => reads.jobGet(this.statements, params));
  }

  jobList(params: JobListParams): JobRow[] {
    return this.read(() => reads.jobList(this.jobLists, params));
  }

  jobAttemptList(params: { id: string }): JobAttemptRow[] {
    return this.read(() => reads.attemptList(this.statements, params));
  }

  jobAttemptListMany(params: { ids: string[] }): Map<string, JobAttemptRow[]> {
    return this.read(() => reads.attemptListMany(this.statements, params));
  }

  jobStats(params: { byOperation?: boolean } = {}): JobStats {
    const byOperation = params.byOperation ?? true;
    return this.read(() => reads.stats(this.statements, { byOperation, now: this.clock.now() }));
  }

  attemptBuckets(params: { since: number; bucketMs: number }): AttemptBucket[] {
    return this.read(() => reads.attemptBuckets(this.statements, { ...params, now: this.clock.now() }));
  }

  // Administrators' writes.

  jobCancel(params: { id: string; actor: string; abortRunning?: boolean }): JobCancelOutcome {
    return this.write(() => admin.cancelJob(this.statements, { ...params, now: this.clock.now() }));
  }

  jobCancelMany(params: {
    filter: JobCancelFilter;
    limit: number;
    actor: string;
  }): Array<{ job: JobRow; wasRunning: boolean }> {
    return this.write(() => admin.cancelMany(this.statements, { ...params, now: this.clock.now() }));
  }

  jobRetry(params: { id: string; actor: string }): JobRetryOutcome {
    return this.write(() => admin.retryJob(this.statements, { ...params, now: this.clock.now() }));
  }

  chainCancel(params: { originalRequestId: string; actor: string }): JobRow[] {
    return this.write(() => admin.cancelChain(this.statements, { ...params, now: this.clock.now() }));
  }

  jobRunNow(params: { id: string; actor: string }): JobRunNowOutcome {
    return this.write(() => admin.runNow(this.statements, { ...params, now: this.clock.now() }));
  }

  jobRetryDeadMany(params: { filter: DeadJobFilter; limit: number; actor: string }): JobRow[] {
    return this.write(() => admin.retryDeadMany(this.statements, { ...params, now: this.clock.now() }));
  }

  adminActionList(params: { jobId: string }): AdminActionRow[] {
    return this.read(() => admin.adminActionList(this.statements, params));
  }

  // Claims and outcomes.

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

  jobRequeueMany(params: { jobs: JobAttempt[]; delayMs: number; errorBody: string; refund: AttemptRefund }): number {
    if (params.jobs.length === 0) return 0;
    return this.write(() => claims.requeueWithError(this.statements, { ...params, now: this.clock.now() }));
  }

  jobNextRunAt(): number | null {
    return this.read(() => claims.nextRunAt(this.statements, { now: this.clock.now() }));
  }

  // Asynchronous attempts.

  jobMarkAsyncIfRunning(params: { job: JobAttempt; tokenHash: string }): boolean {
    // Lazy like a heartbeat: a mark lost to a power cut leaves the attempt's lease to expire, and the job is retried.
    return this.writeLazily(() => asyncAttempts.markAsync(this.statements, { ...params, now: this.clock.now() }));
  }

  jobHeartbeatExternal(params: {
    id: string;
    attempt: number;
    token: AttemptToken;
    progressJson?: string | undefined;
  }): ExternalHeartbeatOutcome {
    return this.writeLazily(() =>
      asyncAttempts.heartbeatExternal(this.statements, { ...params, now: this.clock.now() }),
    );
  }

  jobSetStateExternal(params: { outcome: JobOutcome; token: AttemptToken }): ExternalSetStateOutcome {
    // Durable: the target is told its outcome is recorded, and may forget its work once it hears so.
    return this.write(() => asyncAttempts.setStateExternal(this.statements, { ...params, now: this.clock.now() }));
  }

  jobAsyncStateGet(params: { id: string }): JobAsyncState | undefined {
    return this.read(() => asyncAttempts.asyncState(this.statements, params));
  }

  // Chains.

  jobCallbackDueList(params: { limit: number }): JobRow[] {
    return this.read(() => chains.callbackDueList(this.statements, params));
  }

  jobCallbackEnqueue(params: {
    jobId: string;
    status: "succeeded" | "dead";
    insert: JobInsertParams | null;
  }): JobInsertOutcome | { kind: "skipped" } | { kind: "cleared" } {
    return this.write(() => chains.callbackEnqueue(this.statements, { ...params, now: this.clock.now() }));
  }

  chainSettledDueList(params: { limit: number }): ChainRow[] {
    return this.read(() => chains.settledDueList(this.statements, params));
  }

  chainOnSettledEnqueue(params: {
    originalRequestId: string;
    insert: JobInsertParams | null;
  }): JobInsertOutcome | { kind: "skipped" } | { kind: "cleared" } {
    return this.write(() => chains.onSettledEnqueue(this.statements, { ...params, now: this.clock.now() }));
  }

  chainSettledSince(params: {
    cursor: string;
    limit: number;
  }): Array<{ originalRequestId: string; startedAt: number; settledAt: number }> {
    return this.writeLazily(() => chains.settledSince(this.statements, { ...params, now: this.clock.now() }));
  }

  chainGet(params: { originalRequestId: string }): ChainRow | undefined {
    return this.read(() => chains.chainGet(this.statements, params));
  }

  chainJobCounts(params: { originalRequestId: string }): ChainJobCounts {
    return this.read(() => chains.chainJobCounts(this.statements, params));
  }

  // Schedules and cron ticks.

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

  // Flow control.

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

  // Upkeep.

  jobListExpired(params: { lease: LeaseLimits; limit: number }): JobRow[] {
    return this.read(() => upkeep.listExpired(this.statements, { ...params, now: this.clock.now() }));
  }

  jobExpireMany(params: { limit: number }): JobRow[] {
    return this.write(() => upkeep.expireMany(this.statements, { ...params, now: this.clock.now() }));
  }

  jobDeleteFinishedMany(params: { olderThanMs: number; limit: number }): number {
    return this.write(() => upkeep.deleteFinishedMany(this.statements, { ...params, now: this.clock.now() }));
  }

  idempotencyKeyDeleteMany(params: { limit: number }): number {
    return this.writeLazily(() =>
      upkeep.idempotencyKeyDeleteMany(this.statements, { ...params, now: this.clock.now() }),
    );
  }

  cronTickDeleteMany(params: { olderThanMs: number }): number {
    return this.write(() => upkeep.cronTickDeleteMany(this.statements, { ...params, now: this.clock.now() }));
  }

  attemptCountDeleteMany(params: { olderThanMs: number }): number {
    return this.write(() => upkeep.attemptCountDeleteMany(this.statements, { ...params, now: this.clock.now() }));
  }

  rateBucketDeleteMany(): number {
    return this.write(() => upkeep.rateBucketDeleteMany(this.statements, { now: this.clock.now() }));
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

/**
 * The embedded SQLite engine (better-sqlite3): one process, one connection, one writer. It runs on its own thread
 * (sqlite-thread.ts), behind the `SqliteStore` of sqlite-store.ts, so the event loop never waits for a disk:
 * every method here but `databaseBackup` is synchronous, and `clock.now()` is the time the calling thread sent with
 * the call. The class is a dispatcher, laid out as the PostgreSQL engine is: each method picks the transaction (durable
 * or lazy, connection.ts) and hands over to the concern module of the same name as PostgreSQL's (insert.ts,
 * claims.ts, outcomes.ts, async.ts, chains.ts, schedules.ts, flow.ts, admin.ts, job-reads.ts, upkeep.ts), every
 * statement of which is in sql/<concern>.ts.
 *
 * - Durability: WAL with `synchronous=FULL`, so a commit survives `kill -9` and power loss (connection.ts).
 * - One node: `locking_mode=EXCLUSIVE` makes the connection hold an OS-level lock on the file for its whole
 *   life, so a second process fails at once with SQLITE_BUSY (reported as `StoreLockedError`), and the lock dies
 *   with its process, so a restart after `kill -9` starts at once. (It also keeps the WAL index in heap memory.)
 * - Group commit: `jobInsertMany` commits a batch of inserts in one transaction (one fsync), each in its own
 *   savepoint so one failure fails only its own request. `SqliteStore` collects the batch.
 * - No `SKIP LOCKED`: SQLite has one writer, so a claim inside `BEGIN IMMEDIATE` cannot race another claim.
 * - Online backup: the lock shuts out `sqlite3 .backup`, so `databaseBackup` copies the database on this connection,
 *   a batch of pages at a time, serving other calls between batches (online-backup.ts).
 */
import type Database from "better-sqlite3";
import type { Clock } from "../../clock.js";
import type { OperationControl, PausedKey } from "../../flow/limits.js";
import type { JobAsyncState, JobAttemptRow, JobRow } from "../../job/job.js";
import {
  type AdminActionRow,
  type AdminTokenCutoff,
  type AttemptBucket,
  type CallbackEnqueueOutcome,
  type ChainJobCounts,
  type ChainRow,
  type CronTick,
  type CronTickOutcome,
  type DatabaseBackupSummary,
  type ExternalHeartbeatOutcome,
  type ExternalSetStateOutcome,
  type JobCancelOutcome,
  type JobInsertParams,
  type JobRetryOutcome,
  type JobRunNowOutcome,
  type JobStats,
  type RevokedAdminToken,
  type StoredPayloadRow,
  type UserEraseOutcome,
  type ScheduleCreateOutcome,
  type ScheduleRow,
  type ScheduleUpdateOutcome,
  type ScheduleWriteOutcome,
  type StoreParams,
  StoreUnavailableError,
} from "../store.js";
import * as access from "./access.js";
import * as admin from "./admin.js";
import { PayloadStatements } from "./payloads.js";
import * as asyncAttempts from "./async.js";
import * as chains from "./chains.js";
import * as claims from "./claims.js";
import type { LaneCursor } from "./claims.js";
import { SqliteConnection } from "./connection.js";
import { mapError } from "./errors.js";
import * as flow from "./flow.js";
import { insertMany, type InsertSettled } from "./insert.js";
import * as reads from "./job-reads.js";
import { copyDatabase } from "./online-backup.js";
import { setStateIfRunningMany } from "./outcomes.js";
import * as schedules from "./schedules.js";
import { prepareStatements, type Statements } from "./statements.js";
import * as upkeep from "./upkeep.js";

/** The embedded engine, on the thread that owns the connection. Open it with `SqliteEngine.open`. */
export class SqliteEngine {
  private readonly connection: SqliteConnection;
  private readonly db: Database.Database;
  private readonly clock: Clock;
  private readonly statements: Statements;
  /** The job list's statements, one per shape of filter (job-reads.ts). */
  private readonly jobLists: reads.JobListStatements;
  /** The statements of `opqueue rewrap` (payloads.ts). */
  private readonly payloadStatements: PayloadStatements;
  /** Where the last claim stopped visiting lanes (claims.ts). */
  private laneCursor: LaneCursor = { operationId: "", lane: "" };

  private constructor(options: { connection: SqliteConnection; clock: Clock }) {
    this.connection = options.connection;
    this.db = options.connection.db;
    this.clock = options.clock;
    this.statements = prepareStatements(this.db);
    this.jobLists = new reads.JobListStatements(this.db);
    this.payloadStatements = new PayloadStatements(this.db);
  }

  /**
   * Opens (creating if needed) the database at `path` (`:memory:` for a throwaway one), takes the exclusive
   * lock and applies pending migrations (connection.ts). Throws `StoreLockedError` if another process holds the file.
   */
  static open(options: { path: string; clock: Clock }): SqliteEngine {
    return new SqliteEngine({ connection: SqliteConnection.open(options.path), clock: options.clock });
  }

  /** Runs `fn` in a durable write transaction (connection.ts). */
  private write<T>(fn: () => T): T {
    return this.connection.write(fn);
  }

  /** Runs `fn` in a write transaction committed without an fsync (connection.ts says when that is enough). */
  private writeLazily<T>(fn: () => T): T {
    return this.connection.writeLazily(fn);
  }

  private read<T>(fn: () => T): T {
    return this.connection.read(fn);
  }

  ping(): void {
    const version = this.read(() => this.statements.schemaVersion.get());
    if (version !== this.connection.schemaVersion) {
      throw new StoreUnavailableError(`schema version ${String(version)}, expected ${this.connection.schemaVersion}`);
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

  jobGet(params: StoreParams<"jobGet">): JobRow | undefined {
    return this.read(() => reads.jobGet(this.statements, params));
  }

  jobList(params: StoreParams<"jobList">): JobRow[] {
    return this.read(() => reads.jobList(this.jobLists, params));
  }

  jobAttemptList(params: StoreParams<"jobAttemptList">): JobAttemptRow[] {
    return this.read(() => reads.attemptList(this.statements, params));
  }

  jobAttemptListMany(params: StoreParams<"jobAttemptListMany">): Map<string, JobAttemptRow[]> {
    return this.read(() => reads.attemptListMany(this.statements, params));
  }

  jobStats(params: StoreParams<"jobStats"> = {}): JobStats {
    const byOperation = params.byOperation ?? true;
    return this.read(() => reads.stats(this.statements, { byOperation, now: this.clock.now() }));
  }

  attemptBuckets(params: StoreParams<"attemptBuckets">): AttemptBucket[] {
    return this.read(() => reads.attemptBuckets(this.statements, { ...params, now: this.clock.now() }));
  }

  // Administrators' writes.

  jobCancel(params: StoreParams<"jobCancel">): JobCancelOutcome {
    return this.write(() => admin.cancelJob(this.statements, { ...params, now: this.clock.now() }));
  }

  jobCancelMany(params: StoreParams<"jobCancelMany">): Array<{ job: JobRow; wasRunning: boolean }> {
    return this.write(() => admin.cancelMany(this.statements, { ...params, now: this.clock.now() }));
  }

  jobRetry(params: StoreParams<"jobRetry">): JobRetryOutcome {
    return this.write(() => admin.retryJob(this.statements, { ...params, now: this.clock.now() }));
  }

  chainCancel(params: StoreParams<"chainCancel">): JobRow[] {
    return this.write(() => admin.cancelChain(this.statements, { ...params, now: this.clock.now() }));
  }

  jobRunNow(params: StoreParams<"jobRunNow">): JobRunNowOutcome {
    return this.write(() => admin.runNow(this.statements, { ...params, now: this.clock.now() }));
  }

  jobRetryDeadMany(params: StoreParams<"jobRetryDeadMany">): JobRow[] {
    return this.write(() => admin.retryDeadMany(this.statements, { ...params, now: this.clock.now() }));
  }

  userErase(params: StoreParams<"userErase">): UserEraseOutcome {
    // secure_delete zeroes the bytes a write frees (the old request, bodies): nothing erased is left in the file's
    // free space, and a checkpoint takes the old pages out of the WAL.
    this.db.pragma("secure_delete = ON");
    try {
      return this.write(() => access.eraseUser(this.statements, { ...params, now: this.clock.now() }));
    } finally {
      this.db.pragma("secure_delete = OFF");
    }
  }

  adminActionList(params: StoreParams<"adminActionList">): AdminActionRow[] {
    return this.read(() => admin.adminActionList(this.statements, params));
  }

  // Payload columns as stored (opqueue rewrap).

  payloadPage(params: StoreParams<"payloadPage">): { rows: StoredPayloadRow[]; next: string | null } {
    return this.read(() => this.payloadStatements.page(params));
  }

  payloadRewrite(params: StoreParams<"payloadRewrite">): number {
    return this.write(() => this.payloadStatements.rewrite(params));
  }

  // Revoked admin tokens.

  adminTokenRevoke(params: StoreParams<"adminTokenRevoke">): RevokedAdminToken {
    return this.write(() => access.revoke(this.statements, { ...params, now: this.clock.now() }));
  }

  adminTokenCutoffRaise(params: StoreParams<"adminTokenCutoffRaise">): AdminTokenCutoff {
    return this.write(() => access.raiseCutoff(this.statements, { ...params, now: this.clock.now() }));
  }

  adminTokenIsRevoked(params: StoreParams<"adminTokenIsRevoked">): boolean {
    return this.read(() => access.isRevoked(this.statements, params));
  }

  adminRevocationList(params: StoreParams<"adminRevocationList">): {
    tokens: RevokedAdminToken[];
    cutoff: AdminTokenCutoff | null;
  } {
    return this.read(() => access.revocationList(this.statements, params));
  }

  // Claims and outcomes.

  /** Claims up to `limit` due jobs; the answer is the JSON text of their `JobRow`s, in claim order. */
  jobClaimMany(params: StoreParams<"jobClaimMany">): string {
    if (params.limit <= 0) return "[]";
    return this.writeLazily(() => {
      const { json, cursor } = claims.claimMany(this.statements, {
        limit: params.limit,
        now: this.clock.now(),
        cursor: this.laneCursor,
      });
      this.laneCursor = cursor;
      return json;
    });
  }

  jobSetStateIfRunningMany(params: StoreParams<"jobSetStateIfRunningMany">): boolean[] {
    if (params.outcomes.length === 0) return [];
    // No client waits on an outcome: losing one to a power cut means one more delivery, which at-least-once allows.
    return this.writeLazily(() =>
      setStateIfRunningMany(this.statements, { outcomes: params.outcomes, now: this.clock.now() }),
    );
  }

  jobHeartbeatMany(params: StoreParams<"jobHeartbeatMany">): void {
    if (params.jobs.length === 0) return;
    this.writeLazily(() => claims.heartbeatMany(this.statements, { jobs: params.jobs, now: this.clock.now() }));
  }

  jobRequeueMany(params: StoreParams<"jobRequeueMany">): number {
    if (params.jobs.length === 0) return 0;
    return this.write(() => claims.requeueWithError(this.statements, { ...params, now: this.clock.now() }));
  }

  jobNextRunAt(): number | null {
    return this.read(() => claims.nextRunAt(this.statements, { now: this.clock.now() }));
  }

  // Asynchronous attempts.

  jobMarkAsyncIfRunning(params: StoreParams<"jobMarkAsyncIfRunning">): boolean {
    // Lazy like a heartbeat: a mark lost to a power cut leaves the attempt's lease to expire, and the job is retried.
    return this.writeLazily(() => asyncAttempts.markAsync(this.statements, { ...params, now: this.clock.now() }));
  }

  jobHeartbeatExternal(params: StoreParams<"jobHeartbeatExternal">): ExternalHeartbeatOutcome {
    return this.writeLazily(() =>
      asyncAttempts.heartbeatExternal(this.statements, { ...params, now: this.clock.now() }),
    );
  }

  jobSetStateExternal(params: StoreParams<"jobSetStateExternal">): ExternalSetStateOutcome {
    // Durable: the target is told its outcome is recorded, and may forget its work once it hears so.
    return this.write(() => asyncAttempts.setStateExternal(this.statements, { ...params, now: this.clock.now() }));
  }

  jobAsyncStateGet(params: StoreParams<"jobAsyncStateGet">): JobAsyncState | undefined {
    return this.read(() => asyncAttempts.asyncState(this.statements, params));
  }

  // Chains.

  jobCallbackDueList(params: StoreParams<"jobCallbackDueList">): JobRow[] {
    return this.read(() => chains.callbackDueList(this.statements, params));
  }

  jobCallbackEnqueue(params: StoreParams<"jobCallbackEnqueue">): CallbackEnqueueOutcome {
    return this.write(() => chains.callbackEnqueue(this.statements, { ...params, now: this.clock.now() }));
  }

  chainSettledDueList(params: StoreParams<"chainSettledDueList">): ChainRow[] {
    return this.read(() => chains.settledDueList(this.statements, params));
  }

  chainOnSettledEnqueue(params: StoreParams<"chainOnSettledEnqueue">): CallbackEnqueueOutcome {
    return this.write(() => chains.onSettledEnqueue(this.statements, { ...params, now: this.clock.now() }));
  }

  chainSettledSince(
    params: StoreParams<"chainSettledSince">,
  ): Array<{ originalRequestId: string; startedAt: number; settledAt: number }> {
    return this.writeLazily(() => chains.settledSince(this.statements, { ...params, now: this.clock.now() }));
  }

  chainGet(params: StoreParams<"chainGet">): ChainRow | undefined {
    return this.read(() => chains.chainGet(this.statements, params));
  }

  chainJobCounts(params: StoreParams<"chainJobCounts">): ChainJobCounts {
    return this.read(() => chains.chainJobCounts(this.statements, params));
  }

  // Schedules and cron ticks.

  cronTickInsert(params: StoreParams<"cronTickInsert">): CronTickOutcome {
    return this.write(() => schedules.insertTick(this.statements, { ...params, now: this.clock.now() }));
  }

  cronTickLatestMany(params: StoreParams<"cronTickLatestMany">): CronTick[] {
    if (params.names.length === 0) return [];
    return this.read(() => schedules.latestTicks(this.statements, params.names));
  }

  scheduleCreate(params: StoreParams<"scheduleCreate">): ScheduleCreateOutcome {
    return this.write(() => schedules.createSchedule(this.statements, { ...params, now: this.clock.now() }));
  }

  scheduleGet(params: StoreParams<"scheduleGet">): ScheduleRow | undefined {
    return this.read(() => schedules.getSchedule(this.statements, params.name));
  }

  scheduleList(): ScheduleRow[] {
    return this.read(() => schedules.listSchedules(this.statements));
  }

  scheduleUpdate(params: StoreParams<"scheduleUpdate">): ScheduleUpdateOutcome {
    return this.write(() => schedules.updateSchedule(this.statements, { ...params, now: this.clock.now() }));
  }

  schedulePause(params: StoreParams<"schedulePause">): ScheduleWriteOutcome<"paused"> {
    return this.write(() => schedules.pauseSchedule(this.statements, { ...params, now: this.clock.now() }));
  }

  scheduleResume(params: StoreParams<"scheduleResume">): ScheduleWriteOutcome<"resumed"> {
    return this.write(() => schedules.resumeSchedule(this.statements, params));
  }

  scheduleDelete(params: StoreParams<"scheduleDelete">): ScheduleWriteOutcome<"deleted"> {
    return this.write(() => schedules.deleteSchedule(this.statements, params));
  }

  // Flow control.

  operationLimitsConfigure(params: StoreParams<"operationLimitsConfigure">): void {
    this.write(() => flow.configureLimits(this.statements, params.limits));
  }

  operationControlList(): OperationControl[] {
    return this.read(() => flow.controlList(this.statements));
  }

  operationPause(params: StoreParams<"operationPause">): OperationControl {
    return this.write(() => flow.pause(this.statements, { ...params, now: this.clock.now() }));
  }

  operationResume(params: StoreParams<"operationResume">): OperationControl {
    return this.write(() => flow.resume(this.statements, params));
  }

  operationLimitsSet(params: StoreParams<"operationLimitsSet">): OperationControl {
    return this.write(() => flow.setLimits(this.statements, { ...params, now: this.clock.now() }));
  }

  concurrencyKeyPause(params: StoreParams<"concurrencyKeyPause">): PausedKey {
    return this.write(() => flow.pauseKey(this.statements, { ...params, now: this.clock.now() }));
  }

  concurrencyKeyResume(params: StoreParams<"concurrencyKeyResume">): boolean {
    return this.write(() => flow.resumeKey(this.statements, params));
  }

  pausedKeyList(): PausedKey[] {
    return this.read(() => flow.pausedKeyList(this.statements));
  }

  // Upkeep.

  jobListExpired(params: StoreParams<"jobListExpired">): JobRow[] {
    return this.read(() => upkeep.listExpired(this.statements, { ...params, now: this.clock.now() }));
  }

  jobExpireMany(params: StoreParams<"jobExpireMany">): JobRow[] {
    return this.write(() => upkeep.expireMany(this.statements, { ...params, now: this.clock.now() }));
  }

  jobDeleteFinishedMany(params: StoreParams<"jobDeleteFinishedMany">): number {
    return this.write(() => upkeep.deleteFinishedMany(this.statements, { ...params, now: this.clock.now() }));
  }

  idempotencyKeyDeleteMany(params: StoreParams<"idempotencyKeyDeleteMany">): number {
    return this.writeLazily(() =>
      upkeep.idempotencyKeyDeleteMany(this.statements, { ...params, now: this.clock.now() }),
    );
  }

  cronTickDeleteMany(params: StoreParams<"cronTickDeleteMany">): number {
    return this.write(() => upkeep.cronTickDeleteMany(this.statements, { ...params, now: this.clock.now() }));
  }

  attemptCountDeleteMany(params: StoreParams<"attemptCountDeleteMany">): number {
    return this.write(() => upkeep.attemptCountDeleteMany(this.statements, { ...params, now: this.clock.now() }));
  }

  rateBucketDeleteMany(): number {
    return this.write(() => upkeep.rateBucketDeleteMany(this.statements, { now: this.clock.now() }));
  }

  /** SQLite's plans here depend on no statistics (opqueue never runs ANALYZE on it): nothing to bring up to date. */
  statisticsRefresh(): boolean {
    return false;
  }

  /**
   * Copies the database into a new file at `to` (online-backup.ts). The answer comes once the copy is done; the thread
   * serves the calls that arrive meanwhile between the copy's batches.
   */
  async databaseBackup(params: { to: string }): Promise<DatabaseBackupSummary> {
    this.connection.assertOpen();
    try {
      return await copyDatabase(this.db, params);
    } catch (error) {
      // Closing the connection mid-copy ends the copy (better-sqlite3 removes the partial file).
      if (this.connection.isClosed) throw new StoreUnavailableError("the store is closed");
      throw mapError(error);
    }
  }

  /** The connection's own settings, which cannot be read from another connection (for tests). */
  connectionSettings(): { synchronous: number; lockingMode: string } {
    return this.connection.settings();
  }

  close(): void {
    this.connection.close();
  }
}

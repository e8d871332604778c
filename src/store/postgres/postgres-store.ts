/**
 * The PostgreSQL engine (node-postgres): any number of nodes on one database. The class is a dispatcher: each method
 * hands over to the module of its concern, named after the store's roles (lifecycle.ts, insert.ts, claims.ts,
 * outcomes.ts, async.ts, chains.ts, schedules.ts, flow.ts, job-reads.ts, admin.ts, upkeep.ts, listener.ts). Every
 * statement they run is in sql/ (the PL/pgSQL functions' current text in migrations/postgres/current/, written from
 * a migrated database by `npm run pg-functions`), rows are read in rows.ts, errors in errors.ts, the pool in
 * connection.ts, migrations in migrate.ts.
 *
 * - Tables: a job is a `job_specs` row (what was asked, written once) and a `job_state` row (where it is in its
 *   life), so claims and outcomes rewrite a narrow row and few index entries (migration 0004). Reads go through the
 *   view `jobs`, which joins them; writes name the table they change.
 * - Durability: every acknowledged write commits with `synchronous_commit` as the server has it (on by default).
 *   The writes no client waits on (claims, outcomes, heartbeats) commit lazily, without waiting for the WAL flush,
 *   as the SQLite engine writes them with `synchronous = NORMAL`: see `LAZY_COMMIT` (sql/common.ts).
 * - Group commit: inserts arriving within one turn of the event loop go to the server as one call of
 *   `opqueue_insert_batch`: one round trip and one commit for the batch, every step of the enqueue (dedupe upsert,
 *   spawn cap, cancelled chain) decided inside it.
 * - Claims: one call of `opqueue_claim_batch`, taking candidates with `FOR UPDATE SKIP LOCKED`, so nodes never wait on
 *   each other's claims. Each candidate concurrency key's advisory lock is tried (a key another claim holds now is
 *   left to it) and each operation's taken, then jobs are picked in a snapshot taken after those locks, so two nodes
 *   never both see room for a key's or an operation's last slot (docs/flow-control.md, "Concurrency caps").
 * - Batches: outcome writes and heartbeats are one statement each over `unnest` of arrays.
 * - Time: the database's clock. Every "now" a statement uses (what is due, what has expired, every time written) is
 *   the parameter value `'now'`, which PostgreSQL reads as the transaction's timestamp when it binds it; a delay is
 *   added to it in SQL. So nodes whose clocks disagree still agree on one clock (a node running 120 s fast once
 *   delivered delayed jobs early and stole running ones). Tests that move time by hand open the store with
 *   `databaseTime: false`, and the same parameter then carries their clock's time: one SQL text either way.
 */
import type { Clock } from "../../clock.js";
import type { OperationControl, PausedKey } from "../../flow/limits.js";
import type { JobAsyncState, JobAttemptRow, JobRow } from "../../job/job.js";
import { GroupCommit, type Settled } from "../group-commit.js";
import {
  type AdminActionRow,
  type AdminTokenCutoff,
  type AttemptBucket,
  type CallbackEnqueueOutcome,
  type ChainJobCounts,
  type ChainRow,
  type CronTick,
  type CronTickOutcome,
  type ExternalHeartbeatOutcome,
  type ExternalSetStateOutcome,
  type JobCancelOutcome,
  type JobInsertOutcome,
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
  type Store,
  type StoreParams,
  StoreUnavailableError,
} from "../store.js";
import * as access from "./access.js";
import * as admin from "./admin.js";
import * as payloads from "./payloads.js";
import * as asyncAttempts from "./async.js";
import * as chains from "./chains.js";
import * as claims from "./claims.js";
import type { PgConnection } from "./connection.js";
import * as flow from "./flow.js";
import { sendInserts } from "./insert.js";
import * as reads from "./job-reads.js";
import { checkSchemaVersion, measureClockOffset, openDatabase, type PostgresStoreOptions } from "./lifecycle.js";
import { StoreListeners } from "./listener.js";
import { setStateIfRunningMany } from "./outcomes.js";
import * as schedules from "./schedules.js";
import * as upkeep from "./upkeep.js";

export type { PostgresStoreOptions } from "./lifecycle.js";

/** Most inserts sent in one call. */
const MAX_INSERT_BATCH = 512;
/** Insert batches in flight at once; later arrivals wait and form the next, larger batch. */
const MAX_INSERT_FLIGHTS = 4;

/** The PostgreSQL engine. Open it with `PostgresStore.open`. */
export class PostgresStore implements Store {
  readonly engine = "postgres";
  /** The database's clock minus this node's, as last measured (see `clockOffset`). */
  private offsetMs = 0;
  private readonly inserts = new GroupCommit<JobInsertParams, JobInsertOutcome>({
    send: (items) => sendInserts(this.db, { items, statementNow: () => this.statementNow() }),
    maxBatch: MAX_INSERT_BATCH,
    maxInFlight: MAX_INSERT_FLIGHTS,
  });
  /** Where the last claim stopped visiting lanes (`opqueue_claim_batch`). */
  private laneCursor: claims.LaneCursor = { operationId: "", lane: "" };

  private constructor(
    private readonly db: PgConnection,
    private readonly listeners: StoreListeners,
    private readonly options: { clock: Clock; databaseTime: boolean; schemaVersion: number },
  ) {}

  /** Connects, migrates (under an advisory lock, so nodes starting together migrate once) and returns the store. */
  static async open(options: PostgresStoreOptions): Promise<PostgresStore> {
    const { db, schemaVersion, schema } = await openDatabase(options);
    const listeners = new StoreListeners({
      settings: db.settings,
      jobsChannel: `opqueue_jobs:${schema ?? "public"}`,
      schedulesChannel: `opqueue_schedules:${schema ?? "public"}`,
      onError: options.onPoolError,
      ownsBackend: (pid) => db.ownsBackend(pid),
    });
    return new PostgresStore(db, listeners, {
      clock: options.clock,
      databaseTime: options.databaseTime ?? true,
      schemaVersion,
    });
  }

  /**
   * The "now" parameter of a statement: `'now'`, a special input PostgreSQL reads as the current transaction's
   * timestamp when it binds the value (so it is never stale, even in a prepared statement), or the test clock's time.
   */
  private statementNow(): Date | "now" {
    return this.options.databaseTime ? "now" : new Date(this.options.clock.now());
  }

  // StoreLifecycle: lifecycle.ts
  now(): number {
    return this.options.clock.now() + this.offsetMs;
  }

  async clockOffset(): Promise<number> {
    if (!this.options.databaseTime) return 0;
    this.offsetMs = await measureClockOffset(this.db, this.options.clock);
    return this.offsetMs;
  }

  async ping(): Promise<void> {
    return checkSchemaVersion(this.db, this.options.schemaVersion);
  }

  async close(): Promise<void> {
    if (this.db.isClosed) return;
    await this.listeners.stopAll();
    // Let queued inserts go out first: their callers are waiting for a commit.
    await this.inserts.drain();
    await this.db.close();
  }

  // EnqueueStore: insert.ts
  jobInsert(params: StoreParams<"jobInsert">): Promise<JobInsertOutcome> {
    if (this.db.isClosed) return Promise.reject(new StoreUnavailableError("the store is closed"));
    return this.inserts.add(params);
  }

  async jobInsertMany(params: StoreParams<"jobInsertMany">): Promise<Array<Settled<JobInsertOutcome>>> {
    if (this.db.isClosed) throw new StoreUnavailableError("the store is closed");
    if (params.jobs.length === 0) return [];
    // A producer's batch is a batch of its own: one statement, one commit, beside the group commit of single inserts.
    return sendInserts(this.db, { items: params.jobs, statementNow: () => this.statementNow() });
  }

  // ClaimStore: claims.ts, outcomes.ts, async.ts
  async jobClaimMany(params: StoreParams<"jobClaimMany">): Promise<JobRow[]> {
    const claimed = await claims.claimMany(this.db, { ...params, cursor: this.laneCursor, now: this.statementNow() });
    this.laneCursor = claimed.cursor;
    return claimed.jobs;
  }

  async jobHeartbeatMany(params: StoreParams<"jobHeartbeatMany">): Promise<void> {
    return claims.heartbeatMany(this.db, { ...params, now: this.statementNow() });
  }

  async jobMarkAsyncIfRunning(params: StoreParams<"jobMarkAsyncIfRunning">): Promise<boolean> {
    return asyncAttempts.markAsync(this.db, { ...params, now: this.statementNow() });
  }

  async jobRequeueMany(params: StoreParams<"jobRequeueMany">): Promise<number> {
    return claims.requeueWithError(this.db, { ...params, now: this.statementNow() });
  }

  async jobNextRunAt(): Promise<number | null> {
    return claims.nextRunAt(this.db, { now: this.statementNow() });
  }

  async jobSetStateIfRunningMany(params: StoreParams<"jobSetStateIfRunningMany">): Promise<boolean[]> {
    return setStateIfRunningMany(this.db, { outcomes: params.outcomes, now: this.statementNow() });
  }

  // AsyncAttemptStore: async.ts
  async jobHeartbeatExternal(params: StoreParams<"jobHeartbeatExternal">): Promise<ExternalHeartbeatOutcome> {
    return asyncAttempts.heartbeatExternal(this.db, { ...params, now: this.statementNow() });
  }

  async jobSetStateExternal(params: StoreParams<"jobSetStateExternal">): Promise<ExternalSetStateOutcome> {
    return asyncAttempts.setStateExternal(this.db, { ...params, now: this.statementNow() });
  }

  async jobAsyncStateGet(params: StoreParams<"jobAsyncStateGet">): Promise<JobAsyncState | undefined> {
    return asyncAttempts.asyncState(this.db, params);
  }

  // ChainStore: chains.ts
  async jobCallbackDueList(params: StoreParams<"jobCallbackDueList">): Promise<JobRow[]> {
    return chains.callbackDueList(this.db, params);
  }

  async jobCallbackEnqueue(params: StoreParams<"jobCallbackEnqueue">): Promise<CallbackEnqueueOutcome> {
    return chains.callbackEnqueue(this.db, { ...params, now: this.statementNow() });
  }

  async chainSettledDueList(params: StoreParams<"chainSettledDueList">): Promise<ChainRow[]> {
    return chains.settledDueList(this.db, params);
  }

  async chainOnSettledEnqueue(params: StoreParams<"chainOnSettledEnqueue">): Promise<CallbackEnqueueOutcome> {
    return chains.onSettledEnqueue(this.db, { ...params, now: this.statementNow() });
  }

  async chainSettledSince(
    params: StoreParams<"chainSettledSince">,
  ): Promise<Array<{ originalRequestId: string; startedAt: number; settledAt: number }>> {
    const nowMs = () => (this.options.databaseTime ? Date.now() + this.offsetMs : this.options.clock.now());
    return chains.settledSince(this.db, { ...params, nowMs });
  }

  async chainGet(params: StoreParams<"chainGet">): Promise<ChainRow | undefined> {
    return chains.chainGet(this.db, params);
  }

  async chainJobCounts(params: StoreParams<"chainJobCounts">): Promise<ChainJobCounts> {
    return chains.chainJobCounts(this.db, params);
  }

  // ScheduleStore: schedules.ts
  async scheduleCreate(params: StoreParams<"scheduleCreate">): Promise<ScheduleCreateOutcome> {
    return schedules.createSchedule(this.db, { ...params, now: this.statementNow() });
  }

  async scheduleGet(params: StoreParams<"scheduleGet">): Promise<ScheduleRow | undefined> {
    return schedules.getSchedule(this.db, params.name);
  }

  async scheduleList(): Promise<ScheduleRow[]> {
    return schedules.listSchedules(this.db);
  }

  async scheduleUpdate(params: StoreParams<"scheduleUpdate">): Promise<ScheduleUpdateOutcome> {
    return schedules.updateSchedule(this.db, { ...params, now: this.statementNow() });
  }

  async schedulePause(params: StoreParams<"schedulePause">): Promise<ScheduleWriteOutcome<"paused">> {
    return schedules.pauseSchedule(this.db, { ...params, now: this.statementNow() });
  }

  async scheduleResume(params: StoreParams<"scheduleResume">): Promise<ScheduleWriteOutcome<"resumed">> {
    return schedules.resumeSchedule(this.db, params);
  }

  async scheduleDelete(params: StoreParams<"scheduleDelete">): Promise<ScheduleWriteOutcome<"deleted">> {
    return schedules.deleteSchedule(this.db, params);
  }

  async cronTickInsert(params: StoreParams<"cronTickInsert">): Promise<CronTickOutcome> {
    return schedules.insertTick(this.db, { ...params, now: this.statementNow() });
  }

  async cronTickLatestMany(params: StoreParams<"cronTickLatestMany">): Promise<CronTick[]> {
    return schedules.latestTicks(this.db, params);
  }

  // FlowStore: flow.ts
  async operationLimitsConfigure(params: StoreParams<"operationLimitsConfigure">): Promise<void> {
    await flow.configureLimits(this.db, { ...params, now: this.statementNow() });
  }

  async operationControlList(): Promise<OperationControl[]> {
    return flow.controlList(this.db);
  }

  async operationPause(params: StoreParams<"operationPause">): Promise<OperationControl> {
    return flow.pause(this.db, { ...params, now: this.statementNow() });
  }

  async operationResume(params: StoreParams<"operationResume">): Promise<OperationControl> {
    return flow.resume(this.db, { ...params, now: this.statementNow() });
  }

  async operationLimitsSet(params: StoreParams<"operationLimitsSet">): Promise<OperationControl> {
    return flow.setLimits(this.db, { ...params, now: this.statementNow() });
  }

  async concurrencyKeyPause(params: StoreParams<"concurrencyKeyPause">): Promise<PausedKey> {
    return flow.pauseKey(this.db, { ...params, now: this.statementNow() });
  }

  async concurrencyKeyResume(params: StoreParams<"concurrencyKeyResume">): Promise<boolean> {
    return flow.resumeKey(this.db, { ...params, now: this.statementNow() });
  }

  async pausedKeyList(): Promise<PausedKey[]> {
    return flow.pausedKeyList(this.db);
  }

  // JobReadStore: job-reads.ts (the actions on a job in admin.ts)
  async jobGet(params: StoreParams<"jobGet">): Promise<JobRow | undefined> {
    return reads.jobGet(this.db, params);
  }

  async jobList(params: StoreParams<"jobList">): Promise<JobRow[]> {
    return reads.jobList(this.db, params);
  }

  async jobAttemptList(params: StoreParams<"jobAttemptList">): Promise<JobAttemptRow[]> {
    return reads.attemptList(this.db, params);
  }

  async jobAttemptListMany(params: StoreParams<"jobAttemptListMany">): Promise<Map<string, JobAttemptRow[]>> {
    return reads.attemptListMany(this.db, params);
  }

  async adminActionList(params: StoreParams<"adminActionList">): Promise<AdminActionRow[]> {
    return admin.adminActionList(this.db, params);
  }

  async jobStats(params: StoreParams<"jobStats"> = {}): Promise<JobStats> {
    return reads.stats(this.db, { byOperation: params.byOperation ?? true, now: this.statementNow() });
  }

  async attemptBuckets(params: StoreParams<"attemptBuckets">): Promise<AttemptBucket[]> {
    return reads.attemptBuckets(this.db, { ...params, nowMs: () => this.now() });
  }

  // AdminStore: admin.ts
  async jobCancel(params: StoreParams<"jobCancel">): Promise<JobCancelOutcome> {
    return admin.cancelJob(this.db, { ...params, now: this.statementNow() });
  }

  async jobCancelMany(params: StoreParams<"jobCancelMany">): Promise<Array<{ job: JobRow; wasRunning: boolean }>> {
    return admin.cancelMany(this.db, { ...params, now: this.statementNow() });
  }

  async jobRetry(params: StoreParams<"jobRetry">): Promise<JobRetryOutcome> {
    return admin.retryJob(this.db, { ...params, now: this.statementNow() });
  }

  async jobRetryDeadMany(params: StoreParams<"jobRetryDeadMany">): Promise<JobRow[]> {
    return admin.retryDeadMany(this.db, { ...params, now: this.statementNow() });
  }

  async chainCancel(params: StoreParams<"chainCancel">): Promise<JobRow[]> {
    return admin.cancelChain(this.db, { ...params, now: this.statementNow() });
  }

  async jobRunNow(params: StoreParams<"jobRunNow">): Promise<JobRunNowOutcome> {
    return admin.runNow(this.db, { ...params, now: this.statementNow() });
  }

  async userErase(params: StoreParams<"userErase">): Promise<UserEraseOutcome> {
    return access.eraseUser(this.db, { ...params, now: this.statementNow() });
  }

  // PayloadStore: payloads.ts
  async payloadPage(params: StoreParams<"payloadPage">): Promise<{ rows: StoredPayloadRow[]; next: string | null }> {
    return payloads.page(this.db, params);
  }

  async payloadRewrite(params: StoreParams<"payloadRewrite">): Promise<number> {
    return payloads.rewrite(this.db, params);
  }

  // AccessStore: access.ts
  async adminTokenRevoke(params: StoreParams<"adminTokenRevoke">): Promise<RevokedAdminToken> {
    return access.revoke(this.db, { ...params, now: this.statementNow() });
  }

  async adminTokenCutoffRaise(params: StoreParams<"adminTokenCutoffRaise">): Promise<AdminTokenCutoff> {
    return access.raiseCutoff(this.db, { ...params, now: this.statementNow() });
  }

  async adminTokenIsRevoked(params: StoreParams<"adminTokenIsRevoked">): Promise<boolean> {
    return access.isRevoked(this.db, params);
  }

  async adminRevocationList(
    params: StoreParams<"adminRevocationList">,
  ): Promise<{ tokens: RevokedAdminToken[]; cutoff: AdminTokenCutoff | null }> {
    return access.revocationList(this.db, params);
  }

  // UpkeepStore: upkeep.ts
  async jobListExpired(params: StoreParams<"jobListExpired">): Promise<JobRow[]> {
    return upkeep.listExpired(this.db, { ...params, now: this.statementNow() });
  }

  async jobExpireMany(params: StoreParams<"jobExpireMany">): Promise<JobRow[]> {
    return upkeep.expireMany(this.db, { ...params, now: this.statementNow() });
  }

  async jobDeleteFinishedMany(params: StoreParams<"jobDeleteFinishedMany">): Promise<number> {
    return upkeep.deleteFinishedMany(this.db, { ...params, now: this.statementNow() });
  }

  async idempotencyKeyDeleteMany(params: StoreParams<"idempotencyKeyDeleteMany">): Promise<number> {
    return upkeep.idempotencyKeyDeleteMany(this.db, { ...params, now: this.statementNow() });
  }

  async cronTickDeleteMany(params: StoreParams<"cronTickDeleteMany">): Promise<number> {
    return upkeep.cronTickDeleteMany(this.db, { ...params, now: this.statementNow() });
  }

  async attemptCountDeleteMany(params: StoreParams<"attemptCountDeleteMany">): Promise<number> {
    return upkeep.attemptCountDeleteMany(this.db, { ...params, now: this.statementNow() });
  }

  async rateBucketDeleteMany(): Promise<number> {
    return upkeep.rateBucketDeleteMany(this.db, { now: this.statementNow() });
  }

  /** The job tables' pages when the server last skipped this node's analyze, or 0 (`upkeep.statisticsRefresh`). */
  private analyzeRefusedAt = 0;

  async statisticsRefresh(): Promise<boolean> {
    const tried = await upkeep.statisticsRefresh(this.db, this.analyzeRefusedAt);
    if (tried === null) return false;
    this.analyzeRefusedAt = tried.analyzed ? 0 : tried.size;
    return tried.analyzed;
  }

  // ListenStore: listener.ts
  async jobAvailableListen(
    onAvailable: (runAt: number) => void,
    onAbort?: (jobId: string) => void,
  ): Promise<() => Promise<void>> {
    this.db.assertOpen();
    return this.listeners.jobs({ onAvailable, onAbort, now: () => this.now() });
  }

  async scheduleChangeListen(onChange: () => void): Promise<() => Promise<void>> {
    this.db.assertOpen();
    return this.listeners.schedules(onChange);
  }
}

/**
 * The PostgreSQL engine (node-postgres): any number of nodes on one database. The class holds the engine's logic;
 * every statement it runs is in sql/ (the PL/pgSQL functions in sql/functions/), rows are read in rows.ts, errors
 * in errors.ts, the pool in connection.ts, migrations in migrate.ts.
 *
 * - Tables: a job is a `job_specs` row (what was asked, written once) and a `job_state` row (where it is in its
 *   life), so claims and outcomes rewrite a narrow row and few index entries (migration 0004). Reads go through the
 *   view `jobs`, which joins them; writes name the table they change.
 * - Durability: every acknowledged write commits with `synchronous_commit` as the server has it (on by default).
 *   The writes no client waits on (claims, outcomes, heartbeats) commit lazily, without waiting for the WAL flush,
 *   as the SQLite engine writes them with `synchronous = NORMAL`: see `LAZY_COMMIT` (sql/common.ts).
 * - Group commit: inserts arriving within one turn of the event loop go to the server as one call of
 *   `opqueue_insert_jobs`: one round trip and one commit for the batch, every step of the enqueue (dedupe upsert,
 *   spawn cap, cancelled chain) decided inside it.
 * - Claims: one statement, a CTE taking candidates with `FOR UPDATE SKIP LOCKED`, so nodes never wait on each
 *   other's claims; at most one per concurrency key, none whose key is already running. Two nodes can still pick
 *   two jobs of one key in the same instant: `pg_try_advisory_xact_lock` per key skips most of those up front, and
 *   the partial unique index refuses the rest, which costs one retried claim.
 * - Batches: outcome writes and heartbeats are one statement each over `unnest` of arrays.
 * - Time: the database's clock. Every "now" a statement uses (what is due, what has expired, every time written) is
 *   the parameter value `'now'`, which PostgreSQL reads as the transaction's timestamp when it binds it; a delay is
 *   added to it in SQL. So nodes whose clocks disagree still agree on one clock (a node running 120 s fast once
 *   delivered delayed jobs early and stole running ones). Tests that move time by hand open the store with
 *   `databaseTime: false`, and the same parameter then carries their clock's time: one SQL text either way.
 */
import type pg from "pg";
import type { Clock } from "../../clock.js";
import type {
  AttemptToken,
  JobAsyncState,
  JobAttempt,
  JobAttemptRow,
  JobOutcome,
  JobRow,
  LeaseLimits,
} from "../../job/job.js";
import type { JobResult } from "../../job/schemas.js";
import { JOB_STATUSES, type JobStatus } from "../../job/statuses.js";
import { requireWholeMinutes, toBuckets } from "../attempt-buckets.js";
import { chainJobCountsOf } from "../chain-counts.js";
import { GroupCommit, type Settled } from "../group-commit.js";
import {
  StoreUnavailableError,
  type AttemptBucket,
  type AttemptRefund,
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
  type CronTickOutcome,
  type ScheduleCreateOutcome,
  type ScheduleUpdateOutcome,
  type ScheduleWriteOutcome,
  type Store,
  type ChainJobCounts,
  type ChainRow,
} from "../store.js";
import type { LimitsSource, OperationControl, OperationLimits, PausedKey } from "../../flow/limits.js";
import type { CronTick, ScheduleFields, ScheduleRow } from "../../schedules/schedule.js";
import * as schedules from "./schedules.js";
import { SCHEDULE_IN_FORCE } from "./sql/schedules.js";
import { asyncState, heartbeatExternal, markAsync, setStateExternal } from "./async.js";
import { adminActionList, cancelChain, cancelJob, cancelMany, retryDeadMany, retryJob, runNow } from "./admin.js";
import * as flow from "./flow.js";
import { connectionSettings, defaultSchema, PgConnection } from "./connection.js";
import { isUniqueViolation, mapError, unstorable } from "./errors.js";
import { openError } from "./open-errors.js";
import { NotificationListener } from "./listener.js";
import { migrate } from "./migrate.js";
import {
  insertArgument,
  requireMs,
  toAttemptRow,
  toChainRow,
  toInsertOutcome,
  toJobRow,
  toMs,
  type InsertAnswer,
  type PgRow,
} from "./rows.js";
import { CLAIM, claimCandidates, NEXT_RUN_AT } from "./sql/claim.js";
import { DELETE_BUCKETS } from "./sql/flow.js";
import { CRON_TICK_RECORD, CRON_TICK_SET_JOB, INSERT_JOB, INSERT_JOBS } from "./sql/insert.js";
import { ATTEMPT_LIST, JOB_GET, jobListQuery, NOTIFY } from "./sql/jobs.js";
import {
  ATTEMPT_BUCKETS,
  ATTEMPT_COUNT_DELETE,
  COUNT_BY_OPERATION,
  COUNT_BY_STATUS,
  CRON_TICK_DELETE,
  DATABASE_CLOCK,
  DELETE_ACTIONS,
  DELETE_ATTEMPTS,
  DELETE_EMPTY_CHAINS,
  DELETE_FINISHED,
  EXPIRE_MANY,
  IDEMPOTENCY_KEY_DELETE,
  ATTEMPT_LIST_MANY,
  CALLBACKS_DUE,
  CHAIN_GET,
  CHAIN_JOB_COUNTS,
  CHAIN_SWEEP_LOCK,
  CLEAR_CALLBACK,
  CURSOR_GET,
  CURSOR_SET,
  FIRE_ON_SETTLED,
  LOCK_CHAIN,
  SETTLED_DUE,
  SETTLED_SINCE,
  OLDEST_DUE,
  PAUSED_DUE,
  SCHEMA_VERSION,
} from "./sql/maintenance.js";
import { requeueMany, setStateIfRunningMany } from "./outcomes.js";
import { HEARTBEAT_MANY, LIST_EXPIRED } from "./sql/outcomes.js";

/** Most inserts sent in one call. */
const MAX_INSERT_BATCH = 512;
/** Insert batches in flight at once; later arrivals wait and form the next, larger batch. */
const MAX_INSERT_FLIGHTS = 4;
/** How far behind now the chain sweeper reads finished jobs: outcomes still committing may carry earlier times. */
const SETTLE_READ_LAG_MS = 2000;
/** Claim attempts when a concurrency key race makes the unique index refuse one. */
const CLAIM_TRIES = 3;

/** Options of `PostgresStore.open`. */
export interface PostgresStoreOptions {
  url: string;
  /** This node's clock: what `now()` corrects by the measured offset, and the store's time without `databaseTime`. */
  clock: Clock;
  /**
   * Whether statements use the database's clock (the default, and what production uses); false makes `clock` the
   * database's clock too, for tests that move time by hand.
   */
  databaseTime?: boolean;
  /** The schema to work in (created if missing); the URL's `?schema=`, else `opqueue`. */
  schema?: string;
  /** Told about a choice worth an operator's attention (opqueue's tables found in `public`). */
  onWarning?: (message: string) => void;
  /** Pool size (default 10). */
  poolSize?: number;
  /** Told about errors of idle connections (which must never crash the process). */
  onPoolError?: (error: Error) => void;
}

/** The PostgreSQL engine. Open it with `PostgresStore.open`. */
export class PostgresStore implements Store {
  readonly engine = "postgres";
  /** The database's clock minus this node's, as last measured (see `clockOffset`). */
  private offsetMs = 0;
  private readonly inserts = new GroupCommit<JobInsertParams, JobInsertOutcome>({
    send: (items) => this.sendInserts(items),
    maxBatch: MAX_INSERT_BATCH,
    maxInFlight: MAX_INSERT_FLIGHTS,
  });
  private readonly listeners = new Set<NotificationListener>();
  /** Where the last claim stopped visiting lanes (functions/opqueue_claim.sql). */
  private laneCursor = { operationId: "", lane: "" };

  private constructor(
    private readonly db: PgConnection,
    private readonly options: {
      clock: Clock;
      databaseTime: boolean;
      schemaVersion: number;
      /** The NOTIFY channel of this schema's jobs. */
      channel: string;
      /** The NOTIFY channel of this schema's schedules (sql/schedules.ts, SCHEDULE_NOTIFY). */
      scheduleChannel: string;
      onPoolError: ((error: Error) => void) | undefined;
    },
  ) {}

  /** Connects, migrates (under an advisory lock, so nodes starting together migrate once) and returns the store. */
  static async open(options: PostgresStoreOptions): Promise<PostgresStore> {
    let schema = options.schema ?? (new URL(options.url).searchParams.get("schema") || undefined);
    if (schema === undefined) {
      const chosen = await defaultSchema(options.url);
      if (chosen.warning) options.onWarning?.(chosen.warning);
      schema = chosen.schema;
    }
    const settings = connectionSettings({ url: options.url, schema });
    const db = await PgConnection.open({
      settings,
      poolSize: options.poolSize ?? 10,
      onPoolError: options.onPoolError,
    });
    try {
      const schemaVersion = await migrate(db.pool);
      const current = (await db.pool.query<{ schema: string }>("SELECT current_schema() AS schema")).rows[0]?.schema;
      return new PostgresStore(db, {
        clock: options.clock,
        databaseTime: options.databaseTime ?? true,
        schemaVersion,
        channel: `opqueue_jobs:${current ?? "public"}`,
        scheduleChannel: `opqueue_schedules:${current ?? "public"}`,
        onPoolError: options.onPoolError,
      });
    } catch (error) {
      await db.pool.end().catch(() => undefined);
      throw openError(error, options.url);
    }
  }

  /** `answer`, unless the store is closed. */
  private assertOpen<T>(answer: T): T {
    this.db.assertOpen();
    return answer;
  }

  /**
   * The "now" parameter of a statement: `'now'`, a special input PostgreSQL reads as the current transaction's
   * timestamp when it binds the value (so it is never stale, even in a prepared statement), or the test clock's time.
   */
  private statementNow(): Date | "now" {
    return this.options.databaseTime ? "now" : new Date(this.options.clock.now());
  }

  now(): number {
    return this.options.clock.now() + this.offsetMs;
  }

  async clockOffset(): Promise<number> {
    if (!this.options.databaseTime) return 0;
    const { clock } = this.options;
    const sentAt = clock.now();
    const rows = await this.db.query(DATABASE_CLOCK);
    const receivedAt = clock.now();
    // The database read its clock somewhere in the round trip: its middle is the best guess.
    this.offsetMs = Number(rows[0]?.["now"]) - (sentAt + receivedAt) / 2;
    return this.offsetMs;
  }

  async ping(): Promise<void> {
    const rows = await this.db.query(SCHEMA_VERSION);
    const version = Number(rows[0]?.["version"] ?? 0);
    const expected = this.options.schemaVersion;
    if (version > expected) {
      // A rolling upgrade: a newer node migrated the schema. This one goes on delivering (docs/deploying.md).
      throw new StoreUnavailableError(
        `the schema is at version ${version}, newer than this node's ${expected}: upgrade this node`,
      );
    }
    if (version !== expected) throw new StoreUnavailableError(`schema version ${version}, expected ${expected}`);
  }

  jobInsert(params: JobInsertParams): Promise<JobInsertOutcome> {
    if (this.db.isClosed) return Promise.reject(new StoreUnavailableError("the store is closed"));
    return this.inserts.add(params);
  }

  async jobInsertMany(params: { jobs: JobInsertParams[] }): Promise<Array<Settled<JobInsertOutcome>>> {
    if (this.db.isClosed) throw new StoreUnavailableError("the store is closed");
    if (params.jobs.length === 0) return [];
    // A producer's batch is a batch of its own: one statement, one commit, beside the group commit of single inserts.
    return this.sendInserts(params.jobs);
  }

  /** One batch of inserts; when it fails with the database up, one bad item must fail only itself: one by one. */
  private async sendInserts(items: JobInsertParams[]): Promise<Array<Settled<JobInsertOutcome>>> {
    try {
      return (await this.insertBatch(items)).map((value) => ({ ok: true, value }));
    } catch (error) {
      if (items.length === 1 || error instanceof StoreUnavailableError) throw error;
      return Promise.all(
        items.map((item) =>
          this.insertBatch([item]).then(
            ([value]): Settled<JobInsertOutcome> => (value ? { ok: true, value } : { ok: false, error }),
            (itemError: unknown): Settled<JobInsertOutcome> => ({ ok: false, error: itemError }),
          ),
        ),
      );
    }
  }

  private async insertBatch(items: JobInsertParams[]): Promise<JobInsertOutcome[]> {
    const rows = await this.db.query(
      INSERT_JOBS,
      [JSON.stringify(items.map(insertArgument)), this.statementNow()],
      "opqueue_insert_jobs",
    );
    return rows.map((row, index) => toInsertOutcome(row["outcome"] as InsertAnswer, items[index] as JobInsertParams));
  }

  async jobGet(params: { id: string }): Promise<JobRow | undefined> {
    if (unstorable(params.id)) return this.assertOpen(undefined);
    const rows = await this.db.query(JOB_GET, [params.id], "opqueue_job_get");
    return rows[0] ? toJobRow(rows[0]) : undefined;
  }

  async jobList(params: JobListParams): Promise<JobRow[]> {
    if (unstorable(params.operationId, params.originalRequestId, params.userId, params.parentJobId, params.dedupeKey)) {
      return this.assertOpen([]);
    }
    const { text, values } = jobListQuery(params);
    return (await this.db.query(text, values)).map(toJobRow);
  }

  async jobCancel(params: { id: string; actor: string; abortRunning?: boolean }): Promise<JobCancelOutcome> {
    if (unstorable(params.id)) return this.assertOpen({ kind: "not_found" });
    return cancelJob(this.db, { ...params, now: this.statementNow() });
  }

  async jobCancelMany(params: {
    filter: JobCancelFilter;
    limit: number;
    actor: string;
  }): Promise<Array<{ job: JobRow; wasRunning: boolean }>> {
    const { filter } = params;
    if (unstorable(filter.operationId, filter.originalRequestId, filter.userId, filter.dedupeKey))
      return this.assertOpen([]);
    return cancelMany(this.db, { ...params, now: this.statementNow() });
  }

  async jobRetry(params: { id: string; actor: string }): Promise<JobRetryOutcome> {
    if (unstorable(params.id)) return this.assertOpen({ kind: "not_found" });
    return retryJob(this.db, { ...params, now: this.statementNow() });
  }

  async chainCancel(params: { originalRequestId: string; actor: string }): Promise<JobRow[]> {
    // No job can join such a chain (enqueue refuses U+0000), so there is nothing to cancel or to remember.
    if (unstorable(params.originalRequestId)) return this.assertOpen([]);
    return cancelChain(this.db, { ...params, now: this.statementNow() });
  }

  async jobRunNow(params: { id: string; actor: string }): Promise<JobRunNowOutcome> {
    if (unstorable(params.id)) return this.assertOpen({ kind: "not_found" });
    return runNow(this.db, { ...params, now: this.statementNow() });
  }

  async jobRetryDeadMany(params: { filter: DeadJobFilter; limit: number; actor: string }): Promise<JobRow[]> {
    return retryDeadMany(this.db, { ...params, now: this.statementNow() });
  }

  async adminActionList(params: { jobId: string }): Promise<AdminActionRow[]> {
    if (unstorable(params.jobId)) return this.assertOpen([]);
    return adminActionList(this.db, params);
  }

  async jobClaimMany(params: { limit: number }): Promise<JobRow[]> {
    if (params.limit <= 0) return [];
    for (let tries = 1; ; tries++) {
      try {
        const rows = await this.db.query(
          CLAIM,
          [
            this.statementNow(),
            params.limit,
            claimCandidates(params.limit),
            this.laneCursor.operationId,
            this.laneCursor.lane,
          ],
          "opqueue_claim",
        );
        const jobs: JobRow[] = [];
        for (const row of rows) {
          const parsed = JSON.parse(row["job"] as string) as JobRow | { cursor: [string, string] };
          if ("cursor" in parsed) this.laneCursor = { operationId: parsed.cursor[0], lane: parsed.cursor[1] };
          else jobs.push(parsed);
        }
        return jobs.sort((a, b) => b.priority - a.priority || a.runAt - b.runAt || a.seq - b.seq);
      } catch (error) {
        // Another node started a job of one of these keys in the same instant: the unique index refused ours.
        if (tries < CLAIM_TRIES && isUniqueViolation(error, "job_state_running_concurrency_key")) continue;
        throw error;
      }
    }
  }

  async jobSetStateIfRunningMany(params: { outcomes: JobOutcome[] }): Promise<boolean[]> {
    return setStateIfRunningMany(this.db, { outcomes: params.outcomes, now: this.statementNow() });
  }

  async jobHeartbeatMany(params: { jobs: JobAttempt[] }): Promise<void> {
    if (params.jobs.length === 0) return;
    await this.db.query(
      HEARTBEAT_MANY,
      [params.jobs.map((job) => job.id), params.jobs.map((job) => job.attempt), this.statementNow()],
      "opqueue_heartbeat_many",
    );
  }

  async jobListExpired(params: { lease: LeaseLimits; limit: number }): Promise<JobRow[]> {
    const operations = Object.entries(params.lease.byOperation);
    const asyncOperations = Object.entries(params.lease.asyncByOperation ?? {});
    const rows = await this.db.query(LIST_EXPIRED, [
      this.statementNow(),
      params.lease.defaultMs,
      operations.map(([operationId]) => operationId),
      operations.map(([, leaseMs]) => leaseMs),
      Math.max(0, params.limit),
      asyncOperations.map(([operationId]) => operationId),
      asyncOperations.map(([, leaseMs]) => leaseMs),
    ]);
    return rows.map(toJobRow);
  }

  async jobMarkAsyncIfRunning(params: { job: JobAttempt; tokenHash: string }): Promise<boolean> {
    return markAsync(this.db, { ...params, now: this.statementNow() });
  }

  async jobHeartbeatExternal(params: {
    id: string;
    attempt: number;
    token: AttemptToken;
    progressJson?: string | undefined;
  }): Promise<ExternalHeartbeatOutcome> {
    if (unstorable(params.id)) return this.assertOpen({ kind: "not_found" });
    return heartbeatExternal(this.db, { ...params, now: this.statementNow() });
  }

  async jobSetStateExternal(params: { outcome: JobOutcome; token: AttemptToken }): Promise<ExternalSetStateOutcome> {
    if (unstorable(params.outcome.id)) return this.assertOpen({ kind: "not_found" });
    return setStateExternal(this.db, { ...params, now: this.statementNow() });
  }

  async jobAsyncStateGet(params: { id: string }): Promise<JobAsyncState | undefined> {
    if (unstorable(params.id)) return this.assertOpen(undefined);
    return asyncState(this.db, params);
  }

  async jobRequeueMany(params: {
    jobs: JobAttempt[];
    delayMs: number;
    errorBody: string;
    refund: AttemptRefund;
  }): Promise<number> {
    if (params.jobs.length === 0) return 0;
    const result: JobResult = { error_body: params.errorBody, terminal_reason: null };
    const requeued = await requeueMany(this.db, {
      items: params.jobs.map((job) => ({ ...job, delayMs: params.delayMs, result })),
      refund: params.refund,
      now: this.statementNow(),
      lazy: false,
    });
    return requeued.length;
  }

  async jobNextRunAt(): Promise<number | null> {
    const rows = await this.db.query(NEXT_RUN_AT, [this.statementNow()], "opqueue_next_run_at");
    return toMs(rows[0]?.["next"]);
  }

  async cronTickInsert(params: {
    name: string;
    tickAt: number;
    job: JobInsertParams;
    scheduleRevision?: string | undefined;
  }): Promise<CronTickOutcome> {
    return this.db.transaction(async (client) => {
      const revision = params.scheduleRevision;
      if (revision !== undefined && (await client.query(SCHEDULE_IN_FORCE, [params.name, revision])).rowCount === 0) {
        return { kind: "schedule_changed" } as const;
      }
      const tick = await client.query(CRON_TICK_RECORD, [params.name, new Date(params.tickAt)]);
      if (tick.rowCount === 0) return { kind: "already_enqueued" } as const;
      const answer = await client.query<PgRow>(INSERT_JOB, [
        JSON.stringify(insertArgument(params.job)),
        this.statementNow(),
      ]);
      const outcome = toInsertOutcome(answer.rows[0]?.["outcome"] as InsertAnswer, params.job);
      if (outcome.kind === "created" || outcome.kind === "deduplicated") {
        await client.query(CRON_TICK_SET_JOB, [params.name, new Date(params.tickAt), outcome.job.id]);
      }
      return outcome;
    });
  }

  async cronTickLatestMany(params: { names: string[] }): Promise<CronTick[]> {
    const names = params.names.filter((name) => !unstorable(name));
    if (names.length === 0) return this.assertOpen([]);
    return schedules.latestTicks(this.db, names);
  }

  async cronTickDeleteMany(params: { olderThanMs: number }): Promise<number> {
    return (await this.db.query(CRON_TICK_DELETE, [this.statementNow(), params.olderThanMs])).length;
  }

  async attemptCountDeleteMany(params: { olderThanMs: number }): Promise<number> {
    return (await this.db.query(ATTEMPT_COUNT_DELETE, [this.statementNow(), params.olderThanMs])).length;
  }

  async jobDeleteFinishedMany(params: { olderThanMs: number; limit: number }): Promise<number> {
    return this.db.transaction(async (client) => {
      const deleted = await client.query<PgRow>(DELETE_FINISHED, [
        this.statementNow(),
        Math.max(0, params.limit),
        params.olderThanMs,
      ]);
      const ids = deleted.rows.map((row) => row["id"] as string);
      await client.query(DELETE_ATTEMPTS, [ids]);
      await client.query(DELETE_ACTIONS, [ids]);
      const rids = [...new Set(deleted.rows.map((row) => row["original_request_id"] as string))];
      if (rids.length > 0) await client.query(DELETE_EMPTY_CHAINS, [rids]);
      return deleted.rowCount ?? 0;
    });
  }

  async jobExpireMany(params: { limit: number }): Promise<JobRow[]> {
    const rows = await this.db.query(
      EXPIRE_MANY,
      [this.statementNow(), Math.max(0, params.limit)],
      "opqueue_expire_many",
    );
    return rows.map(toJobRow);
  }

  async jobCallbackDueList(params: { limit: number }): Promise<JobRow[]> {
    return (await this.db.query(CALLBACKS_DUE, [Math.max(0, params.limit)], "opqueue_callbacks_due")).map(toJobRow);
  }

  async jobCallbackEnqueue(params: {
    jobId: string;
    status: "succeeded" | "dead";
    insert: JobInsertParams | null;
  }): Promise<JobInsertOutcome | { kind: "skipped" } | { kind: "cleared" }> {
    return this.db.transaction(async (client) => {
      if ((await client.query(CLEAR_CALLBACK, [params.jobId, params.status])).rowCount === 0)
        return { kind: "skipped" } as const;
      return params.insert === null ? ({ kind: "cleared" } as const) : this.insertInTransaction(client, params.insert);
    });
  }

  async chainSettledDueList(params: { limit: number }): Promise<ChainRow[]> {
    return (await this.db.query(SETTLED_DUE, [Math.max(0, params.limit)])).map(toChainRow);
  }

  async chainOnSettledEnqueue(params: {
    originalRequestId: string;
    insert: JobInsertParams | null;
  }): Promise<JobInsertOutcome | { kind: "skipped" } | { kind: "cleared" }> {
    return this.db.transaction(async (client) => {
      await client.query(LOCK_CHAIN, [params.originalRequestId]);
      if ((await client.query(FIRE_ON_SETTLED, [params.originalRequestId, this.statementNow()])).rowCount === 0) {
        return { kind: "skipped" } as const;
      }
      if (params.insert === null) return { kind: "cleared" } as const;
      return this.insertInTransaction(client, params.insert);
    });
  }

  /** One insert inside a transaction of the caller's, announced to the listening nodes when it makes a job claimable. */
  private async insertInTransaction(client: pg.PoolClient, insert: JobInsertParams): Promise<JobInsertOutcome> {
    const answer = await client.query<PgRow>(INSERT_JOB, [JSON.stringify(insertArgument(insert)), this.statementNow()]);
    const outcome = toInsertOutcome(answer.rows[0]?.["outcome"] as InsertAnswer, insert);
    if ((outcome.kind === "created" || outcome.kind === "deduplicated") && outcome.job.status === "pending") {
      await client.query(NOTIFY, [new Date(outcome.job.runAt)]);
    }
    return outcome;
  }

  async chainSettledSince(params: {
    cursor: string;
    limit: number;
  }): Promise<Array<{ originalRequestId: string; startedAt: number; settledAt: number }>> {
    return this.db.transaction(async (client) => {
      const locked = await client.query<{ locked: boolean }>(CHAIN_SWEEP_LOCK);
      if (!locked.rows[0]?.locked) return [];
      const now = this.options.databaseTime ? Date.now() + this.offsetMs : this.options.clock.now();
      // The cursor's time stays text end to end: finished_at has microseconds, and a cursor cut to milliseconds would
      // read its own last job again, forever.
      const cursor = (await client.query<{ at: string; seq: string }>(CURSOR_GET, [params.cursor])).rows[0];
      const from = cursor ? { at: cursor.at, seq: Number(cursor.seq) } : { at: new Date(now).toISOString(), seq: 0 };
      // Outcomes still committing may carry an earlier finished_at than this read: it stops a few seconds back.
      const rows = await client.query<PgRow>(SETTLED_SINCE, [
        from.at,
        from.seq,
        new Date(now - SETTLE_READ_LAG_MS),
        Math.max(1, params.limit),
      ]);
      const settled: Array<{ originalRequestId: string; startedAt: number; settledAt: number }> = [];
      let next = from;
      for (const row of rows.rows) {
        if (row["kind"] === "cursor") next = { at: row["settled_at"] as string, seq: Number(row["seq"]) };
        else
          settled.push({
            originalRequestId: row["original_request_id"] as string,
            startedAt: Number(row["started_at"]),
            settledAt: Number(row["settled_at"]),
          });
      }
      await client.query(CURSOR_SET, [params.cursor, next.at, next.seq]);
      return settled;
    });
  }

  async chainGet(params: { originalRequestId: string }): Promise<ChainRow | undefined> {
    if (unstorable(params.originalRequestId)) return this.assertOpen(undefined);
    const rows = await this.db.query(CHAIN_GET, [params.originalRequestId]);
    return rows[0] ? toChainRow(rows[0]) : undefined;
  }

  async chainJobCounts(params: { originalRequestId: string }): Promise<ChainJobCounts> {
    if (unstorable(params.originalRequestId)) return this.assertOpen(chainJobCountsOf([]));
    const rows = await this.db.query(CHAIN_JOB_COUNTS, [params.originalRequestId]);
    return chainJobCountsOf(
      rows.map((row) => ({
        status: String(row["status"]),
        jobs: Number(row["jobs"]),
        firstCreatedAt: requireMs(row["first_created_at"]),
        lastFinishedAt: toMs(row["last_finished_at"]),
      })),
    );
  }

  async jobAttemptListMany(params: { ids: string[] }): Promise<Map<string, JobAttemptRow[]>> {
    const attempts = new Map<string, JobAttemptRow[]>(params.ids.map((id) => [id, []]));
    const ids = params.ids.filter((id) => !unstorable(id));
    if (ids.length === 0) return this.assertOpen(attempts);
    for (const row of await this.db.query(ATTEMPT_LIST_MANY, [ids]))
      attempts.get(row["job_id"] as string)?.push(toAttemptRow(row));
    return attempts;
  }

  async idempotencyKeyDeleteMany(params: { limit: number }): Promise<number> {
    const rows = await this.db.query(IDEMPOTENCY_KEY_DELETE, [this.statementNow(), Math.max(0, params.limit)]);
    return rows.length;
  }

  async jobStats(params: { byOperation?: boolean } = {}): Promise<JobStats> {
    const withOperations = params.byOperation ?? true;
    const now = this.statementNow();
    const [counts, due, paused] = await Promise.all([
      withOperations
        ? this.db.query(COUNT_BY_OPERATION, [], "opqueue_stats_counts")
        : this.db.query(COUNT_BY_STATUS, [], "opqueue_stats_status_counts"),
      this.db.query(OLDEST_DUE, [now], "opqueue_stats_due"),
      this.db.query(PAUSED_DUE, [now], "opqueue_stats_paused_due"),
    ]);
    const byStatus = Object.fromEntries(JOB_STATUSES.map((status) => [status, 0])) as Record<JobStatus, number>;
    for (const row of counts) byStatus[row["status"] as JobStatus] += Number(row["count"]);
    const byOperation = withOperations
      ? counts.map((row) => ({
          operationId: row["operation_id"] as string,
          status: row["status"] as JobStatus,
          count: Number(row["count"]),
        }))
      : [];
    const pausedDue = paused.map((row) => ({
      operationId: row["operation_id"] as string,
      count: Number(row["count"]),
    }));
    return { byStatus, byOperation, oldestDueRunAt: toMs(due[0]?.["oldest"]), pausedDue };
  }

  async jobAttemptList(params: { id: string }): Promise<JobAttemptRow[]> {
    if (unstorable(params.id)) return this.assertOpen([]);
    return (await this.db.query(ATTEMPT_LIST, [params.id])).map(toAttemptRow);
  }

  async attemptBuckets(params: { since: number; bucketMs: number }): Promise<AttemptBucket[]> {
    requireWholeMinutes(params);
    const rows = await this.db.query(ATTEMPT_BUCKETS, [new Date(params.since), params.since, params.bucketMs]);
    return toBuckets({
      ...params,
      now: this.now(),
      rows: rows.map((row) => ({
        slot: Number(row["slot"]),
        outcome: String(row["outcome"]),
        count: Number(row["count"]),
      })),
    });
  }

  async jobAvailableListen(
    onAvailable: (runAt: number) => void,
    onAbort?: (jobId: string) => void,
  ): Promise<() => Promise<void>> {
    return this.listen({
      channel: this.options.channel,
      onNotify: (payload) => {
        // A running job cancelled (jobCancelRunningSql): the node delivering it aborts the exchange.
        if (payload?.startsWith("abort:")) {
          onAbort?.(payload.slice("abort:".length));
          return;
        }
        const runAt = Number(payload);
        onAvailable(Number.isFinite(runAt) ? runAt : this.now());
      },
      onReconnect: () => onAvailable(this.now()),
    });
  }

  async operationLimitsConfigure(params: {
    limits: Array<{ operationId: string; limits: OperationLimits }>;
  }): Promise<void> {
    await flow.configureLimits(this.db, { ...params, now: this.statementNow() });
  }

  async operationControlList(): Promise<OperationControl[]> {
    return flow.controlList(this.db);
  }

  async operationPause(params: { operationId: string; actor: string }): Promise<OperationControl> {
    return flow.pause(this.db, { ...params, now: this.statementNow() });
  }

  async operationResume(params: { operationId: string }): Promise<OperationControl> {
    return flow.resume(this.db, { ...params, now: this.statementNow() });
  }

  async operationLimitsSet(params: {
    operationId: string;
    limits: OperationLimits;
    source: LimitsSource;
    actor: string;
  }): Promise<OperationControl> {
    return flow.setLimits(this.db, { ...params, now: this.statementNow() });
  }

  async concurrencyKeyPause(params: { key: string; actor: string }): Promise<PausedKey> {
    return flow.pauseKey(this.db, { ...params, now: this.statementNow() });
  }

  async concurrencyKeyResume(params: { key: string }): Promise<boolean> {
    if (unstorable(params.key)) return this.assertOpen(false);
    return flow.resumeKey(this.db, { ...params, now: this.statementNow() });
  }

  async pausedKeyList(): Promise<PausedKey[]> {
    return flow.pausedKeyList(this.db);
  }

  async rateBucketDeleteMany(): Promise<number> {
    return (await this.db.query(`${DELETE_BUCKETS} RETURNING 1`, [this.statementNow()])).length;
  }

  async scheduleCreate(params: {
    schedule: ScheduleFields;
    revision: string;
    actor: string;
    maxSchedules: number;
  }): Promise<ScheduleCreateOutcome> {
    return schedules.createSchedule(this.db, { ...params, now: this.statementNow() });
  }

  async scheduleGet(params: { name: string }): Promise<ScheduleRow | undefined> {
    if (unstorable(params.name)) return this.assertOpen(undefined);
    return schedules.getSchedule(this.db, params.name);
  }

  async scheduleList(): Promise<ScheduleRow[]> {
    return schedules.listSchedules(this.db);
  }

  async scheduleUpdate(params: {
    schedule: ScheduleFields;
    ifRevision: string;
    revision: string;
    actor: string;
  }): Promise<ScheduleUpdateOutcome> {
    if (unstorable(params.schedule.name)) return this.assertOpen({ kind: "not_found" });
    return schedules.updateSchedule(this.db, { ...params, now: this.statementNow() });
  }

  async schedulePause(params: { name: string; actor: string }): Promise<ScheduleWriteOutcome<"paused">> {
    if (unstorable(params.name)) return this.assertOpen({ kind: "not_found" });
    return schedules.pauseSchedule(this.db, { ...params, now: this.statementNow() });
  }

  async scheduleResume(params: { name: string }): Promise<ScheduleWriteOutcome<"resumed">> {
    if (unstorable(params.name)) return this.assertOpen({ kind: "not_found" });
    return schedules.resumeSchedule(this.db, params);
  }

  async scheduleDelete(params: { name: string }): Promise<ScheduleWriteOutcome<"deleted">> {
    if (unstorable(params.name)) return this.assertOpen({ kind: "not_found" });
    return schedules.deleteSchedule(this.db, params);
  }

  /**
   * A LISTEN connection of its own on the schedules' channel: schedules change seldom, and a node that has not heard of
   * a change fires nothing wrong meanwhile (a tick is checked against the schedule's revision), only late.
   */
  async scheduleChangeListen(onChange: () => void): Promise<() => Promise<void>> {
    return this.listen({ channel: this.options.scheduleChannel, onNotify: () => onChange(), onReconnect: onChange });
  }

  /** Opens a LISTEN connection on `channel`, closed with the store; resolves to the function that closes it. */
  private async listen(options: {
    channel: string;
    onNotify: (payload: string | undefined) => void;
    onReconnect: () => void;
  }): Promise<() => Promise<void>> {
    this.db.assertOpen();
    const { settings } = this.db;
    const listener = new NotificationListener({
      url: settings.url,
      applicationName: `${settings.applicationName}-listener`,
      connectionOptions: settings.options,
      ...options,
      ...(this.options.onPoolError ? { onError: this.options.onPoolError } : {}),
    });
    try {
      await listener.start();
    } catch (error) {
      throw mapError(error);
    }
    this.listeners.add(listener);
    return async () => {
      this.listeners.delete(listener);
      await listener.stop();
    };
  }

  async close(): Promise<void> {
    if (this.db.isClosed) return;
    await Promise.all([...this.listeners].map((listener) => listener.stop()));
    this.listeners.clear();
    // Let queued inserts go out first: their callers are waiting for a commit.
    await this.inserts.drain();
    await this.db.close();
  }
}

/**
 * The embedded SQLite engine as a `Store`. better-sqlite3 is synchronous, and a durable commit waits for an fsync,
 * so the connection lives on a thread of its own (sqlite-thread.ts running `SqliteEngine`, sqlite-engine.ts) and
 * the event loop never waits for the disk: it goes on parsing and answering requests while a commit is under way.
 *
 * Group commit: the inserts of one turn of the event loop go to the thread as one message, and the thread commits
 * every insert message that arrived while it was busy in one transaction (one fsync). The thread never waits for a
 * round trip to this side to learn of more work: the batch grows with the load and the commit's cost, and one insert
 * alone is not delayed. No promise resolves before its commit.
 *
 * The thread is referenced (keeps the process alive) only while a call is in flight, like a socket with a
 * request outstanding; an idle store does not hold the process open.
 */
import { Worker } from "node:worker_threads";
import type { Clock } from "../../clock.js";
import {
  createdJobRow,
  StoreUnavailableError,
  requireWholeMinutes,
  type AttemptBucket,
  type DeadJobFilter,
  type JobCancelOutcome,
  type JobInsertOutcome,
  type JobInsertParams,
  type JobListParams,
  type JobRetryOutcome,
  type JobStats,
  type Store,
  type AttemptRefund,
} from "../store.js";
import { type LeaseLimits } from "../../job/job.js";
import { type JobAttempt, type JobAttemptRow, type JobOutcome, type JobRow } from "../../job/job.js";
import { deserializeError, type EngineCall, type EngineMethod, type FromThread, type InsertAnswer } from "./thread-protocol.js";

/** Most inserts in one message to the thread (which commits at most this many at once, too). */
const MAX_INSERT_BATCH = 512;

interface PendingInsert {
  params: JobInsertParams;
  resolve: (outcome: JobInsertOutcome) => void;
  reject: (error: unknown) => void;
}

interface PendingCall {
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/** Starts the thread; from the TypeScript sources (tests, `tsx`) it loads them through tsx as the caller does. */
function startThread(path: string): Worker {
  const fromSources = import.meta.url.endsWith(".ts");
  const entry = new URL(fromSources ? "./sqlite-thread.ts" : "./sqlite-thread.js", import.meta.url);
  if (!fromSources) return new Worker(entry, { workerData: { path } });
  const boot = `import("tsx/esm/api").then((tsx) => { tsx.register(); return import(${JSON.stringify(entry.href)}); })`;
  return new Worker(boot, { eval: true, workerData: { path } });
}

/** The embedded engine. Open it with `SqliteStore.open`. */
export class SqliteStore implements Store {
  readonly engine = "sqlite";
  private readonly worker: Worker;
  private readonly clock: Clock;
  private readonly calls = new Map<number, PendingCall>();
  private nextCallId = 1;
  private pendingInserts: PendingInsert[] = [];
  private insertScheduled = false;
  /** The batches of inserts on their way to the thread or committing. */
  private readonly insertsInFlight = new Set<Promise<void>>();
  /** Set once `close` starts: no new calls are taken. */
  private closing: Promise<void> | null = null;
  /** Why the thread is gone, once it is. */
  private stopped: Error | null = null;

  private constructor(worker: Worker, clock: Clock) {
    this.worker = worker;
    this.clock = clock;
    worker.unref();
    worker.on("message", (message: FromThread) => {
      if (message.kind === "answer") this.answer(message);
    });
    worker.on("error", (error) => this.stop(new StoreUnavailableError(`the SQLite thread failed: ${error.message}`)));
    worker.on("exit", () => this.stop(new StoreUnavailableError("the store is closed")));
  }

  /**
   * Opens (creating if needed) the database at `path` (`:memory:` for a throwaway one) on a new thread, takes the
   * exclusive lock and applies pending migrations. Rejects with `StoreLockedError` if another process holds the file.
   */
  static async open(options: { path: string; clock: Clock }): Promise<SqliteStore> {
    const worker = startThread(options.path);
    await new Promise<void>((resolve, reject) => {
      const settle = (outcome: { error?: Error }) => {
        worker.off("message", onMessage).off("error", onError).off("exit", onExit);
        if (outcome.error) reject(outcome.error);
        else resolve();
      };
      const onMessage = (message: FromThread) => {
        if (message.kind === "ready") settle({});
        else if (message.kind === "failed") settle({ error: deserializeError(message.error) });
      };
      const onError = (error: Error) => settle({ error });
      const onExit = (code: number) => settle({ error: new Error(`the SQLite thread exited (code ${code}) while opening`) });
      worker.on("message", onMessage).on("error", onError).on("exit", onExit);
    });
    return new SqliteStore(worker, options.clock);
  }

  private call<T>(method: EngineMethod, ...args: unknown[]): Promise<T> {
    if (this.closing !== null && method !== "close") return Promise.reject(new StoreUnavailableError("the store is closed"));
    return this.send<T>(method, args);
  }

  private send<T>(method: EngineMethod, args: unknown[]): Promise<T> {
    if (this.stopped) return Promise.reject(this.stopped);
    const id = this.nextCallId++;
    const call: EngineCall = { id, method, args, now: this.clock.now() };
    return new Promise<T>((resolve, reject) => {
      if (this.calls.size === 0) this.worker.ref();
      this.calls.set(id, { resolve: resolve as (value: unknown) => void, reject });
      this.worker.postMessage(call);
    });
  }

  private answer(message: Extract<FromThread, { kind: "answer" }>): void {
    const pending = this.calls.get(message.id);
    if (!pending) return;
    this.calls.delete(message.id);
    if (this.calls.size === 0 && this.closing === null) this.worker.unref();
    if (message.ok) pending.resolve(message.value);
    else pending.reject(deserializeError(message.error));
  }

  /** The thread is gone: every call still waiting fails. */
  private stop(reason: Error): void {
    this.stopped ??= reason;
    for (const pending of this.calls.values()) pending.reject(this.stopped);
    this.calls.clear();
    for (const insert of this.pendingInserts.splice(0)) insert.reject(this.stopped);
  }

  ping(): Promise<void> {
    return this.call("ping");
  }

  /** The one clock of a one-process database: this process's. */
  now(): number {
    return this.clock.now();
  }

  async clockOffset(): Promise<number> {
    return 0;
  }

  jobInsert(params: JobInsertParams): Promise<JobInsertOutcome> {
    if (this.closing !== null) return Promise.reject(new StoreUnavailableError("the store is closed"));
    if (this.stopped) return Promise.reject(this.stopped);
    return new Promise((resolve, reject) => {
      this.pendingInserts.push({ params, resolve, reject });
      this.scheduleInserts();
    });
  }

  /** Sends the waiting inserts after this turn of the event loop. */
  private scheduleInserts(): void {
    if (this.insertScheduled) return;
    this.insertScheduled = true;
    setImmediate(() => {
      this.insertScheduled = false;
      this.sendInserts();
    });
  }

  private sendInserts(): void {
    while (this.pendingInserts.length > 0) this.sendInsertBatch(this.pendingInserts.splice(0, MAX_INSERT_BATCH));
  }

  private sendInsertBatch(batch: PendingInsert[]): void {
    const inFlight: Promise<void> = this.send<InsertAnswer[]>(
      "jobInsertMany",
      [batch.map((item) => item.params)],
    ).then(
      (settled) => {
        batch.forEach((item, index) => {
          const answer = settled[index];
          if (!answer) item.reject(new Error("no outcome for an insert"));
          else if (!answer.ok) item.reject(deserializeError(answer.error));
          else if ("created" in answer) item.resolve({ kind: "created", job: createdJobRow(item.params, answer.created) });
          else item.resolve(answer.value);
        });
      },
      (error: unknown) => {
        for (const item of batch) item.reject(error);
      },
    ).finally(() => this.insertsInFlight.delete(inFlight));
    this.insertsInFlight.add(inFlight);
  }

  jobGet(params: { id: string }): Promise<JobRow | undefined> {
    return this.call("jobGet", params);
  }

  jobList(params: JobListParams): Promise<JobRow[]> {
    return this.call("jobList", params);
  }

  jobCancel(params: { id: string }): Promise<JobCancelOutcome> {
    return this.call("jobCancel", params);
  }

  jobRetry(params: { id: string }): Promise<JobRetryOutcome> {
    return this.call("jobRetry", params);
  }

  chainCancel(params: { originalRequestId: string }): Promise<JobRow[]> {
    return this.call("chainCancel", params);
  }

  async jobClaimMany(params: { limit: number }): Promise<JobRow[]> {
    if (params.limit <= 0) return [];
    return JSON.parse(await this.call<string>("jobClaimManyJson", params)) as JobRow[];
  }

  jobCompleteMany(params: { outcomes: JobOutcome[] }): Promise<boolean[]> {
    if (params.outcomes.length === 0) return Promise.resolve([]);
    return this.call("jobCompleteMany", params);
  }

  jobHeartbeatMany(params: { jobs: JobAttempt[] }): Promise<void> {
    if (params.jobs.length === 0) return Promise.resolve();
    return this.call("jobHeartbeatMany", params);
  }

  jobListExpired(params: { lease: LeaseLimits; limit: number }): Promise<JobRow[]> {
    return this.call("jobListExpired", params);
  }

  jobRequeueMany(params: { jobs: JobAttempt[]; delayMs: number; errorBody: string; refund: AttemptRefund }): Promise<number> {
    if (params.jobs.length === 0) return Promise.resolve(0);
    return this.call("jobRequeueMany", params);
  }

  jobNextRunAt(): Promise<number | null> {
    return this.call("jobNextRunAt");
  }

  cronTickInsert(params: {
    name: string;
    tickAt: number;
    job: JobInsertParams;
  }): Promise<JobInsertOutcome | { kind: "already_enqueued" }> {
    return this.call("cronTickInsert", params);
  }

  cronTickDeleteMany(params: { olderThanMs: number }): Promise<number> {
    return this.call("cronTickDeleteMany", params);
  }

  attemptCountDeleteMany(params: { olderThanMs: number }): Promise<number> {
    return this.call("attemptCountDeleteMany", params);
  }

  jobDeleteFinishedMany(params: { olderThanMs: number; limit: number }): Promise<number> {
    return this.call("jobDeleteFinishedMany", params);
  }

  jobStats(params?: { byOperation?: boolean }): Promise<JobStats> {
    return this.call("jobStats", params);
  }

  jobAttemptList(params: { id: string }): Promise<JobAttemptRow[]> {
    return this.call("jobAttemptList", params);
  }

  async attemptBuckets(params: { since: number; bucketMs: number }): Promise<AttemptBucket[]> {
    // Checked on this side: an error thrown in the database thread comes back as a plain Error.
    requireWholeMinutes(params);
    return this.call("attemptBuckets", params);
  }

  jobRetryDeadMany(params: { filter: DeadJobFilter; limit: number }): Promise<JobRow[]> {
    return this.call("jobRetryDeadMany", params);
  }

  /** The connection's `synchronous` and `locking_mode`, which no other connection can read (for tests). */
  connectionSettings(): Promise<{ synchronous: number; lockingMode: string }> {
    return this.call("connectionSettings");
  }

  /**
   * No other process can write to the file (SQLite serves one node), so every enqueue and retry already wakes the
   * dispatcher through the in-process telemetry events; there is nothing to listen to.
   */
  async jobAvailableListen(_onAvailable: (runAt: number) => void): Promise<() => Promise<void>> {
    if (this.closing !== null || this.stopped) throw new StoreUnavailableError("the store is closed");
    return async () => undefined;
  }

  /** Commits the inserts still waiting, closes the connection (releasing the lock) and ends the thread. */
  close(): Promise<void> {
    this.closing ??= this.closeNow();
    return this.closing;
  }

  private async closeNow(): Promise<void> {
    if (this.stopped) return;
    for (;;) {
      this.sendInserts();
      if (this.insertsInFlight.size === 0) break;
      await Promise.all([...this.insertsInFlight]);
    }
    const exited = new Promise<void>((resolve) => this.worker.once("exit", () => resolve()));
    this.worker.ref();
    try {
      await this.call("close");
    } catch (error) {
      if (!this.stopped) throw error;
    }
    await exited;
  }
}

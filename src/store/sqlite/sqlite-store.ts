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
 * request outstanding; an idle store does not hold the process open. A closed store's thread is kept, idle and
 * unreferenced, for the next store the process opens (`idleThreads`): starting a thread costs more than the rest of
 * opening a store, and a test run opens hundreds.
 */
import { Worker } from "node:worker_threads";
import type { Clock } from "../../clock.js";
import { requireWholeMinutes } from "../attempt-buckets.js";
import { createdJobRow } from "../created-row.js";
import { GroupCommit, type Settled } from "../group-commit.js";
import type { JobAttempt, JobOutcome, JobRow } from "../../job/job.js";
import {
  StoreUnavailableError,
  type AttemptBucket,
  type AttemptRefund,
  type DatabaseBackupSummary,
  type JobInsertOutcome,
  type JobInsertParams,
  type OnlineBackup,
  type Store,
} from "../store.js";
import type { SqliteEngine } from "./sqlite-engine.js";
import {
  deserializeError,
  type EngineCall,
  type EngineMethod,
  type FromThread,
  type InsertAnswer,
  type ToThread,
} from "./thread-protocol.js";

/** The engine's method `M`, as a function type. */
type EngineFunction<M extends EngineMethod> = SqliteEngine[M] extends (...args: infer A) => infer R
  ? (...args: A) => R
  : never;

/** Most inserts in one message to the thread (which commits at most this many at once, too). */
const MAX_INSERT_BATCH = 512;

interface PendingCall {
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/**
 * Starts a thread; from the TypeScript sources (tests, `tsx`) it loads them through tsx as the caller does, the tsx
 * found beside these sources whatever the working directory.
 */
function startThread(path: string): Worker {
  const fromSources = import.meta.url.endsWith(".ts");
  const entry = new URL(fromSources ? "./sqlite-thread.ts" : "./sqlite-thread.js", import.meta.url);
  if (!fromSources) return new Worker(entry, { workerData: { path } });
  const tsx = JSON.stringify(import.meta.resolve("tsx/esm/api"));
  const boot = `import(${tsx}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry.href)}); })`;
  return new Worker(boot, { eval: true, workerData: { path } });
}

/** Most threads of closed stores kept for the next stores this process opens. */
const MAX_IDLE_THREADS = 4;

/**
 * Threads whose store was closed, waiting (unreferenced) for the next store this process opens, each with what takes
 * its idle listeners off (only those: a Worker's own listeners reference its port).
 */
const idleThreads = new Map<Worker, () => void>();

/** A thread for the database at `path`: an idle one told to open it, or a new one. */
function acquireThread(path: string): Worker {
  for (const [worker, detach] of idleThreads) {
    idleThreads.delete(worker);
    detach();
    worker.ref();
    worker.postMessage({ kind: "open", path } satisfies ToThread);
    return worker;
  }
  return startThread(path);
}

/** Keeps the thread of a closed store for the next one; it ends if too many wait already, and leaves if it fails. */
function releaseThread(worker: Worker): void {
  worker.unref();
  if (idleThreads.size >= MAX_IDLE_THREADS) {
    void worker.terminate();
    return;
  }
  const gone = () => {
    idleThreads.get(worker)?.();
    idleThreads.delete(worker);
  };
  worker.on("error", gone).on("exit", gone);
  idleThreads.set(worker, () => worker.off("error", gone).off("exit", gone));
}

/** The embedded engine. Open it with `SqliteStore.open`. */
export class SqliteStore implements Store, OnlineBackup {
  readonly engine = "sqlite";
  private readonly worker: Worker;
  private readonly clock: Clock;
  private readonly calls = new Map<number, PendingCall>();
  private nextCallId = 1;
  /** Inserts of one turn of the event loop go to the thread as one message (see the top of this file). */
  private readonly inserts = new GroupCommit<JobInsertParams, JobInsertOutcome>({
    send: (batch) => this.sendInserts(batch),
    maxBatch: MAX_INSERT_BATCH,
    // The thread commits whatever has arrived while it was busy: nothing is held back on this side.
    maxInFlight: Number.POSITIVE_INFINITY,
  });
  /**
   * Who `scheduleChangeListen` tells of a change of the schedules. This process is the file's only writer (SQLite
   * serves one node), so its own writes are every change there is: told once each commits, nothing to listen to.
   */
  private readonly scheduleListeners = new Set<() => void>();
  /** Set once `close` starts: no new calls are taken. */
  private closing: Promise<void> | null = null;
  /** Why the thread is gone, once it is. */
  private stopped: Error | null = null;

  private constructor(worker: Worker, clock: Clock) {
    this.worker = worker;
    this.clock = clock;
    worker.unref();
    worker.on("message", this.onMessage).on("error", this.onError).on("exit", this.onExit);
  }

  private readonly onMessage = (message: FromThread) => {
    if (message.kind === "answer") this.answer(message);
  };
  private readonly onError = (error: Error) =>
    this.stop(new StoreUnavailableError(`the SQLite thread failed: ${error.message}`));
  private readonly onExit = () => this.stop(new StoreUnavailableError("the store is closed"));

  /**
   * Opens (creating if needed) the database at `path` (`:memory:` for a throwaway one) on a thread of its own, takes
   * the exclusive lock and applies pending migrations. Rejects with `StoreLockedError` if another process holds the file.
   */
  static async open(options: { path: string; clock: Clock }): Promise<SqliteStore> {
    const worker = acquireThread(options.path);
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
      const onExit = (code: number) =>
        settle({ error: new Error(`the SQLite thread exited (code ${code}) while opening`) });
      worker.on("message", onMessage).on("error", onError).on("exit", onExit);
    });
    return new SqliteStore(worker, options.clock);
  }

  private call<T>(method: EngineMethod, ...args: unknown[]): Promise<T> {
    if (this.closing !== null && method !== "close")
      return Promise.reject(new StoreUnavailableError("the store is closed"));
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
    this.inserts.failWaiting(this.stopped);
  }

  /** An engine method of the Store's name, run on the thread: the same parameters, its answer as a promise. */
  private forward<M extends EngineMethod>(
    method: M,
  ): (...args: Parameters<EngineFunction<M>>) => Promise<ReturnType<EngineFunction<M>>> {
    return (...args) => this.call(method, ...args);
  }

  readonly ping = this.forward("ping");

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
    return this.inserts.add(params);
  }

  async jobInsertMany(params: { jobs: JobInsertParams[] }): Promise<Array<Settled<JobInsertOutcome>>> {
    if (this.closing !== null) throw new StoreUnavailableError("the store is closed");
    if (this.stopped) throw this.stopped;
    if (params.jobs.length === 0) return [];
    // One message: the thread commits a call's inserts in one transaction, however many (see sqlite-thread.ts).
    return this.sendInserts(params.jobs);
  }

  /** One batch to the thread; a created job is rebuilt here from what the thread answered of it. */
  private async sendInserts(batch: JobInsertParams[]): Promise<Array<Settled<JobInsertOutcome>>> {
    const answers = await this.send<InsertAnswer[]>("jobInsertMany", [batch]);
    return answers.map((answer, index): Settled<JobInsertOutcome> => {
      if (!answer.ok) return { ok: false, error: deserializeError(answer.error) };
      if ("created" in answer)
        return {
          ok: true,
          value: { kind: "created", job: createdJobRow(batch[index] as JobInsertParams, answer.created) },
        };
      return { ok: true, value: answer.value };
    });
  }

  readonly jobGet = this.forward("jobGet");
  readonly jobList = this.forward("jobList");
  readonly jobCancel = this.forward("jobCancel");
  readonly jobRetry = this.forward("jobRetry");
  readonly chainCancel = this.forward("chainCancel");
  readonly jobRunNow = this.forward("jobRunNow");
  readonly userErase = this.forward("userErase");
  readonly payloadPage = this.forward("payloadPage");
  readonly payloadRewrite = this.forward("payloadRewrite");
  readonly adminActionList = this.forward("adminActionList");
  readonly adminTokenRevoke = this.forward("adminTokenRevoke");
  readonly adminTokenCutoffRaise = this.forward("adminTokenCutoffRaise");
  readonly adminTokenIsRevoked = this.forward("adminTokenIsRevoked");
  readonly adminRevocationList = this.forward("adminRevocationList");
  async jobClaimMany(params: { limit: number }): Promise<JobRow[]> {
    if (params.limit <= 0) return [];
    return JSON.parse(await this.call<string>("jobClaimMany", params)) as JobRow[];
  }

  jobSetStateIfRunningMany(params: { outcomes: JobOutcome[] }): Promise<boolean[]> {
    if (params.outcomes.length === 0) return Promise.resolve([]);
    return this.call("jobSetStateIfRunningMany", params);
  }

  jobHeartbeatMany(params: { jobs: JobAttempt[] }): Promise<void> {
    if (params.jobs.length === 0) return Promise.resolve();
    return this.call("jobHeartbeatMany", params);
  }

  readonly jobListExpired = this.forward("jobListExpired");
  readonly jobMarkAsyncIfRunning = this.forward("jobMarkAsyncIfRunning");
  readonly jobHeartbeatExternal = this.forward("jobHeartbeatExternal");
  readonly jobSetStateExternal = this.forward("jobSetStateExternal");
  readonly jobAsyncStateGet = this.forward("jobAsyncStateGet");
  jobRequeueMany(params: {
    jobs: JobAttempt[];
    delayMs: number;
    errorBody: string;
    refund: AttemptRefund;
  }): Promise<number> {
    if (params.jobs.length === 0) return Promise.resolve(0);
    return this.call("jobRequeueMany", params);
  }

  readonly jobNextRunAt = this.forward("jobNextRunAt");
  readonly cronTickInsert = this.forward("cronTickInsert");
  readonly cronTickDeleteMany = this.forward("cronTickDeleteMany");
  readonly attemptCountDeleteMany = this.forward("attemptCountDeleteMany");
  readonly jobDeleteFinishedMany = this.forward("jobDeleteFinishedMany");
  readonly jobExpireMany = this.forward("jobExpireMany");
  readonly jobAttemptListMany = this.forward("jobAttemptListMany");
  readonly jobCallbackDueList = this.forward("jobCallbackDueList");
  readonly jobCallbackEnqueue = this.forward("jobCallbackEnqueue");
  readonly chainSettledDueList = this.forward("chainSettledDueList");
  readonly chainOnSettledEnqueue = this.forward("chainOnSettledEnqueue");
  readonly chainSettledSince = this.forward("chainSettledSince");
  readonly chainGet = this.forward("chainGet");
  readonly chainJobCounts = this.forward("chainJobCounts");
  readonly idempotencyKeyDeleteMany = this.forward("idempotencyKeyDeleteMany");
  readonly jobStats = this.forward("jobStats");
  readonly jobAttemptList = this.forward("jobAttemptList");
  async attemptBuckets(params: { since: number; bucketMs: number }): Promise<AttemptBucket[]> {
    // Checked on this side: an error thrown in the database thread comes back as a plain Error.
    requireWholeMinutes(params);
    return this.call("attemptBuckets", params);
  }

  readonly jobRetryDeadMany = this.forward("jobRetryDeadMany");
  readonly jobCancelMany = this.forward("jobCancelMany");
  readonly operationLimitsConfigure = this.forward("operationLimitsConfigure");
  readonly operationControlList = this.forward("operationControlList");
  readonly operationPause = this.forward("operationPause");
  readonly operationResume = this.forward("operationResume");
  readonly operationLimitsSet = this.forward("operationLimitsSet");
  readonly concurrencyKeyPause = this.forward("concurrencyKeyPause");
  readonly concurrencyKeyResume = this.forward("concurrencyKeyResume");
  readonly pausedKeyList = this.forward("pausedKeyList");
  readonly rateBucketDeleteMany = this.forward("rateBucketDeleteMany");
  readonly statisticsRefresh = this.forward("statisticsRefresh");
  readonly cronTickLatestMany = this.forward("cronTickLatestMany");
  readonly scheduleGet = this.forward("scheduleGet");
  readonly scheduleList = this.forward("scheduleList");
  readonly scheduleCreate = this.announcing(this.forward("scheduleCreate"));
  readonly scheduleUpdate = this.announcing(this.forward("scheduleUpdate"));
  readonly schedulePause = this.announcing(this.forward("schedulePause"));
  readonly scheduleResume = this.announcing(this.forward("scheduleResume"));
  readonly scheduleDelete = this.announcing(this.forward("scheduleDelete"));

  /** `write`, then (once it has committed) every `scheduleChangeListen` listener is told. */
  private announcing<A extends unknown[], R>(write: (...args: A) => Promise<R>): (...args: A) => Promise<R> {
    return async (...args) => {
      const answer = await write(...args);
      for (const listener of this.scheduleListeners) listener();
      return answer;
    };
  }

  async scheduleChangeListen(onChange: () => void): Promise<() => Promise<void>> {
    if (this.closing !== null || this.stopped) throw new StoreUnavailableError("the store is closed");
    // A set keeps one entry per function: each listening call gets its own.
    const listener = () => onChange();
    this.scheduleListeners.add(listener);
    return async () => {
      this.scheduleListeners.delete(listener);
    };
  }
  /**
   * Copies the database into a new file at `to` on the thread that owns the connection, which serves every other call
   * between the copy's batches (online-backup.ts): enqueues are committed while it runs.
   */
  databaseBackup(params: { to: string }): Promise<DatabaseBackupSummary> {
    return this.call("databaseBackup", params);
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

  /** Commits the inserts still waiting and closes the connection (releasing the lock); the thread waits for the next store. */
  close(): Promise<void> {
    this.closing ??= this.closeNow();
    return this.closing;
  }

  private async closeNow(): Promise<void> {
    if (this.stopped) return;
    await this.inserts.drain();
    this.worker.ref();
    try {
      await this.call("close");
    } catch (error) {
      if (!this.stopped) throw error;
    }
    if (this.stopped) return;
    // No call of this store reaches the thread again, nor does the thread's answer to another come here.
    this.stop(new StoreUnavailableError("the store is closed"));
    this.worker.off("message", this.onMessage).off("error", this.onError).off("exit", this.onExit);
    releaseThread(this.worker);
  }
}

/**
 * The Store: the only door to the database. Every query opqueue runs is a method here, named noun-first
 * (`jobInsert`, `jobClaimMany`), taking one params object; `Many` marks a batch. Two engines implement it,
 * `src/store/sqlite/` (embedded, one process) and `src/store/postgres/` (any number of nodes), and both pass the one
 * suite of `test/store/conformance/`.
 *
 * Every state change names the state it expects to leave, so a write that lost a race changes nothing.
 */
import type {
  CallbackSpec,
  CallbackToken,
  JobAsyncState,
  JobAttempt,
  JobAttemptRow,
  JobOutcome,
  JobRow,
  LeaseLimits,
  RunTime,
} from "../job/job.js";
import type { LimitsSource, OperationControl, OperationLimits, PausedKey } from "../flow/limits.js";
import type { AdminAction, JobStatus } from "../job/statuses.js";
import type { CronTick, ScheduleFields, ScheduleRow } from "../schedules/schedule.js";
import type { Settled } from "./group-commit.js";

/** What a new job is made of; the store adds status, attempt and times. */
export type JobInsertParams = Pick<
  JobRow,
  | "id"
  | "operationId"
  | "priority"
  | "maxAttempts"
  | "dedupeKey"
  | "concurrencyKey"
  | "rateKey"
  | "enqueuedByOperationId"
  | "parentJobId"
  | "originalRequestId"
  | "userId"
  | "authority"
  | "request"
  | "traceparent"
  | "callbacks"
> & {
  /** When the job becomes claimable; also the new run time of the job a dedupe upsert refreshes. */
  runTime: RunTime;
  /**
   * When the job expires if not started by then: an instant, or a time after the store's now (`delayMs`); null never.
   * A dedupe upsert gives the job it refreshes this expiry too.
   */
  expiry: RunTime | null;
  /** Most jobs one chain may ever create. */
  spawnCap: number;
  /** The producer's idempotency key, remembered with the job it answered (docs/api.md, "Idempotency"). */
  idempotency?: IdempotencyParams | undefined;
  /**
   * The chain's on_settled callback, with the id of the job setting it: only with the chain's first job (otherwise the
   * insert answers `chain_exists` and changes nothing).
   */
  onSettled?: CallbackSpec | undefined;
};

/** An idempotency key as the store keeps it: per caller, for a window, with the request it came with. */
export interface IdempotencyParams {
  /** Whose key it is: the calling operation and the user of the assertion. */
  scope: string;
  key: string;
  /** A digest of the enqueue body: the same key with another body is refused, not answered. */
  fingerprint: string;
  /** How long the key is remembered after its first use. */
  windowMs: number;
}

/** The result of `jobInsert`, decided atomically with the write (docs/api.md, "Enqueue, step by step", steps 5 to 7). */
export type JobInsertOutcome =
  /** A new job; `cancelled` with `cancelled-by-chain` when its chain was cancelled. */
  | { kind: "created"; job: JobRow }
  /** A claimable job held the dedupe key: its run time and request were refreshed. */
  | { kind: "deduplicated"; job: JobRow }
  /**
   * A claimable job holds the dedupe key for another operation, or runs under another authority (another user, or
   * another kind of authority): an upsert never makes one user's request run under another's. Nothing changed.
   */
  | { kind: "dedupe_conflict"; holder: JobRow }
  /** The chain has already created `spawnCap` jobs; nothing changed. */
  | { kind: "spawn_cap_exceeded" }
  /** The idempotency key was used within its window with the same body: the job that call answered, as it is now. */
  | { kind: "idempotent_replay"; job: JobRow }
  /** The idempotency key was used within its window with another body; nothing changed. */
  | { kind: "idempotency_conflict"; job: JobRow }
  /** `onSettled` was given for a chain that already has jobs; nothing changed. */
  | { kind: "chain_exists" };

/** The result of `jobCancel`. */
export type JobCancelOutcome =
  /** `wasRunning`: the job was `running` (cancelled with `abortRunning`); its node is to abort the delivery. */
  | { kind: "cancelled"; job: JobRow; wasRunning: boolean }
  | { kind: "not_found" }
  /** A running job, and `abortRunning` was not asked for: nothing changed. */
  | { kind: "running"; job: JobRow }
  | { kind: "not_cancellable"; job: JobRow };

/** The result of `jobRetry`. */
export type JobRetryOutcome =
  | { kind: "retried"; job: JobRow }
  | { kind: "not_found" }
  | { kind: "not_retryable"; job: JobRow }
  | { kind: "dedupe_conflict"; holder: JobRow };

/** The result of `jobRunNow`. */
export type JobRunNowOutcome =
  | { kind: "moved"; job: JobRow }
  | { kind: "not_found" }
  /** Running or finished: nothing waits to be moved. */
  | { kind: "not_waiting"; job: JobRow };

/** The result of `scheduleCreate`. */
export type ScheduleCreateOutcome =
  | { kind: "created"; schedule: ScheduleRow }
  /** A schedule has that name: nothing changed. */
  | { kind: "exists"; schedule: ScheduleRow }
  /** `maxSchedules` schedules exist already: nothing changed. */
  | { kind: "limit_reached"; maxSchedules: number };

/** The result of `scheduleUpdate`. */
export type ScheduleUpdateOutcome =
  | { kind: "updated"; schedule: ScheduleRow }
  | { kind: "not_found" }
  /** Someone changed the schedule since it was read (its revision is another): nothing changed. */
  | { kind: "revision_changed"; schedule: ScheduleRow };

/** The result of `schedulePause`, `scheduleResume` and `scheduleDelete`: the schedule as the write left it. */
export type ScheduleWriteOutcome<K extends "paused" | "resumed" | "deleted"> =
  { kind: K; schedule: ScheduleRow } | { kind: "not_found" };

/** The result of `cronTickInsert`. */
export type CronTickOutcome =
  | JobInsertOutcome
  /** Some node recorded the tick already (before a restart, or another node): nothing written. */
  | { kind: "already_enqueued" }
  /** A schedule's tick for a revision that is no longer in force, or while it is paused or gone: nothing written. */
  | { kind: "schedule_changed" };

/**
 * Why a target's call on an attempt (`jobHeartbeatExternal`, `jobSetStateExternal`) changed nothing; decided in the
 * call's own transaction, by `externalCallRefusal` on both engines.
 */
export type ExternalCallRefusal =
  | { kind: "not_found" }
  /** The job does not run that attempt (of that claim): it ended, was cancelled or rescued, or runs another one. */
  | { kind: "not_running"; job: JobRow }
  /**
   * The attempt runs, but this token may not act on it: the attempt was taken asynchronously with another token
   * (`other_token`), or the token expired while the attempt had not been taken asynchronously (`expired`).
   */
  | { kind: "token_refused"; job: JobRow; reason: "other_token" | "expired" };

/** The result of `jobHeartbeatExternal`. */
export type ExternalHeartbeatOutcome =
  /** The lease was renewed at `heartbeatAt`; `async` says whether the attempt runs asynchronously (which lease holds). */
  { kind: "renewed"; heartbeatAt: number; async: boolean } | ExternalCallRefusal;

/** The result of `jobSetStateExternal`. */
export type ExternalSetStateOutcome =
  /** The outcome was written; the job as it is now. */
  { kind: "written"; job: JobRow } | ExternalCallRefusal;

/** One administrator's action on one job. */
export interface AdminActionRow {
  /** When (ms since the epoch). */
  at: number;
  /** The admin token's `sub`. */
  actor: string;
  action: AdminAction;
}

/** Filters of the job list; every given filter must match. */
export interface JobListParams {
  statuses?: JobStatus[] | undefined;
  operationId?: string | undefined;
  originalRequestId?: string | undefined;
  userId?: string | undefined;
  parentJobId?: string | undefined;
  /** The job's current `dedupe_key` (a job requeued without its key no longer matches). */
  dedupeKey?: string | undefined;
  /** Only jobs created before this `seq` (the cursor). */
  beforeSeq?: number | undefined;
  limit: number;
}

/** Finished attempts per time bucket, by the status they left their job in. */
export interface AttemptBucket {
  /** Start of the bucket (ms since the epoch). */
  start: number;
  succeeded: number;
  retrying: number;
  dead: number;
  cancelled: number;
}

/** Whether an interrupted attempt put back to the queue still counts. */
export type AttemptRefund =
  /** A graceful shutdown: the attempt counts, but a job that was on its last attempt keeps one to run. */
  | "if-last"
  /** opqueue's own process could not send it (no file descriptor, no memory): the attempt never happened. */
  | "always";

/** How the jobs of a chain stand, counted by the database: however many, without reading them. */
export interface ChainJobCounts {
  jobs: number;
  /** Jobs by status; a status no job has is absent. */
  byStatus: Partial<Record<JobStatus, number>>;
  /** When its first job was created, and its last finished job finished (null: none has). Ms since the epoch. */
  firstCreatedAt: number | null;
  lastFinishedAt: number | null;
}

/** A chain as the store keeps it (docs/chains.md). Times are ms since the epoch. */
export interface ChainRow {
  originalRequestId: string;
  /** Jobs ever created in it, cancelled or not (the spawn cap's count). */
  jobsCreated: number;
  /** When its first job was enqueued; null for chains older than version 6 of the schema. */
  createdAt: number | null;
  /** When it was last seen settled by the chain sweeper (null: not since its last job was enqueued). */
  settledAt: number | null;
  cancelledAt: number | null;
  cancelledBy: string | null;
  /** Its on_settled callback with the job that set it, or null. */
  onSettled: (CallbackSpec & { job_id: string }) | null;
  onSettledFiredAt: number | null;
}

/** Filters of a bulk cancel; every given one must match, and at least one besides `statuses` is given. */
export interface JobCancelFilter {
  /** `pending`, `retrying` and `running` (this one aborts the delivery); default the first two. */
  statuses: Array<"pending" | "retrying" | "running">;
  operationId?: string | undefined;
  originalRequestId?: string | undefined;
  userId?: string | undefined;
  dedupeKey?: string | undefined;
  /** Created at or after this instant (ms since the epoch). */
  createdFrom?: number | undefined;
  /** Created before this instant. */
  createdBefore?: number | undefined;
}

/** Filters of a bulk retry of dead jobs. */
export interface DeadJobFilter {
  operationId?: string | undefined;
  originalRequestId?: string | undefined;
  userId?: string | undefined;
}

/** What metrics and the dashboard read from the store. */
export interface JobStats {
  byStatus: Record<JobStatus, number>;
  /** Counts by operation and status (only pairs that exist); empty when asked without them. */
  byOperation: Array<{ operationId: string; status: JobStatus; count: number }>;
  /**
   * `run_at` of the oldest claimable job that is due now, or null. A job a pause holds (its operation or its
   * concurrency key is paused) is not claimable and is left out: it is counted in `pausedDue` instead.
   */
  oldestDueRunAt: number | null;
  /** Jobs due now (`pending`/`retrying`) that a pause of their operation or concurrency key holds, by operation, sorted. */
  pausedDue: Array<{ operationId: string; count: number }>;
}

/** The only door to the database. */
export interface Store {
  /** Which engine this is, for messages and skips. */
  readonly engine: "sqlite" | "postgres";
  /**
   * The database's clock as this node best knows it (its own clock plus the offset last measured by `clockOffset`).
   * For timers and figures only: every decision of what is due or expired, and every time written, is the
   * database's own.
   */
  now(): number;
  /**
   * Measures how far the database's clock is ahead of this node's (negative: behind), in ms, and remembers it for
   * `now`. Zero where the two are one clock (SQLite, or a store driven by a test clock).
   */
  clockOffset(): Promise<number>;
  /** Resolves when the database answers and its schema is fully migrated; throws `StoreUnavailableError` otherwise. */
  ping(): Promise<void>;
  /** Inserts a job or upserts the claimable job holding its dedupe key; concurrent calls are committed together. */
  jobInsert(params: JobInsertParams): Promise<JobInsertOutcome>;
  /**
   * Inserts a batch as `jobInsert` would each of its items, in order, committed together (one transaction, one
   * fsync); each item settles on its own, so one failing item fails only itself.
   */
  jobInsertMany(params: { jobs: JobInsertParams[] }): Promise<Array<Settled<JobInsertOutcome>>>;
  /** One job by id. */
  jobGet(params: { id: string }): Promise<JobRow | undefined>;
  /** Jobs matching the filters, newest first, at most `limit`. */
  jobList(params: JobListParams): Promise<JobRow[]>;
  /**
   * `pending`/`retrying` → `cancelled` (`cancelled-by-admin`). This and the administrators' writes after it record who
   * made them (`actor`, the admin token's `sub`) for every job they change, in the same transaction (`adminActionList`).
   */
  jobCancel(params: { id: string; actor: string; abortRunning?: boolean }): Promise<JobCancelOutcome>;
  /**
   * Cancels up to `limit` jobs matching `filter`, newest first, as `jobCancel` with `abortRunning` would; returns them
   * (each with whether it was running).
   */
  jobCancelMany(params: {
    filter: JobCancelFilter;
    limit: number;
    actor: string;
  }): Promise<Array<{ job: JobRow; wasRunning: boolean }>>;
  /** `dead`/`cancelled` → `pending` with attempt 0 and run time now. */
  jobRetry(params: { id: string; actor: string }): Promise<JobRetryOutcome>;
  /** Marks the chain cancelled (remembering by whom) and cancels its claimable jobs; returns the jobs it cancelled. */
  chainCancel(params: { originalRequestId: string; actor: string }): Promise<JobRow[]>;
  /** A waiting job (`pending`/`retrying`) due now: its run time moves to now if later. */
  jobRunNow(params: { id: string; actor: string }): Promise<JobRunNowOutcome>;
  /** Who acted on job `jobId`, and how, oldest first. */
  adminActionList(params: { jobId: string }): Promise<AdminActionRow[]>;
  /**
   * Claims up to `limit` due jobs, each becoming `running` with attempt + 1: in claim order (priority DESC, run_at,
   * creation) with lanes taking turns within a priority, and only as the gates let (docs/flow-control.md, "The
   * claim"): no paused operation or key, each operation within its max_concurrency and rate, each concurrency key
   * within its limit (one running job by default), each rate key within its operation's rate_per_key.
   */
  jobClaimMany(params: { limit: number }): Promise<JobRow[]>;
  /**
   * Sets each job's state from an attempt's outcome, if the job is still `running` that attempt of that claim:
   * `succeeded` and `dead` end it (a `dead` one of a cancelled chain ends `cancelled-by-chain`), `retrying` puts it
   * back in the queue (the completer's outcomes and the rescuer's alike). Returns, per outcome, whether it was written
   * (false: someone else, a rescue, a cancel or another node, decided first).
   */
  jobSetStateIfRunningMany(params: { outcomes: JobOutcome[] }): Promise<boolean[]>;
  /** Renews the lease of in-flight jobs (those still `running` with that attempt), in one statement. */
  jobHeartbeatMany(params: { jobs: JobAttempt[] }): Promise<void>;
  /**
   * Running jobs whose lease has expired by the database's clock (no heartbeat for their limit, the asynchronous lease
   * for an attempt taken asynchronously), oldest first.
   */
  jobListExpired(params: { lease: LeaseLimits; limit: number }): Promise<JobRow[]>;
  /**
   * Records that the target took a running attempt asynchronously (202 with `x-job-async: 1`), if the job still runs
   * that attempt of that claim: the attempt is bound to the delivery token it was sent with (`tokenHash`), and its lease
   * starts now. Returns whether it was written (false: the attempt ended first, by a target's call, a cancel or a
   * rescue).
   */
  jobMarkAsyncIfRunning(params: { job: JobAttempt; tokenHash: string }): Promise<boolean>;
  /**
   * A target's heartbeat on attempt `attempt` of job `id`: renews the lease, and replaces the job's progress with
   * `progressJson` (JSON text) when given. Written only if the job runs that attempt and `token` may act on it (an
   * attempt taken asynchronously: its own token, even expired; otherwise: an unexpired token).
   */
  jobHeartbeatExternal(params: {
    id: string;
    attempt: number;
    token: CallbackToken;
    progressJson?: string | undefined;
  }): Promise<ExternalHeartbeatOutcome>;
  /**
   * A target's complete or fail: writes `outcome` as `jobSetStateIfRunningMany` would, under the same conditions as
   * `jobHeartbeatExternal`, and durably (the target is answered once it is committed).
   */
  jobSetStateExternal(params: { outcome: JobOutcome; token: CallbackToken }): Promise<ExternalSetStateOutcome>;
  /** The asynchronous side of job `id`'s attempts (its latest mark and progress); undefined if there is no such job. */
  jobAsyncStateGet(params: { id: string }): Promise<JobAsyncState | undefined>;
  /**
   * Puts interrupted attempts back to `retrying`, due `delayMs` after the store's now, refunding the attempt as
   * `refund` says; a cancelled chain ends the job `cancelled-by-chain`. Returns how many were requeued.
   */
  jobRequeueMany(params: {
    jobs: JobAttempt[];
    delayMs: number;
    errorBody: string;
    refund: AttemptRefund;
  }): Promise<number>;
  /**
   * When a claim may next find a job, on the database's clock (compare it with `now`): the earliest `run_at` of a
   * claimable job whose gates are open, or the time a rate limit lets it start if later; null when nothing waits
   * that a claim could take (what a job's end, a resume or a change of limits opens, they wake the nodes for).
   */
  jobNextRunAt(): Promise<number | null>;
  /**
   * Records a cron tick and inserts its job in one transaction; a tick already recorded (by another node, or
   * before a restart) inserts nothing and answers `already_enqueued`.
   */
  cronTickInsert(params: {
    name: string;
    tickAt: number;
    job: JobInsertParams;
    /**
     * For a schedule's tick (docs/schedules.md): the revision it was fired for. The tick is recorded only while the
     * schedule `name` has this revision and is not paused, checked in the same transaction (which, on PostgreSQL,
     * holds the schedule's row until it commits): otherwise `schedule_changed`. Left out for a config entry's tick.
     */
    scheduleRevision?: string | undefined;
  }): Promise<CronTickOutcome>;
  /** The newest recorded tick of each name that has one (a schedule's or a config entry's last run), in no order. */
  cronTickLatestMany(params: { names: string[] }): Promise<CronTick[]>;
  /**
   * Deletes up to `limit` terminal jobs that finished more than `olderThanMs` ago, but none an unexpired idempotency
   * key still answers with; returns how many.
   */
  jobDeleteFinishedMany(params: { olderThanMs: number; limit: number }): Promise<number>;
  /**
   * Ends up to `limit` waiting jobs (`pending`/`retrying`) whose expiry has passed: `cancelled`, terminal reason
   * `expired`, keeping the last attempt's status code and error body. Returns them.
   */
  jobExpireMany(params: { limit: number }): Promise<JobRow[]>;
  /** Forgets up to `limit` idempotency keys whose window has passed; returns how many. */
  idempotencyKeyDeleteMany(params: { limit: number }): Promise<number>;
  /** Finished jobs (`succeeded`, `dead`) whose callback for that state is still to be enqueued, oldest first. */
  jobCallbackDueList(params: { limit: number }): Promise<JobRow[]>;
  /**
   * Enqueues the callback job of job `jobId` for its terminal `status`, once: the job's pending callback is cleared
   * and `insert` inserted in one transaction, only if the job is still in `status` with its callback pending.
   * `skipped` when that is no longer so (another node fired it, or an administrator retried the job meanwhile). With
   * `insert` null (the job has no callback for that state) the pending callback is only cleared (`cleared`).
   */
  jobCallbackEnqueue(params: {
    jobId: string;
    status: "succeeded" | "dead";
    insert: JobInsertParams | null;
  }): Promise<JobInsertOutcome | { kind: "skipped" } | { kind: "cleared" }>;
  /** Chains whose on_settled callback is still to fire and that have settled (no job pending, running or retrying). */
  chainSettledDueList(params: { limit: number }): Promise<ChainRow[]>;
  /**
   * Fires a settled chain's on_settled once: records it fired and inserts `insert`, in one transaction, only if it
   * has not fired and the chain still has no waiting or running job. `skipped` otherwise. With `insert` null (the
   * callback cannot be built: the job that set it is gone), only records it fired: `cleared`.
   */
  chainOnSettledEnqueue(params: {
    originalRequestId: string;
    insert: JobInsertParams | null;
  }): Promise<JobInsertOutcome | { kind: "skipped" } | { kind: "cleared" }>;
  /**
   * The chains that settled among those with a job finished since the sweep named `cursor` last read (its first read
   * starts at the store's now), each once per settling: their start and settle times. Records how far it read. On
   * PostgreSQL one node at a time reads (the others answer `[]`).
   */
  chainSettledSince(params: {
    cursor: string;
    limit: number;
  }): Promise<Array<{ originalRequestId: string; startedAt: number; settledAt: number }>>;
  /** A chain's row, or undefined when it has none (no job was ever enqueued into it, and it was never cancelled). */
  chainGet(params: { originalRequestId: string }): Promise<ChainRow | undefined>;
  /** How the jobs of a chain stand (none: zero jobs), counted in the database. */
  chainJobCounts(params: { originalRequestId: string }): Promise<ChainJobCounts>;
  /** The finished attempts of several jobs, by job id, each oldest first. */
  jobAttemptListMany(params: { ids: string[] }): Promise<Map<string, JobAttemptRow[]>>;
  /**
   * Forgets cron ticks more than `olderThanMs` old (they can never fire again), but the newest of each name, which
   * `cronTickLatestMany` answers as its last run; returns how many.
   */
  cronTickDeleteMany(params: { olderThanMs: number }): Promise<number>;
  /**
   * Job counts by status and by operation, and the run time of the oldest due claimable job. With
   * `byOperation: false` the counts by operation are left out (`[]`): on PostgreSQL the operation of a job sits in
   * another table than its status, so counting by status alone reads one narrow table (about 6× faster with a
   * million jobs). Metrics, scraped often, ask for that; the dashboard asks for both.
   */
  jobStats(params?: { byOperation?: boolean }): Promise<JobStats>;
  /** The finished attempts of one job, oldest first (admin retries restart the numbering; earlier ones stay). */
  jobAttemptList(params: { id: string }): Promise<JobAttemptRow[]>;
  /**
   * Attempts finished since `since`, counted per `bucketMs` bucket (buckets aligned to `since`), oldest first. The
   * counts are kept per minute (a day of them), so `since` and `bucketMs` are whole minutes (else a RangeError).
   * They outlive the attempts themselves: retention deleting a job leaves its attempts counted.
   */
  attemptBuckets(params: { since: number; bucketMs: number }): Promise<AttemptBucket[]>;
  /** Forgets the attempt counts of minutes more than `olderThanMs` old (the dashboard charts the last hour); returns how many rows. */
  attemptCountDeleteMany(params: { olderThanMs: number }): Promise<number>;
  /**
   * Re-queues up to `limit` dead jobs matching the filter, newest first, like `jobRetry`; a job whose dedupe key
   * another claimable job holds is skipped. Returns the jobs it re-queued.
   */
  jobRetryDeadMany(params: { filter: DeadJobFilter; limit: number; actor: string }): Promise<JobRow[]>;
  /**
   * Calls `onAvailable(runAt)` when another process makes a job claimable at `runAt` (an enqueue or an admin
   * retry on another node), so idle workers wake at once; and calls `onAbort` with the id of every running job an
   * administrator cancelled on another node (its delivery, if this node has it, is to be aborted). Resolves to a
   * function that stops listening.
   */
  jobAvailableListen(
    onAvailable: (runAt: number) => void,
    onAbort?: (jobId: string) => void,
  ): Promise<() => Promise<void>>;
  /**
   * Writes the configuration's limits of every operation whose limits come from it (`limitsSource` "config"), and
   * puts back to no limits those of the operations it no longer lists. Every node does so when it starts.
   */
  operationLimitsConfigure(params: { limits: Array<{ operationId: string; limits: OperationLimits }> }): Promise<void>;
  /** The flow control of every operation that has any (a pause, limits, or limits set by an administrator). */
  operationControlList(): Promise<OperationControl[]>;
  /** Pauses an operation (kept as it was if already paused); every node stops claiming its jobs at once. */
  operationPause(params: { operationId: string; actor: string }): Promise<OperationControl>;
  /** Resumes an operation; its due jobs are claimed at once. */
  operationResume(params: { operationId: string }): Promise<OperationControl>;
  /** Sets an operation's limits in force, and where they come from. */
  operationLimitsSet(params: {
    operationId: string;
    limits: OperationLimits;
    source: LimitsSource;
    actor: string;
  }): Promise<OperationControl>;
  /** Pauses a concurrency key (kept as it was if already paused): no job with it is claimed. */
  concurrencyKeyPause(params: { key: string; actor: string }): Promise<PausedKey>;
  /** Resumes a concurrency key; answers whether it was paused. */
  concurrencyKeyResume(params: { key: string }): Promise<boolean>;
  /** Every paused concurrency key, by key. */
  pausedKeyList(): Promise<PausedKey[]>;
  /** Deletes the rate buckets whose time has passed (they say no more than a missing one); returns how many. */
  rateBucketDeleteMany(): Promise<number>;
  /**
   * Creates a schedule (docs/schedules.md), not paused, `actor` its creator and last changer; `exists` when a
   * schedule has that name, else `limit_reached` when `maxSchedules` exist already. The count and the insert are one
   * transaction, serialised with every other create (on PostgreSQL, under an advisory lock), so creates racing on any
   * number of nodes never pass the limit together.
   */
  scheduleCreate(params: {
    schedule: ScheduleFields;
    revision: string;
    actor: string;
    maxSchedules: number;
  }): Promise<ScheduleCreateOutcome>;
  /** One schedule by name. */
  scheduleGet(params: { name: string }): Promise<ScheduleRow | undefined>;
  /** Every schedule, by name. */
  scheduleList(): Promise<ScheduleRow[]>;
  /**
   * Replaces a schedule's fields (its name aside) and gives it `revision`, if it still has `ifRevision`: a change
   * made from what another change replaced is refused (`revision_changed`), never merged blindly.
   */
  scheduleUpdate(params: {
    schedule: ScheduleFields;
    ifRevision: string;
    revision: string;
    actor: string;
  }): Promise<ScheduleUpdateOutcome>;
  /** Pauses a schedule (kept as it was if already paused): its ticks enqueue nothing until it is resumed. */
  schedulePause(params: { name: string; actor: string }): Promise<ScheduleWriteOutcome<"paused">>;
  /** Resumes a paused schedule (a running one is answered as it is); it ticks again from its next tick. */
  scheduleResume(params: { name: string }): Promise<ScheduleWriteOutcome<"resumed">>;
  /** Deletes a schedule and its recorded ticks; answers it as it was. */
  scheduleDelete(params: { name: string }): Promise<ScheduleWriteOutcome<"deleted">>;
  /**
   * Calls `onChange` after every committed change of the schedules, by any node (a create, an update, a pause, a
   * resume, a delete), and after a reconnection (changes may have gone unheard). Resolves to a function that stops
   * listening.
   */
  scheduleChangeListen(onChange: () => void): Promise<() => Promise<void>>;
  /** Closes the database; pending writes are finished first. */
  close(): Promise<void>;
}

/** What an online backup copied (`OnlineBackup.databaseBackup`). */
export interface DatabaseBackupSummary {
  /** Pages in the copy, of `pageSize` bytes each. */
  pages: number;
  pageSize: number;
  /** Batches the copy took; the store served other calls between them. */
  steps: number;
}

/**
 * A store that copies its database while it serves: the SQLite engine, whose exclusive lock shuts out every other
 * reader. Kept off `Store` because only that engine has it: PostgreSQL is backed up with pg_dump.
 */
export interface OnlineBackup {
  /**
   * Copies the database into a new file at `to` while the store goes on serving every other call, consistent as of
   * the copy's end. Never take `to` from a request: it may name any file.
   */
  databaseBackup(params: { to: string }): Promise<DatabaseBackupSummary>;
}

/** Whether `store` can copy its database while it serves (see `OnlineBackup`). */
export function hasOnlineBackup(store: Store): store is Store & OnlineBackup {
  return typeof (store as Partial<OnlineBackup>).databaseBackup === "function";
}

/** The database cannot be reached or cannot take writes now; answered with 503 `unavailable`. */
export class StoreUnavailableError extends Error {
  override readonly name = "StoreUnavailableError";
}

/**
 * The database cannot be used as it is (someone else's tables where opqueue's would go, a schema newer than this
 * opqueue): an operator must act. The CLI prints the message and exits 2.
 */
export class StoreSetupError extends Error {
  override readonly name = "StoreSetupError";
}

/** Another process holds the database (SQLite serves one node). */
export class StoreLockedError extends Error {
  override readonly name = "StoreLockedError";
}

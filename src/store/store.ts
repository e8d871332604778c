/**
 * The Store: the only door to the database. Every query opqueue runs is a method of it, named noun-first
 * (`jobInsert`, `jobClaimMany`), taking one params object; `Many` marks a batch. Two engines implement it,
 * `src/store/sqlite/` (embedded, one process) and `src/store/postgres/` (any number of nodes), and both pass the one
 * suite of `test/store/conformance/`, organised by the same roles.
 *
 * `Store` is the composition of role interfaces, one file each under `roles/`. A caller takes the role it uses (or
 * `Pick`s the methods it calls from one), never the whole `Store`: only the places that open a store and hand it on
 * (service.ts, the HTTP app, the CLI) hold all of it. docs/architecture.md lists the roles and their callers.
 *
 * Every state change names the state it expects to leave, so a write that lost a race changes nothing.
 * docs/rules.md maps every rule both engines implement: where on each engine, and the conformance cases that pin it.
 */
import type { AccessStore } from "./roles/access.js";
import type { AdminStore } from "./roles/admin.js";
import type { AsyncAttemptStore } from "./roles/async-attempts.js";
import type { ChainStore } from "./roles/chains.js";
import type { ClaimStore } from "./roles/claims.js";
import type { EnqueueStore } from "./roles/enqueue.js";
import type { FlowStore } from "./roles/flow.js";
import type { JobReadStore } from "./roles/job-reads.js";
import type { StoreLifecycle } from "./roles/lifecycle.js";
import type { ListenStore } from "./roles/listening.js";
import type { PayloadStore } from "./roles/payloads.js";
import type { ScheduleStore } from "./roles/schedules.js";
import type { UpkeepStore } from "./roles/upkeep.js";

export type { AccessStore, AdminTokenCutoff, RevokedAdminToken } from "./roles/access.js";
export type { AdminActor, AdminStore, DeadJobFilter, JobCancelFilter, JobCancelOutcome } from "./roles/admin.js";
export type { JobRetryOutcome, JobRunNowOutcome, UserEraseOutcome } from "./roles/admin.js";
export type { AsyncAttemptStore, ExternalCallRefusal } from "./roles/async-attempts.js";
export type { ExternalHeartbeatOutcome, ExternalSetStateOutcome } from "./roles/async-attempts.js";
export { hasOnlineBackup, type DatabaseBackupSummary, type OnlineBackup } from "./roles/backup.js";
export type { CallbackEnqueueOutcome, ChainJobCounts, ChainRow, ChainStore } from "./roles/chains.js";
export type { AttemptRefund, ClaimStore } from "./roles/claims.js";
export type { EnqueueStore, IdempotencyParams, JobInsertOutcome, JobInsertParams } from "./roles/enqueue.js";
export type { FlowStore } from "./roles/flow.js";
export type { AdminActionRow, AttemptBucket, JobListParams, JobReadStore, JobStats } from "./roles/job-reads.js";
export type { StoreLifecycle } from "./roles/lifecycle.js";
export type { ListenStore } from "./roles/listening.js";
export type { PayloadStore, PayloadTable, StoredPayloadRow } from "./roles/payloads.js";
export type { CronTick, CronTickOutcome, ScheduleCreateOutcome, ScheduleFields } from "./roles/schedules.js";
export type { ScheduleRow, ScheduleStore } from "./roles/schedules.js";
export type { ScheduleUpdateOutcome, ScheduleWriteOutcome } from "./roles/schedules.js";
export type { UpkeepStore } from "./roles/upkeep.js";

/** The whole store: every role an engine implements. */
export interface Store
  extends
    StoreLifecycle,
    EnqueueStore,
    ClaimStore,
    AsyncAttemptStore,
    ChainStore,
    ScheduleStore,
    FlowStore,
    JobReadStore,
    AdminStore,
    AccessStore,
    PayloadStore,
    UpkeepStore,
    ListenStore {}

/** The params object of store method `M`, as its role declares it (the engines' methods take theirs so). */
export type StoreParams<M extends keyof Store> = Store[M] extends (params: infer P, ...rest: never[]) => unknown
  ? P
  : never;

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

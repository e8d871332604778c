/**
 * What every conformance file shares: how an engine is plugged in, how a case is registered (with the
 * engine's explicit skips), a fresh store per test, and small builders for jobs, outcomes, tokens, idempotency keys,
 * limits and schedules that cases of several roles use.
 */
import assert from "node:assert/strict";
import { test, type TestContext } from "node:test";
import { ManualClock } from "../../../src/clock.js";
import { newJobId } from "../../../src/job/job-id.js";
import type { JobResult } from "../../../src/job/schemas.js";
import type { IdempotencyParams, JobInsertOutcome, JobInsertParams, Store } from "../../../src/store/store.js";
import type { AttemptToken, JobRow } from "../../../src/job/job.js";
import type { ScheduleFields, ScheduleRow } from "../../../src/schedules/schedule.js";
import { NO_LIMITS, type OperationLimits } from "../../../src/flow/limits.js";

/** A store opened for one test, and how to get rid of it. */
export interface OpenedStore {
  store: Store;
  /** Closes the store if it is still open, and removes its database. Must tolerate an already closed store. */
  cleanup: () => Promise<void>;
}

/** How an engine plugs into the suite. */
export interface StoreConformanceOptions {
  /** The engine's name, shown in the suite's title. */
  engine: string;
  /** Opens a fresh, migrated, empty store on its own database, reading time from `clock`. */
  open: (clock: ManualClock) => Promise<OpenedStore>;
  /** Cases this engine cannot run: case name -> the reason, shown in the test report. */
  skip?: Record<string, string>;
}

/** A fresh store and the clock it reads. */
export interface Fixture {
  store: Store;
  clock: ManualClock;
}

/** The start of every test's clock. */
export const T0 = Date.UTC(2026, 10, 21, 12, 0, 0);

/** Registers cases of one engine; each topic file receives one. */
export class Suite {
  /** Every case name registered so far, to catch a skip naming no case. */
  readonly names = new Set<string>();

  constructor(readonly options: StoreConformanceOptions) {}

  /** Registers a case on a fresh store, skipped (with its reason) when the engine says so. */
  case(name: string, fn: (fixture: Fixture, t: TestContext) => Promise<void>): void {
    this.bareCase(name, async (t) => fn(await this.fresh(t), t));
  }

  /** Registers a case that opens its own stores (with `fresh` or `options.open`). */
  bareCase(name: string, fn: (t: TestContext) => Promise<void>): void {
    assert.ok(!this.names.has(name), `duplicate conformance case name: ${name}`);
    this.names.add(name);
    const reason = this.options.skip?.[name];
    test(name, reason === undefined ? {} : { skip: `${this.options.engine}: ${reason}` }, fn);
  }

  /** Opens a fresh store whose cleanup runs when `t` ends. */
  async fresh(t: TestContext, clock: ManualClock = new ManualClock(T0)): Promise<Fixture> {
    const { store, cleanup } = await this.options.open(clock);
    t.after(cleanup);
    return { store, clock };
  }
}

/**
 * Overrides of a new job's parameters: any field of `JobInsertParams`, or the shorthand `runAt`, which stands for
 * `runTime: { at: runAt }` (most cases name an instant). Giving both is a mistake in the case.
 */
export type JobOverrides = Partial<JobInsertParams> & { runAt?: number };

/** Parameters of a new job, due at T0 unless overridden; every field may be overridden (see `JobOverrides`). */
export function jobParams(overrides: JobOverrides = {}): JobInsertParams {
  const { runAt, ...fields } = overrides;
  assert.ok(runAt === undefined || fields.runTime === undefined, "give runAt or runTime, not both");
  return {
    id: newJobId(),
    operationId: "sendWelcomeEmail",
    priority: 0,
    maxAttempts: 5,
    dedupeKey: null,
    concurrencyKey: null,
    rateKey: null,
    enqueuedByOperationId: "createUser",
    parentJobId: null,
    originalRequestId: "req-1",
    userId: "u1",
    authority: { kind: "request", request_id: "req-1", user_id: "u1", assertion: "header.payload.signature" },
    request: { path_params: { userId: "42" }, body: { hello: "world" } },
    spawnCap: 1000,
    traceparent: null,
    expiry: null,
    callbacks: null,
    ...fields,
    runTime: runAt !== undefined ? { at: runAt } : (fields.runTime ?? { at: T0 }),
  };
}

/** Inserts a job that must be created, and returns it; `overrides` as for `jobParams` (`runAt` shorthand included). */
export async function insertCreated(store: Store, overrides: JobOverrides = {}): Promise<JobRow> {
  const outcome = await store.jobInsert(jobParams(overrides));
  assert.equal(outcome.kind, "created", `expected a created job, got ${JSON.stringify(outcome)}`);
  return (outcome as { job: JobRow }).job;
}

/** Inserts jobs one after the other (so creation order is the list order) and returns them. */
export async function insertAll(store: Store, list: JobOverrides[]): Promise<JobRow[]> {
  const jobs: JobRow[] = [];
  for (const overrides of list) jobs.push(await insertCreated(store, overrides));
  return jobs;
}

/** Reads a job that must exist. */
export async function mustGet(store: Store, id: string): Promise<JobRow> {
  const row = await store.jobGet({ id });
  assert.ok(row, `job ${id} should exist`);
  return row;
}

/** Claims one job, which must be `id` (the next in claim order), and returns it running. */
export async function claimNext(store: Store, id: string): Promise<JobRow> {
  const claimed = await store.jobClaimMany({ limit: 1 });
  assert.deepEqual(
    claimed.map((job) => job.id),
    [id],
    "the claim should take exactly the expected job",
  );
  return claimed[0] as JobRow;
}

/** A priority above every other job of a test, so that setup helpers claim their own job first. */
const SETUP_PRIORITY = 1_000_000;

/** The result of a 2xx attempt. */
export const SUCCESS: JobResult = { status_code: 200, error_body: null, terminal_reason: null };
/** The result of an attempt that will be retried. */
export const UNAVAILABLE: JobResult = { status_code: 503, error_body: "upstream busy", terminal_reason: null };
/** The result of an attempt that ends the job for good. */
export const PERMANENT: JobResult = {
  status_code: 400,
  error_body: "bad request",
  terminal_reason: "permanent-status",
};

/** Creates a job and claims it; top priority unless overridden. */
export async function makeRunning(store: Store, overrides: JobOverrides = {}): Promise<JobRow> {
  const job = await insertCreated(store, { priority: SETUP_PRIORITY, ...overrides });
  return claimNext(store, job.id);
}

/**
 * Moves a fresh job to `retrying` (claimed once, failed, due again at `runAt`); top priority unless overridden.
 * `runAt` is an instant, the shorthand the cases use: the outcome is written with `delayMs: runAt - store.now()`
 * (a store driven by a test clock reads that clock: the case "a store driven by a test clock reads it for now() and
 * measures no clock offset" checks it).
 */
export async function makeRetrying(store: Store, overrides: JobOverrides = {}, runAt: number = T0): Promise<JobRow> {
  const job = await insertCreated(store, { priority: SETUP_PRIORITY, ...overrides });
  const running = await claimNext(store, job.id);
  const delayMs = runAt - store.now();
  assert.deepEqual(
    await store.jobSetStateIfRunningMany({
      outcomes: [{ id: job.id, attempt: running.attempt, status: "retrying", delayMs, result: UNAVAILABLE }],
    }),
    [true],
  );
  const retrying = await mustGet(store, job.id);
  assert.equal(retrying.runAt, runAt, "the retrying job is due at the asked instant");
  return retrying;
}

/** Moves a fresh job to a terminal status through a claim and an outcome; top priority unless overridden. */
export async function makeFinished(
  store: Store,
  status: "succeeded" | "dead",
  overrides: JobOverrides = {},
): Promise<JobRow> {
  const job = await insertCreated(store, { priority: SETUP_PRIORITY, ...overrides });
  const running = await claimNext(store, job.id);
  const result = status === "succeeded" ? SUCCESS : PERMANENT;
  assert.deepEqual(
    await store.jobSetStateIfRunningMany({ outcomes: [{ id: job.id, attempt: running.attempt, status, result }] }),
    [true],
  );
  return mustGet(store, job.id);
}

/** Every job of the store, newest first. */
export function allJobs(store: Store): Promise<JobRow[]> {
  return store.jobList({ limit: 100_000 });
}

/** A schedule's fields (docs/schedules.md): every minute, its jobs for buildReport as user "system". */
export function scheduleFields(name: string, overrides: Partial<Omit<ScheduleFields, "name">> = {}): ScheduleFields {
  return {
    name,
    schedule: "* * * * *",
    timezone: "UTC",
    operationId: "buildReport",
    userId: "system",
    request: { body: { report: name } },
    priority: 0,
    dedupeKey: `cron:${name}`,
    concurrencyKey: null,
    ...overrides,
  };
}

/** A job that is `running` with attempt 2, so attempt 1 is stale; top priority (through the harness helpers). */
export async function makeRunningSecondAttempt(store: Store, overrides: JobOverrides = {}): Promise<JobRow> {
  const first = await makeRunning(store, overrides);
  assert.deepEqual(
    await store.jobSetStateIfRunningMany({
      outcomes: [{ id: first.id, attempt: 1, status: "retrying", delayMs: 0, result: UNAVAILABLE }],
    }),
    [true],
  );
  const second = await claimNext(store, first.id);
  assert.equal(second.attempt, 2);
  return second;
}

/** A pending job cancelled by an admin (a terminal `cancelled` job with finishedAt = now). */
export async function makeCancelled(store: Store, overrides: JobOverrides = {}): Promise<JobRow> {
  const job = await insertCreated(store, { runAt: T0 + 3_600_000, ...overrides });
  assert.equal((await store.jobCancel({ id: job.id, actor: "admin", role: "admin" })).kind, "cancelled");
  return mustGet(store, job.id);
}

/** Asserts that every job of `before` is still in the store exactly as it was. */
export async function assertUnchanged(store: Store, before: JobRow[], message?: string): Promise<void> {
  for (const job of before)
    assert.deepEqual(await mustGet(store, job.id), job, message ?? `job ${job.id} is untouched`);
}

/** Parameters of a cron tick's job, as the scheduler builds them (docs/delivery.md, "Cron"). */
export function cronJob(name: string, tickAt: number, overrides: JobOverrides = {}): JobInsertParams {
  return jobParams({
    operationId: `cron:${name}`,
    enqueuedByOperationId: `cron:${name}`,
    originalRequestId: `cron:${name}:${new Date(tickAt).toISOString()}`,
    dedupeKey: `cron:${name}`,
    authority: { kind: "cron", cron_job_name: name, user_id: "system" },
    runAt: tickAt,
    ...overrides,
  });
}

/** The token the attempt was delivered with, before its `exp`. */
export const TOKEN_A: AttemptToken = { hash: "digest-of-token-a", expired: false, claim: 1 };

/** The same token once its `exp` has passed. */
export const TOKEN_A_EXPIRED: AttemptToken = { ...TOKEN_A, expired: true };

/** Another valid token for the same job and attempt (an earlier claim's, say). */
export const TOKEN_B: AttemptToken = { hash: "digest-of-token-b", expired: false, claim: 1 };

/** A running job whose attempt 1 its target took asynchronously with TOKEN_A. */
export async function makeAsync(store: Store, overrides: Parameters<typeof makeRunning>[1] = {}): Promise<JobRow> {
  const running = await makeRunning(store, overrides);
  const marked = await store.jobMarkAsyncIfRunning({
    job: { id: running.id, attempt: running.attempt, startedAt: running.startedAt },
    tokenHash: TOKEN_A.hash,
  });
  assert.equal(marked, true, "the running attempt is marked");
  return mustGet(store, running.id);
}

/** An hour, in milliseconds. */
export const HOUR_MS = 3600 * 1000;

/** A day, in milliseconds. */
export const DAY_MS = 24 * HOUR_MS;

/** An idempotency key of caller "createUser"/"u1", with a fingerprint standing for the body. */
export function idempotencyKey(name: string, fingerprint = "body-1", windowMs = DAY_MS): IdempotencyParams {
  return { scope: JSON.stringify(["createUser", "u1"]), key: name, fingerprint, windowMs };
}

/** Inserts with an idempotency key; returns the outcome. */
export function insertKeyed(
  store: Store,
  idempotency: IdempotencyParams,
  overrides: JobOverrides = {},
): Promise<JobInsertOutcome> {
  return store.jobInsert(jobParams({ ...overrides, idempotency }));
}

/** The job an insert's outcome carries; the outcome must carry one. */
export function jobOf(outcome: JobInsertOutcome): JobRow {
  assert.ok("job" in outcome, `expected an outcome with a job, got ${outcome.kind}`);
  return outcome.job;
}

/** Claims job `id` (which must be next) and ends it `status`. */
export async function finishNext(
  store: Store,
  id: string,
  status: "succeeded" | "dead" = "succeeded",
): Promise<JobRow> {
  const [running] = await store.jobClaimMany({ limit: 1 });
  assert.equal(running?.id, id, "the job to finish must be next in claim order");
  const result = status === "succeeded" ? SUCCESS : PERMANENT;
  assert.deepEqual(
    await store.jobSetStateIfRunningMany({ outcomes: [{ id, attempt: running.attempt, status, result }] }),
    [true],
  );
  return mustGet(store, id);
}

/** Sets `operationId`'s limits as an administrator would. */
export async function setOperationLimits(
  store: Store,
  operationId: string,
  limits: Partial<OperationLimits>,
): Promise<void> {
  await store.operationLimitsSet({ operationId, limits: { ...NO_LIMITS, ...limits }, source: "admin", actor: "admin" });
}

/** Creates schedule `name` at revision `revision`; it must not exist yet. */
export async function createSchedule(
  store: Store,
  name: string,
  revision = "r1",
  actor = "alice",
): Promise<ScheduleRow> {
  const outcome = await store.scheduleCreate({ schedule: scheduleFields(name), revision, actor, maxSchedules: 100 });
  assert.equal(outcome.kind, "created");
  return outcome.schedule;
}

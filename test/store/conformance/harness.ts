/**
 * What every conformance file shares: how an engine is plugged in, how a case is registered (with the
 * engine's explicit skips), a fresh store per test, and small builders for jobs and outcomes.
 */
import assert from "node:assert/strict";
import { test, type TestContext } from "node:test";
import { ManualClock } from "../../../src/clock.js";
import { newJobId } from "../../../src/job/job-id.js";
import type { JobResult } from "../../../src/job/schemas.js";
import type { JobInsertParams, Store } from "../../../src/store/store.js";
import type { JobRow } from "../../../src/job/job.js";
import type { ScheduleFields } from "../../../src/schedules/schedule.js";

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

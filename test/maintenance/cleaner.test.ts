/**
 * Retention (docs/delivery.md, "Retention"): terminal jobs (succeeded, dead, cancelled) whose `finished_at` is older than
 * `retention.terminal_days` are deleted, in bounded batches, at least hourly; everything else is kept; old cron
 * ticks are forgotten. Time moves on a ManualClock; each pass is run directly with `cleanFinishedJobs`.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { ManualClock } from "../../src/clock.js";
import { NO_LIMITS } from "../../src/flow/limits.js";
import { sweepChains } from "../../src/chains/sweeper.js";
import { CLEAN_BATCH, CLEAN_INTERVAL_MS, cleanFinishedJobs } from "../../src/maintenance/cleaner.js";
import { cronTickJob } from "../../src/schedules/schedule-jobs.js";
import type { JobInsertParams, Store } from "../../src/store/store.js";
import type { JobRow } from "../../src/job/job.js";
import { startTestService, type TestService } from "../helpers/service.js";

const DAY = 24 * 3_600_000;
const START = Date.UTC(2026, 10, 21, 12);

async function start(
  t: TestContext,
  configure: (raw: Record<string, unknown>) => void = () => {},
): Promise<TestService> {
  const s = await startTestService({ configure, clock: new ManualClock(START) });
  t.after(() => s.close());
  return s;
}

let counter = 0;

/** A job for `buildReport`, due now, in chain `rid`. */
function jobParams(s: TestService, rid: string, extra: Partial<JobInsertParams> = {}): JobInsertParams {
  counter++;
  return {
    id: `job-${String(counter).padStart(8, "0")}`,
    operationId: "buildReport",
    priority: 0,
    runTime: { at: s.clock.now() },
    maxAttempts: 5,
    dedupeKey: null,
    concurrencyKey: null,
    rateKey: null,
    enqueuedByOperationId: "createUser",
    parentJobId: null,
    originalRequestId: rid,
    userId: "u1",
    authority: { kind: "request", request_id: rid, user_id: "u1" },
    request: { body: {} },
    spawnCap: 100_000,
    traceparent: null,
    expiry: null,
    callbacks: null,
    ...extra,
  };
}

async function insert(store: Store, params: JobInsertParams): Promise<JobRow> {
  const outcome = await store.jobInsert(params);
  assert.equal(outcome.kind, "created");
  return outcome.job;
}

type State = "pending" | "running" | "retrying" | "succeeded" | "dead" | "cancelled";

/** Creates a job and moves it to `state` now (by the store's clock); returns its id. */
async function jobIn(s: TestService, state: State): Promise<string> {
  const store = s.service.store;
  // A pending job is due in a year, so later claims here never take it.
  const extra = state === "pending" ? { runTime: { delayMs: 365 * DAY } } : {};
  const job = await insert(store, jobParams(s, `chain-${state}-${counter}`, extra));
  if (state === "pending") return job.id;
  if (state === "cancelled") {
    assert.equal((await store.jobCancel({ id: job.id, actor: "admin", role: "admin" })).kind, "cancelled");
    return job.id;
  }
  const [claimed] = await store.jobClaimMany({ limit: 1 });
  assert.equal(claimed?.id, job.id, "the new job is the only claimable one");
  if (state === "running") return job.id;
  const result = { status_code: 500, error_body: "x", terminal_reason: null };
  const outcome =
    state === "succeeded"
      ? { id: job.id, attempt: 1, status: state, result: { status_code: 200, error_body: null, terminal_reason: null } }
      : state === "dead"
        ? { id: job.id, attempt: 1, status: state, result: { ...result, terminal_reason: "exhausted" as const } }
        : { id: job.id, attempt: 1, status: state, delayMs: 365 * DAY, result };
  assert.deepEqual(await store.jobSetStateIfRunningMany({ outcomes: [outcome] }), [true]);
  return job.id;
}

async function exists(store: Store, id: string): Promise<boolean> {
  return (await store.jobGet({ id })) !== undefined;
}

test("terminal jobs finished more than terminal_days ago are deleted; newer terminal jobs and unfinished jobs are kept", async (t) => {
  const s = await start(t, (raw) => (raw["retention"] = { terminal_days: 30 }));
  const store = s.service.store;
  const old = {
    succeeded: await jobIn(s, "succeeded"),
    dead: await jobIn(s, "dead"),
    cancelled: await jobIn(s, "cancelled"),
  };
  // Unfinished jobs as old as the deleted ones.
  const unfinished = {
    pending: await jobIn(s, "pending"),
    retrying: await jobIn(s, "retrying"),
  };
  // The pending and retrying jobs above are due in a year: this one is the only claimable job.
  s.clock.advance(1);
  const running = await insert(store, jobParams(s, "chain-running"));
  assert.equal((await store.jobClaimMany({ limit: 1 }))[0]?.id, running.id);

  s.clock.advance(10 * DAY);
  const newer = {
    succeeded: await jobIn(s, "succeeded"),
    dead: await jobIn(s, "dead"),
    cancelled: await jobIn(s, "cancelled"),
  };
  s.clock.set(START + 30 * DAY + 1);

  const deleted = await cleanFinishedJobs({ config: s.config, store });
  assert.equal(deleted, 3);
  for (const [status, id] of Object.entries(old)) assert.equal(await exists(store, id), false, `old ${status} deleted`);
  for (const [status, id] of Object.entries(newer)) assert.equal(await exists(store, id), true, `newer ${status} kept`);
  for (const [status, id] of Object.entries(unfinished)) assert.equal(await exists(store, id), true, `${status} kept`);
  assert.equal((await store.jobGet({ id: running.id }))?.status, "running");

  // The next pass, later, takes the newer ones once they are old enough.
  s.clock.advance(10 * DAY + 1);
  assert.equal(await cleanFinishedJobs({ config: s.config, store }), 3);
  const stats = await store.jobStats();
  assert.deepEqual(stats.byStatus, { pending: 1, running: 1, retrying: 1, succeeded: 0, dead: 0, cancelled: 0 });
});

test("a terminal job finished exactly terminal_days ago is not older than that, so it is kept", async (t) => {
  const s = await start(t, (raw) => (raw["retention"] = { terminal_days: 2 }));
  const id = await jobIn(s, "succeeded");
  s.clock.advance(2 * DAY);
  assert.equal(await cleanFinishedJobs({ config: s.config, store: s.service.store }), 0);
  assert.equal(await exists(s.service.store, id), true);
  s.clock.advance(1);
  assert.equal(await cleanFinishedJobs({ config: s.config, store: s.service.store }), 1);
  assert.equal(await exists(s.service.store, id), false);
});

test("more terminal jobs than one batch are all deleted in one pass, and a cancelled chain stays cancelled", async (t) => {
  const s = await start(t, (raw) => (raw["retention"] = { terminal_days: 30 }));
  const store = s.service.store;
  const count = 2 * CLEAN_BATCH + 17;
  const rid = "bulk-import";
  // Inserted together (one group commit), then cancelled at once by cancelling their chain.
  await Promise.all(Array.from({ length: count }, () => insert(store, jobParams(s, rid))));
  const kept = await insert(store, jobParams(s, "another-chain"));
  const cancelled = await store.chainCancel({ originalRequestId: rid, actor: "admin", role: "admin" });
  assert.equal(cancelled.length, count);
  assert.equal((await store.jobStats()).byStatus.cancelled, count);

  s.clock.advance(31 * DAY);
  // Watches each delete statement the pass makes.
  const batches: Array<{ limit: number; deleted: number }> = [];
  const watched = new Proxy(store, {
    get(target, property) {
      if (property === "jobDeleteFinishedMany") {
        return async (params: { olderThanMs: number; limit: number }) => {
          const deleted = await target.jobDeleteFinishedMany(params);
          batches.push({ limit: params.limit, deleted });
          return deleted;
        };
      }
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === "function" ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  assert.equal(await cleanFinishedJobs({ config: s.config, store: watched }), count);
  assert.deepEqual(
    batches,
    [CLEAN_BATCH, CLEAN_BATCH, 17].map((deleted) => ({ limit: CLEAN_BATCH, deleted })),
    "bounded batches until one comes back short",
  );
  const stats = await store.jobStats();
  assert.equal(stats.byStatus.cancelled, 0);
  assert.equal(stats.byStatus.pending, 1);
  assert.equal(await exists(store, kept.id), true);

  // Its jobs are gone, but a later job enqueued into the cancelled chain is still created cancelled.
  const late = await insert(store, jobParams(s, rid));
  assert.equal(late.status, "cancelled");
  assert.equal(late.result?.terminal_reason, "cancelled-by-chain");
});

test("terminal_days null keeps every terminal job forever", async (t) => {
  const s = await start(t, (raw) => (raw["retention"] = { terminal_days: null }));
  const ids = [await jobIn(s, "succeeded"), await jobIn(s, "dead"), await jobIn(s, "cancelled")];
  s.clock.advance(10 * 365 * DAY);
  assert.equal(await cleanFinishedJobs({ config: s.config, store: s.service.store }), 0);
  for (const id of ids) assert.equal(await exists(s.service.store, id), true);
});

test("old cron ticks are forgotten while recent ones are still remembered", async (t) => {
  const s = await start(t, (raw) => {
    raw["cron"] = [
      { name: "nightly", schedule: "0 3 * * *", operation_id: "buildReport", user_id: "system", dedupe_key: null },
    ];
  });
  const store = s.service.store;
  const [entry] = s.config.cron;
  assert.ok(entry);
  const oldTick = START - 7 * DAY;
  const recentTick = START - 60_000;
  for (const tickAt of [oldTick, recentTick]) {
    const outcome = await store.cronTickInsert({
      name: "nightly",
      tickAt,
      job: cronTickJob({ config: s.config, settings: s.service.settings, entry, tickAt }),
    });
    assert.equal(outcome.kind, "created");
  }

  await cleanFinishedJobs({ config: s.config, store });

  const again = (tickAt: number) =>
    store.cronTickInsert({
      name: "nightly",
      tickAt,
      job: cronTickJob({ config: s.config, settings: s.service.settings, entry, tickAt }),
    });
  assert.equal((await again(recentTick)).kind, "already_enqueued", "a recent tick is remembered");
  assert.equal((await again(oldTick)).kind, "created", "a week-old tick was forgotten");
});

test("the cleaner runs at least hourly", () => {
  assert.ok(CLEAN_INTERVAL_MS <= 3_600_000, `every ${CLEAN_INTERVAL_MS} ms`);
  assert.ok(CLEAN_BATCH > 0);
});

test("a chain that settles after retention deleted the job that named its on_settled gets no callback, and stops being due", async (t) => {
  const s = await start(t, (raw) => (raw["retention"] = { terminal_days: 1 }));
  const { store, settings, telemetry, notifier } = s.service;
  const onSettled = { operation_id: "recordEmailSent", request: { path_params: { emailId: "1" } } };
  const root = await insert(store, jobParams(s, "late", { onSettled }));
  const child = await insert(store, jobParams(s, "late", { parentJobId: root.id, runTime: { delayMs: 2 * DAY } }));
  const finish = async (id: string) => {
    const [claimed] = await store.jobClaimMany({ limit: 1 });
    assert.equal(claimed?.id, id);
    const result = { status_code: 200, error_body: null, terminal_reason: null };
    assert.deepEqual(
      await store.jobSetStateIfRunningMany({ outcomes: [{ id, attempt: 1, status: "succeeded", result }] }),
      [true],
    );
  };
  await finish(root.id);
  s.clock.advance(DAY + 1);
  assert.equal(await cleanFinishedJobs({ config: s.config, store }), 1, "the root is deleted; its chain still runs");
  s.clock.advance(DAY);
  await finish(child.id);
  assert.deepEqual(
    (await store.chainSettledDueList({ limit: 10 })).map((chain) => chain.originalRequestId),
    ["late"],
  );

  const refused: unknown[] = [];
  telemetry.on("callback:refused", (event) => refused.push(event));
  await sweepChains({ config: s.config, settings, store, telemetry, notifier });
  assert.deepEqual(refused, [{ kind: "on_settled", of: "late", reason: "setter_deleted" }]);
  assert.deepEqual(await store.chainSettledDueList({ limit: 10 }), [], "recorded as fired: never due again");
  assert.notEqual((await store.chainGet({ originalRequestId: "late" }))?.onSettledFiredAt, null);
  assert.deepEqual(
    (await store.jobList({ originalRequestId: "late", limit: 10 })).map((job) => job.id),
    [child.id],
    "no callback job",
  );
});

test("a pass deletes the rate buckets whose time has passed (one per rate key used), and keeps those still in force", async (t) => {
  const s = await start(t);
  const { store } = s.service;
  const limits = { ...NO_LIMITS, ratePerKey: { limit: 1, periodMs: 60_000, burst: 1 } };
  await store.operationLimitsSet({ operationId: "buildReport", limits, source: "admin", actor: "admin" });
  const KEYS = 300;
  for (let n = 0; n < KEYS; n++) await insert(store, jobParams(s, `bucket-${n}`, { rateKey: `key-${n}` }));
  let claimed = 0;
  for (
    let batch = await store.jobClaimMany({ limit: 100 });
    batch.length > 0;
    batch = await store.jobClaimMany({ limit: 100 })
  ) {
    claimed += batch.length;
  }
  assert.equal(claimed, KEYS, "one bucket per key now");
  await cleanFinishedJobs({ config: s.config, store });
  s.clock.advance(60_001);
  await insert(store, jobParams(s, "bucket-late", { rateKey: "key-late" }));
  assert.equal((await store.jobClaimMany({ limit: 1 })).length, 1, "a bucket still in force");
  await cleanFinishedJobs({ config: s.config, store });
  assert.equal(await store.rateBucketDeleteMany(), 0, "the pass left no bucket whose time had passed");
  s.clock.advance(60_001);
  assert.equal(await store.rateBucketDeleteMany(), 1, "the one still in force then was kept");
});

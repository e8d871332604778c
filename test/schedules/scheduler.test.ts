/**
 * Cron (docs/delivery.md, "Cron"): each tick of an entry enqueues exactly one job, with the cron caller, authority, request id
 * and dedupe key the contract gives it, once across schedulers and restarts; tick times follow 5- and 6-field
 * expressions in IANA time zones. Ticks are fired directly with `CronScheduler.fire` on a ManualClock; only the
 * last test waits for a real timer.
 */
import { describe, test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { pino } from "pino";
import { ManualClock, systemClock, type Clock } from "../../src/clock.js";
import { parseConfig, type Config, type CronConfig } from "../../src/config.js";
import type { Job } from "../../src/job/schemas.js";
import { CRON_CATCH_UP_MS, CronScheduler } from "../../src/schedules/scheduler.js";
import { createService, type Service } from "../../src/service.js";
import { StoreUnavailableError, type Store } from "../../src/store/store.js";
import type { OpqueueEvents } from "../../src/telemetry/events.js";
import { deferred } from "../helpers/target.js";
import { mintToken } from "../../src/auth/tokens.js";
import { rawTestConfig } from "../helpers/service.js";

const HOUR = 3_600_000;
const iso = (ms: number): string => new Date(ms).toISOString();

/** The cron entries of these tests; each has its `cron:{name}` trigger. */
const CRON_ENTRIES = [
  {
    name: "nightly",
    schedule: "0 3 * * *",
    timezone: "Europe/Paris",
    operation_id: "buildReport",
    user_id: "system",
    request: { body: { kind: "nightly", days: 1 } },
  },
  {
    name: "welcome",
    schedule: "*/5 * * * *",
    operation_id: "sendWelcomeEmail",
    user_id: "u9",
    request: { path_params: { userId: "9" }, query: { digest: true } },
    dedupe_key: "welcome-digest",
    concurrency_key: "welcome",
    priority: 7,
  },
  {
    name: "every-tick",
    schedule: "0 * * * *",
    operation_id: "buildReport",
    user_id: "system",
    dedupe_key: null,
  },
];

function configure(raw: Record<string, unknown>, entries: object[] = CRON_ENTRIES): void {
  raw["cron"] = entries;
  raw["triggers"] = {
    ...(raw["triggers"] as Record<string, string[]>),
    "cron:nightly": ["buildReport"],
    "cron:welcome": ["sendWelcomeEmail"],
    "cron:every-tick": ["buildReport"],
  };
}

/** A temporary folder and the config of a service writing its SQLite file there; removed when the test ends. */
function testConfig(t: TestContext, entries?: object[]): Config {
  const dir = mkdtempSync(join(tmpdir(), "opqueue-cron-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const raw = rawTestConfig(dir);
  configure(raw, entries);
  return parseConfig({ raw, baseDir: dir, env: {} });
}

/** A service (worker built, not started) on `config`, closed when the test ends. */
async function openService(t: TestContext, config: Config, clock: Clock): Promise<Service> {
  const service = await createService({ config, clock });
  t.after(() => service.close());
  return service;
}

function entryNamed(config: Config, name: string): CronConfig {
  const entry = config.cron.find((candidate) => candidate.name === name);
  assert.ok(entry, `cron entry ${name}`);
  return entry;
}

function schedulerOf(service: Service): CronScheduler {
  assert.ok(service.worker, "the service has a worker");
  return service.worker.cron;
}

/** Records the `cron:tick` events of `service`. */
function recordTicks(service: Service): Array<OpqueueEvents["cron:tick"]> {
  const ticks: Array<OpqueueEvents["cron:tick"]> = [];
  service.telemetry.on("cron:tick", (tick) => ticks.push(tick));
  return ticks;
}

/** Every job of the service's store, oldest first. */
async function allJobs(service: Service) {
  return (await service.store.jobList({ limit: 500 })).reverse();
}

/** `GET /jobs/{id}` as a site admin. */
async function getJob(service: Service, clock: Clock, id: string): Promise<Job> {
  const token = await mintToken({ auth: service.config.auth, clock, sub: "admin", siteAdmin: true });
  const res = await service.app.inject({
    method: "GET",
    url: `/jobs/${id}`,
    headers: { authorization: `Bearer ${token}` },
  });
  assert.equal(res.statusCode, 200, res.body);
  return (res.json() as { job: Job }).job;
}

/** A scheduler of `entry` alone on the service's settings, reading and writing `store`; stopped when the test ends. */
function schedulerOn(
  t: TestContext,
  service: Service,
  options: { entry: CronConfig; store: Store; clock: Clock },
): CronScheduler {
  const scheduler = new CronScheduler({
    config: { ...service.config, cron: [options.entry] },
    registry: service.registry,
    settings: service.settings,
    store: options.store,
    clock: options.clock,
    notifier: service.notifier,
    telemetry: service.telemetry,
    logger: pino({ level: "silent" }),
  });
  t.after(() => scheduler.stop());
  return scheduler;
}

/**
 * Starts a scheduler of `entry` alone on the service's store, and lets its timer fire the tick at `first`, whose commit
 * then waits for `release` (a stalled node, a wait on another node's commit of the same tick).
 */
async function firstTickHeld(
  t: TestContext,
  service: Service,
  options: {
    entry: CronConfig;
    clock: ManualClock;
    first: number;
    /** What the store answers the held tick instead of recording it (a schedule paused meanwhile). */
    answer?: Awaited<ReturnType<Store["cronTickInsert"]>>;
  },
): Promise<{ scheduler: CronScheduler; release: () => void }> {
  const started = deferred();
  const held = deferred();
  let inserts = 0;
  const store: Store = Object.assign(Object.create(service.store) as Store, {
    cronTickInsert: async (params: Parameters<Store["cronTickInsert"]>[0]) => {
      if (inserts++ === 0) {
        started.resolve();
        await held.promise;
        if (options.answer) return options.answer;
      }
      return service.store.cronTickInsert(params);
    },
  });
  const scheduler = schedulerOn(t, service, { entry: options.entry, store, clock: options.clock });
  options.clock.set(options.first - 20);
  scheduler.start();
  options.clock.set(options.first);
  await started.promise;
  return { scheduler, release: () => held.resolve() };
}

/** A cron entry for `nextTick` alone. */
function entry(schedule: string, timezone = "UTC"): CronConfig {
  return { name: "x", schedule, timezone, operation_id: "buildReport", user_id: "system", request: {} };
}

// ---------------------------------------------------------------------------------------------------------

describe("a cron tick", () => {
  test("enqueues exactly one job: caller cron:{name}, cron authority, tick-stamped request id, default dedupe key cron:{name}, the entry's target and request", async (t) => {
    const config = testConfig(t);
    const clock = new ManualClock(Date.UTC(2026, 10, 21, 12));
    const service = await openService(t, config, clock);
    const ticks = recordTicks(service);
    const nightly = entryNamed(config, "nightly");
    const cron = schedulerOf(service);

    // 03:00 in Paris on 22 November (CET, UTC+1) is 02:00Z.
    const tickAt = cron.nextTick(nightly, clock.now());
    assert.equal(tickAt, Date.UTC(2026, 10, 22, 2));
    clock.set(tickAt);
    await cron.fire(nightly, tickAt);

    const jobs = await allJobs(service);
    assert.equal(jobs.length, 1);
    const job = await getJob(service, clock, jobs[0]?.id ?? "");
    assert.deepEqual(
      {
        operation_id: job.operation_id,
        status: job.status,
        attempt: job.attempt,
        max_attempts: job.max_attempts,
        priority: job.priority,
        run_at: job.run_at,
        enqueued_by_operation_id: job.enqueued_by_operation_id,
        parent_job_id: job.parent_job_id,
        original_request_id: job.original_request_id,
        user_id: job.user_id,
        authority: job.authority,
        dedupe_key: job.dedupe_key,
        concurrency_key: job.concurrency_key,
        request: job.request,
      },
      {
        operation_id: "buildReport",
        status: "pending",
        attempt: 0,
        max_attempts: config.defaults.max_attempts,
        priority: 0,
        run_at: "2026-11-22T02:00:00.000Z",
        enqueued_by_operation_id: "cron:nightly",
        parent_job_id: null,
        original_request_id: "cron:nightly:2026-11-22T02:00:00.000Z",
        user_id: "system",
        authority: { kind: "cron", cron_job_name: "nightly", user_id: "system" },
        dedupe_key: "cron:nightly",
        concurrency_key: null,
        request: { body: { kind: "nightly", days: 1 } },
      },
    );
    assert.deepEqual(ticks, [{ name: "nightly", tickAt, outcome: "created" }]);
  });

  test("honours the entry's dedupe_key, concurrency_key, priority and path parameters, and the target's max_attempts override", async (t) => {
    const config = testConfig(t);
    const clock = new ManualClock(Date.UTC(2026, 10, 21, 12, 3));
    const service = await openService(t, config, clock);
    const welcome = entryNamed(config, "welcome");
    const cron = schedulerOf(service);
    const tickAt = cron.nextTick(welcome, clock.now());
    assert.equal(tickAt, Date.UTC(2026, 10, 21, 12, 5));
    await cron.fire(welcome, tickAt as number);

    const [row] = await allJobs(service);
    assert.ok(row);
    const job = await getJob(service, clock, row.id);
    assert.equal(job.operation_id, "sendWelcomeEmail");
    assert.equal(job.dedupe_key, "welcome-digest");
    assert.equal(job.concurrency_key, "welcome");
    assert.equal(job.priority, 7);
    assert.equal(job.max_attempts, 8, "operations.sendWelcomeEmail.max_attempts");
    assert.equal(job.user_id, "u9");
    assert.deepEqual(job.authority, { kind: "cron", cron_job_name: "welcome", user_id: "u9" });
    assert.equal(job.original_request_id, "cron:welcome:2026-11-21T12:05:00.000Z");
    assert.deepEqual(job.request, { path_params: { userId: "9" }, query: { digest: true } });
  });

  test("with dedupe_key null enqueues a job without a dedupe key, and every tick gets its own job", async (t) => {
    const config = testConfig(t);
    const clock = new ManualClock(Date.UTC(2026, 10, 21, 12, 30));
    const service = await openService(t, config, clock);
    const everyTick = entryNamed(config, "every-tick");
    const cron = schedulerOf(service);
    const first = Date.UTC(2026, 10, 21, 13);
    assert.equal(cron.nextTick(everyTick, clock.now()), first);
    await cron.fire(everyTick, first);
    await cron.fire(everyTick, first + HOUR);

    const jobs = await allJobs(service);
    assert.deepEqual(
      jobs.map((job) => [job.dedupeKey, job.originalRequestId, job.status]),
      [
        [null, "cron:every-tick:2026-11-21T13:00:00.000Z", "pending"],
        [null, "cron:every-tick:2026-11-21T14:00:00.000Z", "pending"],
      ],
    );
  });

  test("fired twice for the same tick enqueues once; the second answers already_enqueued", async (t) => {
    const config = testConfig(t);
    const clock = new ManualClock(Date.UTC(2026, 10, 21, 12));
    const service = await openService(t, config, clock);
    const ticks = recordTicks(service);
    const everyTick = entryNamed(config, "every-tick");
    const tickAt = Date.UTC(2026, 10, 21, 13);
    await schedulerOf(service).fire(everyTick, tickAt);
    await schedulerOf(service).fire(everyTick, tickAt);

    assert.equal((await allJobs(service)).length, 1);
    assert.deepEqual(
      ticks.map(({ outcome }) => outcome),
      ["created", "already_enqueued"],
    );
  });

  test("two schedulers on one store firing the same tick at once enqueue exactly one job", async (t) => {
    const config = testConfig(t);
    const clock = new ManualClock(Date.UTC(2026, 10, 21, 12));
    const service = await openService(t, config, clock);
    const ticks = recordTicks(service);
    const logger = pino({ level: "silent" });
    const [a, b] = [0, 1].map(
      () =>
        new CronScheduler({
          config,
          registry: service.registry,
          settings: service.settings,
          store: service.store,
          clock,
          notifier: service.notifier,
          telemetry: service.telemetry,
          logger,
        }),
    );
    assert.ok(a && b);
    // A dedupe key of its own would hide a double enqueue: use the entry without one.
    const everyTick = entryNamed(config, "every-tick");
    const tickAt = Date.UTC(2026, 10, 21, 13);
    await Promise.all([a.fire(everyTick, tickAt), b.fire(everyTick, tickAt)]);

    assert.equal((await allJobs(service)).length, 1);
    assert.deepEqual(ticks.map(({ outcome }) => outcome).sort(), ["already_enqueued", "created"]);
  });

  test("a tick enqueued before a restart is not enqueued again by the new service on the same database", async (t) => {
    const config = testConfig(t);
    const clock = new ManualClock(Date.UTC(2026, 10, 21, 12));
    const everyTick = entryNamed(config, "every-tick");
    const tickAt = Date.UTC(2026, 10, 21, 13);

    const before = await createService({ config, clock });
    await schedulerOf(before).fire(everyTick, tickAt);
    assert.equal((await allJobs(before)).length, 1);
    await before.close();

    const after = await openService(t, config, clock);
    const ticks = recordTicks(after);
    await schedulerOf(after).fire(everyTick, tickAt);
    assert.equal((await allJobs(after)).length, 1);
    assert.deepEqual(ticks, [{ name: "every-tick", tickAt, outcome: "already_enqueued" }]);
  });

  test("finding the previous tick's job still pending refreshes it (dedupe upsert) instead of adding a second job", async (t) => {
    const config = testConfig(t);
    const clock = new ManualClock(Date.UTC(2026, 10, 21, 12));
    const service = await openService(t, config, clock);
    const ticks = recordTicks(service);
    const nightly = entryNamed(config, "nightly");
    const cron = schedulerOf(service);
    const firstTick = cron.nextTick(nightly, clock.now()) as number;
    const secondTick = cron.nextTick(nightly, firstTick) as number;
    assert.equal(secondTick - firstTick, 24 * HOUR);

    clock.set(firstTick);
    await cron.fire(nightly, firstTick);
    const [created] = await allJobs(service);
    assert.ok(created);
    clock.set(secondTick);
    await cron.fire(nightly, secondTick);

    const jobs = await allJobs(service);
    assert.equal(jobs.length, 1);
    const [job] = jobs;
    assert.equal(job?.id, created.id);
    assert.equal(job?.status, "pending");
    assert.equal(job?.attempt, 0);
    assert.equal(job?.runAt, secondTick, "run_at moves to the new tick");
    assert.equal(job?.dedupeKey, "cron:nightly");
    assert.deepEqual(
      ticks.map(({ outcome }) => outcome),
      ["created", "deduplicated"],
    );
  });

  test("finding the previous tick's job running creates a new job beside it (a running job holds no dedupe key)", async (t) => {
    const config = testConfig(t);
    const clock = new ManualClock(Date.UTC(2026, 10, 21, 12));
    const service = await openService(t, config, clock);
    const nightly = entryNamed(config, "nightly");
    const cron = schedulerOf(service);
    const firstTick = cron.nextTick(nightly, clock.now()) as number;
    const secondTick = cron.nextTick(nightly, firstTick) as number;

    clock.set(firstTick);
    await cron.fire(nightly, firstTick);
    const claimed = await service.store.jobClaimMany({ limit: 1 });
    assert.equal(claimed.length, 1);
    clock.set(secondTick);
    await cron.fire(nightly, secondTick);

    const jobs = await allJobs(service);
    assert.deepEqual(
      jobs.map((job) => [job.status, job.originalRequestId]),
      [
        ["running", `cron:nightly:${iso(firstTick)}`],
        ["pending", `cron:nightly:${iso(secondTick)}`],
      ],
    );
  });
});

describe("nextTick", () => {
  const cron = new CronScheduler({
    config: undefined as unknown as Config,
    registry: undefined as never,
    settings: undefined as never,
    notifier: undefined as never,
    store: undefined as never,
    clock: systemClock,
    telemetry: undefined as never,
    logger: pino({ level: "silent" }),
  });

  test("of a 5-field expression in UTC is the next matching minute, strictly after the given time", () => {
    assert.equal(cron.nextTick(entry("0 3 * * *"), Date.UTC(2026, 10, 21, 12)), Date.UTC(2026, 10, 22, 3));
    assert.equal(cron.nextTick(entry("0 3 * * *"), Date.UTC(2026, 10, 22, 3)), Date.UTC(2026, 10, 23, 3));
    assert.equal(cron.nextTick(entry("0 3 * * *"), Date.UTC(2026, 10, 22, 2, 59, 59, 999)), Date.UTC(2026, 10, 22, 3));
    assert.equal(
      cron.nextTick(entry("*/5 * * * *"), Date.UTC(2026, 10, 21, 12, 7, 30)),
      Date.UTC(2026, 10, 21, 12, 10),
    );
  });

  test("of a 6-field expression counts seconds", () => {
    assert.equal(
      cron.nextTick(entry("*/15 * * * * *"), Date.UTC(2026, 10, 21, 12, 0, 7, 500)),
      Date.UTC(2026, 10, 21, 12, 0, 15),
    );
    assert.equal(
      cron.nextTick(entry("* * * * * *"), Date.UTC(2026, 10, 21, 12, 0, 7)),
      Date.UTC(2026, 10, 21, 12, 0, 8),
    );
    assert.equal(cron.nextTick(entry("30 0 3 * * *"), Date.UTC(2026, 10, 21, 12)), Date.UTC(2026, 10, 22, 3, 0, 30));
  });

  test("follows the IANA time zone, daylight saving time included", () => {
    const paris = entry("0 3 * * *", "Europe/Paris");
    // Winter (CET, UTC+1): 03:00 local is 02:00Z.
    assert.equal(cron.nextTick(paris, Date.UTC(2026, 0, 15, 12)), Date.UTC(2026, 0, 16, 2));
    // Summer (CEST, UTC+2): 03:00 local is 01:00Z.
    assert.equal(cron.nextTick(paris, Date.UTC(2026, 6, 15, 12)), Date.UTC(2026, 6, 16, 1));
    // 29 March 2026: clocks go from 02:00 CET to 03:00 CEST at 01:00Z, so 03:00 local is 01:00Z.
    assert.equal(cron.nextTick(paris, Date.UTC(2026, 2, 28, 12)), Date.UTC(2026, 2, 29, 1));
    // 25 October 2026: clocks go back from 03:00 CEST to 02:00 CET at 01:00Z, so 03:00 local is 02:00Z.
    assert.equal(cron.nextTick(paris, Date.UTC(2026, 9, 24, 12)), Date.UTC(2026, 9, 25, 2));
    // A daily time that is skipped (29 March) or repeated (25 October) in Paris still ticks once on that day.
    const halfPastTwo = entry("30 2 * * *", "Europe/Paris");
    const parisDays = [
      // 29 March: from 00:00 CET (23:00Z the day before) to 00:00 CEST (22:00Z), 23 hours.
      { day: "2026-03-29", from: Date.UTC(2026, 2, 28, 23), to: Date.UTC(2026, 2, 29, 22) },
      // 25 October: from 00:00 CEST (22:00Z the day before) to 00:00 CET (23:00Z), 25 hours.
      { day: "2026-10-25", from: Date.UTC(2026, 9, 24, 22), to: Date.UTC(2026, 9, 25, 23) },
    ];
    for (const { day, from, to } of parisDays) {
      const ticks: number[] = [];
      for (let at = cron.nextTick(halfPastTwo, from - 1); at !== null && at < to; at = cron.nextTick(halfPastTwo, at)) {
        ticks.push(at);
      }
      assert.equal(ticks.length, 1, `one tick on ${day}: ${ticks.map(iso).join(", ")}`);
    }
    // New York in January (EST, UTC-5), 6 fields: 03:00:30 local is 08:00:30Z.
    assert.equal(
      cron.nextTick(entry("30 0 3 * * *", "America/New_York"), Date.UTC(2026, 0, 15, 12)),
      Date.UTC(2026, 0, 16, 8, 0, 30),
    );
    // Kolkata (UTC+5:30), Mondays at 09:00: from Saturday 21 November, Monday 23 November 03:30Z.
    assert.equal(
      cron.nextTick(entry("0 9 * * 1", "Asia/Kolkata"), Date.UTC(2026, 10, 21, 12)),
      Date.UTC(2026, 10, 23, 3, 30),
    );
  });
});

test("a started service enqueues a job on a real timer for a 6-field every-second schedule", async (t) => {
  const config = testConfig(t, [
    { name: "nightly", schedule: "* * * * * *", operation_id: "buildReport", user_id: "system", dedupe_key: null },
  ]);
  const service = await openService(t, config, systemClock);
  const firstTick = new Promise<OpqueueEvents["cron:tick"]>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no cron:tick event within 5 s")), 5000);
    service.telemetry.on("cron:tick", (tick) => {
      clearTimeout(timer);
      resolve(tick);
    });
  });
  const startedAt = Date.now();
  service.start();
  const tick = await firstTick;
  assert.equal(tick.name, "nightly");
  assert.equal(tick.outcome, "created");
  assert.equal(tick.tickAt % 1000, 0, "a whole second");
  assert.ok(tick.tickAt > startedAt, "the first tick after the start");

  const jobs = await service.store.jobList({ limit: 500, originalRequestId: `cron:nightly:${iso(tick.tickAt)}` });
  assert.equal(jobs.length, 1);
  assert.equal(jobs[0]?.enqueuedByOperationId, "cron:nightly");
});

test("a tick the database does not take at first is tried again, and enqueued once it answers", async (t) => {
  const config = testConfig(t);
  const nightly = entryNamed(config, "nightly");
  const clock = new ManualClock(Date.UTC(2026, 10, 21, 12, 0, 0));
  const service = await openService(t, config, clock);
  // The service's own store, refusing the tick twice as a restarting database would.
  let refusals = 2;
  const store: Store = Object.assign(Object.create(service.store) as Store, {
    cronTickInsert: (params: Parameters<Store["cronTickInsert"]>[0]) => {
      if (refusals-- > 0) return Promise.reject(new StoreUnavailableError("the database is restarting"));
      return service.store.cronTickInsert(params);
    },
  });
  const ticked = new Promise<OpqueueEvents["cron:tick"]>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the tick was not enqueued within 10 s")), 10_000);
    service.telemetry.on("cron:tick", (tick) => {
      clearTimeout(timer);
      resolve(tick);
    });
  });
  const scheduler = schedulerOn(t, service, { entry: nightly, store, clock });
  const tickAt = scheduler.nextTick(nightly, clock.now()) as number;
  clock.set(tickAt - 50);
  scheduler.start();
  clock.set(tickAt + 1);
  const tick = await ticked;
  assert.deepEqual([tick.name, tick.tickAt, tick.outcome], ["nightly", tickAt, "created"]);
  assert.equal(refusals, -1, "tried three times");
  const jobs = await service.store.jobList({ limit: 10, originalRequestId: `cron:nightly:${iso(tickAt)}` });
  assert.equal(jobs.length, 1);
});

/** A service whose config has one entry, "nightly" on `schedule` (each tick a job of its own), on a clock at `start`. */
async function oneEntry(t: TestContext, schedule: string, start: number) {
  const config = testConfig(t, [
    { name: "nightly", schedule, operation_id: "buildReport", user_id: "system", dedupe_key: null },
  ]);
  const clock = new ManualClock(start);
  const service = await openService(t, config, clock);
  return { nightly: entryNamed(config, "nightly"), clock, service, ticks: recordTicks(service) };
}

/** Waits until `scheduler` has armed its next tick of "nightly" at `at`: every tick before it was fired or skipped. */
async function untilArmed(scheduler: CronScheduler, at: number): Promise<void> {
  for (let i = 0; i < 1000 && scheduler.nextTicks().get("nightly") !== at; i++) await sleep(10);
  assert.equal(scheduler.nextTicks().get("nightly"), at);
}

test("ticks that came due while the tick before was still being enqueued are enqueued next, in order, none skipped", async (t) => {
  const { nightly, clock, service, ticks } = await oneEntry(t, "* * * * * *", Date.UTC(2026, 10, 21, 12, 0, 0, 500));
  const threeTicks = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`3 ticks awaited within 10 s, got ${ticks.map((tick) => iso(tick.tickAt)).join(", ")}`)),
      10_000,
    );
    service.telemetry.on("cron:tick", () => {
      if (ticks.length < 3) return;
      clearTimeout(timer);
      resolve();
    });
  });
  const first = Date.UTC(2026, 10, 21, 12, 0, 1);
  const held = await firstTickHeld(t, service, { entry: nightly, clock, first });
  // The first tick commits 2.5 s late, past two more ticks; the fourth is not due yet.
  clock.set(first + 2500);
  held.release();
  await threeTicks;
  assert.deepEqual(
    ticks.slice(0, 3).map((tick) => [iso(tick.tickAt), tick.outcome]),
    [first, first + 1000, first + 2000].map((at) => [iso(at), "created"]),
  );
});

test("when a tick's commit ends an hour late, the ticks since then more than CRON_CATCH_UP_MS late are not enqueued; those of the last minute are", async (t) => {
  const { nightly, clock, service, ticks } = await oneEntry(t, "*/10 * * * * *", Date.UTC(2026, 10, 21, 12, 0, 5));
  const first = Date.UTC(2026, 10, 21, 12, 0, 10);
  const { scheduler, release } = await firstTickHeld(t, service, { entry: nightly, clock, first });
  // Held for an hour and 5 s: the ticks of the last CRON_CATCH_UP_MS are enqueued, the older ones dropped.
  const now = first + 3_600_000 + 5000;
  clock.set(now);
  release();
  // Ticks are fired one after another, so once the next tick armed is the one after now, every due one was fired.
  await untilArmed(scheduler, now + 5000);
  const caughtUp = Array.from(
    { length: CRON_CATCH_UP_MS / 10_000 },
    (_, i) => now - CRON_CATCH_UP_MS + 5000 + i * 10_000,
  );
  assert.deepEqual(
    ticks.map((tick) => [iso(tick.tickAt), tick.outcome]),
    [first, ...caughtUp].map((at) => [iso(at), "created"]),
  );
});

test("a tick whose timer fires more than CRON_CATCH_UP_MS late is not enqueued; the ticks of the last minute are", async (t) => {
  const { nightly, clock, service, ticks } = await oneEntry(t, "*/10 * * * * *", Date.UTC(2026, 10, 21, 12, 0, 5));
  const scheduler = schedulerOn(t, service, { entry: nightly, store: service.store, clock });
  const first = Date.UTC(2026, 10, 21, 12, 0, 10);
  clock.set(first - 20);
  scheduler.start();
  // The process is held up past its timer (suspended): when the timer runs, its tick is two minutes old.
  const now = first + 125_000;
  clock.set(now);
  await untilArmed(scheduler, now + 5000);
  const lastMinute = Array.from(
    { length: CRON_CATCH_UP_MS / 10_000 },
    (_, i) => now - CRON_CATCH_UP_MS + 5000 + i * 10_000,
  );
  assert.deepEqual(
    ticks.map((tick) => [iso(tick.tickAt), tick.outcome]),
    lastMinute.map((at) => [iso(at), "created"]),
  );
});

test("a tick the store refused because the schedule changed ends the catching up: the next is the first after now", async (t) => {
  const { nightly, clock, service, ticks } = await oneEntry(t, "* * * * * *", Date.UTC(2026, 10, 21, 12, 0, 0, 500));
  const first = Date.UTC(2026, 10, 21, 12, 0, 1);
  const { scheduler, release } = await firstTickHeld(t, service, {
    entry: nightly,
    clock,
    first,
    answer: { kind: "schedule_changed" },
  });
  // Refused 2.5 s late (paused meanwhile, say): the two ticks that came due since are not fired.
  clock.set(first + 2500);
  release();
  await untilArmed(scheduler, first + 3000);
  assert.deepEqual(
    ticks.map((tick) => [iso(tick.tickAt), tick.outcome]),
    [[iso(first), "schedule_changed"]],
  );
});

/**
 * The cron scheduler and schedules created through the API (docs/schedules.md): what a read of the stored schedules
 * arms, re-arms and disarms (a change, a pause, a resume without backfill, a delete), the revision a tick is fired
 * for, the trigger map checked again at every tick, and exactly one job per tick between schedulers. Time is a
 * ManualClock moved by hand; ticks are fired with `CronScheduler.fire` and arming is read with `nextTicks()`. Only the
 * last test waits for a real timer. Runs on the engine of OPQUEUE_TEST_ENGINE.
 */
import assert from "node:assert/strict";
import { describe, test, type TestContext } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { pino } from "pino";
import { ManualClock } from "../../src/clock.js";
import { ConfigError } from "../../src/config.js";
import { CronScheduler } from "../../src/schedules/scheduler.js";
import { cronEntryOf, type ScheduleRow } from "../../src/schedules/schedule.js";
import { createService } from "../../src/service.js";
import type { OpqueueEvents } from "../../src/telemetry/events.js";
import { iso } from "../helpers/jobs.js";
import { startTestService, type TestService } from "../helpers/service.js";

/** Saturday 21 November 2026, 12:03 UTC. */
const START = Date.UTC(2026, 10, 21, 12, 3);

/** Lets schedules created through the API enqueue buildReport and sendWelcomeEmail. */
function allowSchedules(raw: Record<string, unknown>): void {
  raw["triggers"] = { ...(raw["triggers"] as Record<string, string[]>), "cron:*": ["buildReport", "sendWelcomeEmail"] };
}

/** A test service whose scheduler runs (its dispatcher too, with nothing to deliver to), stopped when `t` ends. */
async function startScheduling(
  t: TestContext,
  configure: (raw: Record<string, unknown>) => void = allowSchedules,
): Promise<TestService & { cron: CronScheduler }> {
  const s = await startTestService({ clock: new ManualClock(START), configure });
  t.after(() => s.close());
  const cron = s.service.worker?.cron;
  assert.ok(cron, "the service has a worker");
  cron.start();
  return { ...s, cron };
}

/** A second scheduler on `s`'s store and parts, not started; `options` replace its config or set its read interval. */
function schedulerOf(s: TestService, options: { config?: TestService["config"]; syncMs?: number } = {}): CronScheduler {
  return new CronScheduler({
    config: options.config ?? s.config,
    registry: s.service.registry,
    settings: s.service.settings,
    store: s.service.store,
    clock: s.clock,
    notifier: s.service.notifier,
    telemetry: s.service.telemetry,
    logger: pino({ level: "silent" }),
    ...(options.syncMs === undefined ? {} : { syncMs: options.syncMs }),
  });
}

/** `method url` as a site admin named `sub`, with a JSON body; the answer must have `status`. */
async function admin(
  s: TestService,
  method: "GET" | "POST" | "PATCH" | "DELETE",
  url: string,
  options: { body?: object; status?: number; sub?: string } = {},
) {
  const res = await s.inject({
    method,
    url,
    token: await s.adminToken({ sub: options.sub ?? "alice" }),
    ...(options.body ? { payload: options.body } : {}),
  });
  assert.equal(res.statusCode, options.status ?? 200, res.body);
  return res.json() as Record<string, unknown>;
}

/** Creates a schedule through the API. */
async function create(s: TestService, body: Record<string, unknown>): Promise<void> {
  await admin(s, "POST", "/schedules", {
    body: { operation_id: "buildReport", user_id: "system", ...body },
    status: 201,
  });
}

async function stored(s: TestService, name: string): Promise<ScheduleRow> {
  const row = await s.service.store.scheduleGet({ name });
  assert.ok(row, `schedule ${name} is stored`);
  return row;
}

/** Records the `cron:tick` events of `s`. */
function recordTicks(s: TestService): Array<OpqueueEvents["cron:tick"]> {
  const ticks: Array<OpqueueEvents["cron:tick"]> = [];
  s.service.telemetry.on("cron:tick", (tick) => ticks.push(tick));
  return ticks;
}

/** Every job, oldest first. */
async function allJobs(s: TestService) {
  return (await s.service.store.jobList({ limit: 500 })).reverse();
}

describe("a read of the stored schedules", () => {
  test("arms a created schedule at its next tick in its time zone, beside the config's entries, and its tick enqueues one job of its definition", async (t) => {
    const s = await startScheduling(t);
    await create(s, {
      name: "digest",
      schedule: "0 9 * * 1",
      timezone: "Asia/Kolkata",
      request: { body: { kind: "digest" } },
      priority: 4,
      concurrency_key: "digests",
    });
    await s.cron.sync();
    // Mondays at 09:00 in Kolkata (UTC+5:30): from Saturday 21 November, Monday 23 November 03:30Z.
    const tickAt = Date.UTC(2026, 10, 23, 3, 30);
    assert.deepEqual(
      [...s.cron.nextTicks()].sort(),
      [
        ["digest", tickAt],
        ["nightly", Date.UTC(2026, 10, 22, 3)],
      ],
      "the config's nightly entry and the stored schedule",
    );

    const row = await stored(s, "digest");
    s.clock.set(tickAt);
    assert.equal(await s.cron.fire(cronEntryOf(row), tickAt, { revision: row.revision }), true);
    const jobs = await allJobs(s);
    assert.equal(jobs.length, 1);
    const [job] = jobs;
    assert.deepEqual(
      {
        operationId: job?.operationId,
        status: job?.status,
        runAt: job?.runAt,
        priority: job?.priority,
        enqueuedBy: job?.enqueuedByOperationId,
        originalRequestId: job?.originalRequestId,
        userId: job?.userId,
        authority: job?.authority,
        dedupeKey: job?.dedupeKey,
        concurrencyKey: job?.concurrencyKey,
        request: job?.request,
        maxAttempts: job?.maxAttempts,
      },
      {
        operationId: "buildReport",
        status: "pending",
        runAt: tickAt,
        priority: 4,
        enqueuedBy: "cron:digest",
        originalRequestId: `cron:digest:${iso(tickAt)}`,
        userId: "system",
        authority: { kind: "cron", cron_job_name: "digest", user_id: "system" },
        dedupeKey: "cron:digest",
        concurrencyKey: "digests",
        request: { body: { kind: "digest" } },
        maxAttempts: s.config.defaults.max_attempts,
      },
    );
  });

  test("re-arms a changed schedule by its new definition from now; disarms a paused one; a resume arms the next tick after it, none of those it missed", async (t) => {
    const s = await startScheduling(t);
    await create(s, { name: "report", schedule: "*/5 * * * *" });
    await s.cron.sync();
    assert.equal(s.cron.nextTicks().get("report"), Date.UTC(2026, 10, 21, 12, 5));

    await admin(s, "PATCH", "/schedules/report", { body: { schedule: "0 * * * *" } });
    await s.cron.sync();
    assert.equal(s.cron.nextTicks().get("report"), Date.UTC(2026, 10, 21, 13), "the new expression, from now");

    await admin(s, "POST", "/schedules/report/pause");
    await s.cron.sync();
    assert.equal(s.cron.nextTicks().has("report"), false, "a paused schedule has no timer");

    s.clock.set(Date.UTC(2026, 10, 21, 15, 42));
    await admin(s, "POST", "/schedules/report/resume");
    await s.cron.sync();
    assert.equal(
      s.cron.nextTicks().get("report"),
      Date.UTC(2026, 10, 21, 16),
      "13:00, 14:00 and 15:00 are not enqueued late",
    );
    assert.deepEqual(await allJobs(s), []);
  });

  test("disarms a deleted schedule; a tick fired for a revision changed, paused or deleted since enqueues nothing", async (t) => {
    const s = await startScheduling(t);
    const ticks = recordTicks(s);
    await create(s, { name: "report", schedule: "0 * * * *", dedupe_key: null });
    const first = await stored(s, "report");
    const entry = cronEntryOf(first);
    const at = (hours: number) => Date.UTC(2026, 10, 21, 12 + hours);

    await admin(s, "PATCH", "/schedules/report", { body: { priority: 9 } });
    assert.equal(await s.cron.fire(entry, at(1), { revision: first.revision }), true);
    const second = await stored(s, "report");
    assert.equal(
      await s.cron.fire(cronEntryOf(second), at(1), { revision: second.revision }),
      true,
      "the tick was not recorded: the current revision takes it",
    );

    await admin(s, "POST", "/schedules/report/pause");
    assert.equal(await s.cron.fire(cronEntryOf(second), at(2), { revision: second.revision }), true);
    await admin(s, "POST", "/schedules/report/resume");

    await admin(s, "DELETE", "/schedules/report");
    await s.cron.sync();
    assert.equal(s.cron.nextTicks().has("report"), false);
    assert.equal(await s.cron.fire(cronEntryOf(second), at(3), { revision: second.revision }), true);

    assert.deepEqual(
      ticks.map(({ tickAt, outcome }) => [iso(tickAt), outcome]),
      [
        [iso(at(1)), "schedule_changed"],
        [iso(at(1)), "created"],
        [iso(at(2)), "schedule_changed"],
        [iso(at(3)), "schedule_changed"],
      ],
    );
    const jobs = await allJobs(s);
    assert.deepEqual(
      jobs.map((job) => [job.originalRequestId, job.priority]),
      [[`cron:report:${iso(at(1))}`, 9]],
    );
  });

  test("leaves out a stored schedule under a config entry's name: the config entry is what runs", async (t) => {
    const s = await startScheduling(t);
    // Made behind the API's back, as a node whose config lacks the entry would.
    await s.service.store.scheduleCreate({
      schedule: fieldsNamed("nightly"),
      revision: "r1",
      actor: "elsewhere",
      maxSchedules: 10,
    });
    await s.cron.sync();
    assert.deepEqual(
      [...s.cron.nextTicks()],
      [["nightly", Date.UTC(2026, 10, 22, 3)]],
      "the config entry's 03:00, not every minute",
    );
  });
});

/** Fields of an every-minute schedule named `name`. */
function fieldsNamed(name: string) {
  return {
    name,
    schedule: "* * * * *",
    timezone: "UTC",
    operationId: "buildReport",
    userId: "system",
    request: {},
    priority: 0,
    dedupeKey: null,
    concurrencyKey: null,
  };
}

describe("a schedule's tick", () => {
  test("is not enqueued when this node's trigger map does not let cron:* enqueue the target, and says why", async (t) => {
    const s = await startScheduling(t);
    const ticks = recordTicks(s);
    await create(s, { name: "report", schedule: "0 * * * *" });
    const row = await stored(s, "report");
    // A node whose config no longer lists buildReport under cron:*.
    const stricter = schedulerOf(s, {
      config: { ...s.config, triggers: { ...s.config.triggers, "cron:*": ["sendWelcomeEmail"] } },
    });
    const tickAt = Date.UTC(2026, 10, 21, 13);
    assert.equal(await stricter.fire(cronEntryOf(row), tickAt, { revision: row.revision }), true);
    assert.deepEqual(ticks, [{ name: "report", tickAt, outcome: "trigger_not_allowed" }]);
    assert.deepEqual(await allJobs(s), []);
    assert.deepEqual(
      await s.service.store.cronTickLatestMany({ names: ["report"] }),
      [],
      "no tick recorded: a node allowed to may take it",
    );
    assert.equal(await s.cron.fire(cronEntryOf(row), tickAt, { revision: row.revision }), true);
    assert.equal((await allJobs(s)).length, 1);
  });

  test("fired by two schedulers on one store at once enqueues exactly one job", async (t) => {
    const s = await startScheduling(t);
    const ticks = recordTicks(s);
    await create(s, { name: "report", schedule: "0 * * * *", dedupe_key: null });
    const row = await stored(s, "report");
    const [a, b] = [0, 1].map(() => schedulerOf(s));
    assert.ok(a && b);
    const tickAt = Date.UTC(2026, 10, 21, 13);
    await Promise.all([
      a.fire(cronEntryOf(row), tickAt, { revision: row.revision }),
      b.fire(cronEntryOf(row), tickAt, { revision: row.revision }),
    ]);
    assert.equal((await allJobs(s)).length, 1);
    assert.deepEqual(ticks.map(({ outcome }) => outcome).sort(), ["already_enqueued", "created"]);
    const [last] = await s.service.store.cronTickLatestMany({ names: ["report"] });
    assert.deepEqual(last, { name: "report", tickAt, jobId: (await allJobs(s))[0]?.id });
  });
});

test("a service refuses to start when a config entry has the name of a stored schedule", async (t) => {
  const s = await startTestService({ configure: allowSchedules });
  t.after(() => s.close());
  await create(s, { name: "weekly", schedule: "0 6 * * 1" });
  const config = {
    ...s.config,
    cron: [
      ...s.config.cron,
      {
        name: "weekly",
        schedule: "0 7 * * 1",
        timezone: "UTC",
        operation_id: "buildReport",
        user_id: "system",
        request: {},
      },
    ],
    triggers: { ...s.config.triggers, "cron:weekly": ["buildReport"] },
  } satisfies typeof s.config;
  // The first service holds a SQLite file to itself: a second opens the same database once it is closed.
  await s.service.close();
  await assert.rejects(
    () => createService({ config, clock: s.clock }),
    (error: unknown) =>
      error instanceof ConfigError &&
      /cron\.1\.name: "weekly" is also the name of a schedule created through the API/.test(error.message),
  );
});

/** A ManualClock that reads the system time, so the service's timers run in real time. */
class RealTimeClock extends ManualClock {
  override now(): number {
    return Date.now();
  }
}

test("a schedule created through the API is armed by the store's announcement of the create, not by the next read", async (t) => {
  const s = await startTestService({ clock: new ManualClock(START), configure: allowSchedules });
  t.after(() => s.close());
  // A scheduler that reads the schedules at its start and then once an hour: only an announcement can arm one now.
  const cron = schedulerOf(s, { syncMs: 3_600_000 });
  cron.start();
  t.after(() => cron.stop());
  await cron.sync();
  assert.deepEqual([...cron.nextTicks().keys()], ["nightly"]);
  await create(s, { name: "digest", schedule: "0 9 * * *" });
  // Waits for the read the announcement started (a call of sync() here would read the schedules itself).
  for (let i = 0; i < 1000 && !cron.nextTicks().has("digest"); i++) await sleep(10);
  assert.equal(cron.nextTicks().get("digest"), Date.UTC(2026, 10, 22, 9));
});

test("a started service runs a schedule created through the API on a real timer: an every-second schedule's tick is enqueued", async (t) => {
  const s = await startTestService({ clock: new RealTimeClock(), configure: allowSchedules });
  t.after(() => s.close());
  const firstTick = new Promise<OpqueueEvents["cron:tick"]>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no cron:tick event of the schedule within 10 s")), 10_000);
    s.service.telemetry.on("cron:tick", (tick) => {
      if (tick.name !== "every-second" || tick.outcome !== "created") return;
      clearTimeout(timer);
      resolve(tick);
    });
  });
  s.service.start();
  const createdAt = Date.now();
  await create(s, { name: "every-second", schedule: "* * * * * *", dedupe_key: null });
  // Nothing here reads the schedules: the store's announcement of the create arms it (the test above shows that alone
  // does), or else the scheduler's read every 5 s.
  const tick = await firstTick;
  assert.equal(tick.tickAt % 1000, 0, "a whole second");
  assert.ok(tick.tickAt > createdAt - 1000, "a tick after the schedule was created, none before");
  const jobs = await s.service.store.jobList({ limit: 10, originalRequestId: `cron:every-second:${iso(tick.tickAt)}` });
  assert.equal(jobs.length, 1);
  assert.equal(jobs[0]?.enqueuedByOperationId, "cron:every-second");
});

/**
 * `/schedules` over HTTP (docs/schedules.md): create, list, get, update, pause, resume, delete and run now, for site
 * administrators; the config file's entries listed read-only; every check of a definition and every refusal with its
 * code; next and last runs; each change logged with the admin's `sub`. Run on the engine of OPQUEUE_TEST_ENGINE.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Job } from "../../src/job/schemas.js";
import type { ScheduleBody } from "../../src/schedules/schemas.js";
import { cronEntryOf } from "../../src/schedules/schedule.js";
import { Schedules } from "../../src/schedules/schedules.js";
import { RequestSchemas } from "../../src/operations/request-schemas.js";
import { patchFields } from "../../src/schedules/schemas.js";
import type { Store } from "../../src/store/store.js";
import { assertError, iso, startService } from "../helpers/jobs.js";
import { capturedLogger } from "../helpers/logs.js";
import type { TestService } from "../helpers/service.js";

/** Lets schedules created through the API enqueue buildReport and sendWelcomeEmail. */
function allowSchedules(raw: Record<string, unknown>): void {
  raw["triggers"] = { ...(raw["triggers"] as Record<string, string[]>), "cron:*": ["buildReport", "sendWelcomeEmail"] };
}

/** A fresh service whose config lets schedules enqueue buildReport and sendWelcomeEmail. */
const start = (t: { after: (fn: () => Promise<void>) => void }) => startService(t, { configure: allowSchedules });

type Method = "GET" | "POST" | "PATCH" | "DELETE";

/** `method url` as site admin `sub` (default alice). */
async function call(s: TestService, method: Method, url: string, options: { body?: unknown; sub?: string } = {}) {
  return s.inject({
    method,
    url,
    token: await s.adminToken({ sub: options.sub ?? "alice" }),
    ...(options.body === undefined ? {} : { payload: options.body as object }),
  });
}

/** A schedule's answer, which must have `status`. */
async function schedule(
  s: TestService,
  method: Method,
  url: string,
  options: { body?: unknown; sub?: string; status?: number } = {},
): Promise<ScheduleBody> {
  const res = await call(s, method, url, options);
  assert.equal(res.statusCode, options.status ?? 200, res.body);
  return (res.json() as { schedule: ScheduleBody }).schedule;
}

/** The body of an every-hour schedule of buildReport named `name`, with `extra`. */
function hourly(name: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { name, schedule: "0 * * * *", operation_id: "buildReport", user_id: "system", ...extra };
}

async function list(s: TestService): Promise<ScheduleBody[]> {
  const res = await call(s, "GET", "/schedules");
  assert.equal(res.statusCode, 200, res.body);
  return (res.json() as { schedules: ScheduleBody[] }).schedules;
}

describe("creating a schedule", () => {
  test("answers 201 with its whole definition, who created it and when, and its next run; GET and the list show the same", async (t) => {
    const s = await start(t);
    const now = iso(s.clock.now());
    const created = await schedule(s, "POST", "/schedules", {
      status: 201,
      body: {
        name: "welcome-digest",
        schedule: "30 0 9 * * 1-5",
        timezone: "Europe/Paris",
        operation_id: "sendWelcomeEmail",
        user_id: "u7",
        request: { path_params: { userId: "7" }, query: { digest: true }, body: { days: 1 } },
        priority: 5,
        dedupe_key: "digest-7",
        concurrency_key: "digests",
      },
    });
    assert.deepEqual(created, {
      name: "welcome-digest",
      source: "api",
      schedule: "30 0 9 * * 1-5",
      timezone: "Europe/Paris",
      operation_id: "sendWelcomeEmail",
      user_id: "u7",
      request: { path_params: { userId: "7" }, query: { digest: true }, body: { days: 1 } },
      priority: 5,
      dedupe_key: "digest-7",
      concurrency_key: "digests",
      paused: null,
      created: { at: now, by: "alice" },
      updated: { at: now, by: "alice" },
      // Saturday 21 November 12:00Z: the next weekday 09:00:30 in Paris (UTC+1) is Monday 23 November 08:00:30Z.
      next_run_at: "2026-11-23T08:00:30.000Z",
      last_run_at: null,
      last_job_id: null,
    });
    assert.deepEqual(await schedule(s, "GET", "/schedules/welcome-digest"), created);
    assert.deepEqual(
      (await list(s)).find((item) => item.name === "welcome-digest"),
      created,
    );
  });

  test("fills in UTC, an empty request, priority 0, the dedupe key cron:{name} and no concurrency key", async (t) => {
    const s = await start(t);
    const created = await schedule(s, "POST", "/schedules", { status: 201, body: hourly("report") });
    assert.deepEqual(
      [created.timezone, created.request, created.priority, created.dedupe_key, created.concurrency_key],
      ["UTC", {}, 0, "cron:report", null],
    );
    const none = await schedule(s, "POST", "/schedules", {
      status: 201,
      body: hourly("every-tick", { dedupe_key: null }),
    });
    assert.equal(none.dedupe_key, null, "null: every tick a job of its own");
  });

  test("refuses what the config or another schedule already names with 409 schedule_exists", async (t) => {
    const s = await start(t);
    assertError(await call(s, "POST", "/schedules", { body: hourly("nightly") }), 409, "schedule_exists");
    await schedule(s, "POST", "/schedules", { status: 201, body: hourly("report") });
    assertError(
      await call(s, "POST", "/schedules", { body: hourly("report", { schedule: "0 3 * * *" }) }),
      409,
      "schedule_exists",
    );
    assert.equal((await schedule(s, "GET", "/schedules/report")).schedule, "0 * * * *", "the first stays as it was");
  });

  test("refuses a create past limits.max_schedules with 409 schedule_limit_reached; config entries do not count; a delete makes room", async (t) => {
    const s = await startService(t, {
      configure: (raw) => {
        allowSchedules(raw);
        raw["limits"] = { ...(raw["limits"] as Record<string, unknown>), max_schedules: 2 };
      },
    });
    await schedule(s, "POST", "/schedules", { status: 201, body: hourly("first") });
    await schedule(s, "POST", "/schedules", { status: 201, body: hourly("second") });
    const refused = await call(s, "POST", "/schedules", { body: hourly("third") });
    assertError(refused, 409, "schedule_limit_reached");
    assert.match((refused.json() as { message: string }).message, /limits\.max_schedules/);
    assertError(await call(s, "POST", "/schedules", { body: hourly("first") }), 409, "schedule_exists");
    assertError(await call(s, "GET", "/schedules/third"), 404, "schedule_not_found");
    assert.deepEqual(
      (await list(s)).map((item) => item.name),
      ["first", "nightly", "second"],
    );
    await schedule(s, "DELETE", "/schedules/first");
    await schedule(s, "POST", "/schedules", { status: 201, body: hourly("third") });
  });

  test("creates racing for the last room under limits.max_schedules: exactly one passes", async (t) => {
    const s = await startService(t, {
      configure: (raw) => {
        allowSchedules(raw);
        raw["limits"] = { ...(raw["limits"] as Record<string, unknown>), max_schedules: 3 };
      },
    });
    await schedule(s, "POST", "/schedules", { status: 201, body: hourly("a") });
    await schedule(s, "POST", "/schedules", { status: 201, body: hourly("b") });
    // On PostgreSQL these run on the pool's connections at once: without the creates' lock, several count 2 under READ
    // COMMITTED and insert (40 racers made that happen on every run tried).
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) => call(s, "POST", "/schedules", { body: hourly(`racer-${i}`) })),
    );
    const statuses = answers.map((res) => res.statusCode).sort();
    assert.deepEqual(statuses, [201, ...Array<number>(39).fill(409)], answers.map((res) => res.body).join("\n"));
    for (const res of answers.filter((answer) => answer.statusCode === 409))
      assertError(res, 409, "schedule_limit_reached");
    assert.equal((await list(s)).filter((item) => item.source === "api").length, 3);
  });

  test("refuses a bad definition with the enqueue's codes, in the enqueue's order", async (t) => {
    const s = await start(t);
    const refusals: Array<[Record<string, unknown>, number, string]> = [
      [hourly("report", { schedule: "0 * * *" }), 400, "invalid_request"],
      [hourly("report", { schedule: "0 0 * * * * *" }), 400, "invalid_request"],
      [hourly("report", { schedule: "@daily" }), 400, "invalid_request"],
      [hourly("report", { schedule: "61 * * * *" }), 400, "invalid_request"],
      [hourly("report", { timezone: "Mars/Olympus" }), 400, "invalid_request"],
      [hourly("report", { timezone: "+01:00" }), 400, "invalid_request"],
      [hourly(".."), 400, "invalid_request"],
      [hourly(".hidden"), 400, "invalid_request"],
      [hourly("a b"), 400, "invalid_request"],
      [hourly("x".repeat(201)), 400, "invalid_request"],
      [hourly("cron:x"), 400, "invalid_request"],
      [hourly("report", { unknown: 1 }), 400, "invalid_request"],
      [hourly("report", { request: { headers: {} } }), 400, "invalid_request"],
      [hourly("report", { user_id: "" }), 400, "invalid_request"],
      [hourly("report", { user_id: "a\u0000b" }), 400, "invalid_request"],
      [hourly("report", { priority: 2 ** 31 }), 400, "invalid_request"],
      [hourly("report", { dedupe_key: "" }), 400, "invalid_request"],
      [hourly("report", { request: { body: "x".repeat(16_400) } }), 400, "payload_too_large"],
      [hourly("report", { operation_id: "sendWelcomeEmail" }), 400, "missing_path_param"],
      [
        hourly("report", { operation_id: "sendWelcomeEmail", request: { path_params: { userId: ".." } } }),
        400,
        "invalid_path_param",
      ],
      [hourly("report", { operation_id: "noSuchOperation" }), 422, "unknown_operation"],
      [hourly("report", { operation_id: "createUser" }), 422, "operation_not_background"],
      [
        hourly("report", { operation_id: "recordEmailSent", request: { path_params: { emailId: "1" } } }),
        403,
        "trigger_not_allowed",
      ],
      // The first failing step answers: a bad expression before an unknown operation.
      [hourly("report", { schedule: "nope", operation_id: "noSuchOperation" }), 400, "invalid_request"],
    ];
    for (const [body, status, code] of refusals) {
      const res = await call(s, "POST", "/schedules", { body });
      assert.equal(res.statusCode, status, `${JSON.stringify(body).slice(0, 200)}: ${res.body}`);
      assert.equal((res.json() as { code: string }).code, code, JSON.stringify(body).slice(0, 200));
    }
    assert.deepEqual(
      (await list(s)).map((item) => item.name),
      ["nightly"],
      "nothing was created",
    );
  });

  test("is refused 403 trigger_not_allowed for every target while the trigger map has no cron:* key", async (t) => {
    const s = await startService(t);
    const res = await call(s, "POST", "/schedules", { body: hourly("report") });
    assertError(res, 403, "trigger_not_allowed");
    assert.match((res.json() as { message: string }).message, /triggers\."cron:\*"/);
  });
});

describe("the list", () => {
  test("shows the config's entries read-only (source config, no stamps) beside the created schedules, by name", async (t) => {
    const s = await start(t);
    await schedule(s, "POST", "/schedules", { status: 201, body: hourly("zeta") });
    await schedule(s, "POST", "/schedules", { status: 201, body: hourly("alpha") });
    const schedules = await list(s);
    assert.deepEqual(
      schedules.map((item) => [item.name, item.source]),
      [
        ["alpha", "api"],
        ["nightly", "config"],
        ["zeta", "api"],
      ],
    );
    assert.deepEqual(schedules[1], {
      name: "nightly",
      source: "config",
      schedule: "0 3 * * *",
      timezone: "UTC",
      operation_id: "buildReport",
      user_id: "system",
      request: {},
      priority: 0,
      dedupe_key: "cron:nightly",
      concurrency_key: null,
      paused: null,
      created: null,
      updated: null,
      next_run_at: "2026-11-22T03:00:00.000Z",
      last_run_at: null,
      last_job_id: null,
    });
  });

  test("shows each schedule's last tick and the job it enqueued, config entries' too", async (t) => {
    const s = await start(t);
    await schedule(s, "POST", "/schedules", { status: 201, body: hourly("report") });
    const cron = s.service.worker?.cron;
    assert.ok(cron);
    const row = await s.service.store.scheduleGet({ name: "report" });
    assert.ok(row);
    const tickAt = Date.UTC(2026, 10, 21, 13);
    s.clock.set(tickAt);
    await cron.fire(cronEntryOf(row), tickAt, { revision: row.revision });
    const nightly = s.config.cron[0];
    assert.ok(nightly);
    await cron.fire(nightly, Date.UTC(2026, 10, 21, 3));
    const jobs = await s.service.store.jobList({ limit: 10 });
    const jobOf = (name: string) => jobs.find((job) => job.enqueuedByOperationId === `cron:${name}`)?.id;

    const report = await schedule(s, "GET", "/schedules/report");
    assert.deepEqual(
      [report.last_run_at, report.last_job_id, report.next_run_at],
      [iso(tickAt), jobOf("report"), "2026-11-21T14:00:00.000Z"],
    );
    const listed = await list(s);
    assert.deepEqual(
      listed.map((item) => [item.name, item.last_run_at, item.last_job_id]),
      [
        ["nightly", "2026-11-21T03:00:00.000Z", jobOf("nightly")],
        ["report", iso(tickAt), jobOf("report")],
      ],
    );
  });
});

describe("changing a schedule", () => {
  test("PATCH changes the given fields, keeps the others, stamps who changed it; null removes a key", async (t) => {
    const s = await start(t);
    const created = await schedule(s, "POST", "/schedules", {
      status: 201,
      body: hourly("report", { concurrency_key: "reports", priority: 2 }),
    });
    s.clock.advance(60_000);
    const changed = await schedule(s, "PATCH", "/schedules/report", {
      sub: "bob",
      body: { schedule: "15 */2 * * *", timezone: "America/New_York", dedupe_key: null, request: { body: { v: 2 } } },
    });
    assert.deepEqual(changed, {
      ...created,
      schedule: "15 */2 * * *",
      timezone: "America/New_York",
      dedupe_key: null,
      request: { body: { v: 2 } },
      updated: { at: iso(s.clock.now()), by: "bob" },
      // 12:01Z is 07:01 in New York (EST): the next even hour's quarter past is 08:15 local, 13:15Z.
      next_run_at: "2026-11-21T13:15:00.000Z",
    });
    assert.deepEqual(await schedule(s, "GET", "/schedules/report"), changed);
  });

  test("PATCH is checked as a create, against the fields it leaves as they were too", async (t) => {
    const s = await start(t);
    await schedule(s, "POST", "/schedules", { status: 201, body: hourly("report") });
    assertError(await call(s, "PATCH", "/schedules/report", { body: {} }), 400, "invalid_request");
    assertError(await call(s, "PATCH", "/schedules/report", { body: { name: "other" } }), 400, "invalid_request");
    assertError(
      await call(s, "PATCH", "/schedules/report", { body: { schedule: "every hour" } }),
      400,
      "invalid_request",
    );
    assertError(
      await call(s, "PATCH", "/schedules/report", { body: { operation_id: "sendWelcomeEmail" } }),
      400,
      "missing_path_param",
    );
    assertError(
      await call(s, "PATCH", "/schedules/report", { body: { operation_id: "createUser" } }),
      422,
      "operation_not_background",
    );
    const changed = await schedule(s, "PATCH", "/schedules/report", {
      body: { operation_id: "sendWelcomeEmail", request: { path_params: { userId: "9" } } },
    });
    assert.equal(changed.operation_id, "sendWelcomeEmail");
    assertError(await call(s, "PATCH", "/schedules/nope", { body: { priority: 1 } }), 404, "schedule_not_found");
    assertError(await call(s, "PATCH", "/schedules/nightly", { body: { priority: 1 } }), 409, "schedule_read_only");
  });

  test("a change racing another is made again from the other's result, never written over it", async (t) => {
    const s = await start(t);
    await schedule(s, "POST", "/schedules", { status: 201, body: hourly("report") });
    // The service's store, on which bob changes the priority between this change's read and its write, once.
    const real = s.service.store;
    let raced = false;
    const store: Store = Object.assign(Object.create(real) as Store, {
      scheduleUpdate: async (params: Parameters<Store["scheduleUpdate"]>[0]) => {
        if (!raced) {
          raced = true;
          const current = await real.scheduleGet({ name: "report" });
          assert.ok(current);
          await real.scheduleUpdate({
            schedule: { ...current, priority: 7 },
            ifRevision: current.revision,
            revision: "bobs",
            actor: "bob",
          });
        }
        return real.scheduleUpdate(params);
      },
    });
    const { config, registry, settings, telemetry, notifier, clock } = s.service;
    const requestSchemas = RequestSchemas.compile({ registry, settings });
    const schedules = new Schedules({ config, registry, requestSchemas, settings, store, telemetry, notifier, clock });
    const view = await schedules.update(
      "report",
      (current) => patchFields(current, { timezone: "Asia/Tokyo" }),
      "alice",
    );
    assert.equal(raced, true);
    assert.deepEqual(
      [view.fields.timezone, view.fields.priority, view.row?.updated.by],
      ["Asia/Tokyo", 7, "alice"],
      "bob's priority and alice's zone",
    );
  });

  test("pause stamps who and when and clears the next run; a second pause keeps the first; resume clears the stamp and the next run is the next tick after now", async (t) => {
    const s = await start(t);
    await schedule(s, "POST", "/schedules", { status: 201, body: hourly("report") });
    const pausedAt = iso(s.clock.now());
    const paused = await schedule(s, "POST", "/schedules/report/pause", { sub: "carol" });
    assert.deepEqual([paused.paused, paused.next_run_at], [{ at: pausedAt, by: "carol" }, null]);
    s.clock.advance(2 * 3_600_000 + 60_000);
    const again = await schedule(s, "POST", "/schedules/report/pause", { sub: "dave" });
    assert.deepEqual(again.paused, { at: pausedAt, by: "carol" });
    const resumed = await schedule(s, "POST", "/schedules/report/resume");
    assert.deepEqual([resumed.paused, resumed.next_run_at], [null, "2026-11-21T15:00:00.000Z"]);
    assert.deepEqual(resumed.updated, resumed.created, "a pause is not a change of the definition");
  });

  test("DELETE answers the schedule as it was; it is gone from GET and the list; its jobs stay", async (t) => {
    const s = await start(t);
    await schedule(s, "POST", "/schedules", { status: 201, body: hourly("report") });
    const ran = await call(s, "POST", "/schedules/report/run-now");
    assert.equal(ran.statusCode, 201, ran.body);
    const deleted = await schedule(s, "DELETE", "/schedules/report");
    assert.equal(deleted.name, "report");
    assert.equal(deleted.next_run_at, null);
    assertError(await call(s, "GET", "/schedules/report"), 404, "schedule_not_found");
    assert.deepEqual(
      (await list(s)).map((item) => item.name),
      ["nightly"],
    );
    assertError(await call(s, "DELETE", "/schedules/report"), 404, "schedule_not_found");
    const job = (ran.json() as { job: Job }).job;
    const kept = await call(s, "GET", `/jobs/${job.id}`);
    assert.equal(kept.statusCode, 200);
  });

  test("a config entry cannot be changed, paused, resumed or deleted through the API: 409 schedule_read_only", async (t) => {
    const s = await start(t);
    for (const [method, url] of [
      ["PATCH", "/schedules/nightly"],
      ["POST", "/schedules/nightly/pause"],
      ["POST", "/schedules/nightly/resume"],
      ["DELETE", "/schedules/nightly"],
    ] as const) {
      const res = await call(s, method, url, method === "PATCH" ? { body: { priority: 1 } } : {});
      assertError(res, 409, "schedule_read_only");
      assert.match((res.json() as { message: string }).message, /config file/);
    }
    for (const [method, url] of [
      ["GET", "/schedules/nope"],
      ["POST", "/schedules/nope/pause"],
      ["POST", "/schedules/nope/resume"],
      ["POST", "/schedules/nope/run-now"],
      ["GET", "/schedules/%00"],
    ] as const) {
      assertError(await call(s, method, url), 404, "schedule_not_found");
    }
  });
});

describe("run now", () => {
  test("enqueues one job at once in a chain of its own, not a tick; again while it waits refreshes it (200, dedupe key)", async (t) => {
    const s = await start(t);
    await schedule(s, "POST", "/schedules", {
      status: 201,
      body: hourly("report", { request: { body: { n: 1 } }, priority: 3 }),
    });
    const now = iso(s.clock.now());
    const first = await call(s, "POST", "/schedules/report/run-now");
    assert.equal(first.statusCode, 201, first.body);
    const job = (first.json() as { job: Job }).job;
    assert.deepEqual(
      [
        job.operation_id,
        job.status,
        job.run_at,
        job.enqueued_by_operation_id,
        job.original_request_id,
        job.user_id,
        job.dedupe_key,
        job.priority,
      ],
      ["buildReport", "pending", now, "cron:report", `cron:report:manual:${now}`, "system", "cron:report", 3],
    );
    assert.deepEqual(job.authority, { kind: "cron", cron_job_name: "report", user_id: "system" });
    assert.deepEqual(job.request, { body: { n: 1 } });
    const shown = await schedule(s, "GET", "/schedules/report");
    assert.deepEqual([shown.last_run_at, shown.last_job_id], [null, null], "a run now is not a tick");

    s.clock.advance(1000);
    const again = await call(s, "POST", "/schedules/report/run-now");
    assert.equal(again.statusCode, 200, again.body);
    assert.equal((again.json() as { job: Job }).job.id, job.id, "the waiting job holds the dedupe key");
  });

  test("runs a paused schedule and a config entry too", async (t) => {
    const s = await start(t);
    await schedule(s, "POST", "/schedules", { status: 201, body: hourly("report", { dedupe_key: null }) });
    await schedule(s, "POST", "/schedules/report/pause");
    const paused = await call(s, "POST", "/schedules/report/run-now");
    assert.equal(paused.statusCode, 201, paused.body);
    const config = await call(s, "POST", "/schedules/nightly/run-now");
    assert.equal(config.statusCode, 201, config.body);
    assert.equal((config.json() as { job: Job }).job.original_request_id, `cron:nightly:manual:${iso(s.clock.now())}`);
  });
});

describe("access", () => {
  test("every route answers 401 without an admin token and 403 to a token without site_admin", async (t) => {
    const s = await start(t);
    const notAdmin = await s.adminToken({ siteAdmin: false });
    const routes: Array<[Method, string, unknown?]> = [
      ["GET", "/schedules"],
      ["POST", "/schedules", hourly("report")],
      ["GET", "/schedules/nightly"],
      ["PATCH", "/schedules/nightly", { priority: 1 }],
      ["POST", "/schedules/nightly/pause"],
      ["POST", "/schedules/nightly/resume"],
      ["DELETE", "/schedules/nightly"],
      ["POST", "/schedules/nightly/run-now"],
    ];
    for (const [method, url, body] of routes) {
      const payload = body === undefined ? {} : { payload: body as object };
      assertError(await s.inject({ method, url, ...payload }), 401, "unauthenticated");
      assertError(await s.inject({ method, url, token: notAdmin, ...payload }), 403, "site_admin_required");
    }
    assert.deepEqual(
      (await list(s)).map((item) => item.name),
      ["nightly"],
    );
  });

  test("every change is logged as an admin action with the admin's sub", async (t) => {
    const { logger, lines } = capturedLogger();
    const s = await startService(t, { configure: allowSchedules, logger });
    await schedule(s, "POST", "/schedules", {
      status: 201,
      body: hourly("report", { request: { body: { secret: "s3cr3t" } } }),
      sub: "alice",
    });
    await schedule(s, "PATCH", "/schedules/report", {
      body: { priority: 1, request: { body: { secret: "t0p" } } },
      sub: "bob",
    });
    await schedule(s, "POST", "/schedules/report/pause", { sub: "carol" });
    await schedule(s, "POST", "/schedules/report/resume", { sub: "dave" });
    assert.equal((await call(s, "POST", "/schedules/report/run-now", { sub: "erin" })).statusCode, 201);
    await schedule(s, "DELETE", "/schedules/report", { sub: "frank" });
    const actions = lines
      .filter((line) => line["msg"] === "admin action")
      .map((line) => [line["action"], line["actor"], line["schedule"]]);
    assert.deepEqual(actions, [
      ["create-schedule", "alice", "report"],
      ["update-schedule", "bob", "report"],
      ["pause-schedule", "carol", "report"],
      ["resume-schedule", "dave", "report"],
      ["run-schedule-now", "erin", "report"],
      ["delete-schedule", "frank", "report"],
    ]);
    const changes = lines
      .filter((line) => line["msg"] === "admin action")
      .slice(0, 2)
      .map((line) => line["definition"] ?? line["changes"]);
    assert.deepEqual(changes, [
      { name: "report", schedule: "0 * * * *", operation_id: "buildReport", user_id: "system", request: "(given)" },
      { priority: 1, request: "(given)" },
    ]);
    assert.ok(
      !lines.some((line) => JSON.stringify(line).includes("s3cr3t") || JSON.stringify(line).includes("t0p")),
      "the jobs' request is not logged",
    );
  });

  test("the served OpenAPI document describes every schedule route", async (t) => {
    const s = await start(t);
    const document = (await s.inject({ method: "GET", url: "/openapi.json" })).json() as {
      paths: Record<string, Record<string, { operationId?: string }>>;
    };
    const operations = Object.values(document.paths)
      .flatMap((item) => Object.values(item).map((operation) => operation.operationId))
      .filter((id): id is string => typeof id === "string" && /Schedule/.test(id))
      .sort();
    assert.deepEqual(operations, [
      "createSchedule",
      "deleteSchedule",
      "getSchedule",
      "listSchedules",
      "pauseSchedule",
      "resumeSchedule",
      "runScheduleNow",
      "updateSchedule",
    ]);
  });
});

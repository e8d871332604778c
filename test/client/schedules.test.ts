/**
 * The client's schedules calls (docs/schedules.md) against a live service: the wire forms they send and return, run
 * now, the typed errors of every refusal, and names that cannot travel as a path segment. Run on the engine of
 * OPQUEUE_TEST_ENGINE.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  createJobsClient,
  InvalidRequestError,
  OpqueueError,
  ScheduleExistsError,
  ScheduleNotFoundError,
  ScheduleReadOnlyError,
  TriggerNotAllowedError,
  type JobsClient,
  type Schedule,
} from "@opqueue/client";
import { startLiveService, type LiveService } from "../helpers/live-service.js";

/** Lets schedules enqueue buildReport and sendWelcomeEmail. */
function allowSchedules(raw: Record<string, unknown>): void {
  raw["triggers"] = { ...(raw["triggers"] as Record<string, string[]>), "cron:*": ["buildReport", "sendWelcomeEmail"] };
}

/** A client of `s` calling as the site admin `sub`. */
function adminOf(s: LiveService, sub = "alice@example.com", fetchFn?: typeof fetch): JobsClient {
  return createJobsClient({
    baseUrl: s.url,
    adminToken: () => s.adminToken({ sub }),
    ...(fetchFn ? { fetch: fetchFn } : {}),
  });
}

/** `call` rejects with an instance of `ErrorClass` carrying `status` and `code`. */
async function assertRefused(
  call: Promise<unknown>,
  ErrorClass: typeof OpqueueError,
  status: number,
  code: string,
): Promise<void> {
  await assert.rejects(call, (error: unknown) => {
    assert.ok(error instanceof ErrorClass, `expected ${ErrorClass.name}, got ${String(error)}`);
    assert.equal(error.status, status);
    assert.equal(error.code, code);
    return true;
  });
}

describe("the client's schedules", () => {
  test("create, get, list, update, pause, resume and delete send and answer the wire forms, stamped with the admin's sub", async (t) => {
    const s = await startLiveService(t, { configure: allowSchedules });
    const alice = adminOf(s);
    const bob = adminOf(s, "bob@example.com");
    const created = await alice.createSchedule({
      name: "welcome-digest",
      schedule: "0 9 * * 1-5",
      timezone: "Europe/Paris",
      operation_id: "sendWelcomeEmail",
      user_id: "u7",
      request: { path_params: { userId: "7" } },
      concurrency_key: "digests",
    });
    assert.equal(created.source, "api");
    assert.deepEqual(
      [created.priority, created.dedupe_key, created.concurrency_key],
      [0, "cron:welcome-digest", "digests"],
    );
    assert.equal(created.created?.by, "alice@example.com");
    assert.ok(created.next_run_at !== null && Date.parse(created.next_run_at) > Date.now() - 1000);
    assert.deepEqual(await alice.getSchedule("welcome-digest"), created);

    const listed: Schedule[] = await alice.listSchedules();
    assert.deepEqual(
      listed.map((item) => [item.name, item.source]),
      [
        ["nightly", "config"],
        ["welcome-digest", "api"],
      ],
    );

    const changed = await bob.updateSchedule("welcome-digest", { priority: 3, dedupe_key: null });
    assert.deepEqual([changed.priority, changed.dedupe_key, changed.schedule], [3, null, "0 9 * * 1-5"]);
    assert.equal(changed.updated?.by, "bob@example.com");

    const paused = await bob.pauseSchedule("welcome-digest");
    assert.deepEqual([paused.paused?.by, paused.next_run_at], ["bob@example.com", null]);
    const resumed = await alice.resumeSchedule("welcome-digest");
    assert.equal(resumed.paused, null);
    assert.notEqual(resumed.next_run_at, null);

    const deleted = await alice.deleteSchedule("welcome-digest");
    assert.equal(deleted.name, "welcome-digest");
    assert.deepEqual(
      (await alice.listSchedules()).map((item) => item.name),
      ["nightly"],
    );
  });

  test("runScheduleNow enqueues a job at once in a chain of its own: created, then refreshed while it waits", async (t) => {
    const s = await startLiveService(t, { configure: allowSchedules });
    const admin = adminOf(s);
    await admin.createSchedule({
      name: "report",
      schedule: "0 * * * *",
      operation_id: "buildReport",
      user_id: "system",
    });
    const first = await admin.runScheduleNow("report");
    assert.equal(first.created, true);
    assert.equal(first.job.enqueued_by_operation_id, "cron:report");
    assert.match(first.job.original_request_id, /^cron:report:manual:\d{4}-\d{2}-\d{2}T/);
    const again = await admin.runScheduleNow("report");
    assert.deepEqual([again.created, again.job.id], [false, first.job.id]);
  });

  test("every refusal is its typed error", async (t) => {
    const s = await startLiveService(t, { configure: allowSchedules });
    const admin = adminOf(s);
    const hourly = { schedule: "0 * * * *", operation_id: "buildReport", user_id: "system" };
    await admin.createSchedule({ name: "report", ...hourly });
    await assertRefused(admin.getSchedule("nope"), ScheduleNotFoundError, 404, "schedule_not_found");
    await assertRefused(admin.runScheduleNow("nope"), ScheduleNotFoundError, 404, "schedule_not_found");
    await assertRefused(
      admin.createSchedule({ name: "report", ...hourly }),
      ScheduleExistsError,
      409,
      "schedule_exists",
    );
    await assertRefused(
      admin.createSchedule({ name: "nightly", ...hourly }),
      ScheduleExistsError,
      409,
      "schedule_exists",
    );
    await assertRefused(
      admin.updateSchedule("nightly", { priority: 1 }),
      ScheduleReadOnlyError,
      409,
      "schedule_read_only",
    );
    await assertRefused(admin.pauseSchedule("nightly"), ScheduleReadOnlyError, 409, "schedule_read_only");
    await assertRefused(admin.deleteSchedule("nightly"), ScheduleReadOnlyError, 409, "schedule_read_only");
    await assertRefused(
      admin.createSchedule({ name: "bad", ...hourly, schedule: "@hourly" }),
      InvalidRequestError,
      400,
      "invalid_request",
    );
    await assertRefused(
      admin.createSchedule({
        name: "emails",
        ...hourly,
        operation_id: "recordEmailSent",
        request: { path_params: { emailId: "1" } },
      }),
      TriggerNotAllowedError,
      403,
      "trigger_not_allowed",
    );
  });

  test("a name that is empty, . or .. throws before anything is sent: URL parsing would make it another route", async (t) => {
    const s = await startLiveService(t, { configure: allowSchedules });
    let calls = 0;
    const admin = adminOf(s, "alice", (input, init) => {
      calls++;
      return fetch(input, init);
    });
    for (const name of ["", ".", ".."]) {
      for (const call of [
        admin.getSchedule(name),
        admin.updateSchedule(name, { priority: 1 }),
        admin.pauseSchedule(name),
        admin.resumeSchedule(name),
        admin.deleteSchedule(name),
        admin.runScheduleNow(name),
      ]) {
        await assert.rejects(
          call,
          (error: unknown) =>
            !(error instanceof OpqueueError) && /must be a non-empty string other than/.test((error as Error).message),
        );
      }
    }
    assert.equal(calls, 0);
    // Any other text reaches its route, percent-encoded: a name no schedule can have is simply not found.
    await assertRefused(admin.getSchedule("a/b?c#d"), ScheduleNotFoundError, 404, "schedule_not_found");
  });
});

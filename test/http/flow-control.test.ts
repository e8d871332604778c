/**
 * Flow control over HTTP (docs/flow-control.md): pause and resume of operations and keys, limits set at runtime and
 * reset to the configuration's, bulk cancel, cancelling a running job, and the metrics. Run on the engine of
 * OPQUEUE_TEST_ENGINE, against real targets where something is delivered.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { Job } from "../../src/job/schemas.js";
import { assertError, enqueue, getJob, startService, welcomeEmail, buildReport } from "../helpers/jobs.js";
import { startLiveService } from "../helpers/live-service.js";
import { answer, deferred, startTarget } from "../helpers/target.js";

const NO_LIMITS = { rate: null, rate_per_key: null, max_concurrency: null, concurrency_limit: 1 };

describe("pause and resume", () => {
  test("pausing an operation says who and when, pausing again keeps the first, resuming clears it", async (t) => {
    const s = await startService(t);
    const pause = async (sub: string) =>
      s.inject({ method: "POST", url: "/operations/sendWelcomeEmail/pause", token: await s.adminToken({ sub }) });
    const first = await pause("alice");
    assert.equal(first.statusCode, 200, first.body);
    const at = new Date(s.clock.now()).toISOString();
    assert.deepEqual(first.json(), {
      operation: {
        operation_id: "sendWelcomeEmail",
        paused: { at, by: "alice" },
        limits: NO_LIMITS,
        limits_source: "config",
        limits_set: null,
      },
    });
    s.clock.advance(1000);
    const again = await pause("bob");
    assert.deepEqual((again.json() as { operation: { paused: unknown } }).operation.paused, { at, by: "alice" });

    const listed = await s.inject({ method: "GET", url: "/operations", token: await s.adminToken() });
    const operations = (listed.json() as { operations: Array<{ operation_id: string; control: { paused: unknown } }> })
      .operations;
    assert.deepEqual(operations.find((op) => op.operation_id === "sendWelcomeEmail")?.control.paused, {
      at,
      by: "alice",
    });

    const resumed = await s.inject({
      method: "POST",
      url: "/operations/sendWelcomeEmail/resume",
      token: await s.adminToken(),
    });
    assert.equal(resumed.statusCode, 200, resumed.body);
    assert.equal((resumed.json() as { operation: { paused: unknown } }).operation.paused, null);
  });

  test("an operation that is not a background operation of the document is 404 operation_not_found; no token is 401", async (t) => {
    const s = await startService(t);
    for (const id of ["noSuchOperation", "createUser"]) {
      assertError(
        await s.inject({ method: "POST", url: `/operations/${id}/pause`, token: await s.adminToken() }),
        404,
        "operation_not_found",
      );
    }
    assertError(await s.inject({ method: "POST", url: "/operations/sendWelcomeEmail/pause" }), 401, "unauthenticated");
    const token = await s.adminToken({ siteAdmin: false });
    assertError(
      await s.inject({ method: "POST", url: "/operations/sendWelcomeEmail/pause", token }),
      403,
      "site_admin_required",
    );
  });

  test("a paused operation's jobs wait pending while others are delivered, and are delivered once it resumes", async (t) => {
    const target = await startTarget(t);
    const s = await startLiveService(t, {
      worker: true,
      configure: (raw) => (raw["target"] = { base_url: target.url, audience: "product" }),
    });
    const paused = await s.inject({
      method: "POST",
      url: "/operations/sendWelcomeEmail/pause",
      token: await s.adminToken(),
    });
    assert.equal(paused.statusCode, 200, paused.body);
    const held = await enqueue(s, welcomeEmail());
    const other = await enqueue(s, buildReport());
    // Enqueued after the held job, delivered while it waits: the node did claim, and left the paused one.
    await s.waitForJob(other.id, (job) => job.status === "succeeded", "the other operation's job delivered");
    assert.equal((await getJob(s, held.id)).status, "pending");
    assert.equal(target.requests.length, 1);

    const resumed = await s.inject({
      method: "POST",
      url: "/operations/sendWelcomeEmail/resume",
      token: await s.adminToken(),
    });
    assert.equal(resumed.statusCode, 200, resumed.body);
    await s.waitForJob(held.id, (job) => job.status === "succeeded", "the held job delivered after the resume");
  });

  test("a paused concurrency key holds its jobs of every operation; it is listed, and resuming lets them go", async (t) => {
    const target = await startTarget(t);
    const s = await startLiveService(t, {
      worker: true,
      configure: (raw) => (raw["target"] = { base_url: target.url, audience: "product" }),
    });
    const pause = await s.inject({
      method: "POST",
      url: "/concurrency-keys/tenant-7/pause",
      token: await s.adminToken({ sub: "carol" }),
    });
    assert.equal(pause.statusCode, 200, pause.body);
    assert.equal((pause.json() as { key: { paused: { by: string } } }).key.paused.by, "carol");
    const listed = await s.inject({ method: "GET", url: "/concurrency-keys/paused", token: await s.adminToken() });
    assert.deepEqual(
      (listed.json() as { keys: Array<{ concurrency_key: string }> }).keys.map((key) => key.concurrency_key),
      ["tenant-7"],
    );

    const held = await enqueue(s, welcomeEmail({ concurrency_key: "tenant-7" }));
    const free = await enqueue(s, welcomeEmail({ concurrency_key: "tenant-8" }));
    await s.waitForJob(free.id, (job) => job.status === "succeeded");
    assert.equal((await getJob(s, held.id)).status, "pending");

    const resume = await s.inject({
      method: "POST",
      url: "/concurrency-keys/tenant-7/resume",
      token: await s.adminToken(),
    });
    assert.deepEqual(resume.json(), { concurrency_key: "tenant-7", resumed: true });
    await s.waitForJob(held.id, (job) => job.status === "succeeded");
    const again = await s.inject({
      method: "POST",
      url: "/concurrency-keys/tenant-7/resume",
      token: await s.adminToken(),
    });
    assert.deepEqual(again.json(), { concurrency_key: "tenant-7", resumed: false });
  });
});

describe("limits", () => {
  test("the configuration's limits are shown; PATCH changes some and keeps the rest; DELETE puts the configuration's back", async (t) => {
    const s = await startService(t, {
      configure: (raw) => {
        raw["operations"] = { sendWelcomeEmail: { rate: { limit: 10 }, max_concurrency: 4 } };
      },
    });
    const configured = { ...NO_LIMITS, rate: { limit: 10, period_ms: 1000, burst: 10 }, max_concurrency: 4 };
    const listed = await s.inject({ method: "GET", url: "/operations", token: await s.adminToken() });
    const control = (
      listed.json() as {
        operations: Array<{ operation_id: string; control: { limits: unknown; limits_source: string } }>;
      }
    ).operations.find((op) => op.operation_id === "sendWelcomeEmail")?.control;
    assert.deepEqual(control?.limits, configured);
    assert.equal(control?.limits_source, "config");

    const patched = await s.inject({
      method: "PATCH",
      url: "/operations/sendWelcomeEmail/limits",
      token: await s.adminToken({ sub: "dave" }),
      payload: { rate: { limit: 2, period_ms: 500, burst: 1 }, max_concurrency: null, concurrency_limit: 3 },
    });
    assert.equal(patched.statusCode, 200, patched.body);
    assert.deepEqual(patched.json(), {
      operation: {
        operation_id: "sendWelcomeEmail",
        paused: null,
        limits: {
          rate: { limit: 2, period_ms: 500, burst: 1 },
          rate_per_key: null,
          max_concurrency: null,
          concurrency_limit: 3,
        },
        limits_source: "admin",
        limits_set: { at: new Date(s.clock.now()).toISOString(), by: "dave" },
      },
    });

    const reset = await s.inject({
      method: "DELETE",
      url: "/operations/sendWelcomeEmail/limits",
      token: await s.adminToken(),
    });
    assert.equal(reset.statusCode, 200, reset.body);
    const after = (reset.json() as { operation: { limits: unknown; limits_source: string; limits_set: unknown } })
      .operation;
    assert.deepEqual([after.limits, after.limits_source, after.limits_set], [configured, "config", null]);
  });

  test("a malformed limits body is 400 invalid_request, never a 5xx", async (t) => {
    const s = await startService(t);
    const token = await s.adminToken();
    for (const payload of [
      {},
      { rate: { limit: 0 } },
      { rate: { period_ms: 10 } },
      { max_concurrency: 0 },
      { concurrency_limit: null },
      { nope: 1 },
      { rate: { limit: 2 ** 31 } },
    ]) {
      const res = await s.inject({ method: "PATCH", url: "/operations/sendWelcomeEmail/limits", token, payload });
      assertError(res, 400, "invalid_request");
    }
  });

  test("a rate limit set at runtime spaces the deliveries of a backlog: the second waits for its turn, pending", async (t) => {
    const target = await startTarget(t);
    const s = await startLiveService(t, {
      worker: true,
      configure: (raw) => (raw["target"] = { base_url: target.url, audience: "product" }),
    });
    // One job per hour: the first starts at once, the second must wait an hour.
    const patched = await s.inject({
      method: "PATCH",
      url: "/operations/sendWelcomeEmail/limits",
      token: await s.adminToken(),
      payload: { rate: { limit: 1, period_ms: 3_600_000 } },
    });
    assert.equal(patched.statusCode, 200, patched.body);
    const first = await enqueue(s, welcomeEmail());
    const second = await enqueue(s, welcomeEmail());
    const other = await enqueue(s, buildReport());
    await s.waitForJob(first.id, (job) => job.status === "succeeded");
    await s.waitForJob(other.id, (job) => job.status === "succeeded");
    const waiting = await getJob(s, second.id);
    assert.deepEqual(
      [waiting.status, waiting.attempt],
      ["pending", 0],
      "a throttled job stays pending and uses no attempt",
    );
    const metrics = await s.inject({ method: "GET", url: "/metrics", token: await s.adminToken() });
    assert.match(metrics.body, /opqueue_operation_throttled\{operation_id="sendWelcomeEmail"\} 1/);
    assert.match(metrics.body, /opqueue_job_wait_seconds_count\{operation_id="sendWelcomeEmail"\} 1/);
  });
});

describe("bulk cancel", () => {
  test("cancels the waiting jobs matching the filter, newest first, recorded as cancel-many; an empty filter is refused", async (t) => {
    const s = await startService(t);
    const a = await enqueue(s, welcomeEmail(), { sub: "u1" });
    const b = await enqueue(s, welcomeEmail(), { sub: "u2" });
    const c = await enqueue(s, welcomeEmail(), { sub: "u1" });
    const token = await s.adminToken({ sub: "erin" });
    assertError(await s.inject({ method: "POST", url: "/jobs/cancel", token, payload: {} }), 400, "invalid_request");
    assertError(
      await s.inject({ method: "POST", url: "/jobs/cancel", token, payload: { statuses: ["pending"] } }),
      400,
      "invalid_request",
    );
    assertError(
      await s.inject({ method: "POST", url: "/jobs/cancel", token, payload: { user_id: "u1", limit: 1001 } }),
      400,
      "invalid_request",
    );

    const res = await s.inject({ method: "POST", url: "/jobs/cancel", token, payload: { user_id: "u1" } });
    assert.equal(res.statusCode, 200, res.body);
    const jobs = (res.json() as { jobs: Job[] }).jobs;
    assert.deepEqual(
      jobs.map((job) => job.id),
      [c.id, a.id],
    );
    for (const job of jobs)
      assert.deepEqual([job.status, job.result?.terminal_reason], ["cancelled", "cancelled-by-admin"]);
    assert.equal((await getJob(s, b.id)).status, "pending");
    const history = await s.inject({ method: "GET", url: `/jobs/${a.id}/history`, token });
    assert.ok(JSON.stringify(history.json()).includes('"cancel-many"'), history.body);
    assert.ok(JSON.stringify(history.json()).includes('"erin"'), history.body);
  });

  test("the created_after and created_before filters bound the creation time; limit bounds the call", async (t) => {
    const s = await startService(t);
    const early = await enqueue(s, welcomeEmail());
    s.clock.advance(60_000);
    const middle = await enqueue(s, welcomeEmail());
    s.clock.advance(60_000);
    await enqueue(s, welcomeEmail());
    const token = await s.adminToken();
    const res = await s.inject({
      method: "POST",
      url: "/jobs/cancel",
      token,
      payload: { created_after: middle.created_at, created_before: new Date(s.clock.now()).toISOString() },
    });
    assert.deepEqual(
      (res.json() as { jobs: Job[] }).jobs.map((job) => job.id),
      [middle.id],
    );
    const limited = await s.inject({
      method: "POST",
      url: "/jobs/cancel",
      token,
      payload: { operation_id: "sendWelcomeEmail", limit: 1 },
    });
    assert.equal((limited.json() as { jobs: Job[] }).jobs.length, 1);
    assert.equal((await getJob(s, early.id)).status, "pending");
  });
});

describe("cancelling a running job", () => {
  test("without abort it is 409 job_running; with abort=true the delivery is aborted and the job ends cancelled for good", async (t) => {
    const closed = deferred();
    const target = await startTarget(t, (_request, res) => {
      // Never answers on its own: only opqueue's abort ends the exchange.
      res.on("close", () => closed.resolve());
    });
    const s = await startLiveService(t, {
      worker: true,
      configure: (raw) => (raw["target"] = { base_url: target.url, audience: "product" }),
    });
    const job = await enqueue(s, welcomeEmail());
    await target.waitForRequests(1);
    await s.waitForJob(job.id, (row) => row.status === "running");
    const token = await s.adminToken({ sub: "frank" });
    assertError(await s.inject({ method: "POST", url: `/jobs/${job.id}/cancel`, token }), 409, "job_running");

    const res = await s.inject({ method: "POST", url: `/jobs/${job.id}/cancel?abort=true`, token });
    assert.equal(res.statusCode, 200, res.body);
    const cancelled = (res.json() as { job: Job }).job;
    assert.deepEqual([cancelled.status, cancelled.result?.terminal_reason], ["cancelled", "cancelled-by-admin"]);
    await closed.promise;
    // The aborted attempt's outcome finds the job no longer running and writes nothing; a later job's outcome,
    // written after it, says it has been through.
    target.setHandler(answer(204));
    const later = await enqueue(s, welcomeEmail());
    await s.waitForJob(later.id, (row) => row.status === "succeeded");
    const after = await getJob(s, job.id);
    assert.deepEqual([after.status, after.result?.terminal_reason], ["cancelled", "cancelled-by-admin"]);
    const attempts = await s.inject({ method: "GET", url: `/jobs/${job.id}/attempts`, token });
    const list = (attempts.json() as { attempts: Array<{ outcome: string; error_body: string | null }> }).attempts;
    assert.equal(list.length, 1, attempts.body);
    assert.equal(list[0]?.outcome, "cancelled");
    assert.match(list[0]?.error_body ?? "", /^aborted/);
    assert.equal(
      target.requests.filter((request) => request.headers["x-job-id"] === job.id).length,
      1,
      "never delivered again",
    );
  });

  test("a bulk cancel with running among its statuses aborts the running job's delivery too", async (t) => {
    const closed = deferred();
    const target = await startTarget(t, (_request, res) => {
      res.on("close", () => closed.resolve());
    });
    const s = await startLiveService(t, {
      worker: true,
      configure: (raw) => (raw["target"] = { base_url: target.url, audience: "product" }),
    });
    const job = await enqueue(s, welcomeEmail({ dedupe_key: "bulk-abort" }));
    await target.waitForRequests(1);
    await s.waitForJob(job.id, (row) => row.status === "running");
    const res = await s.inject({
      method: "POST",
      url: "/jobs/cancel",
      token: await s.adminToken(),
      payload: { dedupe_key: "bulk-abort", statuses: ["running", "pending"] },
    });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(
      (res.json() as { jobs: Job[] }).jobs.map((row) => row.id),
      [job.id],
    );
    await closed.promise;
    target.setHandler(answer(204));
    const later = await enqueue(s, welcomeEmail());
    await s.waitForJob(later.id, (row) => row.status === "succeeded");
    assert.equal((await getJob(s, job.id)).status, "cancelled");
  });
});

describe("rate keys out of their rate", () => {
  test("300 keys held by an hour's rate_per_key hold back neither an unrelated job nor a fresh key's job; their second jobs wait", async (t) => {
    const target = await startTarget(t);
    const s = await startLiveService(t, {
      worker: true,
      configure: (raw) => {
        raw["target"] = { base_url: target.url, audience: "product" };
        raw["operations"] = { buildReport: { rate_per_key: { limit: 1, period_ms: 3_600_000 } } };
      },
    });
    const KEYS = 300;
    const bodyOf = (g: string, k: number) => JSON.stringify({ g, k });
    const jobs = Array.from({ length: KEYS }, (_, k) => [
      buildReport({ rate_key: `key-${k}`, request: { body: { g: "first", k } } }),
      buildReport({ rate_key: `key-${k}`, request: { body: { g: "second", k } } }),
    ]).flat();
    const batch = await s.inject({ method: "POST", url: "/jobs/batch", token: await s.assertion(), payload: { jobs } });
    assert.equal(batch.statusCode, 200, batch.body);
    await target.waitForRequests(KEYS);
    const unrelated = await enqueue(s, welcomeEmail());
    const fresh = await enqueue(s, buildReport({ rate_key: "fresh", request: { body: { g: "fresh", k: 0 } } }));
    await s.waitForJob(unrelated.id, (job) => job.status === "succeeded", "the unrelated job delivered");
    await s.waitForJob(fresh.id, (job) => job.status === "succeeded", "the fresh key's job delivered");
    // One job of each key, the other waiting for the key's next hour: the first, or on PostgreSQL, where a claim skips
    // a job another claim has locked, sometimes the second.
    const keyed = target.requests
      .filter((request) => request.path === "/reports")
      .map((request) => JSON.parse(request.body) as { g: string; k: number })
      .filter((body) => body.g !== "fresh");
    assert.equal(
      keyed.filter((body) => body.g === "first" || body.g === "second").length,
      KEYS,
      "one job of each key within its hour",
    );
    assert.equal(new Set(keyed.map((body) => body.k)).size, KEYS);
    assert.ok(target.requests.some((request) => request.body === bodyOf("fresh", 0)));
  });
});

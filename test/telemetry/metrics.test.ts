/**
 * GET /metrics after real work: delivery counters and the duration histogram after real deliveries to a target
 * (one success, one 503 retry, one 400 dead), attempts taken asynchronously and ended by their target, job gauges that
 * match the store, the queue lag as the age of the oldest due job, rescued leases, and a scrape while the database is
 * gone.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import http from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import { ManualClock } from "../../src/clock.js";
import type { Job } from "../../src/job/schemas.js";
import type { JobRow } from "../../src/job/job.js";
import { startTestService, type TestService } from "../helpers/service.js";

const START = Date.UTC(2026, 10, 21, 12);

async function start(
  t: TestContext,
  configure: (raw: Record<string, unknown>) => void = () => {},
): Promise<TestService> {
  const s = await startTestService({
    configure: (raw) => {
      raw["cron"] = [];
      configure(raw);
    },
    clock: new ManualClock(START),
  });
  t.after(() => s.close());
  return s;
}

/** The samples of a Prometheus text exposition, keyed `name{label="value",...}` with labels sorted. */
function parseMetrics(text: string): Map<string, number> {
  const samples = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(match, `a sample line: ${line}`);
    const [, name, labelText, value] = match;
    const labels = [...(labelText ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)]
      .map(([, key, labelValue]) => `${key}="${labelValue}"`)
      .sort();
    samples.set(labels.length > 0 ? `${name}{${labels.join(",")}}` : String(name), Number(value));
  }
  return samples;
}

/** GET /metrics, which must answer 200 with the Prometheus text format; its samples. */
async function scrape(s: TestService): Promise<Map<string, number>> {
  const res = await s.inject({ method: "GET", url: "/metrics" });
  assert.equal(res.statusCode, 200, res.body);
  assert.match(String(res.headers["content-type"]), /^text\/plain/);
  return parseMetrics(res.body);
}

/** `POST /jobs` for `sendWelcomeEmail` to `userId`; the job. */
async function enqueueWelcome(s: TestService, userId: string): Promise<Job> {
  const res = await s.inject({
    method: "POST",
    url: "/jobs",
    token: await s.assertion({ rid: `signup-${userId}` }),
    payload: { operation_id: "sendWelcomeEmail", request: { path_params: { userId } } },
  });
  assert.equal(res.statusCode, 201, res.body);
  return (res.json() as { job: Job }).job;
}

/**
 * A target answering `/users/{status}/welcome-email` with that status (a 202 with `x-job-async: 1`: it takes the
 * attempt asynchronously); `delivered` gets each delivery's job id and token.
 */
async function startTarget(
  t: TestContext,
  delivered: (jobId: string, token: string) => void = () => {},
): Promise<string> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const status = Number(/^\/users\/(\d{3})\//.exec(req.url ?? "")?.[1] ?? 404);
      delivered(String(req.headers["x-job-id"]), String(req.headers["authorization"]).slice("Bearer ".length));
      const headers = { "content-type": "text/plain", ...(status === 202 ? { "x-job-async": "1" } : {}) };
      res.writeHead(status, headers).end(status >= 300 ? `status ${status}` : undefined);
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  t.after(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const address = server.address();
  assert.ok(address !== null && typeof address === "object");
  return `http://127.0.0.1:${address.port}`;
}

/** The job statuses the store holds now, counted, for every status. */
async function statusCounts(s: TestService): Promise<Record<string, number>> {
  return (await s.service.store.jobStats()).byStatus;
}

/** Waits, a bounded time, until the dispatcher has written the outcomes of the three jobs. */
async function waitForStatuses(s: TestService, ids: string[], expected: string[]): Promise<JobRow[]> {
  let rows: Array<JobRow | undefined> = [];
  for (let i = 0; i < 300; i++) {
    rows = await Promise.all(ids.map((id) => s.service.store.jobGet({ id })));
    if (rows.every((row, index) => row?.status === expected[index])) return rows as JobRow[];
    await sleep(20);
  }
  assert.fail(`statuses ${rows.map((row) => row?.status).join(", ")}, expected ${expected.join(", ")}`);
}

const DECLARED_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

test("after real deliveries, /metrics counts them by operation and outcome, times them in a histogram, and gauges jobs by status as the store does", async (t) => {
  const targetUrl = await startTarget(t);
  const s = await start(t, (raw) => (raw["target"] = { base_url: targetUrl, audience: "product" }));
  const finished: string[] = [];
  s.service.telemetry.on("delivery:finished", ({ outcome }) => finished.push(outcome));
  s.service.start();

  const ok = await enqueueWelcome(s, "204");
  const busy = await enqueueWelcome(s, "503");
  const bad = await enqueueWelcome(s, "400");
  const rows = await waitForStatuses(s, [ok.id, busy.id, bad.id], ["succeeded", "retrying", "dead"]);
  assert.equal(rows[1]?.result?.status_code, 503);
  assert.equal(rows[2]?.result?.terminal_reason, "permanent-status");
  assert.deepEqual(finished.sort(), ["dead", "retrying", "succeeded"]);

  const metrics = await scrape(s);
  const op = 'operation_id="sendWelcomeEmail"';
  assert.equal(metrics.get(`opqueue_deliveries_total{${op},outcome="succeeded"}`), 1);
  assert.equal(metrics.get(`opqueue_deliveries_total{${op},outcome="retrying"}`), 1);
  assert.equal(metrics.get(`opqueue_deliveries_total{${op},outcome="dead"}`), 1);

  assert.equal(metrics.get(`opqueue_delivery_duration_seconds_count{${op}}`), 3);
  assert.ok((metrics.get(`opqueue_delivery_duration_seconds_sum{${op}}`) ?? 0) > 0);
  const buckets = [...DECLARED_BUCKETS.map(String), "+Inf"].map((le) => {
    const value = metrics.get(`opqueue_delivery_duration_seconds_bucket{le="${le}",${op}}`);
    assert.ok(value !== undefined, `bucket le=${le}`);
    return value;
  });
  for (let i = 1; i < buckets.length; i++) {
    assert.ok((buckets[i] ?? 0) >= (buckets[i - 1] ?? 0), "buckets are cumulative");
  }
  assert.equal(buckets.at(-1), 3, "+Inf holds every attempt");

  assert.equal(metrics.get(`opqueue_jobs_enqueued_total{${op},outcome="created"}`), 3);

  const counts = await statusCounts(s);
  assert.deepEqual(counts, { pending: 0, running: 0, retrying: 1, succeeded: 1, dead: 1, cancelled: 0 });
  for (const [status, count] of Object.entries(counts)) {
    assert.equal(metrics.get(`opqueue_jobs{status="${status}"}`), count, `opqueue_jobs{status="${status}"}`);
  }
  // The retrying job is due later (backoff): nothing is waiting now.
  assert.equal(metrics.get("opqueue_queue_lag_seconds"), 0);
});

test("opqueue_queue_lag_seconds is the age of the oldest due job: 0 when none waits, 5 after 5 s, delayed jobs ignored", async (t) => {
  const s = await start(t);
  // The worker is not started: jobs stay pending.
  assert.equal((await scrape(s)).get("opqueue_queue_lag_seconds"), 0);

  const res = await s.inject({
    method: "POST",
    url: "/jobs",
    token: await s.assertion(),
    payload: { operation_id: "buildReport", request: { body: {} }, delay_ms: 60_000 },
  });
  assert.equal(res.statusCode, 201, res.body);
  s.clock.advance(1000);
  assert.equal((await scrape(s)).get("opqueue_queue_lag_seconds"), 0, "a job not yet due does not count");

  await enqueueWelcome(s, "1");
  s.clock.advance(2000);
  await enqueueWelcome(s, "2");
  s.clock.advance(3000);
  const metrics = await scrape(s);
  assert.equal(metrics.get("opqueue_queue_lag_seconds"), 5, "the older due job waited 5 s");
  assert.equal(metrics.get('opqueue_jobs{status="pending"}'), 3);
});

test("a pause longer than the lag alert's window keeps opqueue_queue_lag_seconds and /stats' lag at 0 while opqueue_paused_jobs counts the held jobs", async (t) => {
  const s = await start(t);
  const admin = await s.adminToken();
  const pause = await s.inject({ method: "POST", url: "/operations/sendWelcomeEmail/pause", token: admin });
  assert.equal(pause.statusCode, 200, pause.body);
  await enqueueWelcome(s, "1");
  await enqueueWelcome(s, "2");
  // docs/deploying.md's "queue falling behind": lag above 60 s for 5 min. The pause lasts 10 min.
  for (let minute = 1; minute <= 10; minute++) {
    s.clock.advance(60_000);
    const metrics = await scrape(s);
    assert.equal(
      metrics.get("opqueue_queue_lag_seconds"),
      0,
      `a paused operation's jobs are no lag (minute ${minute})`,
    );
    assert.equal(
      metrics.get('opqueue_paused_jobs{operation_id="sendWelcomeEmail"}'),
      2,
      "the paused backlog is counted",
    );
  }
  const stats = await s.inject({ method: "GET", url: "/stats", token: admin });
  assert.equal(stats.statusCode, 200, stats.body);
  const body = stats.json() as { queue_lag_seconds: number; paused_jobs: unknown };
  assert.equal(body.queue_lag_seconds, 0);
  assert.deepEqual(body.paused_jobs, [{ operation_id: "sendWelcomeEmail", count: 2 }]);

  // A job of an operation still running counts as ever, beside the paused backlog.
  const report = await s.inject({
    method: "POST",
    url: "/jobs",
    token: await s.assertion(),
    payload: { operation_id: "buildReport", request: { body: {} } },
  });
  assert.equal(report.statusCode, 201, report.body);
  s.clock.advance(90_000);
  const both = await scrape(s);
  assert.equal(both.get("opqueue_queue_lag_seconds"), 90);
  assert.equal(both.get('opqueue_paused_jobs{operation_id="sendWelcomeEmail"}'), 2);

  // Resumed, the backlog is due again: its age is the lag, and the paused series is gone.
  const resume = await s.inject({ method: "POST", url: "/operations/sendWelcomeEmail/resume", token: admin });
  assert.equal(resume.statusCode, 200, resume.body);
  const resumed = await scrape(s);
  assert.equal(resumed.get("opqueue_queue_lag_seconds"), 690);
  assert.equal(resumed.get('opqueue_paused_jobs{operation_id="sendWelcomeEmail"}'), undefined);
});

test("a count a busy machine made slow is not served again to the next scrape of a service given a clock (a test's)", async (t) => {
  const s = await start(t);
  const store = s.service.store;
  const jobStats = store.jobStats.bind(store);
  // 300 ms of real time: past COUNTS_READ's 250 ms, which makes a read timed on a real clock servable for 3 s.
  store.jobStats = async (params) => {
    await new Promise((resolve) => setTimeout(resolve, 300));
    return jobStats(params);
  };
  assert.equal((await scrape(s)).get('opqueue_jobs{status="pending"}'), 0);
  await enqueueWelcome(s, "1");
  assert.equal((await scrape(s)).get('opqueue_jobs{status="pending"}'), 1);
});

test("opqueue_leases_rescued_total counts running jobs recovered after their lease expired", async (t) => {
  const s = await start(t, (raw) => {
    raw["defaults"] = { max_attempts: 5, timeout_ms: 1000 };
    raw["lease"] = { heartbeat_ms: 100, grace_ms: 200, check_ms: 100 };
    raw["operations"] = {};
  });
  const job = await enqueueWelcome(s, "1");
  const [claimed] = await s.service.store.jobClaimMany({ limit: 1 });
  assert.equal(claimed?.id, job.id);
  assert.ok(s.service.worker);

  // Not expired yet: the last heartbeat is exactly timeout + grace old.
  s.clock.advance(1200);
  await s.service.worker.rescuer.runNow();
  assert.equal((await s.service.store.jobGet({ id: job.id }))?.status, "running");

  s.clock.advance(1);
  await s.service.worker.rescuer.runNow();
  const rescued = await s.service.store.jobGet({ id: job.id });
  assert.equal(rescued?.status, "retrying");
  assert.equal(rescued?.result?.error_body, "lease expired: outcome unknown");

  const metrics = await scrape(s);
  assert.equal(metrics.get('opqueue_leases_rescued_total{outcome="retrying"}'), 1);
  assert.equal(metrics.get('opqueue_leases_rescued_total{outcome="dead"}') ?? 0, 0);
});

test("asynchronous attempts: the hand-off counts as a delivery with outcome async, the target's end in opqueue_async_attempts_finished_total", async (t) => {
  const tokens = new Map<string, string>();
  const targetUrl = await startTarget(t, (jobId, token) => tokens.set(jobId, token));
  const s = await start(t, (raw) => (raw["target"] = { base_url: targetUrl, audience: "product" }));
  let handedOff = 0;
  const bothHandedOff = new Promise<void>((resolve) =>
    s.service.telemetry.on("delivery:async", () => {
      if (++handedOff === 2) resolve();
    }),
  );
  s.service.start();
  const first = await enqueueWelcome(s, "202");
  const second = await s.inject({
    method: "POST",
    url: "/jobs",
    token: await s.assertion({ rid: "signup-202-again" }),
    payload: { operation_id: "sendWelcomeEmail", request: { path_params: { userId: "202" } } },
  });
  const secondId = (second.json() as { job: Job }).job.id;
  await bothHandedOff;
  const call = (id: string, action: string, payload: object) =>
    s.inject({ method: "POST", url: `/jobs/${id}/${action}`, token: tokens.get(id) ?? "", payload });
  assert.equal((await call(first.id, "complete", {})).statusCode, 200);
  assert.equal((await call(secondId, "fail", { status_code: 404 })).statusCode, 200);

  const metrics = await scrape(s);
  const op = 'operation_id="sendWelcomeEmail"';
  assert.equal(metrics.get(`opqueue_deliveries_total{${op},outcome="async"}`), 2);
  assert.equal(metrics.get(`opqueue_delivery_duration_seconds_count{${op}}`), 2);
  assert.equal(metrics.get(`opqueue_async_attempts_finished_total{${op},outcome="succeeded"}`), 1);
  assert.equal(metrics.get(`opqueue_async_attempts_finished_total{${op},outcome="dead"}`), 1);
});

test("/metrics still answers 200 once the store is closed, the job gauges keeping their last values", async (t) => {
  const s = await start(t);
  await enqueueWelcome(s, "1");
  await enqueueWelcome(s, "2");
  const before = await scrape(s);
  assert.equal(before.get('opqueue_jobs{status="pending"}'), 2);

  await s.service.store.close();
  const after = await scrape(s);
  assert.equal(after.get('opqueue_jobs{status="pending"}'), 2);
  assert.equal(after.get("opqueue_queue_lag_seconds"), before.get("opqueue_queue_lag_seconds"));
  assert.equal(after.get('opqueue_jobs_enqueued_total{operation_id="sendWelcomeEmail",outcome="created"}'), 2);
});

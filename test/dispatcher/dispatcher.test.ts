/**
 * docs/delivery.md, "Dispatch", §6 and §7 end to end: a service whose dispatcher delivers to a real target server. Time moves only
 * through the ManualClock (then `dispatcher.wake()`); tests wait for what the target receives, or for the
 * stored state an exchange leads to, never for time to pass.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { jwtVerify, type JWTPayload } from "jose";
import { mintToken } from "../../src/auth/tokens.js";
import type { Dispatcher } from "../../src/dispatcher/dispatcher.js";
import type { Authority } from "../../src/job/schemas.js";
import { LEASE_EXPIRED_ERROR, rescueExpiredLeases } from "../../src/maintenance/rescuer.js";
import { openStore } from "../../src/store/open-store.js";
import type { JobRow } from "../../src/job/job.js";
import { startDeliveryService, waitForJob, waitForStatus } from "../helpers/delivery.js";
import { enqueue } from "../helpers/jobs.js";
import { TEST_DELIVERY_SECRET, type TestService } from "../helpers/service.js";
import {
  answer,
  deferred,
  reply,
  startTarget,
  type Target,
  type TargetHandler,
  type TargetRequest,
} from "../helpers/target.js";

type TestContext = { after: (fn: () => Promise<void>) => void };

/** Backoff of these tests: attempt n waits 1000 × 2^(n−1) × 0.75 ms at random 0.5. */
const RETRY = { base_ms: 1000, factor: 2, max_ms: 60_000, retry_after_max_ms: 600_000 };
const FIRST_BACKOFF_MS = 750;
/** A poll fallback that never fires during a test: only events can start a delivery. */
const NEVER_POLL_MS = 3_600_000;

const welcome = (extra: Record<string, unknown> = {}) => ({
  operation_id: "sendWelcomeEmail",
  request: { path_params: { userId: "42" } },
  ...extra,
});
const report = (query: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) => ({
  operation_id: "buildReport",
  request: { body: {}, query },
  ...extra,
});

/** A target and a service delivering to it, with deterministic jitter; nothing started. */
async function setup(
  t: TestContext,
  options: {
    handler?: TargetHandler;
    configure?: (raw: Record<string, unknown>) => void;
    /** What times deliveries: the machine's clock unless a test decides how long they take. */
    stopwatch?: () => number;
  } = {},
): Promise<{ s: TestService; target: Target }> {
  const target = await startTarget(t, options.handler ?? answer(204));
  const s = await startDeliveryService(t, {
    target,
    random: () => 0.5,
    ...(options.stopwatch ? { stopwatch: options.stopwatch } : {}),
    configure: (raw) => {
      raw["retry"] = RETRY;
      options.configure?.(raw);
    },
  });
  return { s, target };
}

function dispatcherOf(s: TestService): Dispatcher {
  assert.ok(s.service.worker, "the test service has a worker");
  return s.service.worker.dispatcher;
}

/**
 * A started service of `concurrency` whose target answered one job at once (a quick delivery, so the dispatcher
 * claims ahead from then on) and holds every later request until its `held` entry is called. Its stopwatch stands
 * still, so every delivery takes 0 ms however busy the machine: quick is decided by the test, not by the machine.
 */
async function startAfterQuickDelivery(
  t: TestContext,
  concurrency: number,
): Promise<{ s: TestService; target: Target; held: Array<() => void> }> {
  const held: Array<() => void> = [];
  let requests = 0;
  const { s, target } = await setup(t, {
    handler: (_request, res) => {
      if (requests++ === 0) reply(res, 204);
      else held.push(() => reply(res, 204));
    },
    configure: (raw) => {
      raw["worker"] = { concurrency, poll_ms: NEVER_POLL_MS };
    },
    stopwatch: () => 0,
  });
  s.service.start();
  await waitForStatus(s, (await enqueue(s, report({ n: 0 }))).id, "succeeded");
  return { s, target, held };
}

/** Moves the ManualClock to `ms` and wakes the dispatcher, as the timer to the next due job would. */
function moveClockTo(s: TestService, ms: number): void {
  s.clock.set(ms);
  dispatcherOf(s).wake();
}

async function verifyDeliveryToken(s: TestService, request: TargetRequest): Promise<JWTPayload> {
  const token = (request.headers["authorization"] ?? "").slice("Bearer ".length);
  const { payload } = await jwtVerify(token, new TextEncoder().encode(TEST_DELIVERY_SECRET), {
    audience: "product",
    currentDate: new Date(s.clock.now()),
  });
  return payload;
}

describe("dispatch and outcomes", () => {
  test("delivers a job due now and records {status_code: 204, error_body: null, terminal_reason: null}", async (t) => {
    const { s, target } = await setup(t);
    const job = await enqueue(s, welcome());
    s.service.start();
    const done = await waitForStatus(s, job.id, "succeeded");
    assert.deepEqual(done.result, { status_code: 204, error_body: null, terminal_reason: null });
    assert.equal(done.attempt, 1);
    assert.equal(done.startedAt, s.clock.now());
    assert.equal(done.finishedAt, s.clock.now());
    assert.equal(target.requests.length, 1);
  });

  test("a 503 goes back to retrying at now + backoff; once the clock passes run_at, attempt 2 succeeds", async (t) => {
    let calls = 0;
    const { s, target } = await setup(t, {
      handler: (_request, res) => (++calls === 1 ? reply(res, 503, { body: "busy" }) : reply(res, 204)),
    });
    const t0 = s.clock.now();
    const job = await enqueue(s, welcome());
    s.service.start();
    const failed = await waitForStatus(s, job.id, "retrying");
    assert.equal(failed.attempt, 1);
    assert.equal(failed.runAt, t0 + FIRST_BACKOFF_MS);
    assert.deepEqual(failed.result, { status_code: 503, error_body: "busy", terminal_reason: null });
    assert.equal(failed.finishedAt, null);

    moveClockTo(s, failed.runAt);
    const done = await waitForStatus(s, job.id, "succeeded");
    assert.equal(done.attempt, 2);
    assert.deepEqual(done.result, { status_code: 204, error_body: null, terminal_reason: null });
    assert.deepEqual(
      target.requests.map((request) => request.headers["x-job-attempt"]),
      ["1", "2"],
    );
  });

  test("a job failing every attempt ends dead exhausted with the last status code and body", async (t) => {
    let calls = 0;
    const { s } = await setup(t, {
      handler: (_request, res) => reply(res, 503, { body: `down ${++calls}` }),
      configure: (raw) => {
        raw["operations"] = { buildReport: { max_attempts: 3 } };
      },
    });
    const t0 = s.clock.now();
    const job = await enqueue(s, report());
    s.service.start();
    for (const attempt of [1, 2]) {
      const failed = await waitForJob(s, job.id, (row) => row.status === "retrying" && row.attempt === attempt);
      assert.equal(
        failed.runAt - s.clock.now(),
        FIRST_BACKOFF_MS * 2 ** (attempt - 1),
        `backoff after attempt ${attempt}`,
      );
      moveClockTo(s, failed.runAt);
    }
    const dead = await waitForStatus(s, job.id, "dead");
    assert.equal(dead.attempt, 3);
    assert.deepEqual(dead.result, { status_code: 503, error_body: "down 3", terminal_reason: "exhausted" });
    assert.equal(dead.finishedAt, t0 + 750 + 1500);
  });

  const endings: Array<{
    name: string;
    status: number;
    headers?: Record<string, string>;
    body: string;
    expected: { status: JobRow["status"]; terminal_reason: string | null };
  }> = [
    {
      name: "a 503 with x-job-retry: never ends dead rejected-by-endpoint",
      status: 503,
      headers: { "x-job-retry": "never" },
      body: "stop",
      expected: { status: "dead", terminal_reason: "rejected-by-endpoint" },
    },
    {
      name: "a 401 with code auth_unresolvable ends dead auth-unresolvable",
      status: 401,
      headers: { "content-type": "application/json" },
      body: '{"code":"auth_unresolvable","message":"user is gone"}',
      expected: { status: "dead", terminal_reason: "auth-unresolvable" },
    },
    {
      name: "a 404 ends dead permanent-status",
      status: 404,
      body: "no such user",
      expected: { status: "dead", terminal_reason: "permanent-status" },
    },
    {
      name: "a 400 with x-job-retry: always goes back to retrying",
      status: 400,
      headers: { "x-job-retry": "always" },
      body: "not yet",
      expected: { status: "retrying", terminal_reason: null },
    },
  ];
  for (const ending of endings) {
    test(ending.name, async (t) => {
      const { s, target } = await setup(t, {
        handler: (_request, res) =>
          reply(res, ending.status, { ...(ending.headers ? { headers: ending.headers } : {}), body: ending.body }),
      });
      const job = await enqueue(s, welcome());
      s.service.start();
      const done = await waitForStatus(s, job.id, ending.expected.status);
      assert.deepEqual(done.result, {
        status_code: ending.status,
        error_body: ending.body,
        terminal_reason: ending.expected.terminal_reason,
      });
      assert.equal(done.attempt, 1);
      assert.equal(done.finishedAt, ending.expected.status === "dead" ? s.clock.now() : null);
      assert.equal(target.requests.length, 1);
    });
  }
});

describe("chains", () => {
  /** What each target enqueues next: A (sendWelcomeEmail) → B (recordEmailSent) → C (buildReport). */
  const NEXT: Record<string, object | undefined> = {
    sendWelcomeEmail: { operation_id: "recordEmailSent", request: { path_params: { emailId: "e-1" }, body: {} } },
    recordEmailSent: { operation_id: "buildReport", request: { body: { week: 47 } } },
  };

  const roots: Array<{
    kind: string;
    claims: { op: string; sub: string; rid: string };
    onBehalfOf?: { user_id: string; authority: Authority };
    expected: Authority;
  }> = [
    {
      kind: "request",
      claims: { op: "createUser", sub: "u1", rid: "req-chain" },
      expected: { kind: "request", request_id: "req-chain", user_id: "u1" },
    },
    {
      kind: "resource",
      claims: { op: "importUsers", sub: "importer", rid: "req-import" },
      onBehalfOf: {
        user_id: "u7",
        authority: { kind: "resource", resource_id: "imp-9", resource_kind: "import", user_id: "u7" },
      },
      expected: { kind: "resource", resource_id: "imp-9", resource_kind: "import", user_id: "u7" },
    },
    {
      kind: "cron",
      claims: { op: "importUsers", sub: "importer", rid: "req-cron" },
      onBehalfOf: { user_id: "system", authority: { kind: "cron", cron_job_name: "nightly", user_id: "system" } },
      expected: { kind: "cron", cron_job_name: "nightly", user_id: "system" },
    },
  ];

  for (const root of roots) {
    test(`a chain A→B→C enqueued by the targets over HTTP copies parents, request id and ${root.kind} authority verbatim`, async (t) => {
      // The service and its address exist only once the target is up; the handler reads them when called.
      const api: { s?: TestService; url?: string } = {};
      const tokens: JWTPayload[] = [];
      const { s, target } = await setup(t, {
        handler: async (request, res) => {
          const { s: service, url } = api;
          assert.ok(service && url);
          const claims = await verifyDeliveryToken(service, request);
          tokens.push(claims);
          const next = NEXT[String(claims["op"])];
          if (next) {
            const assertion = await mintToken({
              auth: service.config.auth,
              clock: service.clock,
              sub: String(claims.sub),
              op: String(claims["op"]),
              job: String(claims["job"]),
            });
            const enqueued = await fetch(`${url}/jobs`, {
              method: "POST",
              headers: { authorization: `Bearer ${assertion}`, "content-type": "application/json" },
              body: JSON.stringify(next),
            });
            if (enqueued.status !== 201) return reply(res, 500, { body: await enqueued.text() });
          }
          reply(res, 204);
        },
      });
      api.s = s;
      api.url = await s.service.app.listen({ port: 0, host: "127.0.0.1" });
      const a = await enqueue(s, welcome(root.onBehalfOf ? { on_behalf_of: root.onBehalfOf } : {}), root.claims);
      s.service.start();
      await target.waitForRequests(3);
      const rid = root.claims.rid;
      const jobs = (await s.service.store.jobList({ originalRequestId: rid, limit: 10 })).reverse();
      assert.deepEqual(
        jobs.map((job) => job.operationId),
        ["sendWelcomeEmail", "recordEmailSent", "buildReport"],
      );
      const [rowA, rowB, rowC] = await Promise.all(jobs.map((job) => waitForStatus(s, job.id, "succeeded")));
      assert.ok(rowA && rowB && rowC);
      assert.equal(rowA.id, a.id);
      assert.deepEqual([rowA.parentJobId, rowB.parentJobId, rowC.parentJobId], [null, rowA.id, rowB.id]);
      assert.deepEqual(
        [rowA.enqueuedByOperationId, rowB.enqueuedByOperationId, rowC.enqueuedByOperationId],
        [root.claims.op, "sendWelcomeEmail", "recordEmailSent"],
      );
      for (const row of [rowA, rowB, rowC]) {
        assert.equal(row.originalRequestId, rid);
        assert.equal(row.userId, root.expected.user_id);
        // The stored authority, evidence included, is the root's, byte for byte.
        assert.deepEqual(row.authority, rowA.authority);
      }
      const { assertion: evidence, ...wire } = rowA.authority;
      assert.equal(typeof evidence, "string");
      assert.deepEqual(wire, root.expected);
      assert.deepEqual(
        tokens.map((claims) => [claims["op"], claims.sub, claims["rid"], claims["authority"]]),
        [
          ["sendWelcomeEmail", root.expected.user_id, rid, root.expected],
          ["recordEmailSent", root.expected.user_id, rid, root.expected],
          ["buildReport", root.expected.user_id, rid, root.expected],
        ],
      );
    });
  }
});

describe("claiming", () => {
  test("runs at most one job per concurrency key while running several keys at once", async (t) => {
    const keys = ["k1", "k2", "k3"];
    const perKey = 3;
    const total = keys.length * perKey;
    const inFlight = new Map<string, number>();
    let maxPerKey = 0;
    let maxDistinctKeys = 0;
    let arrived = 0;
    const held: Array<() => void> = [];
    const { s } = await setup(t, {
      configure: (raw) => {
        raw["worker"] = { concurrency: 8, poll_ms: NEVER_POLL_MS };
      },
      handler: (request, res) => {
        const key = request.query.get("key") ?? "";
        inFlight.set(key, (inFlight.get(key) ?? 0) + 1);
        maxPerKey = Math.max(maxPerKey, ...inFlight.values());
        maxDistinctKeys = Math.max(maxDistinctKeys, [...inFlight.values()].filter((n) => n > 0).length);
        arrived++;
        held.push(() => {
          inFlight.set(key, (inFlight.get(key) ?? 0) - 1);
          reply(res, 204);
        });
        // Hold answers until one request per key has arrived (or the last ones), then answer them all.
        if (held.length === keys.length || arrived === total) held.splice(0).forEach((release) => release());
      },
    });
    const jobs: string[] = [];
    for (let i = 0; i < perKey; i++) {
      for (const key of keys) jobs.push((await enqueue(s, report({ key }, { concurrency_key: key }))).id);
    }
    s.service.start();
    for (const id of jobs) await waitForStatus(s, id, "succeeded");
    assert.equal(arrived, total);
    assert.equal(maxPerKey, 1, "never two requests of one key in flight");
    assert.ok(maxDistinctKeys >= 2, `several keys ran at once (at most ${maxDistinctKeys} did)`);
  });

  test("claims by priority, then run_at, then creation order", async (t) => {
    const { s, target } = await setup(t, {
      configure: (raw) => {
        raw["worker"] = { concurrency: 1, poll_ms: NEVER_POLL_MS };
      },
    });
    const past = new Date(s.clock.now() - 60_000).toISOString();
    const specs: Array<{ name: string; priority: number; run_at?: string }> = [
      { name: "p0-first", priority: 0 },
      { name: "p5-first", priority: 5 },
      { name: "p-1", priority: -1 },
      { name: "p5-second", priority: 5 },
      { name: "p10", priority: 10 },
      { name: "p0-second", priority: 0 },
      { name: "p0-earlier-run-at", priority: 0, run_at: past },
    ];
    const ids = [];
    for (const spec of specs) {
      const { name, ...fields } = spec;
      ids.push((await enqueue(s, report({ name }, fields))).id);
    }
    s.service.start();
    for (const id of ids) await waitForStatus(s, id, "succeeded");
    assert.deepEqual(
      target.requests.map((request) => request.query.get("name")),
      ["p10", "p5-first", "p5-second", "p0-earlier-run-at", "p0-first", "p0-second", "p-1"],
    );
  });

  test("never has more deliveries in flight than worker.concurrency", async (t) => {
    const concurrency = 3;
    const total = 8;
    let inFlight = 0;
    let maxInFlight = 0;
    const held: Array<{ jobId: string; release: () => void }> = [];
    const { s, target } = await setup(t, {
      configure: (raw) => {
        raw["worker"] = { concurrency, poll_ms: NEVER_POLL_MS };
      },
      handler: (request, res) => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        held.push({
          jobId: String(request.headers["x-job-id"]),
          release: () => {
            inFlight--;
            reply(res, 204);
          },
        });
      },
    });
    const ids = [];
    for (let i = 0; i < total; i++) ids.push((await enqueue(s, report({ i }))).id);
    s.service.start();
    // Keep the node full: answer the oldest request only once every slot holds one. Claimed jobs are `running`
    // in the store before their request leaves: the slots' jobs, and at most as many again claimed ahead.
    for (let answered = 0; answered < total; answered++) {
      const slotsFull = Math.min(concurrency, total - answered);
      await target.waitForRequests(answered + slotsFull);
      assert.equal(held.length, slotsFull);
      const running = (await s.service.store.jobStats()).byStatus.running;
      assert.ok(running >= slotsFull && running <= slotsFull + concurrency, `${running} running in the store`);
      assert.equal(dispatcherOf(s).inFlightCount, slotsFull);
      const oldest = held.shift();
      assert.ok(oldest);
      oldest.release();
      await waitForStatus(s, oldest.jobId, "succeeded");
    }
    for (const id of ids) await waitForStatus(s, id, "succeeded");
    assert.equal(maxInFlight, concurrency);
    assert.equal(target.requests.length, total);
  });

  /** Waits until the store holds `count` running jobs. */
  async function waitForRunning(s: TestService, count: number): Promise<void> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const running = (await s.service.store.jobStats()).byStatus.running;
      if (running === count) return;
      // A bound for a dispatcher that never claims, never a pause: each claim ends the wait.
      if (Date.now() > deadline) throw new Error(`${running} running jobs, expected ${count}`);
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  test("once deliveries are quick, claims up to worker.concurrency ahead; each starts when a slot frees", async (t) => {
    const { s, target, held } = await startAfterQuickDelivery(t, 4);
    const ids = [];
    // Ten jobs for four slots and four claimed ahead: two stay waiting in the store.
    for (let n = 1; n <= 10; n++) ids.push((await enqueue(s, report({ n }))).id);
    await target.waitForRequests(1 + 4);
    await waitForRunning(s, 4 + 4);
    assert.equal(dispatcherOf(s).inFlightCount, 4);
    assert.equal(dispatcherOf(s).readyCount, 4);
    assert.equal((await s.service.store.jobStats()).byStatus.pending, 2);

    held.shift()?.();
    await target.waitForRequests(1 + 5);
    assert.equal(target.requests.at(-1)?.query.get("n"), "5", "the oldest job claimed ahead started");
    while (target.requests.length < 1 + 10 || held.length > 0) {
      held.shift()?.();
      await new Promise((resolve) => setImmediate(resolve));
    }
    for (const id of ids) await waitForStatus(s, id, "succeeded");
    // Jobs started together travel on separate connections, so only the set of arrivals is certain past this point.
    assert.deepEqual(
      target.requests.map((request) => Number(request.query.get("n"))).sort((a, b) => a - b),
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
    );
  });

  test("takes a job due now made here for each free slot until a claim begins, none unless running", async (t) => {
    const held: Array<() => void> = [];
    const { s, target } = await setup(t, {
      handler: (_request, res) => {
        held.push(() => reply(res, 204));
      },
      configure: (raw) => {
        raw["worker"] = { concurrency: 2, poll_ms: NEVER_POLL_MS };
      },
    });
    t.after(async () => held.forEach((release) => release()));
    const dispatcher = dispatcherOf(s);
    assert.equal(dispatcher.takesOne(), false, "not started");
    s.service.start();
    assert.deepEqual([dispatcher.takesOne(), dispatcher.takesOne(), dispatcher.takesOne()], [true, true, false]);
    // A claim begins (this enqueue wakes it) and takes the job: one slot is left for the next job made here.
    await enqueue(s, report());
    await target.waitForRequests(1);
    assert.deepEqual([dispatcher.takesOne(), dispatcher.takesOne()], [true, false]);
  });

  test("claims nothing ahead before a delivery was quick", async (t) => {
    const held: Array<() => void> = [];
    const { s, target } = await setup(t, {
      handler: (_request, res) => {
        held.push(() => reply(res, 204));
      },
      configure: (raw) => {
        raw["worker"] = { concurrency: 4, poll_ms: NEVER_POLL_MS };
      },
    });
    for (let n = 1; n <= 8; n++) await enqueue(s, report({ n }));
    s.service.start();
    await target.waitForRequests(4);
    assert.equal((await s.service.store.jobStats()).byStatus.running, 4);
    assert.equal(dispatcherOf(s).readyCount, 0);
    t.after(() => held.forEach((release) => release()));
  });

  test("claims nothing ahead while deliveries are slow, however quickly the machine ran them", async (t) => {
    const held: Array<() => void> = [];
    let requests = 0;
    let elapsed = 0;
    const { s, target } = await setup(t, {
      handler: (_request, res) => {
        if (requests++ === 0) reply(res, 204);
        else held.push(() => reply(res, 204));
      },
      configure: (raw) => {
        raw["worker"] = { concurrency: 4, poll_ms: NEVER_POLL_MS };
      },
      // Each reading is a second after the last: every delivery takes a second.
      stopwatch: () => (elapsed += 1000),
    });
    t.after(() => held.forEach((release) => release()));
    s.service.start();
    await waitForStatus(s, (await enqueue(s, report({ n: 0 }))).id, "succeeded");
    for (let n = 1; n <= 8; n++) await enqueue(s, report({ n }));
    await target.waitForRequests(1 + 4);
    assert.equal((await s.service.store.jobStats()).byStatus.running, 4);
    assert.equal(dispatcherOf(s).readyCount, 0);
  });

  test("a due job waiting for a busy concurrency key does not make the dispatcher claim in a loop", async (t) => {
    const release = deferred();
    const { s, target } = await setup(t, {
      handler: async (_request, res) => {
        await release.promise;
        reply(res, 204);
      },
      configure: (raw) => {
        raw["worker"] = { concurrency: 4, poll_ms: NEVER_POLL_MS };
        raw["lease"] = { heartbeat_ms: 5, check_ms: NEVER_POLL_MS };
      },
    });
    const store = s.service.store;
    let claims = 0;
    let heartbeats = 0;
    const heartbeatWaiters: Array<{ count: number; resolve: () => void }> = [];
    const claimMany = store.jobClaimMany.bind(store);
    const heartbeatMany = store.jobHeartbeatMany.bind(store);
    // Once the listener for other nodes is in place, the node claims once more (a job committed before the LISTEN
    // notified nobody); on PostgreSQL that can come after the first heartbeats, so the quiet window starts after it.
    const listening = deferred();
    const availableListen = store.jobAvailableListen.bind(store);
    store.jobAvailableListen = async (onAvailable) => {
      const stop = await availableListen(onAvailable);
      listening.resolve();
      return stop;
    };
    store.jobClaimMany = (params) => {
      claims++;
      return claimMany(params);
    };
    store.jobHeartbeatMany = async (params) => {
      await heartbeatMany(params);
      heartbeats++;
      heartbeatWaiters.filter((w) => heartbeats >= w.count).forEach((w) => w.resolve());
    };
    const nextHeartbeats = (n: number) =>
      new Promise<void>((resolve, reject) => {
        // A bound for a node that stopped heartbeating, never a pause: heartbeats resolve this.
        const timer = setTimeout(() => reject(new Error(`no ${n} heartbeats (got ${heartbeats})`)), 10_000);
        heartbeatWaiters.push({
          count: heartbeats + n,
          resolve: () => {
            clearTimeout(timer);
            resolve();
          },
        });
      });

    const first = await enqueue(s, report({ n: 1 }, { concurrency_key: "k" }));
    const second = await enqueue(s, report({ n: 2 }, { concurrency_key: "k" }));
    s.service.start();
    await target.waitForRequests(1);
    await listening.promise;
    // Heartbeats are the only thing the node does while the key is busy and nothing else changes.
    await nextHeartbeats(3);
    const claimsBefore = claims;
    await nextHeartbeats(10);
    assert.equal(claims - claimsBefore, 0, "no claim while nothing changed");
    assert.equal((await store.jobGet({ id: second.id }))?.status, "pending");

    release.resolve();
    await waitForStatus(s, first.id, "succeeded");
    await waitForStatus(s, second.id, "succeeded");
  });
});

describe("conditional outcome writes", () => {
  const failed = { status_code: 500, error_body: "x", terminal_reason: null };
  const succeeded = { status_code: 200, error_body: null, terminal_reason: null };

  async function claimOne(s: TestService): Promise<JobRow> {
    const [job] = await s.service.store.jobClaimMany({ limit: 1 });
    assert.ok(job);
    return job;
  }

  test("a late outcome after an admin cancel changes nothing", async (t) => {
    const { s } = await setup(t);
    const store = s.service.store;
    const job = await enqueue(s, welcome());
    await claimOne(s);
    assert.deepEqual(
      await store.jobSetStateIfRunningMany({
        outcomes: [{ id: job.id, attempt: 1, status: "retrying", delayMs: 1000, result: failed }],
      }),
      [true],
    );
    const cancelled = await s.inject({ method: "POST", url: `/jobs/${job.id}/cancel`, token: await s.adminToken() });
    assert.equal(cancelled.statusCode, 200, cancelled.body);
    const before = await store.jobGet({ id: job.id });
    assert.deepEqual(
      await store.jobSetStateIfRunningMany({
        outcomes: [{ id: job.id, attempt: 1, status: "succeeded", result: succeeded }],
      }),
      [false],
    );
    const after = await store.jobGet({ id: job.id });
    assert.deepEqual(after, before);
    assert.equal(after?.status, "cancelled");
    assert.equal(after?.result?.terminal_reason, "cancelled-by-admin");
  });

  test("a late outcome after a chain cancel changes nothing", async (t) => {
    const { s } = await setup(t);
    const store = s.service.store;
    const job = await enqueue(s, welcome(), { rid: "req-late" });
    await claimOne(s);
    await store.jobSetStateIfRunningMany({
      outcomes: [{ id: job.id, attempt: 1, status: "retrying", delayMs: 1000, result: failed }],
    });
    assert.deepEqual(
      (await store.chainCancel({ originalRequestId: "req-late", actor: "admin", role: "admin" })).map((row) => row.id),
      [job.id],
    );
    const before = await store.jobGet({ id: job.id });
    assert.deepEqual(
      await store.jobSetStateIfRunningMany({
        outcomes: [
          { id: job.id, attempt: 1, status: "dead", result: { ...failed, terminal_reason: "permanent-status" } },
        ],
      }),
      [false],
    );
    assert.deepEqual(await store.jobGet({ id: job.id }), before);
    assert.equal(before?.result?.terminal_reason, "cancelled-by-chain");
  });

  test("a late outcome after a lease rescue changes nothing, before and after the next claim", async (t) => {
    const { s } = await setup(t, {
      configure: (raw) => {
        raw["lease"] = { grace_ms: 1000 };
      },
    });
    const store = s.service.store;
    const job = await enqueue(s, welcome());
    await claimOne(s);
    s.clock.advance(30_000 + 1000 + 1);
    const rescued = await rescueExpiredLeases({
      settings: s.service.settings,
      store,
      clock: s.clock,
      telemetry: s.service.telemetry,
      random: () => 0.5,
    });
    assert.equal(rescued, 1);
    const lateSuccess = { id: job.id, attempt: 1, status: "succeeded" as const, result: succeeded };
    assert.deepEqual(await store.jobSetStateIfRunningMany({ outcomes: [lateSuccess] }), [false]);
    const afterRescue = await store.jobGet({ id: job.id });
    assert.equal(afterRescue?.status, "retrying");
    assert.equal(afterRescue?.result?.error_body, LEASE_EXPIRED_ERROR);

    s.clock.set(afterRescue?.runAt ?? 0);
    const again = await claimOne(s);
    assert.equal(again.attempt, 2);
    assert.deepEqual(await store.jobSetStateIfRunningMany({ outcomes: [lateSuccess] }), [false]);
    assert.equal((await store.jobGet({ id: job.id }))?.status, "running");
    // In one batch, the stale outcome is refused and the current one written.
    assert.deepEqual(
      await store.jobSetStateIfRunningMany({ outcomes: [lateSuccess, { ...lateSuccess, attempt: 2 }] }),
      [false, true],
    );
    assert.equal((await store.jobGet({ id: job.id }))?.status, "succeeded");
  });

  test("a job rescued from this node and claimed by it again is tracked once per attempt", async (t) => {
    const holds = [deferred(), deferred()];
    const { s, target } = await setup(t, {
      handler: async (_request, res) => {
        await holds[target.requests.length - 1]?.promise;
        reply(res, 204);
      },
    });
    const store = s.service.store;
    const job = await enqueue(s, welcome());
    s.service.start();
    await target.waitForRequests(1);
    // As a rescuer elsewhere would, once this node's lease looked expired: the job goes back, and this node takes it.
    assert.equal(
      await store.jobRequeueMany({
        jobs: [{ id: job.id, attempt: 1 }],
        delayMs: 0,
        errorBody: "lease expired",
        refund: "if-last",
      }),
      1,
    );
    dispatcherOf(s).wake();
    await target.waitForRequests(2);
    assert.equal(dispatcherOf(s).inFlightCount, 2, "both deliveries are in flight");
    holds[0]?.resolve();
    for (
      const deadline = Date.now() + 10_000;
      dispatcherOf(s).inFlightCount !== 1;
      await new Promise((r) => setTimeout(r, 10))
    ) {
      assert.ok(Date.now() < deadline, "the first delivery ends within 10 s");
    }
    assert.equal((await store.jobGet({ id: job.id }))?.status, "running", "its outcome is refused: attempt 2 runs");
    holds[1]?.resolve();
    const done = await waitForStatus(s, job.id, "succeeded");
    assert.equal(done.attempt, 2);
    assert.equal(dispatcherOf(s).inFlightCount, 0);
  });

  test("a duplicate outcome of the same attempt is written once", async (t) => {
    const { s } = await setup(t);
    const store = s.service.store;
    const job = await enqueue(s, welcome());
    await claimOne(s);
    const outcome = {
      id: job.id,
      attempt: 1,
      status: "dead" as const,
      result: { ...failed, terminal_reason: "exhausted" as const },
    };
    assert.deepEqual(await store.jobSetStateIfRunningMany({ outcomes: [outcome] }), [true]);
    const written = await store.jobGet({ id: job.id });
    s.clock.advance(1000);
    assert.deepEqual(
      await store.jobSetStateIfRunningMany({ outcomes: [{ ...outcome, status: "succeeded", result: succeeded }] }),
      [false],
    );
    assert.deepEqual(await store.jobGet({ id: job.id }), written);
  });

  for (const ending of [
    {
      name: "fails (503)",
      status: 503,
      expected: {
        status: "cancelled",
        result: { status_code: 503, error_body: "busy", terminal_reason: "cancelled-by-chain" },
      },
    },
    {
      name: "fails for good (400)",
      status: 400,
      expected: {
        status: "cancelled",
        result: { status_code: 400, error_body: "busy", terminal_reason: "cancelled-by-chain" },
      },
    },
    {
      name: "succeeds (204)",
      status: 204,
      expected: { status: "succeeded", result: { status_code: 204, error_body: null, terminal_reason: null } },
    },
  ] as const) {
    test(`a job whose chain is cancelled while it runs ends ${ending.expected.status} when its attempt ${ending.name}`, async (t) => {
      const release = deferred();
      const { s, target } = await setup(t, {
        handler: async (_request, res) => {
          await release.promise;
          reply(res, ending.status, ending.status === 204 ? {} : { body: "busy" });
        },
      });
      const job = await enqueue(s, welcome(), { rid: "req-running" });
      s.service.start();
      await target.waitForRequests(1);
      const cancel = await s.inject({ method: "POST", url: "/chains/req-running/cancel", token: await s.adminToken() });
      assert.equal(cancel.statusCode, 200, cancel.body);
      assert.deepEqual(cancel.json(), { jobs: [] }, "a running job is not interrupted");
      assert.equal((await s.service.store.jobGet({ id: job.id }))?.status, "running");
      release.resolve();
      const done = await waitForStatus(s, job.id, ending.expected.status);
      assert.deepEqual(done.result, ending.expected.result);
      assert.equal(done.finishedAt, s.clock.now());
    });
  }
});

describe("leases", () => {
  test("recovers a job whose lease expired only after timeout_ms + grace_ms, as retrying with backoff", async (t) => {
    const { s } = await setup(t, {
      configure: (raw) => {
        raw["lease"] = { grace_ms: 1000 };
      },
    });
    const store = s.service.store;
    const rescue = () =>
      rescueExpiredLeases({
        settings: s.service.settings,
        store,
        clock: s.clock,
        telemetry: s.service.telemetry,
        random: () => 0.5,
      });
    const job = await enqueue(s, welcome());
    const [claimed] = await store.jobClaimMany({ limit: 1 });
    assert.equal(claimed?.id, job.id);

    // The default timeout_ms (30000) plus grace_ms (1000): not yet older than the lease at exactly that age.
    s.clock.advance(31_000);
    assert.equal(await rescue(), 0);
    assert.equal((await store.jobGet({ id: job.id }))?.status, "running");

    s.clock.advance(1);
    assert.equal(await rescue(), 1);
    const rescued = await store.jobGet({ id: job.id });
    assert.equal(rescued?.status, "retrying");
    assert.equal(rescued?.attempt, 1);
    assert.equal(rescued?.runAt, s.clock.now() + FIRST_BACKOFF_MS);
    assert.deepEqual(rescued?.result, { error_body: LEASE_EXPIRED_ERROR, terminal_reason: null });
    assert.equal(await rescue(), 0, "a rescued job is rescued once");
  });

  test("uses each operation's own timeout_ms for its lease", async (t) => {
    const { s } = await setup(t, {
      configure: (raw) => {
        raw["lease"] = { grace_ms: 1000 };
        raw["operations"] = { buildReport: { timeout_ms: 5000 } };
      },
    });
    const store = s.service.store;
    const long = await enqueue(s, welcome());
    const short = await enqueue(s, report());
    assert.equal((await store.jobClaimMany({ limit: 2 })).length, 2);
    s.clock.advance(6001);
    assert.equal(
      await rescueExpiredLeases({
        settings: s.service.settings,
        store,
        clock: s.clock,
        telemetry: s.service.telemetry,
      }),
      1,
    );
    assert.equal((await store.jobGet({ id: short.id }))?.status, "retrying");
    assert.equal((await store.jobGet({ id: long.id }))?.status, "running");
  });

  test("a job whose lease expires at its last attempt ends dead exhausted", async (t) => {
    const { s } = await setup(t, {
      configure: (raw) => {
        raw["lease"] = { grace_ms: 1000 };
        raw["operations"] = { buildReport: { max_attempts: 1 } };
      },
    });
    const store = s.service.store;
    const job = await enqueue(s, report());
    await store.jobClaimMany({ limit: 1 });
    s.clock.advance(31_001);
    assert.equal(
      await rescueExpiredLeases({
        settings: s.service.settings,
        store,
        clock: s.clock,
        telemetry: s.service.telemetry,
      }),
      1,
    );
    const dead = await store.jobGet({ id: job.id });
    assert.equal(dead?.status, "dead");
    assert.deepEqual(dead?.result, { error_body: LEASE_EXPIRED_ERROR, terminal_reason: "exhausted" });
    assert.equal(dead?.finishedAt, s.clock.now());
  });

  test("heartbeats keep an in-flight delivery from being rescued", async (t) => {
    const release = deferred();
    const { s, target } = await setup(t, {
      handler: async (_request, res) => {
        await release.promise;
        reply(res, 204);
      },
      configure: (raw) => {
        raw["lease"] = { heartbeat_ms: 20, grace_ms: 1000, check_ms: NEVER_POLL_MS };
        raw["operations"] = { sendWelcomeEmail: { timeout_ms: 5000 } };
      },
    });
    const store = s.service.store;
    const job = await enqueue(s, welcome());
    s.service.start();
    await target.waitForRequests(1);
    // Far past timeout_ms + grace_ms since the claim; the next heartbeat renews the lease at this time.
    s.clock.advance(10_000);
    await waitForJob(s, job.id, (row) => row.heartbeatAt === s.clock.now(), "a heartbeat at the new time");
    assert.equal(
      await rescueExpiredLeases({
        settings: s.service.settings,
        store,
        clock: s.clock,
        telemetry: s.service.telemetry,
      }),
      0,
    );
    assert.equal((await store.jobGet({ id: job.id }))?.status, "running");
    release.resolve();
    const done = await waitForStatus(s, job.id, "succeeded");
    assert.equal(done.attempt, 1);
  });

  test("no heartbeat starts while the one before it is on its way, so a slow database never commits an older time last", async (t) => {
    const release = deferred();
    const { s, target } = await setup(t, {
      handler: async (_request, res) => {
        await release.promise;
        reply(res, 204);
      },
      configure: (raw) => {
        raw["lease"] = { heartbeat_ms: 1, check_ms: NEVER_POLL_MS };
      },
    });
    const store = s.service.store;
    const heartbeatMany = store.jobHeartbeatMany.bind(store);
    const firstHeld = deferred();
    const firstStarted = deferred();
    let calls = 0;
    let atOnce = 0;
    let mostAtOnce = 0;
    store.jobHeartbeatMany = async (params) => {
      calls++;
      mostAtOnce = Math.max(mostAtOnce, ++atOnce);
      try {
        if (calls === 1) {
          firstStarted.resolve();
          await firstHeld.promise;
        }
        await heartbeatMany(params);
      } finally {
        atOnce--;
      }
    };
    const job = await enqueue(s, welcome());
    s.service.start();
    await target.waitForRequests(1);
    await firstStarted.promise;
    // Many 1 ms intervals pass while the first heartbeat is held; none of them starts another.
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(calls, 1);
    firstHeld.resolve();
    s.clock.advance(1000);
    await waitForJob(s, job.id, (row) => row.heartbeatAt === s.clock.now(), "a heartbeat after the held one");
    assert.equal(mostAtOnce, 1);
    release.resolve();
    await waitForStatus(s, job.id, "succeeded");
  });
});

describe("graceful stop", () => {
  /** Reads a job from the database of a closed service, on the test's clock as the service was. */
  async function readAfterClose(s: TestService, id: string): Promise<JobRow | undefined> {
    const store = await openStore({ url: s.config.database, clock: s.clock, databaseTime: false });
    try {
      return await store.jobGet({ id });
    } finally {
      await store.close();
    }
  }

  test("lets a delivery that answers within the grace finish, and claims nothing more", async (t) => {
    const release = deferred();
    const { s, target } = await setup(t, {
      handler: async (_request, res) => {
        await release.promise;
        reply(res, 204);
      },
      configure: (raw) => {
        raw["worker"] = { concurrency: 1, poll_ms: NEVER_POLL_MS };
      },
    });
    const first = await enqueue(s, welcome());
    const second = await enqueue(s, welcome());
    s.service.start();
    await target.waitForRequests(1);
    const closing = s.service.close({ graceMs: 10_000 });
    release.resolve();
    await closing;
    const done = await readAfterClose(s, first.id);
    assert.equal(done?.status, "succeeded");
    assert.deepEqual(done?.result, { status_code: 204, error_body: null, terminal_reason: null });
    const waiting = await readAfterClose(s, second.id);
    assert.equal(waiting?.status, "pending");
    assert.equal(waiting?.attempt, 0);
    assert.equal(target.requests.length, 1);
  });

  test("puts a delivery still unanswered after the grace back to retrying with run_at = now", async (t) => {
    const { s, target } = await setup(t, { handler: () => new Promise<void>(() => undefined) });
    const job = await enqueue(s, welcome());
    s.service.start();
    await target.waitForRequests(1);
    await s.service.close({ graceMs: 200 });
    const requeued = await readAfterClose(s, job.id);
    assert.equal(requeued?.status, "retrying");
    assert.equal(requeued?.runAt, s.clock.now());
    assert.equal(requeued?.attempt, 1);
    assert.equal(requeued?.result?.terminal_reason, null);
    assert.equal(requeued?.result && "status_code" in requeued.result, false);
    assert.match(requeued?.result?.error_body ?? "", /shutdown/);
  });

  test("a job claimed ahead and still waiting when the grace ends goes back to retrying, marked as not delivered", async (t) => {
    const { s, target, held } = await startAfterQuickDelivery(t, 2);
    const ids = [];
    for (let n = 1; n <= 3; n++) ids.push((await enqueue(s, report({ n }))).id);
    await target.waitForRequests(1 + 2);
    const deadline = Date.now() + 10_000;
    while (dispatcherOf(s).readyCount < 1) {
      // A bound for a dispatcher that never claims ahead, never a pause.
      if (Date.now() > deadline) throw new Error("nothing was claimed ahead");
      await new Promise((resolve) => setImmediate(resolve));
    }
    await s.service.close({ graceMs: 200 });
    held.forEach((release) => release());
    const jobs = [];
    for (const id of ids) jobs.push(await readAfterClose(s, id));
    const [first, second, third] = jobs;
    for (const delivered of [first, second]) {
      assert.equal(delivered?.status, "retrying");
      assert.match(delivered?.result?.error_body ?? "", /outcome unknown/);
    }
    assert.equal(third?.status, "retrying");
    assert.equal(third?.runAt, s.clock.now());
    assert.match(third?.result?.error_body ?? "", /claimed, but not delivered/);
    assert.equal(target.requests.length, 1 + 2, "the job claimed ahead never left");
  });

  test("a claim still on its way to the database when the stop begins: its jobs are delivered, none is left running", async (t) => {
    const { s, target } = await setup(t, {
      configure: (raw) => {
        raw["worker"] = { concurrency: 4, poll_ms: NEVER_POLL_MS };
      },
    });
    const job = await enqueue(s, welcome());
    // Hold the dispatcher's first claim before it reaches the database, and let it go only once the stop began.
    const store = s.service.store;
    const claim = store.jobClaimMany.bind(store);
    const claimStarted = deferred();
    const releaseClaim = deferred();
    store.jobClaimMany = async (params) => {
      claimStarted.resolve();
      await releaseClaim.promise;
      return claim(params);
    };
    s.service.start();
    await claimStarted.promise;
    const closing = s.service.close({ graceMs: 10_000 });
    releaseClaim.resolve();
    await closing;
    assert.equal(target.requests.length, 1, "the claimed job was delivered");
    const done = await readAfterClose(s, job.id);
    assert.equal(done?.status, "succeeded");
  });

  test("an unanswered last attempt is put back to retrying with an attempt left, not dead", async (t) => {
    const { s, target } = await setup(t, {
      handler: () => new Promise<void>(() => undefined),
      configure: (raw) => {
        raw["operations"] = { buildReport: { max_attempts: 1 } };
      },
    });
    const job = await enqueue(s, report());
    s.service.start();
    await target.waitForRequests(1);
    await s.service.close({ graceMs: 200 });
    const requeued = await readAfterClose(s, job.id);
    assert.equal(requeued?.status, "retrying");
    assert.equal(requeued?.runAt, s.clock.now());
    assert.ok((requeued?.attempt ?? 1) < (requeued?.maxAttempts ?? 0), "one attempt is left to run");
  });
});

describe("wake-ups", () => {
  test("a job enqueued over HTTP while the dispatcher is idle is delivered without time passing", async (t) => {
    const { s, target } = await setup(t, {
      configure: (raw) => {
        raw["worker"] = { concurrency: 4, poll_ms: NEVER_POLL_MS };
      },
    });
    const t0 = s.clock.now();
    s.service.start();
    const first = await enqueue(s, welcome());
    await waitForStatus(s, first.id, "succeeded");
    // Idle now: nothing is due and the poll fallback is an hour away.
    const second = await enqueue(s, welcome());
    const [, request] = await target.waitForRequests(2);
    assert.equal(request?.headers["x-job-id"], second.id);
    await waitForStatus(s, second.id, "succeeded");
    assert.equal(s.clock.now(), t0);
  });

  test("a job put back by an admin retry is delivered without time passing", async (t) => {
    let calls = 0;
    const { s, target } = await setup(t, {
      handler: (_request, res) => reply(res, ++calls === 1 ? 404 : 204),
      configure: (raw) => {
        raw["worker"] = { concurrency: 4, poll_ms: NEVER_POLL_MS };
      },
    });
    s.service.start();
    const job = await enqueue(s, welcome());
    await waitForStatus(s, job.id, "dead");
    const retried = await s.inject({ method: "POST", url: `/jobs/${job.id}/retry`, token: await s.adminToken() });
    assert.equal(retried.statusCode, 200, retried.body);
    await target.waitForRequests(2);
    const done = await waitForStatus(s, job.id, "succeeded");
    assert.equal(done.attempt, 1);
  });

  test("after a claim for another node's work found nothing, the next one for another node's work waits for claim_gather_ms; work made here does not", async (t) => {
    let now = 0;
    const { s } = await setup(t, {
      configure: (raw) => {
        raw["worker"] = { concurrency: 4, poll_ms: NEVER_POLL_MS, claim_gather_ms: 1000 };
      },
      stopwatch: () => now,
    });
    const { store, notifier, telemetry } = s.service;
    const dispatcher = dispatcherOf(s);
    let claimsStarted = 0;
    const claimMany = store.jobClaimMany.bind(store);
    store.jobClaimMany = (params) => {
      claimsStarted++;
      return claimMany(params);
    };
    const finished: Array<() => void> = [];
    telemetry.on("claim:finished", () => finished.splice(0).forEach((resolve) => resolve()));
    /** Waits, claim by claim, until `condition` holds once a claim is back (the test's timeout is the bound). */
    const afterClaims = async (condition: () => boolean) => {
      while (!condition()) await new Promise<void>((resolve) => finished.push(resolve));
    };
    const turns = async (count: number) => {
      for (let i = 0; i < count; i++) await new Promise<void>((resolve) => setImmediate(resolve));
    };
    const listening = deferred();
    const availableListen = store.jobAvailableListen.bind(store);
    store.jobAvailableListen = async (onAvailable, onAbort) => {
      const stop = await availableListen(onAvailable, onAbort);
      listening.resolve();
      return stop;
    };

    s.service.start();
    await listening.promise;
    // Another node's work that someone else took first: the claim for it finds nothing.
    notifier.notify(s.clock.now(), "elsewhere");
    await afterClaims(() => dispatcher.gathering);
    const before = claimsStarted;
    notifier.notify(s.clock.now(), "elsewhere");
    await turns(3);
    assert.equal(claimsStarted, before, "another node's work waits for the gather");

    // Work made in this process is claimed at once, and takes what the gather waited for.
    const here = await enqueue(s, welcome());
    await waitForStatus(s, here.id, "succeeded");
    assert.ok(claimsStarted > before);
    assert.equal(dispatcher.gathering, false, "a claim that found a job ends the wait");

    // Once claim_gather_ms has passed since a wasted claim, another node's work is claimed at once.
    notifier.notify(s.clock.now(), "elsewhere");
    await afterClaims(() => dispatcher.gathering);
    // (The gather's own timer runs on the machine's clock: if it fires first, its claim is the one awaited.)
    now += 1000;
    const after = claimsStarted;
    notifier.notify(s.clock.now(), "elsewhere");
    await afterClaims(() => claimsStarted > after);
  });

  test("a delayed job is delivered once the clock passes its run_at, not before", async (t) => {
    const { s, target } = await setup(t, {
      configure: (raw) => {
        raw["worker"] = { concurrency: 4, poll_ms: NEVER_POLL_MS };
      },
    });
    const t0 = s.clock.now();
    s.service.start();
    const delayed = await enqueue(s, welcome({ delay_ms: 60_000 }));
    assert.equal(delayed.run_at, new Date(t0 + 60_000).toISOString());

    // A job due now, enqueued after it, is claimed by a claim that would have taken the delayed one too.
    const sentinel = await enqueue(s, report());
    await waitForStatus(s, sentinel.id, "succeeded");
    assert.equal((await s.service.store.jobGet({ id: delayed.id }))?.status, "pending");

    moveClockTo(s, t0 + 59_999);
    const secondSentinel = await enqueue(s, report());
    await waitForStatus(s, secondSentinel.id, "succeeded");
    assert.equal((await s.service.store.jobGet({ id: delayed.id }))?.status, "pending");
    assert.ok(
      target.requests.every((request) => request.headers["x-job-id"] !== delayed.id),
      "the delayed job was not delivered early",
    );

    moveClockTo(s, t0 + 60_000);
    const done = await waitForStatus(s, delayed.id, "succeeded");
    assert.equal(done.startedAt, t0 + 60_000);
    assert.equal(target.requests.at(-1)?.headers["x-job-id"], delayed.id);
  });
});

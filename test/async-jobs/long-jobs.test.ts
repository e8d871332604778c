/**
 * Long jobs (docs/delivery.md, "Long jobs"): a real target answers 202 with x-job-async: 1 and then calls back, over
 * the service's API, with the delivery token it was sent. Time moves only through the ManualClock; tests wait for
 * events (the target's requests, the `delivery:async` telemetry event) or the stored state a call leads to, never
 * for time to pass.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Dispatcher } from "../../src/dispatcher/dispatcher.js";
import type { Job } from "../../src/job/schemas.js";
import { LEASE_EXPIRED_ERROR, rescueExpiredLeases } from "../../src/maintenance/rescuer.js";
import type { OpqueueEvents } from "../../src/telemetry/events.js";
import { startDeliveryService, waitForJob, waitForStatus } from "../helpers/delivery.js";
import { enqueue } from "../helpers/jobs.js";
import type { TestService } from "../helpers/service.js";
import { reply, startTarget, type Target, type TargetHandler, type TargetRequest } from "../helpers/target.js";

type TestContext = { after: (fn: () => Promise<void>) => void };

/** Backoff of these tests: the first retry waits 1000 × 0.75 ms at random 0.5. */
const RETRY = { base_ms: 1000, factor: 2, max_ms: 60_000, retry_after_max_ms: 600_000 };
const FIRST_BACKOFF_MS = 750;
/** A poll fallback that never fires during a test: only events start a delivery. */
const NEVER_POLL_MS = 3_600_000;
/** The operation's timeout and the lease grace of these tests: a lease of 3 s. */
const TIMEOUT_MS = 2000;
const GRACE_MS = 1000;
/** Upper bound of a wait for an event; far above what a passing test needs. */
const WAIT_LIMIT_MS = 10_000;

/** The answer that takes an attempt asynchronously. */
const takeAsync: TargetHandler = (_request, res) => reply(res, 202, { headers: { "x-job-async": "1" } });

async function setup(
  t: TestContext,
  options: { handler?: TargetHandler; configure?: (raw: Record<string, unknown>) => void } = {},
): Promise<{ s: TestService; target: Target }> {
  const target = await startTarget(t, options.handler ?? takeAsync);
  const s = await startDeliveryService(t, {
    target,
    random: () => 0.5,
    configure: (raw) => {
      raw["retry"] = RETRY;
      raw["worker"] = { concurrency: 4, poll_ms: NEVER_POLL_MS };
      raw["lease"] = { heartbeat_ms: 5000, grace_ms: GRACE_MS, check_ms: 3_600_000 };
      raw["operations"] = { buildReport: { timeout_ms: TIMEOUT_MS } };
      options.configure?.(raw);
    },
  });
  return { s, target };
}

function dispatcherOf(s: TestService): Dispatcher {
  assert.ok(s.service.worker, "the test service has a worker");
  return s.service.worker.dispatcher;
}

/** Resolves with the next `event` that `matches`; fails after a bound. Subscribe before causing it. */
function nextEvent<E extends keyof OpqueueEvents>(
  s: TestService,
  event: E,
  matches: (payload: OpqueueEvents[E]) => boolean = () => true,
): Promise<OpqueueEvents[E]> {
  return new Promise((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => {
      settled = true;
      reject(new Error(`no ${event} event within ${WAIT_LIMIT_MS} ms`));
    }, WAIT_LIMIT_MS);
    s.service.telemetry.on(event, (payload) => {
      if (settled || !matches(payload)) return;
      settled = true;
      clearTimeout(timer);
      resolve(payload);
    });
  });
}

/** The delivery token a target request carried. */
const tokenOf = (request: TargetRequest | undefined): string =>
  String(request?.headers["authorization"]).slice("Bearer ".length);

/** A target's call on its attempt, through the service's API. */
async function callAttempt(
  s: TestService,
  request: TargetRequest | undefined,
  action: "heartbeat" | "complete" | "fail",
  payload: object = {},
) {
  const id = String(request?.headers["x-job-id"]);
  return s.inject({ method: "POST", url: `/jobs/${id}/${action}`, token: tokenOf(request), payload });
}

/** One pass of the rescuer, as a worker node runs it every `lease.check_ms`. */
function rescue(s: TestService): Promise<number> {
  const { settings, store, telemetry } = s.service;
  return rescueExpiredLeases({ settings, store, clock: s.clock, telemetry, random: () => 0.5 });
}

const report = (n = 0) => ({ operation_id: "buildReport", request: { body: { n } } });

describe("long jobs: a target that answers 202 with x-job-async: 1", () => {
  test("the job stays running, its slot is freed, and its lease runs from the 202: without a heartbeat it is rescued", async (t) => {
    const { s, target } = await setup(t);
    const handedOff = nextEvent(s, "delivery:async");
    const job = await enqueue(s, report());
    s.service.start();
    const event = await handedOff;
    assert.equal(event.jobId, job.id);
    assert.equal(event.attempt, 1);
    assert.equal(target.requests.length, 1);
    assert.equal(dispatcherOf(s).inFlightCount, 0, "the node holds the job no more: no slot, no heartbeat of its");
    const running = await s.service.store.jobGet({ id: job.id });
    assert.equal(running?.status, "running");
    assert.equal(running?.heartbeatAt, s.clock.now(), "the lease starts at the 202");
    const state = await s.service.store.jobAsyncStateGet({ id: job.id });
    assert.deepEqual(state?.accepted, { attempt: 1, startedAt: running?.startedAt, at: s.clock.now() });

    // No heartbeat for the operation's timeout plus the grace: the normal retry rules apply.
    s.clock.advance(TIMEOUT_MS + GRACE_MS);
    assert.equal(await rescue(s), 0, "the lease's whole length is not past it");
    s.clock.advance(1);
    assert.equal(await rescue(s), 1);
    const retrying = await s.service.store.jobGet({ id: job.id });
    assert.equal(retrying?.status, "retrying");
    assert.deepEqual(retrying?.result, { error_body: LEASE_EXPIRED_ERROR, terminal_reason: null });
    assert.equal(retrying?.runAt, s.clock.now() + FIRST_BACKOFF_MS);

    // Attempt 2 is delivered once due, with a token of its own; attempt 1's token cannot touch it.
    const second = nextEvent(s, "delivery:async", (e) => e.attempt === 2);
    s.clock.set(retrying?.runAt ?? 0);
    dispatcherOf(s).wake();
    await second;
    assert.deepEqual(
      target.requests.map((request) => request.headers["x-job-attempt"]),
      ["1", "2"],
    );
    assert.equal((await callAttempt(s, target.requests[0], "complete")).statusCode, 409);
    assert.equal((await callAttempt(s, target.requests[1], "complete")).statusCode, 200);
    assert.equal((await s.service.store.jobGet({ id: job.id }))?.status, "succeeded");
  });

  test("heartbeats keep it running far past its timeout and its token's exp; complete ends it succeeded", async (t) => {
    const { s, target } = await setup(t);
    const handedOff = nextEvent(s, "delivery:async");
    const job = await enqueue(s, report());
    s.service.start();
    await handedOff;
    const request = target.requests[0];
    // Ten minutes of work, a heartbeat every 2.5 s (inside the 3 s lease), progress with each.
    for (let done = 1; done <= 240; done++) {
      s.clock.advance(2500);
      const beat = await callAttempt(s, request, "heartbeat", { progress: { done, of: 240 } });
      assert.equal(beat.statusCode, 200, beat.body);
      if (done % 60 === 0) assert.equal(await rescue(s), 0, `no rescue after ${done} heartbeats`);
    }
    const progress = (await s.service.store.jobAsyncStateGet({ id: job.id }))?.progress;
    assert.deepEqual(progress, { attempt: 1, value: { done: 240, of: 240 }, at: s.clock.now() });
    const finished = nextEvent(s, "async:finished");
    const done = await callAttempt(s, request, "complete", { status_code: 200 });
    assert.equal(done.statusCode, 200, done.body);
    const ended = (done.json() as { job: Job }).job;
    assert.equal(ended.status, "succeeded");
    assert.equal(ended.attempt, 1);
    assert.deepEqual(ended.result, { status_code: 200, error_body: null, terminal_reason: null });
    assert.deepEqual(await finished, {
      jobId: job.id,
      attempt: 1,
      operationId: "buildReport",
      via: "complete",
      outcome: "succeeded",
      terminalReason: null,
      statusCode: 200,
      retryInMs: undefined,
      error: null,
    });
    assert.equal(target.requests.length, 1, "one delivery");
  });

  test("a fail with a retryable status is retried with backoff: the dispatcher wakes for attempt 2, which succeeds", async (t) => {
    let calls = 0;
    const { s, target } = await setup(t, {
      handler: (request, res) => (++calls === 1 ? void takeAsync(request, res) : reply(res, 204)),
    });
    const handedOff = nextEvent(s, "delivery:async");
    const job = await enqueue(s, report());
    s.service.start();
    await handedOff;
    s.clock.advance(100);
    const failed = await callAttempt(s, target.requests[0], "fail", { status_code: 503, error: "the encoder is busy" });
    assert.equal(failed.statusCode, 200, failed.body);
    const retrying = (failed.json() as { job: Job }).job;
    assert.equal(retrying.status, "retrying");
    assert.deepEqual(retrying.result, { status_code: 503, error_body: "the encoder is busy", terminal_reason: null });
    assert.equal(Date.parse(retrying.run_at), s.clock.now() + FIRST_BACKOFF_MS);
    // The fail notified the dispatcher: moving the clock to the run time and its timer's wake-up starts attempt 2.
    s.clock.advance(FIRST_BACKOFF_MS);
    dispatcherOf(s).wake();
    const done = await waitForStatus(s, job.id, "succeeded");
    assert.equal(done.attempt, 2);
    assert.equal(target.requests.length, 2);
  });

  test("a fail with retry never ends the job dead rejected-by-endpoint", async (t) => {
    const { s, target } = await setup(t);
    const handedOff = nextEvent(s, "delivery:async");
    const job = await enqueue(s, report());
    s.service.start();
    await handedOff;
    const failed = await callAttempt(s, target.requests[0], "fail", {
      retry: "never",
      error: "the source file is corrupt",
    });
    assert.equal(failed.statusCode, 200, failed.body);
    const dead = await s.service.store.jobGet({ id: job.id });
    assert.equal(dead?.status, "dead");
    assert.deepEqual(dead?.result, {
      error_body: "the source file is corrupt",
      terminal_reason: "rejected-by-endpoint",
    });
  });

  test("a complete that overtakes its own 202 ends the job; the hand-off then writes nothing", async (t) => {
    const { s, target } = await setup(t, {
      handler: async (request, res) => {
        // The target's worker finishes before its web handler has answered: its complete arrives first.
        const early = await callAttempt(s, request, "complete");
        assert.equal(early.statusCode, 200, early.body);
        takeAsync(request, res);
      },
    });
    const job = await enqueue(s, report());
    s.service.start();
    await waitForStatus(s, job.id, "succeeded");
    await target.waitForRequests(1);
    await waitForJob(s, job.id, () => dispatcherOf(s).inFlightCount === 0, "the hand-off to end");
    assert.equal(
      (await s.service.store.jobAsyncStateGet({ id: job.id }))?.accepted,
      null,
      "the late mark wrote nothing",
    );
    assert.equal((await s.service.store.jobGet({ id: job.id }))?.status, "succeeded");
  });

  test("a 202 without x-job-async, or another 2xx with it, is a success as the contract reads it", async (t) => {
    let calls = 0;
    const { s } = await setup(t, {
      handler: (_request, res) =>
        ++calls === 1 ? reply(res, 202) : reply(res, 200, { headers: { "x-job-async": "1" } }),
    });
    const first = await enqueue(s, report(1));
    const second = await enqueue(s, report(2));
    s.service.start();
    for (const job of [first, second]) {
      const done = await waitForStatus(s, job.id, "succeeded");
      assert.equal(done.attempt, 1);
      assert.equal((await s.service.store.jobAsyncStateGet({ id: job.id }))?.accepted, null);
    }
  });

  test("cancelling it with abort ends it at once; the target's later heartbeat and complete answer 409 job_not_running", async (t) => {
    const { s, target } = await setup(t);
    const handedOff = nextEvent(s, "delivery:async");
    const job = await enqueue(s, report());
    s.service.start();
    await handedOff;
    const cancel = await s.inject({
      method: "POST",
      url: `/jobs/${job.id}/cancel?abort=true`,
      token: await s.adminToken(),
    });
    assert.equal(cancel.statusCode, 200, cancel.body);
    assert.equal((cancel.json() as { job: Job }).job.result?.terminal_reason, "cancelled-by-admin");
    for (const action of ["heartbeat", "complete"] as const) {
      const res = await callAttempt(s, target.requests[0], action);
      assert.equal(res.statusCode, 409, res.body);
      assert.equal((res.json() as { code: string }).code, "job_not_running");
    }
  });

  test("operations.*.async_lease_ms holds an attempt taken asynchronously longer than its timeout would", async (t) => {
    const { s } = await setup(t, {
      configure: (raw) => {
        raw["operations"] = { buildReport: { timeout_ms: TIMEOUT_MS, async_lease_ms: 60_000 } };
      },
    });
    const handedOff = nextEvent(s, "delivery:async");
    const job = await enqueue(s, report());
    s.service.start();
    await handedOff;
    s.clock.advance(TIMEOUT_MS + GRACE_MS + 1);
    assert.equal(await rescue(s), 0, "the ordinary lease has passed, the asynchronous one has not");
    s.clock.advance(60_000 - (TIMEOUT_MS + GRACE_MS));
    assert.equal(await rescue(s), 1);
    assert.equal((await s.service.store.jobGet({ id: job.id }))?.status, "retrying");
  });

  test("a node shutting down leaves an attempt taken asynchronously running: the target's complete still ends it", async (t) => {
    const { s, target } = await setup(t);
    const handedOff = nextEvent(s, "delivery:async");
    const job = await enqueue(s, report());
    s.service.start();
    await handedOff;
    await dispatcherOf(s).stop({ graceMs: 0 });
    assert.equal(
      (await s.service.store.jobGet({ id: job.id }))?.status,
      "running",
      "nothing to requeue: it was handed off",
    );
    const done = await callAttempt(s, target.requests[0], "complete");
    assert.equal(done.statusCode, 200, done.body);
  });
});

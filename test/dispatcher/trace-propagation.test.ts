/**
 * docs/tracing.md, "Propagation", with OTLP export off: the `traceparent` each delivery attempt sends, as a real target
 * server receives it (and as the client library's verifier hands it to product code). Attempt 1 continues the
 * producer's trace; a retry starts a new one with the stored sampled flag; a job without a trace context sends none.
 * Time moves only through the ManualClock; the tests wait for what the target receives.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { verifyDelivery, type DeliveryContext } from "@opqueue/client";
import { ManualClock } from "../../src/clock.js";
import { parseTraceparent, type TraceContext } from "../../src/telemetry/trace-context.js";
import { waitForJob } from "../helpers/delivery.js";
import { buildReport } from "../helpers/jobs.js";
import { startTestService, TEST_DELIVERY_SECRET, type TestService } from "../helpers/service.js";
import { reply, startTarget, type Target, type TargetRequest } from "../helpers/target.js";

type TestContext = { after: (fn: () => Promise<void>) => void };

/** The producer's span, as its `traceparent` names it. */
const PRODUCER = { traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7" };
const producerTraceparent = (flags: string) => `00-${PRODUCER.traceId}-${PRODUCER.spanId}-${flags}`;
/** A poll fallback that never fires during a test: only events start a delivery. */
const NEVER_POLL_MS = 3_600_000;

/**
 * A target that answers 503 to the first `failures` requests and 204 after, verifying each delivery with the client
 * library as product code would (its contexts in `delivered`), and a service delivering to it; not started. The
 * clock starts at the real time so the client's verifier, which reads the real clock, accepts the tokens.
 */
async function setup(
  t: TestContext,
  failures = 0,
): Promise<{ s: TestService; target: Target; delivered: DeliveryContext[] }> {
  const delivered: DeliveryContext[] = [];
  const target = await startTarget(t, async (request, res) => {
    delivered.push(
      await verifyDelivery(request.headers, {
        audience: "product",
        secret: TEST_DELIVERY_SECRET,
        operationId: "buildReport",
      }),
    );
    reply(res, delivered.length <= failures ? 503 : 204);
  });
  const s = await startTestService({
    clock: new ManualClock(Date.now()),
    random: () => 0.5,
    configure: (raw) => {
      raw["target"] = { base_url: target.url, audience: "product" };
      raw["retry"] = { base_ms: 1000, factor: 2, max_ms: 60_000, retry_after_max_ms: 600_000 };
      raw["worker"] = { concurrency: 4, poll_ms: NEVER_POLL_MS };
      raw["shutdown"] = { grace_ms: 200 };
      raw["cron"] = [];
    },
  });
  t.after(() => s.close());
  return { s, target, delivered };
}

/** `POST /jobs` for buildReport, with `traceparent` when given; the job's id. */
async function enqueueTraced(s: TestService, traceparent?: string): Promise<string> {
  const res = await s.inject({
    method: "POST",
    url: "/jobs",
    token: await s.assertion(),
    payload: buildReport(),
    headers: traceparent === undefined ? {} : { traceparent },
  });
  assert.equal(res.statusCode, 201, res.body);
  return (res.json() as { job: { id: string } }).job.id;
}

/** Lets the job's retry come due (the clock to its run_at) and waits for the target's request of that attempt. */
async function nextAttempt(s: TestService, target: Target, jobId: string, attempt: number): Promise<TargetRequest> {
  const waiting = await waitForJob(
    s,
    jobId,
    (job) => job.status === "retrying" && job.attempt === attempt - 1,
    "retrying",
  );
  s.clock.set(waiting.runAt);
  s.service.worker?.dispatcher.wake();
  const requests = await target.waitForRequests(attempt);
  return requests[attempt - 1] as TargetRequest;
}

/** The `traceparent` a request carried, parsed; fails the test when it has none or a malformed one. */
function sentContext(request: TargetRequest): TraceContext {
  const header = request.headers["traceparent"];
  assert.equal(typeof header, "string", "the delivery carries a traceparent");
  assert.match(header as string, /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/);
  const context = parseTraceparent(header);
  assert.ok(context, `a valid traceparent: ${String(header)} (neither id all zeros)`);
  return context;
}

describe("traceparent on delivery, OTLP export off", () => {
  test("attempt 1 continues the producer's trace: its trace id, a new parent-id, the stored flags", async (t) => {
    const { s, target, delivered } = await setup(t);
    const jobId = await enqueueTraced(s, producerTraceparent("01"));
    s.service.start();
    // Succeeded: the target's handler, and so the client's verifier, have seen the request.
    await waitForJob(s, jobId, (job) => job.status === "succeeded", "succeeded");
    const [request] = target.requests;
    assert.ok(request);
    const sent = sentContext(request);
    assert.equal(sent.traceId, PRODUCER.traceId);
    assert.notEqual(sent.spanId, PRODUCER.spanId, "the delivery's own span id, not the producer's");
    assert.equal(sent.flags, "01");
    assert.equal(
      delivered[0]?.traceparent,
      request.headers["traceparent"],
      "the client's delivery context reads the header",
    );
  });

  test("a retry starts a new trace: another trace id and parent-id, and of the stored flags the sampled bit alone", async (t) => {
    const { s, target } = await setup(t, 1);
    // 03: sampled, and Level 2's "random trace id", which describes the producer's trace, not a new one.
    const jobId = await enqueueTraced(s, producerTraceparent("03"));
    s.service.start();
    const [first] = await target.waitForRequests(1);
    assert.ok(first);
    const second = await nextAttempt(s, target, jobId, 2);
    assert.equal(second.headers["x-job-attempt"], "2");
    const [attempt1, attempt2] = [sentContext(first), sentContext(second)];
    assert.equal(attempt1.traceId, PRODUCER.traceId);
    assert.equal(attempt1.flags, "03", "attempt 1 keeps the stored flags as they are");
    assert.notEqual(attempt2.traceId, PRODUCER.traceId, "attempt 2 starts a new trace");
    assert.notEqual(attempt2.spanId, attempt1.spanId);
    assert.notEqual(attempt2.spanId, PRODUCER.spanId);
    assert.equal(attempt2.flags, "01");
  });

  test("an unsampled producer's job stays unsampled on every attempt", async (t) => {
    const { s, target } = await setup(t, 1);
    const jobId = await enqueueTraced(s, producerTraceparent("00"));
    s.service.start();
    const [first] = await target.waitForRequests(1);
    assert.ok(first);
    const second = await nextAttempt(s, target, jobId, 2);
    assert.deepEqual([sentContext(first).flags, sentContext(second).flags], ["00", "00"]);
    assert.equal(sentContext(first).traceId, PRODUCER.traceId);
  });

  test("a job enqueued without a traceparent (or with an invalid one) is delivered without one, on every attempt", async (t) => {
    const { s, target, delivered } = await setup(t, 2);
    const plain = await enqueueTraced(s);
    const invalid = await enqueueTraced(s, `00-${"0".repeat(32)}-${PRODUCER.spanId}-01`);
    s.service.start();
    const waiting = await Promise.all(
      [plain, invalid].map((id) => waitForJob(s, id, (job) => job.status === "retrying", "retrying")),
    );
    s.clock.set(Math.max(...waiting.map((job) => job.runAt)));
    s.service.worker?.dispatcher.wake();
    await Promise.all(
      [plain, invalid].map((id) => waitForJob(s, id, (job) => job.status === "succeeded", "succeeded")),
    );
    assert.deepEqual(target.requests.map((request) => request.headers["x-job-attempt"]).sort(), ["1", "1", "2", "2"]);
    for (const request of target.requests) {
      assert.equal(
        request.headers["traceparent"],
        undefined,
        `attempt ${String(request.headers["x-job-attempt"])} sends none`,
      );
    }
    assert.ok(delivered.every((context) => context.traceparent === undefined));
  });

  test("every attempt of many jobs sends a span id of its own", async (t) => {
    const { s, target } = await setup(t);
    for (let i = 0; i < 20; i++) await enqueueTraced(s, producerTraceparent("01"));
    s.service.start();
    const requests = await target.waitForRequests(20);
    const spanIds = new Set(requests.map((request) => sentContext(request).spanId));
    assert.equal(spanIds.size, 20);
  });
});

/**
 * docs/tracing.md, "Spans": with `telemetry.otlp` set, a trace seen end to end by an OTLP receiver (test/helpers/
 * otlp-receiver.ts). A producer enqueues over real HTTP with a `traceparent`, the real dispatcher delivers to a real
 * target server, and the receiver gets the enqueue span and the delivery span in the producer's trace, the delivery
 * span's id being the parent-id the target saw; a retry's span starts a new trace linked to the producer's. Spans are
 * exported when the test flushes the tracer (or the service closes): waits are for what the receiver gets, never time.
 */
import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";
import { parseTraceparent, type TraceContext } from "../../src/telemetry/trace-context.js";
import type { Tracing } from "../../src/telemetry/tracing.js";
import { startDeliveryService, waitForJob } from "../helpers/delivery.js";
import { buildReport } from "../helpers/jobs.js";
import {
  OTLP_SPAN_KIND,
  OTLP_STATUS,
  startOtlpReceiver,
  type OtlpReceiver,
  type ReceivedSpan,
} from "../helpers/otlp-receiver.js";
import type { TestService } from "../helpers/service.js";
import { reply, startTarget, type Target, type TargetRequest } from "../helpers/target.js";

type TestContext = { after: (fn: () => Promise<void>) => void };

/** The producer's span, as its `traceparent` names it. */
const PRODUCER = { traceId: "0af7651916cd43dd8448eb211c80319c", spanId: "b7ad6b7169203331" };
const producerTraceparent = (flags = "01") => `00-${PRODUCER.traceId}-${PRODUCER.spanId}-${flags}`;
/** A poll fallback that never fires during a test: only events start a delivery. */
const NEVER_POLL_MS = 3_600_000;

interface Setup {
  s: TestService;
  target: Target;
  receiver: OtlpReceiver;
  /** The API's address: the producer enqueues over real HTTP. */
  apiUrl: string;
}

/** A receiver, a target answering 503 to its first `failures` requests then 204, and a service exporting spans. */
async function setup(t: TestContext, failures = 0): Promise<Setup> {
  const receiver = await startOtlpReceiver(t);
  let requests = 0;
  const target = await startTarget(t, (_request, res) => reply(res, ++requests <= failures ? 503 : 204));
  const s = await startDeliveryService(t, {
    target,
    random: () => 0.5,
    configure: (raw) => {
      raw["telemetry"] = { otlp: { endpoint: receiver.endpoint, service_name: "opqueue-test" } };
      raw["retry"] = { base_ms: 1000, factor: 2, max_ms: 60_000, retry_after_max_ms: 600_000 };
      raw["worker"] = { concurrency: 4, poll_ms: NEVER_POLL_MS };
      raw["cron"] = [];
    },
  });
  await s.service.app.listen({ host: "127.0.0.1", port: 0 });
  const { port } = s.service.app.server.address() as AddressInfo;
  return { s, target, receiver, apiUrl: `http://127.0.0.1:${port}` };
}

function tracingOf(s: TestService): Tracing {
  assert.ok(s.service.tracing, "telemetry.otlp is configured, so the service traces");
  return s.service.tracing;
}

/** POSTs `body` to `path` of the API over HTTP as a producer would, with `headers`; the status and JSON answer. */
async function post(
  { s, apiUrl }: Setup,
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${apiUrl}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${await s.assertion()}`, ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

/** Enqueues one buildReport job over HTTP, with `traceparent` when given; its id. */
async function enqueueOverHttp(setup: Setup, traceparent?: string): Promise<string> {
  const { status, json } = await post(setup, "/jobs", buildReport(), traceparent === undefined ? {} : { traceparent });
  assert.equal(status, 201, JSON.stringify(json));
  return (json["job"] as { id: string }).id;
}

/** The trace context the target saw in request `request`. */
function seenBy(request: TargetRequest | undefined): TraceContext {
  const context = parseTraceparent(request?.headers["traceparent"]);
  assert.ok(context, "the delivery carried a valid traceparent");
  return context;
}

/** The one span matching `predicate` among `spans`. */
function only(spans: ReceivedSpan[], predicate: (span: ReceivedSpan) => boolean, what: string): ReceivedSpan {
  const found = spans.filter(predicate);
  assert.equal(found.length, 1, `exactly one ${what}; got ${found.length}`);
  return found[0] as ReceivedSpan;
}

const isDelivery = (jobId: string, attempt: number) => (span: ReceivedSpan) =>
  span.name === "deliver buildReport" &&
  span.attributes["opqueue.job.id"] === jobId &&
  span.attributes["opqueue.job.attempt"] === attempt;

describe("spans exported over OTLP", () => {
  test("a trace end to end: the enqueue span and the delivery span in the producer's trace, the delivery span's id the parent-id the target saw", async (t) => {
    const setupDone = await setup(t);
    const { s, target, receiver } = setupDone;
    const jobId = await enqueueOverHttp(setupDone, producerTraceparent());
    s.service.start();
    await waitForJob(s, jobId, (job) => job.status === "succeeded", "succeeded");
    await tracingOf(s).flush();
    const spans = await receiver.waitForSpans(
      (received) => received.some(isDelivery(jobId, 1)) && received.some((span) => span.name === "POST /jobs"),
      "the enqueue and delivery spans",
    );

    const enqueueSpan = only(spans, (span) => span.name === "POST /jobs", "enqueue span");
    assert.equal(enqueueSpan.kind, OTLP_SPAN_KIND.server);
    assert.equal(enqueueSpan.traceId, PRODUCER.traceId);
    assert.equal(enqueueSpan.parentSpanId, PRODUCER.spanId, "a child of the producer's span");
    assert.equal(enqueueSpan.attributes["opqueue.job.id"], jobId);
    assert.equal(enqueueSpan.attributes["opqueue.operation_id"], "buildReport");
    assert.equal(enqueueSpan.attributes["opqueue.enqueue.outcome"], "created");
    assert.equal(enqueueSpan.attributes["http.response.status_code"], 201);
    assert.equal(enqueueSpan.attributes["http.route"], "/jobs");
    assert.equal(enqueueSpan.resource["service.name"], "opqueue-test");

    const sent = seenBy(target.requests[0]);
    const deliverySpan = only(spans, isDelivery(jobId, 1), "delivery span");
    assert.equal(deliverySpan.kind, OTLP_SPAN_KIND.client);
    assert.equal(deliverySpan.traceId, PRODUCER.traceId);
    assert.equal(deliverySpan.parentSpanId, PRODUCER.spanId);
    assert.equal(deliverySpan.spanId, sent.spanId, "the parent-id the target saw names the delivery span");
    assert.equal(sent.traceId, PRODUCER.traceId);
    assert.equal(deliverySpan.attributes["opqueue.operation_id"], "buildReport");
    assert.equal(deliverySpan.attributes["url.full"], `${target.url}/reports`);
    assert.equal(deliverySpan.attributes["http.request.method"], "POST");
    assert.equal(deliverySpan.attributes["http.response.status_code"], 204);
    assert.equal(deliverySpan.attributes["opqueue.delivery.outcome"], "succeeded");
    assert.equal(deliverySpan.status.code, OTLP_STATUS.unset);

    const claimSpan = only(spans, (span) => span.name === "claim", "claim span");
    assert.equal(claimSpan.kind, OTLP_SPAN_KIND.internal);
    assert.equal(claimSpan.parentSpanId, "", "a claim is a trace of its own");
    assert.equal(claimSpan.attributes["opqueue.claim.jobs"], 1);
    assert.deepEqual(receiver.rejected, []);
  });

  test("a retry's delivery span starts a new trace, the one the target saw, linked to the producer's context", async (t) => {
    const setupDone = await setup(t, 1);
    const { s, target, receiver } = setupDone;
    const jobId = await enqueueOverHttp(setupDone, producerTraceparent());
    s.service.start();
    const waiting = await waitForJob(s, jobId, (job) => job.status === "retrying", "retrying");
    s.clock.set(waiting.runAt);
    s.service.worker?.dispatcher.wake();
    await waitForJob(s, jobId, (job) => job.status === "succeeded", "succeeded");
    await tracingOf(s).flush();
    const spans = await receiver.waitForSpans(
      (received) => received.some(isDelivery(jobId, 1)) && received.some(isDelivery(jobId, 2)),
      "both attempts' delivery spans",
    );

    const first = only(spans, isDelivery(jobId, 1), "attempt 1's span");
    assert.equal(first.traceId, PRODUCER.traceId);
    assert.equal(first.attributes["http.response.status_code"], 503);
    assert.equal(first.attributes["opqueue.delivery.outcome"], "retrying");
    assert.equal(first.attributes["error.type"], "503");
    assert.equal(first.status.code, OTLP_STATUS.error);

    const sent = seenBy(target.requests[1]);
    const retry = only(spans, isDelivery(jobId, 2), "attempt 2's span");
    assert.notEqual(retry.traceId, PRODUCER.traceId, "a new trace");
    assert.equal(retry.traceId, sent.traceId, "the trace the target saw");
    assert.equal(retry.spanId, sent.spanId);
    assert.equal(retry.parentSpanId, "", "the retry's span is its trace's root");
    assert.deepEqual(retry.links, [{ traceId: PRODUCER.traceId, spanId: PRODUCER.spanId }]);
    assert.equal(retry.attributes["opqueue.delivery.outcome"], "succeeded");
  });

  test("a batch enqueue is one server span listing its jobs; a refused request is a span with its code", async (t) => {
    const setupDone = await setup(t);
    const { s, receiver } = setupDone;
    const batch = await post(
      setupDone,
      "/jobs/batch",
      { jobs: [buildReport(), { operation_id: "noSuchOperation", request: {} }] },
      {
        traceparent: producerTraceparent(),
      },
    );
    assert.equal(batch.status, 200);
    const [created] = batch.json["results"] as Array<{ id?: string }>;
    assert.ok(created?.id);
    const refused = await fetch(`${setupDone.apiUrl}/jobs`, {
      method: "POST",
      headers: { "content-type": "application/json", traceparent: producerTraceparent() },
      body: JSON.stringify(buildReport()),
    });
    assert.equal(refused.status, 401);
    await tracingOf(s).flush();
    const spans = await receiver.waitForSpans(
      (received) =>
        received.some((span) => span.name === "POST /jobs/batch") &&
        received.some((span) => span.name === "POST /jobs"),
      "the batch's and the refused request's spans",
    );

    const batchSpan = only(spans, (span) => span.name === "POST /jobs/batch", "batch span");
    assert.equal(batchSpan.parentSpanId, PRODUCER.spanId);
    assert.deepEqual(batchSpan.attributes["opqueue.job.ids"], [created.id]);
    assert.deepEqual(batchSpan.attributes["opqueue.operation_ids"], ["buildReport"]);
    assert.deepEqual(batchSpan.attributes["opqueue.enqueue.outcomes"], ["created"]);
    assert.equal(batchSpan.attributes["opqueue.batch.refused"], 1);

    const refusedSpan = only(spans, (span) => span.name === "POST /jobs", "refused request's span");
    assert.equal(refusedSpan.traceId, PRODUCER.traceId);
    assert.equal(refusedSpan.attributes["http.response.status_code"], 401);
    assert.equal(refusedSpan.attributes["opqueue.enqueue.outcome"], "invalid_assertion");
    assert.equal(refusedSpan.status.code, OTLP_STATUS.unset, "a 4xx is the caller's mistake, not the server's failure");
  });

  test("a job without a trace context sends no traceparent; its delivery span is a trace of its own", async (t) => {
    const setupDone = await setup(t);
    const { s, target, receiver } = setupDone;
    const jobId = await enqueueOverHttp(setupDone);
    s.service.start();
    await waitForJob(s, jobId, (job) => job.status === "succeeded", "succeeded");
    assert.equal(target.requests[0]?.headers["traceparent"], undefined);
    await tracingOf(s).flush();
    const spans = await receiver.waitForSpans((received) => received.some(isDelivery(jobId, 1)), "the delivery span");
    const deliverySpan = only(spans, isDelivery(jobId, 1), "delivery span");
    assert.equal(deliverySpan.parentSpanId, "");
    assert.deepEqual(deliverySpan.links, []);
    const enqueueSpan = only(spans, (span) => span.name === "POST /jobs", "enqueue span");
    assert.equal(enqueueSpan.parentSpanId, "", "an enqueue without traceparent starts a trace");
    assert.notEqual(deliverySpan.traceId, enqueueSpan.traceId, "the job kept no trace context to join");
  });

  test("an unsampled producer's trace is propagated but not exported, on its first attempt and its retries", async (t) => {
    const setupDone = await setup(t, 1);
    const { s, target, receiver } = setupDone;
    const jobId = await enqueueOverHttp(setupDone, producerTraceparent("00"));
    s.service.start();
    const waiting = await waitForJob(s, jobId, (job) => job.status === "retrying", "retrying");
    s.clock.set(waiting.runAt);
    s.service.worker?.dispatcher.wake();
    await waitForJob(s, jobId, (job) => job.status === "succeeded", "succeeded");
    const [first, second] = [seenBy(target.requests[0]), seenBy(target.requests[1])];
    assert.equal(first.traceId, PRODUCER.traceId);
    assert.deepEqual([first.flags, second.flags], ["00", "00"]);
    await tracingOf(s).flush();
    // The claims are sampled (they start traces of their own): once both are in, so is whatever else was exported.
    const spans = await receiver.waitForSpans(
      (received) => received.filter((span) => span.name === "claim").length >= 2,
      "both claims' spans",
    );
    const traced = spans.filter((span) => span.traceId === PRODUCER.traceId || span.traceId === second.traceId);
    assert.deepEqual(
      traced.map((span) => span.name),
      [],
      "no span of the unsampled trace, nor of its retry's",
    );
  });

  test("closing the service exports the spans still waiting in the batch", async (t) => {
    const setupDone = await setup(t);
    const { s, receiver } = setupDone;
    const jobId = await enqueueOverHttp(setupDone, producerTraceparent());
    s.service.start();
    await waitForJob(s, jobId, (job) => job.status === "succeeded", "succeeded");
    // No flush: the batch processor would export these after its 5 s delay; closing must not wait for it, nor lose them.
    await s.service.close();
    const names = receiver.spans.map((span) => span.name).sort();
    assert.deepEqual(names, ["POST /jobs", "claim", "deliver buildReport"]);
  });
});

/**
 * The pure parts of tracing (docs/tracing.md): new span and trace ids, the flags a new trace keeps, and the
 * `traceparent` a delivery sends with no tracer on, attempt by attempt.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { continuesProducerTrace, deliveryTraceparent } from "../../src/telemetry/delivery-trace.js";
import { newSpanId, newTraceId, parseTraceparent, sampledFlagOnly } from "../../src/telemetry/trace-context.js";

const STORED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

test("new ids are lower-case hex of the W3C lengths, never all zeros, and do not repeat", () => {
  // Enough draws to refill the pool of random bytes several times over.
  const spanIds = Array.from({ length: 2000 }, newSpanId);
  const traceIds = Array.from({ length: 1000 }, newTraceId);
  for (const id of spanIds) assert.match(id, /^(?!0{16})[0-9a-f]{16}$/);
  for (const id of traceIds) assert.match(id, /^(?!0{32})[0-9a-f]{32}$/);
  assert.equal(new Set(spanIds).size, spanIds.length);
  assert.equal(new Set(traceIds).size, traceIds.length);
});

test("a new trace keeps the sampled bit of the flags alone", () => {
  assert.deepEqual(["00", "01", "02", "03", "ff", "fe"].map(sampledFlagOnly), ["00", "01", "00", "01", "01", "00"]);
});

test("attempt 1 continues the stored trace, later attempts start new ones; a job without trace context sends none", () => {
  assert.equal(continuesProducerTrace(1), true);
  assert.equal(continuesProducerTrace(2), false);
  assert.equal(deliveryTraceparent({ traceparent: null, attempt: 1 }), undefined);

  const first = parseTraceparent(deliveryTraceparent({ traceparent: STORED, attempt: 1 }));
  assert.ok(first);
  assert.equal(first.traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
  assert.notEqual(first.spanId, "00f067aa0ba902b7");
  assert.equal(first.flags, "01");

  const retry = parseTraceparent(deliveryTraceparent({ traceparent: STORED.replace(/01$/, "03"), attempt: 3 }));
  assert.ok(retry);
  assert.notEqual(retry.traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
  assert.equal(retry.flags, "01");
});

test("a stored value that is not a valid traceparent sends none", () => {
  assert.equal(deliveryTraceparent({ traceparent: "garbage", attempt: 1 }), undefined);
});

/**
 * The trace context a delivery sends (docs/tracing.md, "Propagation"), and the hook through which the OTLP tracer
 * (src/telemetry/otlp.ts, loaded only when `telemetry.otlp` is configured) wraps each attempt in a span.
 *
 * - A job without a trace context sends no `traceparent`, and this costs it one null check.
 * - Attempt 1 continues the producer's trace: the stored trace id, a new span id (the delivery span's) as parent-id,
 *   the stored flags.
 * - A later attempt starts a new trace (new trace id and span id, the stored `sampled` flag): a retry hours later would
 *   otherwise stretch the producer's trace for as long as the job keeps failing, and a trace's duration would say
 *   nothing about the request that started it. With OTLP export on, the retry's delivery span carries a span link to
 *   the stored context, which keeps the two connected.
 */
import type { JobRow } from "../job/job.js";
import { formatTraceparent, newSpanId, newTraceId, parseTraceparent, sampledFlagOnly } from "./trace-context.js";

/** Whether attempt number `attempt` continues the producer's trace (the first does) or starts a new, linked one. */
export function continuesProducerTrace(attempt: number): boolean {
  return attempt <= 1;
}

/**
 * The `traceparent` a delivery of `job` sends when no tracer is on (its span id then names no recorded span, but the
 * target's spans still join the trace); undefined for a job without trace context.
 */
export function deliveryTraceparent(job: Pick<JobRow, "traceparent" | "attempt">): string | undefined {
  if (job.traceparent === null) return undefined;
  const stored = parseTraceparent(job.traceparent);
  if (stored === undefined) return undefined;
  return continuesProducerTrace(job.attempt)
    ? formatTraceparent({ traceId: stored.traceId, spanId: newSpanId(), flags: stored.flags })
    : formatTraceparent({ traceId: newTraceId(), spanId: newSpanId(), flags: sampledFlagOnly(stored.flags) });
}

/** How an attempt ended, as its span records it. */
export interface DeliveryEnding {
  /** The outcome written; `not-sent` for an attempt this process could not send, which is given back uncounted. */
  outcome: "succeeded" | "retrying" | "dead" | "not-sent";
  /** The target's status, when it answered. */
  statusCode: number | undefined;
  /** What went wrong (the start of `error_body`); null for a success. */
  error: string | null;
  terminalReason: string | null;
}

/** The span of one delivery attempt. */
export interface DeliverySpan {
  /** The `traceparent` the attempt sends, naming this span; undefined for a job without trace context. */
  readonly traceparent: string | undefined;
  /** The request is about to go: its method and URL (origin, path and query). */
  sending(method: string, url: string): void;
  /** The attempt's outcome is decided; ends the span. */
  end(ending: DeliveryEnding): void;
}

/** Starts a span for each delivery attempt; the dispatcher has one only while OTLP export is on. */
export interface DeliveryTracer {
  /** The span of the attempt of `job` about to start (a claimed job: its `attempt` is this attempt's number). */
  start(job: JobRow): DeliverySpan;
}

/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` header a producer may send with an
 * enqueue, kept with the job and sent on with its deliveries (docs/tracing.md). A header that does not parse is
 * ignored, as the recommendation says a receiver must: the enqueue goes on without a trace.
 */

/** version "-" trace-id "-" parent-id "-" flags, lower-case hex; a later version may append "-" and more. */
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** The parts of a trace context. */
export interface TraceContext {
  traceId: string;
  /** The caller's span: the parent of whatever continues the trace. */
  spanId: string;
  flags: string;
}

/** Parses a `traceparent` header; undefined when absent or not a valid one. */
export function parseTraceparent(header: string | string[] | undefined): TraceContext | undefined {
  if (typeof header !== "string") return undefined;
  const match = TRACEPARENT.exec(header.trim());
  if (!match) return undefined;
  const [, version, traceId, spanId, flags, rest] = match as unknown as [string, string, string, string, string, string | undefined];
  // Version ff is forbidden; version 00 has exactly four fields; all-zero ids are invalid.
  if (version === "ff" || (version === "00" && rest !== undefined)) return undefined;
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  return { traceId, spanId, flags };
}

/** A trace context as a version-00 `traceparent` header. */
export function formatTraceparent(context: TraceContext): string {
  return `00-${context.traceId}-${context.spanId}-${context.flags}`;
}

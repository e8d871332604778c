/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` header a producer may send with an
 * enqueue, kept with the job and carried on by its deliveries (docs/tracing.md). A header that does not parse is
 * ignored, as the recommendation says a receiver must: the enqueue goes on without a trace.
 *
 * Also the ids of the spans opqueue starts. They come from a pool of random bytes refilled 4 KiB at a time, so a
 * delivery's new span id costs a slice of a buffer and a hex string, not a call into the system's random source.
 */
import { randomFillSync } from "node:crypto";

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
  const [, version, traceId, spanId, flags, rest] = match as unknown as [
    string,
    string,
    string,
    string,
    string,
    string | undefined,
  ];
  // Version ff is forbidden; version 00 has exactly four fields; all-zero ids are invalid.
  if (version === "ff" || (version === "00" && rest !== undefined)) return undefined;
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  return { traceId, spanId, flags };
}

/** A trace context as a version-00 `traceparent` header. */
export function formatTraceparent(context: TraceContext): string {
  return `00-${context.traceId}-${context.spanId}-${context.flags}`;
}

/** Whether `flags` (two hex digits) have the `sampled` bit set. */
export function isSampled(flags: string): boolean {
  return (Number.parseInt(flags, 16) & 1) === 1;
}

/**
 * The `sampled` bit of `flags` alone: what a new trace started from another one keeps. The other bits (such as
 * Level 2's "random trace id") describe the trace they came with, not a new one.
 */
export function sampledFlagOnly(flags: string): string {
  return isSampled(flags) ? "01" : "00";
}

/** Bytes drawn from the system's random source at once: 4 KiB make 256 span ids or 128 trace ids per refill. */
const POOL_BYTES = 4096;
const pool = Buffer.allocUnsafe(POOL_BYTES);
let poolOffset = POOL_BYTES;

/** `bytes` random bytes as lower-case hex, never all zeros (an all-zero id is invalid). */
function randomHex(bytes: number): string {
  for (;;) {
    if (poolOffset + bytes > POOL_BYTES) {
      randomFillSync(pool);
      poolOffset = 0;
    }
    const start = poolOffset;
    poolOffset += bytes;
    for (let i = start; i < start + bytes; i++) {
      if (pool[i] !== 0) return pool.toString("hex", start, start + bytes);
    }
    // All zeros: 1 chance in 2^64 for a span id; draw again rather than ever send an invalid id.
  }
}

/** A new random trace id: 32 lower-case hex digits, not all zero. */
export function newTraceId(): string {
  return randomHex(16);
}

/** A new random span id: 16 lower-case hex digits, not all zero. */
export function newSpanId(): string {
  return randomHex(8);
}

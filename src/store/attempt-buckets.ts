/**
 * The dashboard's chart of finished attempts: counts kept per minute by both engines, read back in whole-minute
 * buckets.
 */
import type { AttemptBucket } from "./store.js";

/** The width of the attempt counts behind `attemptBuckets`. */
export const ATTEMPT_COUNT_MS = 60_000;

/** `attemptBuckets` can only answer in whole minutes, the width of the counts it reads. */
export function requireWholeMinutes(params: { since: number; bucketMs: number }): void {
  if (params.since % ATTEMPT_COUNT_MS !== 0 || params.bucketMs <= 0 || params.bucketMs % ATTEMPT_COUNT_MS !== 0) {
    throw new RangeError(`attempt buckets are whole minutes: since ${params.since}, bucketMs ${params.bucketMs}`);
  }
}

/** Turns per-slot counts into every bucket from `since` to `now`, zeros included (shared by the engines). */
export function toBuckets(options: {
  since: number;
  bucketMs: number;
  now: number;
  rows: Array<{ slot: number | string; outcome: string; count: number | string }>;
}): AttemptBucket[] {
  // Every bucket that has begun, the current (partial) one included.
  const slots = Math.max(1, Math.floor((options.now - options.since) / options.bucketMs) + 1);
  const buckets: AttemptBucket[] = Array.from({ length: slots }, (_, i) => ({
    start: options.since + i * options.bucketMs,
    succeeded: 0,
    retrying: 0,
    dead: 0,
    cancelled: 0,
  }));
  for (const row of options.rows) {
    const bucket = buckets[Math.floor(Number(row.slot))];
    if (
      bucket &&
      (row.outcome === "succeeded" ||
        row.outcome === "retrying" ||
        row.outcome === "dead" ||
        row.outcome === "cancelled")
    ) {
      bucket[row.outcome] += Number(row.count);
    }
  }
  return buckets;
}

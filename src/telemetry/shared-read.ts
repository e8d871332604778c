/**
 * A read of the database that many callers share: the counts behind `/stats` and `/metrics`. Counting is a scan
 * (about half a second for 1,000,000 jobs on PostgreSQL), and every open dashboard asks for it every few seconds.
 *
 * Callers that ask while a read is under way wait for that read. A finished read that took `minCostMs` or more is
 * served again while its age is under `ageFactor` times what it took (and under `maxAgeMs`): with a factor of 10, a
 * read of 500 ms is reused for 5 s. However many callers there are, an expensive read then keeps a connection busy at
 * most 1/(ageFactor + 1) of the time; a cheap one is never reused, so a small database is always counted afresh.
 * A failed read is never reused.
 */

export interface SharedReadOptions {
  /** A result stays servable for this many times its read's duration. */
  ageFactor: number;
  /** And never longer than this. */
  maxAgeMs: number;
  /** A read quicker than this is not reused at all. */
  minCostMs: number;
  /** Milliseconds on a monotonic clock; `performance.now` unless a test drives it. Durations are real costs. */
  now?: () => number;
}

/**
 * For counts of jobs: reused for up to 10 times their cost when they took 250 ms or more (never past 30 s), so
 * counting a large database takes at most about a tenth of one connection's time, and a small one (a count of a few
 * ms, or a few tens when the machine is busy) is always counted afresh.
 */
export const COUNTS_READ: SharedReadOptions = { ageFactor: 10, maxAgeMs: 30_000, minCostMs: 250 };

/** Wraps `read` so concurrent and closely following calls share one read (see the top of this file). */
export function sharedRead<T>(read: () => Promise<T>, options: SharedReadOptions): () => Promise<T> {
  const now = options.now ?? (() => performance.now());
  let inFlight: Promise<T> | undefined;
  let last: { value: T; finishedAt: number; servableMs: number } | undefined;
  return () => {
    if (last) {
      // A clock a test moved back ends the reuse rather than stretching it.
      const age = now() - last.finishedAt;
      if (age >= 0 && age < last.servableMs) return Promise.resolve(last.value);
    }
    if (inFlight) return inFlight;
    const startedAt = now();
    const current = read().then((value) => {
      const finishedAt = now();
      const costMs = finishedAt - startedAt;
      const servableMs = costMs < options.minCostMs ? 0 : Math.min(options.maxAgeMs, options.ageFactor * costMs);
      last = { value, finishedAt, servableMs };
      return value;
    });
    inFlight = current;
    const settled = () => {
      if (inFlight === current) inFlight = undefined;
    };
    current.then(settled, settled);
    return current;
  };
}

/**
 * The retention cleaner (docs/delivery.md, "Retention"): deletes terminal jobs whose `finished_at` is older than
 * `retention.terminal_days`, in bounded batches so no single statement holds the database for long (but none an
 * idempotency key still answers with), and forgets cron ticks that can never fire again, the dashboard's attempt counts
 * older than a day, and idempotency keys whose window has passed.
 */
import type { Config } from "../config.js";
import type { UpkeepStore } from "../store/store.js";

/** Jobs deleted per statement. */
export const CLEAN_BATCH = 1000;
/** The cleaner runs at least this often. */
export const CLEAN_INTERVAL_MS = 15 * 60 * 1000;
/** Cron ticks are remembered this long: far longer than any clock skew between nodes. */
const CRON_TICK_MEMORY_MS = 24 * 3600 * 1000;
/** Attempt counts per minute are kept this long; the dashboard charts the last hour. */
const ATTEMPT_COUNT_MEMORY_MS = 24 * 3600 * 1000;
const DAY_MS = 24 * 3600 * 1000;

/** What retention deletes: the store's upkeep without the lease rescue's and expiry's reads. */
type RetentionStore = Omit<UpkeepStore, "jobListExpired" | "jobExpireMany">;

/** One pass of the cleaner; returns how many jobs it deleted. Ages are on the store's clock. */
export async function cleanFinishedJobs(options: { config: Config; store: RetentionStore }): Promise<number> {
  const { config, store } = options;
  await store.cronTickDeleteMany({ olderThanMs: CRON_TICK_MEMORY_MS });
  await store.attemptCountDeleteMany({ olderThanMs: ATTEMPT_COUNT_MEMORY_MS });
  await store.rateBucketDeleteMany();
  while ((await store.idempotencyKeyDeleteMany({ limit: CLEAN_BATCH })) === CLEAN_BATCH) {
    await new Promise((resolve) => setImmediate(resolve));
  }
  const days = config.retention.terminal_days;
  if (days === null) return 0;
  const olderThanMs = days * DAY_MS;
  let total = 0;
  for (;;) {
    const deleted = await store.jobDeleteFinishedMany({ olderThanMs, limit: CLEAN_BATCH });
    total += deleted;
    if (deleted < CLEAN_BATCH) return total;
    // Let requests in between batches.
    await new Promise((resolve) => setImmediate(resolve));
  }
}

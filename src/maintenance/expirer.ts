/**
 * The expirer (docs/api.md, "Expiry"): a waiting job whose expiry has passed ends `cancelled` with terminal reason
 * `expired`. Claims never start such a job whether or not this has run yet (they skip expired jobs in the same
 * statement that takes them), so this pass only makes the end visible, and releases the job's dedupe key. Its write
 * is conditional on the job still waiting: a claim that took the job first wins, and on several nodes each job ends
 * once.
 */
import type { UpkeepStore } from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";

/** Jobs ended per statement. */
const BATCH = 500;

/** One pass: ends every waiting job past its expiry, in batches; returns how many. */
export async function expireJobs(options: {
  store: Pick<UpkeepStore, "jobExpireMany">;
  telemetry: Telemetry;
}): Promise<number> {
  let total = 0;
  for (;;) {
    const expired = await options.store.jobExpireMany({ limit: BATCH });
    for (const job of expired) options.telemetry.emit("job:expired", { jobId: job.id, operationId: job.operationId });
    total += expired.length;
    if (expired.length < BATCH) return total;
  }
}

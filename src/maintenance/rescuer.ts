/**
 * The lease rescuer (CONTRACT §7): a running job whose last heartbeat is older than its operation's timeout plus
 * `lease.grace_ms` belonged to a node that died (or lost its database). It is retried with backoff, or ends dead
 * `exhausted` when out of attempts. The write is conditional like any outcome, so it is safe on several nodes.
 */
import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import { retrySettingsFor } from "../dispatcher/dispatcher.js";
import { decideAttempt } from "../job/retry-policy.js";
import type { JobOutcome, LeaseLimits, Store } from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";

/** The `error_body` of a rescued attempt. */
export const LEASE_EXPIRED_ERROR = "lease expired: outcome unknown";

/** Most jobs rescued in one pass. */
const BATCH = 200;

/** How long each operation's running jobs may go without a heartbeat: its timeout plus the lease grace. */
export function leaseLimits(config: Config): LeaseLimits {
  const byOperation: Record<string, number> = {};
  for (const [operationId, override] of Object.entries(config.operations)) {
    if (override.timeout_ms !== undefined) byOperation[operationId] = override.timeout_ms + config.lease.grace_ms;
  }
  return { defaultMs: config.defaults.timeout_ms + config.lease.grace_ms, byOperation };
}

/** One pass of the rescuer; returns how many jobs it recovered. Expiry is decided on the store's clock. */
export async function rescueExpiredLeases(options: {
  config: Config;
  store: Store;
  clock: Clock;
  telemetry: Telemetry;
  random?: () => number;
}): Promise<number> {
  const { config, store, clock } = options;
  const random = options.random ?? Math.random;
  const expired = await store.jobListExpired({ lease: leaseLimits(config), limit: BATCH });
  if (expired.length === 0) return 0;
  const outcomes: JobOutcome[] = expired.map((job) => ({
    id: job.id,
    attempt: job.attempt,
    startedAt: job.startedAt,
    ...decideAttempt({
      attempt: job.attempt,
      maxAttempts: job.maxAttempts,
      result: { kind: "no-response", error: LEASE_EXPIRED_ERROR },
      now: clock.now(),
      retry: retrySettingsFor(config, job.operationId),
      random: random(),
    }),
  }));
  const written = await store.jobCompleteMany({ outcomes });
  let rescued = 0;
  outcomes.forEach((outcome, index) => {
    if (!written[index]) return;
    rescued++;
    options.telemetry.emit("lease:rescued", {
      operationId: expired[index]?.operationId ?? "",
      outcome: outcome.status === "dead" ? "dead" : "retrying",
    });
  });
  return rescued;
}

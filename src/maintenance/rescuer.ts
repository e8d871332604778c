/**
 * The lease rescuer (docs/delivery.md, "Leases, heartbeats and rescue"): a running job whose last heartbeat is older
 * than its operation's timeout plus `lease.grace_ms` belonged to a node that died (or lost its database). It is retried
 * with backoff, or ends dead `exhausted` when out of attempts. The write is conditional like any outcome, so it is safe
 * on several nodes.
 */
import type { Clock } from "../clock.js";
import { decideAttempt } from "../job/retry-policy.js";
import type { JobOutcome } from "../job/job.js";
import type { PerOperationSettings } from "../operations/settings.js";
import type { ClaimStore, UpkeepStore } from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";

/** The `error_body` of a rescued attempt. */
export const LEASE_EXPIRED_ERROR = "lease expired: outcome unknown";

/** Most jobs rescued in one pass. */
const BATCH = 200;

/** One pass of the rescuer; returns how many jobs it recovered. Expiry is decided on the store's clock. */
export async function rescueExpiredLeases(options: {
  settings: PerOperationSettings;
  store: Pick<UpkeepStore, "jobListExpired"> & Pick<ClaimStore, "jobSetStateIfRunningMany">;
  clock: Clock;
  telemetry: Telemetry;
  random?: () => number;
}): Promise<number> {
  const { settings, store, clock } = options;
  const random = options.random ?? Math.random;
  const expired = await store.jobListExpired({ lease: settings.leaseLimits(), limit: BATCH });
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
      retry: settings.of(job.operationId).retry,
      random: random(),
    }),
  }));
  const written = await store.jobSetStateIfRunningMany({ outcomes });
  let rescued = 0;
  outcomes.forEach((outcome, index) => {
    if (!written[index]) return;
    rescued++;
    options.telemetry.emit("lease:rescued", {
      jobId: outcome.id,
      attempt: outcome.attempt,
      operationId: expired[index]?.operationId ?? "",
      outcome: outcome.status === "dead" ? "dead" : "retrying",
    });
  });
  return rescued;
}

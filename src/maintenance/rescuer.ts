/**
 * The lease rescuer (CONTRACT §7): a running job whose last heartbeat is older than its operation's timeout plus
 * `lease.grace_ms` belonged to a node that died (or lost its database). It is retried with backoff, or ends dead
 * `exhausted` when out of attempts. The write is conditional like any outcome, so it is safe on several nodes.
 */
import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import { retrySettingsFor } from "../dispatcher/dispatcher.js";
import { decideAttempt } from "../job/retry-policy.js";
import type { JobOutcome, Store } from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";

/** The `error_body` of a rescued attempt. */
export const LEASE_EXPIRED_ERROR = "lease expired: outcome unknown";

/** Most jobs rescued in one pass. */
const BATCH = 200;

/** One pass of the rescuer; returns how many jobs it recovered. */
export async function rescueExpiredLeases(options: {
  config: Config;
  store: Store;
  clock: Clock;
  telemetry: Telemetry;
  random?: () => number;
}): Promise<number> {
  const { config, store, clock } = options;
  const random = options.random ?? Math.random;
  const timeoutOf = (operationId: string) => config.operations[operationId]?.timeout_ms ?? config.defaults.timeout_ms;
  const shortestTimeout = Math.min(
    config.defaults.timeout_ms,
    ...Object.values(config.operations).map((override) => override.timeout_ms ?? config.defaults.timeout_ms),
  );
  const now = clock.now();
  const candidates = await store.jobListExpired({
    heartbeatBefore: now - shortestTimeout - config.lease.grace_ms,
    limit: BATCH,
  });
  const outcomes: JobOutcome[] = [];
  for (const job of candidates) {
    const lastSeen = job.heartbeatAt ?? job.startedAt ?? 0;
    if (now - lastSeen <= timeoutOf(job.operationId) + config.lease.grace_ms) continue;
    const decision = decideAttempt({
      attempt: job.attempt,
      maxAttempts: job.maxAttempts,
      result: { kind: "no-response", error: LEASE_EXPIRED_ERROR },
      now,
      retry: retrySettingsFor(config, job.operationId),
      random: random(),
    });
    outcomes.push({ id: job.id, attempt: job.attempt, startedAt: job.startedAt, ...decision });
  }
  if (outcomes.length === 0) return 0;
  const written = await store.jobCompleteMany({ outcomes });
  let rescued = 0;
  outcomes.forEach((outcome, index) => {
    if (!written[index]) return;
    rescued++;
    const job = candidates.find((candidate) => candidate.id === outcome.id);
    options.telemetry.emit("lease:rescued", {
      operationId: job?.operationId ?? "",
      outcome: outcome.status === "dead" ? "dead" : "retrying",
    });
  });
  return rescued;
}

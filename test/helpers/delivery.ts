/**
 * Steps shared by the delivery tests: a test service whose worker delivers to a real target server, and a
 * bounded wait for a job's stored state to change after a real HTTP exchange.
 */
import { setTimeout as delay } from "node:timers/promises";
import type { JobRow } from "../../src/job/job.js";
import { startTestService, type TestService } from "./service.js";
import type { Target } from "./target.js";

/** Upper bound of every wait for a state change; far above what a passing test needs. */
const WAIT_LIMIT_MS = 10_000;
/** Pause between two reads of the store while waiting. */
const POLL_MS = 5;

/**
 * Starts a test service that delivers to `target` (not started: call `s.service.start()`), closed when test `t`
 * ends. Shutdown grace is short, so closing never waits long for a delivery the test left hanging.
 */
export async function startDeliveryService(
  t: { after: (fn: () => Promise<void>) => void },
  options: {
    target: Target | string;
    configure?: (raw: Record<string, unknown>) => void;
    random?: () => number;
    /** Times deliveries (see the Dispatcher); the machine's clock by default. */
    stopwatch?: () => number;
  },
): Promise<TestService> {
  const baseUrl = typeof options.target === "string" ? options.target : options.target.url;
  const s = await startTestService({
    configure: (raw) => {
      raw["target"] = { base_url: baseUrl, audience: "product" };
      raw["shutdown"] = { grace_ms: 200 };
      options.configure?.(raw);
    },
    ...(options.random ? { random: options.random } : {}),
    ...(options.stopwatch ? { stopwatch: options.stopwatch } : {}),
  });
  t.after(() => s.close());
  return s;
}

/**
 * Reads job `id` until `predicate` holds, and returns it. Only for state changes caused by a real HTTP exchange
 * (or a heartbeat), which no event announces once written; fails after a bound with the last state seen.
 */
export async function waitForJob(
  s: TestService,
  id: string,
  predicate: (job: JobRow) => boolean,
  what = "the expected state",
): Promise<JobRow> {
  const deadline = Date.now() + WAIT_LIMIT_MS;
  let job = await s.service.store.jobGet({ id });
  while (!job || !predicate(job)) {
    if (Date.now() > deadline) {
      throw new Error(`job ${id} did not reach ${what}; last seen: ${JSON.stringify(job)}`);
    }
    await delay(POLL_MS);
    job = await s.service.store.jobGet({ id });
  }
  return job;
}

/** Waits until job `id` has status `status`. */
export function waitForStatus(s: TestService, id: string, status: JobRow["status"]): Promise<JobRow> {
  return waitForJob(s, id, (job) => job.status === status, `status ${status}`);
}

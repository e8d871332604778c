/**
 * A test service on the real clock, listening on a real port of 127.0.0.1: for tests of code that talks to
 * opqueue over HTTP and mints its tokens with `Date.now()` (the client library). Built by `startTestService`, so
 * it has the test config, its own database, and `assertion`/`adminToken` minted at real time.
 */
import type { AddressInfo } from "node:net";
import { ManualClock } from "../../src/clock.js";
import type { JobRow } from "../../src/job/job.js";
import type { OpqueueEvents } from "../../src/telemetry/events.js";
import { startTestService, type TestService } from "./service.js";

/** Upper bound of every wait; far above what a passing test needs. */
const WAIT_LIMIT_MS = 10_000;

/** A ManualClock that reads the system time: the service runs in real time. */
class SystemTimeClock extends ManualClock {
  override now(): number {
    return Date.now();
  }
}

/** A listening test service. */
export interface LiveService extends TestService {
  /** `http://127.0.0.1:PORT`. */
  url: string;
  /** Resolves with the `delivery:finished` event of job `id`'s next finished attempt (one seen already counts). */
  deliveryFinished(id: string): Promise<OpqueueEvents["delivery:finished"]>;
  /**
   * Job `id` once its stored state satisfies `predicate`; for the write that follows `delivery:finished` (the
   * completer writes outcomes a moment after the event), which no event announces.
   */
  waitForJob(id: string, predicate: (job: JobRow) => boolean, what?: string): Promise<JobRow>;
}

/**
 * Starts a test service on the real clock, listening on an ephemeral port of 127.0.0.1, closed when test `t`
 * ends. With `worker: true` its worker runs (claims and delivers); shutdown grace is short so closing never waits
 * long for a delivery left hanging.
 */
export async function startLiveService(
  t: { after: (fn: () => Promise<void>) => void },
  options: { configure?: (raw: Record<string, unknown>) => void; worker?: boolean; env?: Record<string, string> } = {},
): Promise<LiveService> {
  const s = await startTestService({
    clock: new SystemTimeClock(),
    ...(options.env ? { env: options.env } : {}),
    configure: (raw) => {
      raw["shutdown"] = { grace_ms: 200 };
      options.configure?.(raw);
    },
  });
  t.after(() => s.close());
  const finished: Array<OpqueueEvents["delivery:finished"]> = [];
  const waiters: Array<{ id: string; resolve: (event: OpqueueEvents["delivery:finished"]) => void }> = [];
  s.service.telemetry.on("delivery:finished", (event) => {
    finished.push(event);
    for (const waiter of waiters.filter((w) => w.id === event.jobId)) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve(event);
    }
  });
  await s.service.app.listen({ host: "127.0.0.1", port: 0 });
  const { port } = s.service.app.server.address() as AddressInfo;
  if (options.worker) s.service.start();
  return {
    ...s,
    url: `http://127.0.0.1:${port}`,
    deliveryFinished(id) {
      const seen = finished.find((event) => event.jobId === id);
      if (seen) {
        finished.splice(finished.indexOf(seen), 1);
        return Promise.resolve(seen);
      }
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(waiter), 1);
          reject(new Error(`no delivery of job ${id} finished`));
        }, WAIT_LIMIT_MS);
        const waiter = {
          id,
          resolve: (event: OpqueueEvents["delivery:finished"]) => {
            clearTimeout(timer);
            finished.splice(finished.indexOf(event), 1);
            resolve(event);
          },
        };
        waiters.push(waiter);
      });
    },
    async waitForJob(id, predicate, what = "the expected state") {
      const deadline = Date.now() + WAIT_LIMIT_MS;
      let job = await s.service.store.jobGet({ id });
      while (!job || !predicate(job)) {
        if (Date.now() > deadline)
          throw new Error(`job ${id} did not reach ${what}; last seen: ${JSON.stringify(job)}`);
        // The outcome write is batched on the next turn of the event loop: yield to it, do not pause.
        await new Promise((resolve) => setImmediate(resolve));
        job = await s.service.store.jobGet({ id });
      }
      return job;
    },
  };
}

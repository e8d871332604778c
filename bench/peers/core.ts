/**
 * opqueue's store alone, no HTTP (scenario 5): the built store (dist/) in a process of its own.
 *
 * - enqueue: `count` `jobInsert` calls, `concurrency` at a time (as 32 HTTP clients would make them), each with the
 *   fields a real enqueue stores (an id made as the service makes them, an authority with its assertion, a small
 *   request). Group commit
 *   batches the concurrent calls as it does in the service.
 * - drain: claim up to `limit` due jobs, complete them all as succeeded (a no-op delivery), repeat until none is
 *   left: the store's cost per delivered job.
 *
 * Commands: open {url}, enqueue {count, concurrency, delayMs, assertion}, drain {limit}, close.
 */
import { randomBytes } from "node:crypto";
import { serveCommands } from "../lib/ipc.js";
import { ROOT } from "../lib/ipc.js";
import type { Store } from "../../src/store/store.js";

type OpenStore = typeof import("../../src/store/open-store.js");
type JobIds = typeof import("../../src/job/job-id.js");
const { openStore } = (await import(`${ROOT}/dist/store/open-store.js`)) as OpenStore;
// The service's ids: time-prefixed, so close in the id indexes (a random id costs a random index page per insert
// and per attempt record).
const { newJobId } = (await import(`${ROOT}/dist/job/job-id.js`)) as JobIds;
const systemClock = { now: () => Date.now() };

let store: Store | undefined;

function requireStore(): Store {
  if (!store) throw new Error("open the store first");
  return store;
}

async function enqueue(args: { count: number; concurrency: number; delayMs: number; assertion: string }) {
  const active = requireStore();
  const rid = `core-${randomBytes(4).toString("hex")}`;
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: args.concurrency }, async () => {
      while (next < args.count) {
        const n = next++;
        const outcome = await active.jobInsert({
          id: newJobId(),
          operationId: "buildReport",
          priority: 0,
          // Due `delayMs` after the store's now (the database's clock on PostgreSQL), as an enqueue's delay_ms is.
          runTime: { delayMs: args.delayMs },
          maxAttempts: 5,
          dedupeKey: null,
          concurrencyKey: null,
          rateKey: null,
          enqueuedByOperationId: "createUser",
          parentJobId: null,
          originalRequestId: rid,
          userId: "bench",
          authority: { kind: "request", request_id: rid, user_id: "bench", assertion: args.assertion },
          request: { body: { report: "daily", n } },
          spawnCap: 2_000_000_000,
          traceparent: null,
          expiry: null,
          callbacks: null,
        });
        if (outcome.kind !== "created") throw new Error(`jobInsert answered ${outcome.kind}`);
      }
    }),
  );
  return { elapsedMs: performance.now() - started };
}

async function drain(args: { limit: number }) {
  const active = requireStore();
  let jobs = 0;
  const started = performance.now();
  for (;;) {
    const claimed = await active.jobClaimMany({ limit: args.limit });
    if (claimed.length === 0) break;
    await active.jobSetStateIfRunningMany({
      outcomes: claimed.map((job) => ({
        id: job.id,
        attempt: job.attempt,
        status: "succeeded" as const,
        result: { status_code: 204, error_body: null, terminal_reason: null },
      })),
    });
    jobs += claimed.length;
  }
  return { elapsedMs: performance.now() - started, jobs };
}

serveCommands(
  {
    open: async (args: { url: string }) => {
      store = await openStore({ url: args.url, clock: systemClock });
    },
    enqueue,
    drain,
    close: async () => {
      await store?.close();
      store = undefined;
    },
  },
  {},
  async () => {
    await store?.close();
  },
);

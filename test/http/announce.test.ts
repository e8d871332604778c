/**
 * docs/delivery.md, "Who hears of a new job": on PostgreSQL a job enqueued here is announced to the other nodes
 * (NOTIFY) only when they may be needed for it. A listening store on the same schema stands for another node; what it
 * hears is compared, in commit order, with a job announced after the one that must not be.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createService, type Service } from "../../src/service.js";
import { startDeliveryService } from "../helpers/delivery.js";
import { enqueue } from "../helpers/jobs.js";
import { openPostgresStore } from "../helpers/postgres.js";
import { TEST_ENGINE, type TestService } from "../helpers/service.js";
import { answer, reply, startTarget, type TargetHandler } from "../helpers/target.js";

type TestContext = { after: (fn: () => Promise<void>) => void };

/** A poll fallback that never fires during a test: the horizon of quiet jobs is twice it. */
const POLL_MS = 3_600_000;

const report = (n: number, extra: Record<string, unknown> = {}) => ({
  operation_id: "buildReport",
  request: { body: {}, query: { n } },
  ...extra,
});

/**
 * A started service with a worker of `concurrency` slots, an API-only service on its database, and another node's
 * listener there; `heard` waits for the listener's next notification.
 */
async function setup(
  t: TestContext,
  handler: TargetHandler,
  concurrency: number,
): Promise<{
  node: TestService;
  apiOnly: Service;
  heard: () => Promise<number>;
  target: Awaited<ReturnType<typeof startTarget>>;
}> {
  const target = await startTarget(t, handler);
  const node = await startDeliveryService(t, {
    target,
    configure: (raw) => {
      raw["worker"] = { concurrency, poll_ms: POLL_MS };
    },
  });
  node.service.start();
  const apiOnly = await createService({ config: node.config, clock: node.clock, worker: false });
  t.after(() => apiOnly.close());
  const schema = new URL(node.config.database).searchParams.get("schema") ?? "";
  const other = await openPostgresStore(node.clock, { schema });
  t.after(() => other.store.close());
  const queue: number[] = [];
  const waiters: Array<(runAt: number) => void> = [];
  const stop = await other.store.jobAvailableListen((runAt) => {
    const waiter = waiters.shift();
    if (waiter) waiter(runAt);
    else queue.push(runAt);
  });
  t.after(() => stop());
  const heard = () => {
    const first = queue.shift();
    return first !== undefined ? Promise.resolve(first) : new Promise<number>((resolve) => waiters.push(resolve));
  };
  return { node, apiOnly, heard, target };
}

/** Enqueues through the API-only service, which has no worker: always announced. */
async function enqueueApiOnly(
  s: TestService,
  apiOnly: Service,
  payload: object,
): Promise<{ id: string; run_at: string }> {
  const res = await apiOnly.app.inject({
    method: "POST",
    url: "/jobs",
    headers: { authorization: `Bearer ${await s.assertion()}` },
    payload,
  });
  assert.equal(res.statusCode, 201, res.body);
  return (res.json() as { job: { id: string; run_at: string } }).job;
}

describe(
  "who hears of a new job",
  { skip: TEST_ENGINE === "sqlite" && "SQLite serves one node: the PostgreSQL pass runs this" },
  () => {
    test("a job due now that this node's worker takes is not announced; one made on a node without a free slot is", async (t) => {
      const held: Array<() => void> = [];
      const { node, apiOnly, heard, target } = await setup(
        t,
        (_request, res) => {
          held.push(() => reply(res, 204));
        },
        1,
      );
      t.after(() => held.forEach((release) => release()));

      // Each job due now, at an instant of its own (seconds ago), so that what is heard tells them apart.
      const due = (n: number) => report(n, { run_at: new Date(node.clock.now() - n * 1000).toISOString() });
      // Taken by the node that made it: delivered, and no other node told.
      await enqueue(node, due(1));
      await target.waitForRequests(1);
      // Made on a node without a worker: announced, and the worker node, told, delivers it once its slot is free.
      const fromApi = await enqueueApiOnly(node, apiOnly, due(2));
      assert.equal(await heard(), Date.parse(fromApi.run_at));
      // The node's one slot is held: its next job is announced.
      const whileFull = await enqueue(node, due(3));
      assert.equal(await heard(), Date.parse(whileFull.run_at));

      held.shift()?.();
      await target.waitForRequests(2);
      held.shift()?.();
      await target.waitForRequests(3);
      assert.deepEqual(target.requests.map((request) => Number(request.query.get("n"))).sort(), [1, 2, 3]);
    });

    test("a job due later than twice worker.poll_ms is not announced, one due sooner is", async (t) => {
      const { node, apiOnly, heard } = await setup(t, answer(204), 4);
      // Every node's poll reads the next run time before then: none needs telling, from either service.
      await enqueue(node, report(1, { delay_ms: 2 * POLL_MS + 1000 }));
      await enqueueApiOnly(node, apiOnly, report(2, { delay_ms: 2 * POLL_MS + 1000 }));
      const soon = await enqueue(node, report(3, { delay_ms: 1000 }));
      assert.equal(await heard(), Date.parse(soon.run_at));
      const soonFromApi = await enqueueApiOnly(node, apiOnly, report(4, { delay_ms: 2000 }));
      assert.equal(await heard(), Date.parse(soonFromApi.run_at));
    });
  },
);

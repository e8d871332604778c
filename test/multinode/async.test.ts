/**
 * Long jobs across three `opqueue serve` processes on one PostgreSQL database (docs/delivery.md, "Long jobs"): an
 * attempt a target took asynchronously lives on its own lease, renewed by the target's heartbeats through any node.
 * It outlives its timeout, and the node that delivered it killed -9; when the heartbeats stop, any node rescues it and
 * attempt 2 arrives. Real time is all these tests have: the leases are short (2 s), and the tests wait for events
 * (a delivery, a row, a metric) in bounded polls; the heartbeats' own pace is the only timer, as a target's. An
 * administrator's retry through another node starts attempt 1 again under a new claim, whose token is its own.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { request } from "undici";
import { mintToken } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import type { Job } from "../../src/job/schemas.js";
import { LEASE_EXPIRED_ERROR } from "../../src/maintenance/rescuer.js";
import { POSTGRES_SKIP } from "../helpers/postgres.js";
import {
  adminToken,
  type Cluster,
  createCluster,
  type Delivery,
  metricSum,
  type Node,
  until,
} from "../helpers/cluster.js";

/**
 * The operation's timeout and the lease grace: a lease of 2 s, checked every 200 ms by every node. A heartbeat every
 * 500 ms leaves 1.5 s for one to be late on a busy machine before the lease would expire.
 */
const TIMEOUT_MS = 1000;
const GRACE_MS = 1000;
/** A target's heartbeat interval: a third of the lease. */
const HEARTBEAT_EVERY_MS = 500;

/** The answer that takes an attempt asynchronously. */
const TAKE_ASYNC = { status: 202, headers: { "x-job-async": "1" } };

/** A cluster of three nodes with the short lease above. */
async function startCluster(t: Parameters<typeof createCluster>[0]): Promise<{ c: Cluster; nodes: Node[] }> {
  const c = await createCluster(t, {
    change: (raw) => {
      raw["lease"] = { heartbeat_ms: 200, grace_ms: GRACE_MS, check_ms: 200 };
      raw["operations"] = { buildReport: { timeout_ms: TIMEOUT_MS } };
    },
  });
  const nodes = await Promise.all(["a1", "a2", "a3"].map((name) => c.start(name)));
  return { c, nodes };
}

/** Enqueues one `buildReport` job through `node`; its id. */
async function enqueue(c: Cluster, node: Node, rid: string): Promise<string> {
  const assertion = await mintToken({ auth: c.config.auth, clock: systemClock, sub: "u1", op: "createUser", rid });
  const response = await request(`${node.url}/jobs`, {
    method: "POST",
    dispatcher: c.agent,
    headers: { authorization: `Bearer ${assertion}`, "content-type": "application/json" },
    body: JSON.stringify({ operation_id: "buildReport", request: { body: { key: rid } } }),
  });
  const text = await response.body.text();
  assert.equal(response.statusCode, 201, text);
  return (JSON.parse(text) as { job: Job }).job.id;
}

/** A target's call on its attempt through `node`: the status and the parsed body. */
async function callAttempt(
  c: Cluster,
  node: Node,
  delivery: Delivery,
  action: "heartbeat" | "complete" | "fail",
  body: object = {},
): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await request(`${node.url}/jobs/${delivery.jobId}/${action}`, {
    method: "POST",
    dispatcher: c.agent,
    headers: { authorization: `Bearer ${delivery.token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: response.statusCode, body: (await response.body.json()) as Record<string, unknown> };
}

/** The node that handed the job off: the one whose metrics count a delivery taken asynchronously. */
async function deliveringNode(nodes: Node[]): Promise<Node> {
  return until("the delivering node's count of its asynchronous hand-off", async () => {
    for (const node of nodes) if ((await metricSum(node, "opqueue_deliveries_total")) > 0) return node;
    return undefined;
  });
}

test(
  "a long job heartbeating through other nodes far past its timeout succeeds, its delivering node killed -9 meanwhile",
  { skip: POSTGRES_SKIP, timeout: 120_000 },
  async (t) => {
    const { c, nodes } = await startCluster(t);
    c.target.setAnswer(() => TAKE_ASYNC);
    const id = await enqueue(c, nodes[0] as Node, "long-1");
    await c.target.waitUntil("the delivery", () => c.target.deliveries.length === 1);
    const delivery = c.target.deliveries[0] as Delivery;
    const deliverer = await deliveringNode(nodes);
    const others = nodes.filter((node) => node !== deliverer);

    // Heartbeats for three times the lease (six times the timeout), each through a node that did not deliver the job,
    // the two in turn; the delivering node is killed -9 after the second.
    const began = performance.now();
    let beats = 0;
    while (performance.now() - began < 3 * (TIMEOUT_MS + GRACE_MS)) {
      const via = others[beats % others.length] as Node;
      const beat = await callAttempt(c, via, delivery, "heartbeat", { progress: { beats } });
      assert.equal(beat.status, 200, `heartbeat ${beats} through ${via.name}: ${JSON.stringify(beat.body)}`);
      beats++;
      if (beats === 2) {
        deliverer.child.kill("SIGKILL");
        assert.equal((await deliverer.exited).signal, "SIGKILL");
      }
      await sleep(HEARTBEAT_EVERY_MS);
    }
    const running = await c.db.query<{ status: string; attempt: number }>(
      "SELECT status, attempt FROM jobs WHERE id = $1",
      [id],
    );
    assert.deepEqual(running.rows, [{ status: "running", attempt: 1 }]);

    const done = await callAttempt(c, others[1] as Node, delivery, "complete");
    assert.equal(done.status, 200, JSON.stringify(done.body));
    const job = done.body["job"] as Job;
    assert.equal(job.status, "succeeded");
    assert.equal(job.attempt, 1);
    t.diagnostic(
      `${beats} heartbeats over ${Math.round(performance.now() - began)} ms (lease ${TIMEOUT_MS + GRACE_MS} ms) through ` +
        `${others.map((node) => node.name).join(" and ")}; ${deliverer.name} delivered it and was killed -9 after the second`,
    );

    // One delivery, one attempt, no rescue by any node.
    assert.equal(c.target.deliveries.length, 1);
    const attempts = await c.db.query<{ attempt: number; outcome: string }>(
      "SELECT attempt, outcome FROM job_attempts WHERE job_id = $1",
      [id],
    );
    assert.deepEqual(attempts.rows, [{ attempt: 1, outcome: "succeeded" }]);
    for (const node of others)
      assert.equal(await metricSum(node, "opqueue_leases_rescued_total"), 0, `${node.name} rescued nothing`);
    const progress = await c.db.query<{ progress: unknown }>(
      "SELECT s.progress FROM job_state s JOIN job_specs j ON j.seq = s.seq WHERE j.id = $1",
      [id],
    );
    assert.deepEqual(progress.rows[0]?.progress, { beats: beats - 1 });
  },
);

test(
  "a long job whose heartbeats stop is rescued by a node and retried: attempt 2 arrives, and attempt 1's token is refused",
  { skip: POSTGRES_SKIP, timeout: 120_000 },
  async (t) => {
    const { c, nodes } = await startCluster(t);
    c.target.setAnswer((delivery) => (delivery.attempt === 1 ? TAKE_ASYNC : 204));
    const id = await enqueue(c, nodes[1] as Node, "long-2");
    await c.target.waitUntil("attempt 1", () => c.target.deliveries.length === 1);
    const first = c.target.deliveries[0] as Delivery;
    const deliverer = await deliveringNode(nodes);
    const other = nodes.find((node) => node !== deliverer) as Node;
    assert.equal((await callAttempt(c, other, first, "heartbeat", { progress: "started" })).status, 200);

    // No more heartbeats: the lease expires, a node rescues the job, and after its backoff attempt 2 is delivered.
    const stopped = performance.now();
    await c.target.waitUntil("attempt 2", () =>
      c.target.deliveries.some((delivery) => delivery.jobId === id && delivery.attempt === 2),
    );
    t.diagnostic(`attempt 2 arrived ${Math.round(performance.now() - stopped)} ms after the last heartbeat`);
    const done = await until("the job to succeed", async () => {
      const rows = await c.db.query<{ status: string; attempt: number }>(
        "SELECT status, attempt FROM jobs WHERE id = $1",
        [id],
      );
      return rows.rows[0]?.status === "succeeded" ? rows.rows[0] : undefined;
    });
    assert.equal(done.attempt, 2);
    const attempts = await c.db.query<{ attempt: number; outcome: string; error_body: string | null }>(
      "SELECT attempt, outcome, error_body FROM job_attempts WHERE job_id = $1 ORDER BY id",
      [id],
    );
    assert.deepEqual(attempts.rows, [
      { attempt: 1, outcome: "retrying", error_body: LEASE_EXPIRED_ERROR },
      { attempt: 2, outcome: "succeeded", error_body: null },
    ]);
    const rescued = await Promise.all(nodes.map((node) => metricSum(node, "opqueue_leases_rescued_total")));
    assert.equal(
      rescued.reduce((sum, n) => sum + n, 0),
      1,
      `one rescue in all: ${rescued.join(", ")}`,
    );

    // The target of attempt 1, late: its token acts on nothing any more.
    for (const action of ["heartbeat", "complete"] as const) {
      const late = await callAttempt(c, other, first, action);
      assert.equal(late.status, 409, JSON.stringify(late.body));
      assert.equal(late.body["code"], "job_not_running");
    }
  },
);

test(
  "an attempt failed for good and retried by an administrator through another node: the new attempt 1 carries a token of its own, and the old one is refused on every node",
  { skip: POSTGRES_SKIP, timeout: 120_000 },
  async (t) => {
    const { c, nodes } = await startCluster(t);
    c.target.setAnswer(() => TAKE_ASYNC);
    const id = await enqueue(c, nodes[0] as Node, "retried");
    await c.target.waitUntil("the first claim's delivery", () => c.target.deliveries.length === 1);
    const first = c.target.deliveries[0] as Delivery;
    const failed = await callAttempt(c, nodes[1] as Node, first, "fail", { retry: "never", error: "given up" });
    assert.equal(failed.status, 200, JSON.stringify(failed.body));
    assert.equal((failed.body["job"] as Job).status, "dead");

    const retried = await request(`${(nodes[2] as Node).url}/jobs/${id}/retry`, {
      method: "POST",
      dispatcher: c.agent,
      headers: { authorization: `Bearer ${await adminToken(c)}` },
    });
    assert.equal(retried.statusCode, 200, await retried.body.text());
    await c.target.waitUntil("the second claim's delivery", () => c.target.deliveries.length === 2);
    const second = c.target.deliveries[1] as Delivery;
    assert.equal(second.attempt, 1, "an administrator's retry starts again at attempt 1");
    assert.notEqual(second.token, first.token, "each claim's token is its own");
    for (const node of nodes) {
      for (const action of ["heartbeat", "complete", "fail"] as const) {
        const late = await callAttempt(c, node, first, action);
        assert.equal(late.status, 409, `${action} through ${node.name}: ${JSON.stringify(late.body)}`);
        assert.equal(late.body["code"], "job_not_running");
      }
    }
    const done = await callAttempt(c, nodes[0] as Node, second, "complete");
    assert.equal(done.status, 200, JSON.stringify(done.body));
    assert.equal((done.body["job"] as Job).status, "succeeded");
  },
);

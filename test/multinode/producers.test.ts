/**
 * What producers send beyond the contract, across three `opqueue serve` processes on one PostgreSQL database
 * (docs/api.md, "Batch enqueue", "Idempotency", "Expiry"): the same idempotency key sent to every node at once makes
 * one job; expired jobs are delivered by no node and end expired with a node killed -9 meanwhile; a batch a node
 * acknowledged survives that node's kill -9 and is delivered by the others. Waits for events and bounded polls only.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { request } from "undici";
import { mintToken } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import type { Job } from "../../src/job/schemas.js";
import { POSTGRES_SKIP } from "../helpers/postgres.js";
import { adminToken, type Cluster, createCluster, type Node, statusCounts, until } from "../helpers/cluster.js";

/** POST `path` to `node` with an enqueue assertion of `rid`; status and parsed body. */
async function post(
  c: Cluster,
  node: Node,
  path: string,
  body: unknown,
  options: { rid: string; headers?: Record<string, string> },
): Promise<{ status: number; body: Record<string, unknown> }> {
  const assertion = await mintToken({
    auth: c.config.auth,
    clock: systemClock,
    sub: "producer",
    op: "createUser",
    rid: options.rid,
  });
  const response = await request(`${node.url}${path}`, {
    method: "POST",
    dispatcher: c.agent,
    headers: { authorization: `Bearer ${assertion}`, "content-type": "application/json", ...options.headers },
    body: JSON.stringify(body),
  });
  return { status: response.statusCode, body: (await response.body.json()) as Record<string, unknown> };
}

const report = (n: number, extra: Record<string, unknown> = {}) => ({
  operation_id: "buildReport",
  request: { body: { key: "producers", n } },
  ...extra,
});

test(
  "the same idempotency key sent to three nodes at once makes one job, and every answer names it",
  { skip: POSTGRES_SKIP, timeout: 120_000 },
  async (t) => {
    const c = await createCluster(t);
    const nodes = await Promise.all(["i1", "i2", "i3"].map((name) => c.start(name)));
    for (let k = 0; k < 20; k++) {
      const answers = await Promise.all(
        nodes.flatMap((node) =>
          [0, 1].map(() =>
            post(c, node, "/jobs", report(k, { delay_ms: 3_600_000 }), {
              rid: `idem-${k}`,
              headers: { "idempotency-key": `key-${k}` },
            }),
          ),
        ),
      );
      const ids = new Set(answers.map((answer) => (answer.body["job"] as Job | undefined)?.id));
      assert.equal(
        ids.size,
        1,
        `key-${k}: ${JSON.stringify(answers.map((a) => [a.status, (a.body["job"] as Job | undefined)?.id ?? a.body]))}`,
      );
      assert.deepEqual(
        answers.map((answer) => answer.status).filter((status) => status === 201),
        [201],
        `key-${k}: one 201`,
      );
    }
    const jobs = await c.db.query<{ n: number }>("SELECT count(*)::int AS n FROM jobs");
    assert.equal(jobs.rows[0]?.n, 20);
  },
);

test(
  "jobs past their expiry are delivered by no node and end expired, with a node killed -9 meanwhile",
  { skip: POSTGRES_SKIP, timeout: 120_000 },
  async (t) => {
    const c = await createCluster(t);
    const [n1, n2, n3] = await Promise.all(["e1", "e2", "e3"].map((name) => c.start(name)));
    assert.ok(n1 && n2 && n3);
    const admin = { authorization: `Bearer ${await adminToken(c)}` };
    const pause = await request(`${n1.url}/operations/buildReport/pause`, {
      method: "POST",
      dispatcher: c.agent,
      headers: admin,
    });
    assert.equal(pause.statusCode, 200, await pause.body.text());
    const results = await post(
      c,
      n2,
      "/jobs/batch",
      { jobs: Array.from({ length: 40 }, (_, n) => report(n, { ttl_ms: 1500 })) },
      { rid: "expiring" },
    );
    assert.equal(results.status, 200);
    n3.child.kill("SIGKILL");
    await n3.exited;
    // Past the expiry, while paused: then resumed, no node may start them.
    await sleep(1600);
    const resume = await request(`${n2.url}/operations/buildReport/resume`, {
      method: "POST",
      dispatcher: c.agent,
      headers: admin,
    });
    assert.equal(resume.statusCode, 200, await resume.body.text());
    await until("every job expired", async () => ((await statusCounts(c.db))["cancelled"] === 40 ? true : undefined));
    const reasons = await c.db.query<{ reason: string; n: number }>(
      "SELECT result->>'terminal_reason' AS reason, count(*)::int AS n FROM jobs GROUP BY 1",
    );
    assert.deepEqual(reasons.rows, [{ reason: "expired", n: 40 }]);
    assert.equal(c.target.deliveries.length, 0, "no delivery of an expired job");
  },
);

test(
  "a batch a node acknowledged survives its kill -9, and the other nodes deliver every item",
  { skip: POSTGRES_SKIP, timeout: 120_000 },
  async (t) => {
    const c = await createCluster(t);
    const [n1, n2, n3] = await Promise.all(["b1", "b2", "b3"].map((name) => c.start(name)));
    assert.ok(n1 && n2 && n3);
    const answer = await post(
      c,
      n1,
      "/jobs/batch",
      { jobs: Array.from({ length: 300 }, (_, n) => report(n, { delay_ms: 1000 })) },
      { rid: "batch-kill" },
    );
    assert.equal(answer.status, 200);
    const created = (answer.body["results"] as Array<{ status: number; id: string }>).filter(
      (result) => result.status === 201,
    );
    assert.equal(created.length, 300);
    n1.child.kill("SIGKILL");
    await n1.exited;
    await c.target.waitUntil(
      "every acknowledged job delivered",
      () => new Set(c.target.deliveries.map((d) => d.jobId)).size === 300,
      60_000,
    );
    assert.deepEqual(new Set(c.target.deliveries.map((d) => d.jobId)), new Set(created.map((result) => result.id)));
  },
);

/**
 * Chains across three `opqueue serve` processes on one PostgreSQL database (docs/chains.md): callbacks fire exactly
 * once with the node that finished the jobs killed -9 before it could enqueue them, a chain of 50 jobs settles once
 * and fires on_settled once, and a producer's wait answers at the terminal state. Waits for events and bounded polls.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { request } from "undici";
import { mintToken } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import type { Job } from "../../src/job/schemas.js";
import { POSTGRES_SKIP } from "../helpers/postgres.js";
import { type Cluster, createCluster, type Node, until } from "../helpers/cluster.js";

/** A config whose chain sweepers run often, and whose trigger map lets jobs call back. */
function chainsConfig(raw: Record<string, unknown>): void {
  raw["chains"] = { check_ms: 50 };
  raw["triggers"] = {
    createUser: ["sendWelcomeEmail", "buildReport"],
    sendWelcomeEmail: ["recordEmailSent", "buildReport"],
    buildReport: ["recordEmailSent"],
    "cron:nightly": ["buildReport"],
  };
}

async function enqueue(c: Cluster, node: Node, body: unknown, rid: string, sub = "u1"): Promise<Job> {
  const assertion = await mintToken({ auth: c.config.auth, clock: systemClock, sub, op: "createUser", rid });
  const response = await request(`${node.url}/jobs`, {
    method: "POST",
    dispatcher: c.agent,
    headers: { authorization: `Bearer ${assertion}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await response.body.text();
  assert.equal(response.statusCode, 201, text);
  return (JSON.parse(text) as { job: Job }).job;
}

async function count(c: Cluster, sql: string, params: unknown[] = []): Promise<number> {
  return Number((await c.db.query<{ n: string }>(sql, params)).rows[0]?.n ?? 0);
}

test(
  "callbacks fire exactly once, the node that finished the jobs killed -9 as its sweeper enqueued them",
  { skip: POSTGRES_SKIP, timeout: 120_000 },
  async (t) => {
    // Node f1 alone delivers the jobs, and is killed once they succeeded: its sweeper may have enqueued some callbacks
    // by then, or none. Nodes s2 and s3, started after, enqueue the rest: every job gets one callback, none two.
    const c = await createCluster(t, { change: chainsConfig });
    const f1 = await c.start("f1");
    const jobs = await Promise.all(
      Array.from({ length: 20 }, (_, n) =>
        enqueue(
          c,
          f1,
          {
            operation_id: "buildReport",
            request: { body: { key: "cb", n } },
            on_complete: { operation_id: "recordEmailSent", request: { path_params: { emailId: `e-${n}` } } },
          },
          `cb-${n}`,
        ),
      ),
    );
    await c.target.waitUntil("the twenty jobs delivered", () =>
      jobs.every((job) => c.target.deliveries.some((d) => d.jobId === job.id)),
    );
    await until("the twenty jobs succeeded", async () =>
      (await count(c, "SELECT count(*) AS n FROM jobs WHERE status = 'succeeded' AND operation_id = 'buildReport'")) ===
      20
        ? true
        : undefined,
    );
    f1.child.kill("SIGKILL");
    await f1.exited;
    await Promise.all(["s2", "s3"].map((name) => c.start(name)));
    await until("twenty callback jobs", async () =>
      (await count(c, "SELECT count(*) AS n FROM jobs WHERE operation_id = 'recordEmailSent'")) === 20
        ? true
        : undefined,
    );
    await until("every callback delivered", async () =>
      (await count(
        c,
        "SELECT count(*) AS n FROM jobs WHERE operation_id = 'recordEmailSent' AND status = 'succeeded'",
      )) === 20
        ? true
        : undefined,
    );
    assert.equal(await count(c, "SELECT count(*) AS n FROM jobs WHERE operation_id = 'recordEmailSent'"), 20);
    const perParent = await c.db.query<{ parent_job_id: string; n: string }>(
      "SELECT parent_job_id, count(*) AS n FROM jobs WHERE operation_id = 'recordEmailSent' GROUP BY parent_job_id",
    );
    assert.equal(perParent.rows.length, 20);
    assert.ok(
      perParent.rows.every((row) => Number(row.n) === 1),
      "one callback per job",
    );
  },
);

test(
  "a chain of 50 jobs on three nodes settles once and fires on_settled once",
  { skip: POSTGRES_SKIP, timeout: 120_000 },
  async (t) => {
    const c = await createCluster(t, { change: chainsConfig });
    const nodes = await Promise.all(["c1", "c2", "c3"].map((name) => c.start(name)));
    const rid = "chain-of-50";
    // Every answer held until the 50th job is enqueued: the chain cannot settle early, after its first jobs.
    c.target.hold();
    const first = await enqueue(
      c,
      nodes[0] as Node,
      {
        operation_id: "buildReport",
        request: { body: { key: "chain", n: 0 } },
        on_settled: { operation_id: "recordEmailSent", request: { path_params: { emailId: "settled" } } },
      },
      rid,
    );
    for (let n = 1; n < 50; n++) {
      await enqueue(
        c,
        nodes[n % 3] as Node,
        { operation_id: "buildReport", request: { body: { key: "chain", n } } },
        rid,
      );
    }
    c.target.release();
    await until("the on_settled callback delivered", async () =>
      (await count(
        c,
        "SELECT count(*) AS n FROM jobs WHERE operation_id = 'recordEmailSent' AND status = 'succeeded'",
      )) >= 1
        ? true
        : undefined,
    );
    // A few sweeps more on every node: still one.
    await until("sweeps after the callback", async () =>
      (await count(c, "SELECT count(*) AS n FROM chains WHERE on_settled_fired_at IS NOT NULL")) === 1
        ? true
        : undefined,
    );
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(await count(c, "SELECT count(*) AS n FROM jobs WHERE operation_id = 'recordEmailSent'"), 1);
    const callback = await c.db.query<{
      parent_job_id: string;
      original_request_id: string;
      request: { body: { jobs: number; counts: Record<string, number> } };
    }>("SELECT parent_job_id, original_request_id, request FROM jobs WHERE operation_id = 'recordEmailSent'");
    const { request: sent, ...lineage } = callback.rows[0] ?? { request: undefined };
    assert.deepEqual(lineage, { parent_job_id: first.id, original_request_id: rid });
    // Fired when the whole chain had settled, not after its first jobs.
    assert.equal(sent?.body.jobs, 50);
    assert.equal(sent?.body.counts["succeeded"], 50);
    const delivered = c.target.deliveries.filter((d) => d.path === "/emails/settled/record");
    assert.equal(delivered.length, 1);
  },
);

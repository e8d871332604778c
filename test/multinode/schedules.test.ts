/**
 * Schedules across three `opqueue serve` processes on one PostgreSQL database (docs/schedules.md): a schedule created
 * through one node ticks exactly once per period across the three, with the node enqueueing its ticks killed -9 midway;
 * and a pause, a resume and a delete made through one node hold on every node, with no tick enqueued while paused and
 * none of the missed ones enqueued after the resume.
 *
 * Ticks are counted in the database: one job per tick, its `original_request_id` naming the tick. Absence (nothing
 * enqueued while paused or deleted) is shown against a second schedule that goes on ticking meanwhile, not a sleep.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { request } from "undici";
import { POSTGRES_SKIP } from "../helpers/postgres.js";
import { adminToken, type Cluster, createCluster, type Node, until } from "../helpers/cluster.js";

/** Lets schedules created through the API enqueue buildReport. */
function allowSchedules(raw: Record<string, unknown>): void {
  raw["triggers"] = { ...(raw["triggers"] as Record<string, string[]>), "cron:*": ["buildReport"] };
}

/** An admin call to `node`; the parsed answer, which must have `status`. */
async function admin(
  c: Cluster,
  node: Node,
  method: "POST" | "DELETE",
  path: string,
  body?: unknown,
  status = 200,
): Promise<unknown> {
  const response = await request(`${node.url}${path}`, {
    method,
    dispatcher: c.agent,
    headers: {
      authorization: `Bearer ${await adminToken(c)}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.body.text();
  assert.equal(response.statusCode, status, `${method} ${path} on ${node.name}: ${text}`);
  return JSON.parse(text) as unknown;
}

/** Creates an every-second schedule of buildReport, each tick a job of its own, through `node`. */
async function everySecond(c: Cluster, node: Node, name: string): Promise<void> {
  await admin(
    c,
    node,
    "POST",
    "/schedules",
    { name, schedule: "* * * * * *", operation_id: "buildReport", user_id: "system", dedupe_key: null },
    201,
  );
}

/** The jobs of schedule `name` per tick (ms), from their `original_request_id` (`cron:{name}:{tick}`). */
async function jobsPerTick(c: Cluster, name: string): Promise<Map<number, number>> {
  const prefix = `cron:${name}:`;
  const rows = await c.db.query<{ rid: string; n: number }>(
    "SELECT original_request_id AS rid, count(*)::int AS n FROM jobs WHERE enqueued_by_operation_id = $1 GROUP BY 1",
    [`cron:${name}`],
  );
  return new Map(rows.rows.map((row) => [Date.parse(row.rid.slice(prefix.length)), row.n]));
}

/** Waits until schedule `name` has `count` ticks (later than `after`, if given); answers its ticks. */
async function ticksReached(c: Cluster, name: string, count: number, after = 0): Promise<Map<number, number>> {
  return until(`${count} ticks of ${name}`, async () => {
    const ticks = await jobsPerTick(c, name);
    return [...ticks.keys()].filter((tick) => tick > after).length >= count ? ticks : undefined;
  });
}

/** Which node enqueued each tick of `name`, from the nodes' "cron tick enqueued" log lines. */
function enqueuers(nodes: Node[], name: string): Map<string, string> {
  const byTick = new Map<string, string>();
  for (const node of nodes) {
    for (const line of node.logLines()) {
      if (line["msg"] === "cron tick enqueued" && line["cron"] === name) byTick.set(String(line["tick"]), node.name);
    }
  }
  return byTick;
}

test(
  "a schedule created on one node ticks exactly once per second across three, with the node enqueueing its ticks killed -9 midway",
  { skip: POSTGRES_SKIP, timeout: 120_000 },
  async (t) => {
    const c = await createCluster(t, { change: allowSchedules, logLevel: "info" });
    const nodes = await Promise.all(["s1", "s2", "s3"].map((name) => c.start(name)));
    await everySecond(c, nodes[0] as Node, "every-second");

    const before = await ticksReached(c, "every-second", 5);
    // The node that enqueued the latest tick is the one to kill: the others must take over from it.
    const latest = new Date(Math.max(...before.keys())).toISOString();
    const winner = await until("the log line of the latest tick", async () => {
      const name = enqueuers(nodes, "every-second").get(latest);
      return nodes.find((node) => node.name === name);
    });
    winner.child.kill("SIGKILL");
    await winner.exited;
    // A node's clock is corrected by its measured offset to the database's, off by a few milliseconds when measured in a
    // busy start: the killed node may have fired a tick just after this instant a little early. A second later, none.
    const takenOverFrom = Date.now() + 1000;
    const survivors = nodes.filter((node) => node !== winner);
    const after = await ticksReached(c, "every-second", 5, takenOverFrom);
    await admin(c, survivors[0] as Node, "POST", "/schedules/every-second/pause");

    const ticks = [...(await jobsPerTick(c, "every-second"))].sort(([a], [b]) => a - b);
    // A tick is committed before its node logs it: waits for the log lines of the survivors' ticks.
    const survivorTicks = [...after.keys()]
      .filter((tick) => tick > takenOverFrom)
      .map((tick) => new Date(tick).toISOString());
    const byNode = await until("a log line of every tick after the kill", async () => {
      const lines = enqueuers(nodes, "every-second");
      return survivorTicks.every((tick) => lines.has(tick)) ? lines : undefined;
    });
    t.diagnostic(
      `${ticks.length} ticks; ${before.size} before ${winner.name} was killed; created on s1; enqueued by ` +
        JSON.stringify(Object.fromEntries([...byNode].map(([tick, node]) => [tick.slice(11, 19), node]))),
    );
    const repeated = ticks.filter(([, count]) => count !== 1);
    assert.deepEqual(repeated, [], "one job per tick, never two");
    for (const [tick] of ticks) assert.equal(tick % 1000, 0, `${new Date(tick).toISOString()} is a whole second`);
    // Every second from the first tick to the last has its job: three nodes ticking, one dying, none missed.
    const first = ticks[0]?.[0] ?? 0;
    const last = ticks.at(-1)?.[0] ?? 0;
    const missing: string[] = [];
    for (let tick = first; tick <= last; tick += 1000)
      if (!ticks.some(([at]) => at === tick)) missing.push(new Date(tick).toISOString());
    assert.deepEqual(missing, [], "no second without its tick");
    // The recorded ticks name the same jobs, one each.
    const recorded = await c.db.query<{ n: number; jobs: number }>(
      "SELECT count(*)::int AS n, count(DISTINCT job_id)::int AS jobs FROM cron_ticks WHERE name = 'every-second'",
    );
    assert.deepEqual(recorded.rows[0], { n: ticks.length, jobs: ticks.length });
    // The survivors took over from the node that had been enqueueing the ticks.
    const afterKill = survivorTicks.map((tick) => byNode.get(tick));
    assert.ok(
      afterKill.length >= 5 && afterKill.every((name) => survivors.some((node) => node.name === name)),
      `ticks after ${winner.name}'s kill by ${afterKill.join(", ")}`,
    );
  },
);

test(
  "a pause, a resume and a delete through one node hold on every node: nothing while paused, none of the missed ticks after, nothing once deleted",
  { skip: POSTGRES_SKIP, timeout: 120_000 },
  async (t) => {
    const c = await createCluster(t, { change: allowSchedules });
    const [n1, n2, n3] = await Promise.all(["q1", "q2", "q3"].map((name) => c.start(name)));
    assert.ok(n1 && n2 && n3);
    await everySecond(c, n1, "watched");
    await everySecond(c, n2, "clock");
    await ticksReached(c, "watched", 2);

    await admin(c, n2, "POST", "/schedules/watched/pause");
    const whenPaused = await jobsPerTick(c, "watched");
    const pausedAt = Date.now();
    // Three ticks of the other schedule, every node ticking: time enough for any node that missed the pause.
    await ticksReached(c, "clock", 3, pausedAt + 1000);
    assert.deepEqual(await jobsPerTick(c, "watched"), whenPaused, "no tick enqueued while paused");

    const resumedAt = Date.now();
    await admin(c, n3, "POST", "/schedules/watched/resume");
    const resumed = await ticksReached(c, "watched", 2, resumedAt);
    const lastBeforePause = Math.max(...whenPaused.keys());
    const skipped = [...resumed.keys()].filter((tick) => tick > lastBeforePause && tick < resumedAt - 1000);
    assert.deepEqual(
      skipped.map((tick) => new Date(tick).toISOString()),
      [],
      "the ticks missed while paused are not enqueued late",
    );

    await admin(c, n1, "DELETE", "/schedules/watched");
    const whenDeleted = await jobsPerTick(c, "watched");
    const deletedAt = Date.now();
    await ticksReached(c, "clock", 3, deletedAt + 1000);
    assert.deepEqual(await jobsPerTick(c, "watched"), whenDeleted, "no tick enqueued once deleted");
    for (const ticks of [whenPaused, resumed, whenDeleted])
      assert.ok([...ticks.values()].every((count) => count === 1));
    t.diagnostic(`watched: ${whenDeleted.size} ticks in all`);
  },
);

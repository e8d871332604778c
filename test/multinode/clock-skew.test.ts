/**
 * One fast clock must not steal another node's work (docs/delivery.md, issue "security holes", hole 8): on
 * PostgreSQL the database's clock decides what is due, what has expired and what a row is stamped with. Two services
 * share one schema: node A with the machine's clock, node B with a clock 120 s ahead (an injected offset), both on
 * the database's clock as in production. An outside attack saw B deliver a job delayed by 60 s at once, stamp its
 * jobs 120 s in the future, and rescue A's running job while A's delivery was still in flight.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test, type TestContext } from "node:test";
import { pino } from "pino";
import { mintToken } from "../../src/auth/tokens.js";
import { systemClock, type Clock } from "../../src/clock.js";
import { parseConfig, type Config } from "../../src/config.js";
import { rescueExpiredLeases } from "../../src/maintenance/rescuer.js";
import { createService, type Service } from "../../src/service.js";
import { dropSchema, freshSchemaName, POSTGRES_SKIP, POSTGRES_URL } from "../helpers/postgres.js";
import { rawTestConfig } from "../helpers/service.js";
import { deferred, reply, startTarget } from "../helpers/target.js";

const SKEW_MS = 120_000;
const fastClock: Clock = { now: () => Date.now() + SKEW_MS };

interface Node {
  service: Service;
  clock: Clock;
  config: Config;
  warnings: string[];
}

async function startNode(
  t: TestContext,
  options: { schema: string; clock: Clock; targetUrl: string; worker: boolean },
): Promise<Node> {
  assert.ok(POSTGRES_URL);
  const dir = mkdtempSync(join(tmpdir(), "opqueue-skew-"));
  const raw = rawTestConfig(dir);
  const url = new URL(POSTGRES_URL);
  url.searchParams.set("schema", options.schema);
  raw["database"] = url.toString();
  raw["database_pool_size"] = 4;
  raw["target"] = { base_url: options.targetUrl, audience: "product" };
  raw["cron"] = [];
  raw["shutdown"] = { grace_ms: 100 };
  const config = parseConfig({ raw, baseDir: dir, env: {} });
  const warnings: string[] = [];
  const logger = pino({ level: "warn" }, { write: (line: string) => void warnings.push(line) });
  const service = await createService({
    config,
    clock: options.clock,
    databaseTime: true,
    logger,
    worker: options.worker,
  });
  t.after(async () => {
    await service.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { service, clock: options.clock, config, warnings };
}

async function enqueueOn(
  node: Node,
  body: object,
): Promise<{ status: number; job: { id: string; run_at: string; created_at: string } }> {
  const token = await mintToken({
    auth: node.config.auth,
    clock: node.clock,
    sub: "u1",
    op: "createUser",
    rid: `req-${Math.random()}`,
  });
  const res = await node.service.app.inject({
    method: "POST",
    url: "/jobs",
    headers: { authorization: `Bearer ${token}` },
    payload: body,
  });
  return {
    status: res.statusCode,
    job: (res.json() as { job: { id: string; run_at: string; created_at: string } }).job,
  };
}

test(
  "a node whose clock runs 120 s fast stamps its jobs on the database's clock, claims no job delayed by 60 s, and never rescues another node's running job",
  { skip: POSTGRES_SKIP, timeout: 60_000 },
  async (t) => {
    const schema = freshSchemaName();
    t.after(() => dropSchema(schema));
    const held = deferred();
    t.after(() => held.resolve());
    const target = await startTarget(t, async (_request, res) => {
      await held.promise;
      reply(res, 204);
    });
    const a = await startNode(t, { schema, clock: systemClock, targetUrl: target.url, worker: true });
    const b = await startNode(t, { schema, clock: fastClock, targetUrl: target.url, worker: false });

    // The skew is measured, exposed and warned about.
    const offsetMs = await b.service.store.clockOffset();
    assert.ok(Math.abs(offsetMs + SKEW_MS) < 5_000, `B measures the database ~120 s behind it (got ${offsetMs} ms)`);
    assert.ok(
      b.warnings.some((line) => line.includes("differs from the database's")),
      "B warned about its clock",
    );
    const metrics = await b.service.metrics.registry.getSingleMetricAsString("opqueue_clock_offset_seconds");
    const gauge = Number(/^opqueue_clock_offset_seconds (\S+)$/m.exec(metrics)?.[1]);
    assert.ok(Math.abs(gauge + SKEW_MS / 1000) < 5, `the gauge says the database is ~120 s behind B:\n${metrics}`);
    assert.ok(Math.abs(await a.service.store.clockOffset()) < 5_000, "A's clock agrees with the database");

    // A job enqueued on B with a 60 s delay is due 60 s from the database's now, not B's.
    const before = Date.now();
    const delayed = await enqueueOn(b, { operation_id: "buildReport", request: { body: {} }, delay_ms: 60_000 });
    assert.equal(delayed.status, 201);
    const createdAt = Date.parse(delayed.job.created_at);
    const runAt = Date.parse(delayed.job.run_at);
    assert.ok(
      createdAt >= before - 5_000 && createdAt <= Date.now() + 5_000,
      `created_at ${delayed.job.created_at} is the database's now`,
    );
    assert.equal(runAt - createdAt, 60_000);
    // B's claim, on the database's clock, finds nothing due.
    assert.deepEqual(await b.service.store.jobClaimMany({ limit: 10 }), []);
    assert.equal((await b.service.store.jobGet({ id: delayed.job.id }))?.status, "pending");

    // A delivers a job to a target that holds its answer; B's rescuer, 120 s ahead, must not take it.
    a.service.start();
    const running = await enqueueOn(a, {
      operation_id: "sendWelcomeEmail",
      request: { path_params: { userId: "42" } },
    });
    await target.waitForRequests(1);
    assert.equal(
      await rescueExpiredLeases({
        settings: b.service.settings,
        store: b.service.store,
        clock: b.clock,
        telemetry: b.service.telemetry,
      }),
      0,
    );
    const stillRunning = await a.service.store.jobGet({ id: running.job.id });
    assert.equal(stillRunning?.status, "running");
    assert.equal(stillRunning?.attempt, 1);
    held.resolve();
    await target.waitForRequests(1);
  },
);

/**
 * Blocked rate keys (issue 28, item 1; BENCHMARKS.md section 6, "Blocked rate keys"), on SQLite and on PostgreSQL:
 * does a rate key that used its rate_per_key hold back other work? Everything is real: a `node dist/cli.js serve` child
 * with a generated config, enqueues over HTTP (`POST /jobs/batch`, 1,000 a batch) from this process, and deliveries to
 * bench/peers/flow-target.ts, which keeps every arrival.
 *
 * `operations.buildReport.rate_per_key` is {limit 1, period_ms 3,600,000}. Each of K rate keys gets two jobs: one is
 * delivered, the other is held back by its rate for an hour. Once one job of every key has arrived, probes are
 * enqueued one at a time, alternately a job of an unrelated operation (`renderChart`'s twin: `buildReport` without a
 * rate key) and a job of a fresh rate key, and each one's wait is measured from its enqueue's answer to its arrival at
 * the target. Before lanes were held (issue 28), 10,000 keys held an unrelated job back for over a minute.
 *
 *   npx tsx bench/blocked-keys.ts [--engine sqlite,postgres] [--keys 100000] [--probes 10] [--out FILE]
 *     [--into bench/results/flow-DATE.json]
 *
 * --into merges the figures into a flow results file (bench/flow.ts) as `blockedKeys`; `npx tsx bench/flow.ts --report
 * FILE` then puts section 6, with them, into BENCHMARKS.md.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { request } from "undici";
import { mintToken } from "../src/auth/tokens.js";
import { systemClock } from "../src/clock.js";
import { Context, SIZES, waitUntil } from "./lib/context.js";
import { parsedAuth, startNode, wallNow, type Arrival } from "./lib/flow-node.js";
import { Child, ROOT } from "./lib/ipc.js";
import { requireBuild, type ServeProcess } from "./lib/opqueue.js";
import type { BlockedKeysResults, BlockedKeysRun, FlowResults } from "./lib/flow-report.js";
import { Progress } from "./lib/progress.js";
import type { Engine } from "./lib/results.js";
import { summarize } from "./lib/stats.js";

const { values } = parseArgs({
  options: {
    engine: { type: "string", default: "sqlite,postgres" },
    keys: { type: "string", default: "100000" },
    probes: { type: "string", default: "10" },
    out: { type: "string" },
    into: { type: "string" },
  },
});

const OPERATION = "buildReport";
const BATCH = 1000;
const KEY_RATE = { limit: 1, period_ms: 3_600_000, burst: 1 };

async function enqueueToken(rid: string): Promise<string> {
  return mintToken({
    auth: parsedAuth(),
    clock: systemClock,
    sub: "bench-user",
    op: "createUser",
    rid,
    ttlSeconds: 300,
  });
}

/** Enqueues `jobs` (bodies of POST /jobs) in batches of 1,000; fails unless every item is created. */
async function enqueueAll(serve: ServeProcess, jobs: object[], progress: Progress): Promise<void> {
  for (let start = 0; start < jobs.length; start += BATCH) {
    const token = await enqueueToken(`blocked-${Date.now().toString(36)}-${start}`);
    const response = await request(`${serve.url}/jobs/batch`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: JSON.stringify({ jobs: jobs.slice(start, start + BATCH) }),
    });
    const answer = (await response.body.json()) as { results?: Array<{ status: number }> };
    const created = answer.results?.filter((item) => item.status === 201).length ?? 0;
    if (response.statusCode !== 200 || created !== Math.min(BATCH, jobs.length - start)) {
      throw new Error(
        `batch at ${start}: ${response.statusCode}, ${created} created: ${JSON.stringify(answer).slice(0, 300)}`,
      );
    }
    progress.update(`enqueued ${Math.min(start + BATCH, jobs.length)}/${jobs.length}`);
  }
}

async function runEngine(options: {
  ctx: Context;
  engine: Engine;
  target: Child;
  targetOrigin: string;
  keys: number;
  probes: number;
}): Promise<BlockedKeysRun> {
  const { ctx, engine, target, keys, probes } = options;
  const progress = new Progress(`blocked keys ${engine}`);
  const operations = { [OPERATION]: { rate_per_key: KEY_RATE } };
  const serve = await startNode({ ctx, engine, name: "blocked", targetOrigin: options.targetOrigin, operations });
  await target.call("reset");

  const enqueueStart = performance.now();
  const jobs: object[] = [];
  for (let k = 0; k < keys; k++) {
    for (const g of ["first", "second"]) {
      jobs.push({ operation_id: OPERATION, rate_key: `key-${k}`, request: { body: { g, k } } });
    }
  }
  await enqueueAll(serve, jobs, progress);
  const enqueueSeconds = (performance.now() - enqueueStart) / 1000;
  await waitUntil(
    async () => {
      // One job of each key: its first, or (on PostgreSQL, where a claim skips a job another claim has locked) its
      // second, the first then waiting for the key's next hour.
      const { counts } = await target.call<{ counts: Record<string, number> }>("counts");
      const delivered = (counts["first"] ?? 0) + (counts["second"] ?? 0);
      progress.update(`one job of each key delivered: ${delivered}/${keys}`);
      return delivered >= keys;
    },
    keys * 10 + 120_000,
    200,
  );
  const firstJobsSeconds = (performance.now() - enqueueStart) / 1000 - enqueueSeconds;

  const unrelatedWaitMs: number[] = [];
  const freshKeyWaitMs: number[] = [];
  const answeredAt = new Map<string, number>();
  for (let i = 0; i < probes * 2; i++) {
    const fresh = i % 2 === 1;
    const group = fresh ? "fresh" : "unrelated";
    const body = fresh
      ? { operation_id: OPERATION, rate_key: `fresh-${i}`, request: { body: { g: group, k: i } } }
      : { operation_id: OPERATION, request: { body: { g: group, k: i } } };
    const token = await enqueueToken(`probe-${Date.now().toString(36)}-${i}`);
    const response = await request(`${serve.url}/jobs`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: JSON.stringify(body),
    });
    const text = await response.body.text();
    answeredAt.set(`${group}/${i}`, wallNow());
    if (response.statusCode !== 201) throw new Error(`probe ${i}: ${response.statusCode} ${text}`);
    // The counts, not the arrivals, while waiting: a read of every arrival would load the machine being measured.
    const expected = Math.floor(i / 2) + 1;
    await waitUntil(
      async () => ((await target.call<{ counts: Record<string, number> }>("counts")).counts[group] ?? 0) >= expected,
      120_000,
      2,
    );
    progress.update(`probe ${i + 1}/${probes * 2} (${group}) delivered`);
  }
  for (const [g, k, wall] of await target.call<Arrival[]>("arrivals")) {
    const answered = answeredAt.get(`${g}/${k}`);
    if (answered === undefined) continue;
    (g === "fresh" ? freshKeyWaitMs : unrelatedWaitMs).push(wall - answered);
  }
  const { counts } = await target.call<{ counts: Record<string, number> }>("counts");
  await serve.stop();
  progress.done(
    `unrelated ${unrelatedWaitMs.map(Math.round).join(", ")} ms; fresh key ${freshKeyWaitMs.map(Math.round).join(", ")} ms`,
  );
  const extra = (counts["first"] ?? 0) + (counts["second"] ?? 0) - keys;
  return { keys, enqueueSeconds, firstJobsSeconds, unrelatedWaitMs, freshKeyWaitMs, secondJobsDelivered: extra };
}

async function main(): Promise<void> {
  requireBuild(ROOT, "this checkout");
  const engines = (values.engine ?? "").split(",").filter(Boolean) as Engine[];
  const keys = Number(values.keys);
  const probes = Number(values.probes);
  const ctx = new Context("quick", SIZES.quick, engines, { peers: false });
  const results: BlockedKeysResults["results"] = {};
  const loadavgStart = loadavg();
  try {
    const target = await Child.start({ name: "flow-target", file: "bench/peers/flow-target.ts" });
    ctx.defer(() => target.stop());
    const targetOrigin = `http://127.0.0.1:${(target.info as { port: number }).port}`;
    for (const engine of engines)
      results[engine] = await runEngine({ ctx, engine, target, targetOrigin, keys, probes });
  } finally {
    await ctx.close();
  }
  const date = new Date().toISOString().slice(0, 10);
  const out = resolve(values.out ?? join(ROOT, "bench/results", `blocked-keys-${date}.json`));
  mkdirSync(join(out, ".."), { recursive: true });
  const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim();
  const command = `npx tsx bench/blocked-keys.ts${process.argv.length > 2 ? ` ${process.argv.slice(2).join(" ")}` : ""}`;
  const blocked: BlockedKeysResults = { date, command, commit, keys, probes, loadavg: loadavgStart, results };
  writeFileSync(out, `${JSON.stringify(blocked, null, 2)}\n`);
  if (values.into) {
    const into = resolve(values.into);
    const flow = JSON.parse(readFileSync(into, "utf8")) as FlowResults;
    writeFileSync(into, `${JSON.stringify({ ...flow, blockedKeys: blocked }, null, 2)}\n`);
    console.log(`merged into ${into}: \`npx tsx bench/flow.ts --report ${values.into}\` puts it into BENCHMARKS.md`);
  }
  for (const [engine, run] of Object.entries(results) as Array<[string, BlockedKeysRun]>) {
    const u = summarize(run.unrelatedWaitMs);
    const f = summarize(run.freshKeyWaitMs);
    console.log(
      `${engine}: ${run.keys} keys blocked; unrelated job waited median ${u.median.toFixed(1)} ms, max ${u.max.toFixed(1)} ms; ` +
        `fresh key median ${f.median.toFixed(1)} ms, max ${f.max.toFixed(1)} ms; jobs beyond one per key ${run.secondJobsDelivered}; ` +
        `enqueue ${run.enqueueSeconds.toFixed(1)} s, first jobs ${run.firstJobsSeconds.toFixed(1)} s`,
    );
  }
  console.log(`results: ${out}`);
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);

/**
 * The flow control benchmark (BENCHMARKS.md, section 6), on SQLite and on PostgreSQL. Everything is real: a
 * `node dist/cli.js serve` child with a generated config, enqueues over HTTP from the load generator's process, and
 * deliveries to a node:http target in a process of its own (bench/peers/flow-target.ts) that keeps every arrival.
 *
 * - Rate per key: `operations.buildReport.rate_per_key` {limit 5, period_ms 1000, burst 1}; 100 rate keys × 50 jobs
 *   enqueued while the operation is paused, then resumed. Measured at the target: the aggregate rate (expected 500/s)
 *   and each key's rate and gaps (expected 5/s, 200 ms apart).
 * - Fairness: user A's backlog of 50,000 jobs enqueued while paused, then resumed (no limits); user B enqueues one job
 *   at a time as A's deliveries reach 10, 25, 40, 55 and 70 %. Measured: B's wait (enqueue answered → arrival at
 *   the target), A's deliveries meanwhile, and what strict FIFO would give (A's undelivered jobs, all ahead of B).
 *
 * Writes bench/results/flow-<date>.json (keeping the `drain` figures bench/drain-compare.ts merged into it) and prints
 * section 6. Build first (`npm run build`).
 *
 *   npx tsx bench/flow.ts [--engine sqlite,postgres] [--runs 1] [--keys 100] [--jobs-per-key 50] [--backlog 50000]
 *     [--out FILE]
 *   npx tsx bench/flow.ts --report FILE.json    put section 6 from FILE into BENCHMARKS.md (nothing else changes)
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join, relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { request } from "undici";
import { mintToken } from "../src/auth/tokens.js";
import { systemClock } from "../src/clock.js";
import { Context, SIZES, waitUntil } from "./lib/context.js";
import {
  flowSection,
  spliceFlowSection,
  type FairnessProbe,
  type FairnessRun,
  type FlowResults,
  type RateRun,
} from "./lib/flow-report.js";
import { startNode, parsedAuth, wallNow, type Arrival } from "./lib/flow-node.js";
import { Child, ROOT } from "./lib/ipc.js";
import { requireBuild, type ServeProcess } from "./lib/opqueue.js";
import { Progress } from "./lib/progress.js";
import { describeEnvironment, sampleBusyCores, type Engine } from "./lib/results.js";
import { percentile, summarize } from "./lib/stats.js";

const { values } = parseArgs({
  options: {
    engine: { type: "string", default: "sqlite,postgres" },
    runs: { type: "string", default: "1" },
    keys: { type: "string", default: "100" },
    "jobs-per-key": { type: "string", default: "50" },
    backlog: { type: "string", default: "50000" },
    out: { type: "string" },
    report: { type: "string" },
  },
});

const OPERATION = "buildReport";
const KEY_RATE = { limit: 5, period_ms: 1000, burst: 1 };
/** B enqueues when A's deliveries reach these shares of the backlog. */
const PROBE_SHARES = [0.1, 0.25, 0.4, 0.55, 0.7];
/** Connections of the load generator for the bulk enqueues (as the enqueue scenario). */
const ENQUEUE_CONNECTIONS = 32;

/** POST /operations/{OPERATION}/{pause|resume} with a site administrator's token. */
async function control(serve: ServeProcess, adminToken: string, action: "pause" | "resume"): Promise<void> {
  const response = await request(`${serve.url}/operations/${OPERATION}/${action}`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminToken}` },
  });
  const text = await response.body.text();
  if (response.statusCode !== 200) throw new Error(`${action}: ${response.statusCode} ${text}`);
}

/** Enqueues `bodies` round-robin `count` times over HTTP from the load generator; fails unless all are accepted. */
async function bulkEnqueue(options: {
  ctx: Context;
  serve: ServeProcess;
  bodies: string[];
  count: number;
  users: number;
  ridPrefix: string;
  progress: Progress;
  label: string;
}): Promise<number> {
  const result = await options.ctx.load(
    {
      origin: options.serve.url ?? "",
      path: "/jobs",
      method: "POST",
      connections: ENQUEUE_CONNECTIONS,
      count: options.count,
      headers: { "content-type": "application/json" },
      bodies: options.bodies,
      mint: { ridPrefix: options.ridPrefix, users: options.users },
      expectStatus: 201,
    },
    (ok) => options.progress.update(`${options.label}: ${ok}/${options.count} enqueued`),
  );
  if (result.ok !== options.count) {
    throw new Error(
      `${options.label}: ${result.ok}/${options.count} enqueued (${result.firstError ?? JSON.stringify(result.other)})`,
    );
  }
  return result.rate;
}

async function targetCounts(target: Child): Promise<{ counts: Record<string, number>; duplicates: number }> {
  return target.call("counts");
}

/** Number of ascending `times` at or before `t`. */
function countUpTo(times: number[], t: number): number {
  let low = 0;
  let high = times.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if ((times[middle] ?? Infinity) <= t) low = middle + 1;
    else high = middle;
  }
  return low;
}

/** Scenario a: many rate keys, each limited to KEY_RATE. */
async function rateRun(options: {
  ctx: Context;
  engine: Engine;
  target: Child;
  targetOrigin: string;
  adminToken: string;
  keys: number;
  jobsPerKey: number;
  progress: Progress;
}): Promise<RateRun> {
  const { ctx, engine, target, keys, jobsPerKey, progress } = options;
  const serve = await startNode({
    ctx,
    engine,
    name: "flow-rate",
    targetOrigin: options.targetOrigin,
    operations: { [OPERATION]: { rate_per_key: KEY_RATE } },
  });
  const loadavgStart = loadavg();
  await control(serve, options.adminToken, "pause");
  await target.call("reset");
  const count = keys * jobsPerKey;
  const bodies = Array.from({ length: keys }, (_, k) =>
    JSON.stringify({ operation_id: OPERATION, rate_key: `key-${k}`, request: { body: { g: "rate", k } } }),
  );
  await bulkEnqueue({
    ctx,
    serve,
    bodies,
    count,
    users: 32,
    ridPrefix: `flow-rate-${Date.now().toString(36)}`,
    progress,
    label: "rate",
  });
  const resumedAt = wallNow();
  await control(serve, options.adminToken, "resume");
  const periodMs = KEY_RATE.period_ms / KEY_RATE.limit;
  await waitUntil(
    async () => {
      const { counts } = await targetCounts(target);
      progress.update(`rate: ${counts["rate"] ?? 0}/${count} delivered`);
      return (counts["rate"] ?? 0) >= count;
    },
    jobsPerKey * periodMs * 2 + 60_000,
    100,
  );
  const { duplicates } = await targetCounts(target);
  const arrivals = (await target.call<Arrival[]>("arrivals")).filter(([group]) => group === "rate");
  await serve.stop();

  const byKey = new Map<string, number[]>();
  for (const [, key, wall] of arrivals) {
    const times = byKey.get(key) ?? [];
    times.push(wall);
    byKey.set(key, times);
  }
  const perKey: number[] = [];
  const gaps: number[] = [];
  for (const times of byKey.values()) {
    times.sort((a, b) => a - b);
    const first = times[0] ?? 0;
    const last = times.at(-1) ?? 0;
    if (times.length > 1) perKey.push(((times.length - 1) / (last - first)) * 1000);
    for (let i = 1; i < times.length; i++) gaps.push((times[i] ?? 0) - (times[i - 1] ?? 0));
  }
  const all = arrivals.map(([, , wall]) => wall).sort((a, b) => a - b);
  const t0 = all[0] ?? 0;
  const tEnd = all.at(-1) ?? 0;
  const steadyFrom = t0 + 1000;
  const steadyTo = tEnd - 1000;
  const steadyRate = ((countUpTo(all, steadyTo) - countUpTo(all, steadyFrom)) / (steadyTo - steadyFrom)) * 1000;
  const keyRates = summarize(perKey);
  gaps.sort((a, b) => a - b);
  return {
    keys,
    jobsPerKey,
    limit: KEY_RATE,
    delivered: arrivals.length,
    duplicates,
    firstDelayMs: t0 - resumedAt,
    spanMs: tEnd - t0,
    idealSpanMs: (jobsPerKey - 1) * periodMs,
    steadyRate,
    expectedRate: (keys * KEY_RATE.limit * 1000) / KEY_RATE.period_ms,
    perKeyRate: { min: keyRates.min, median: keyRates.median, max: keyRates.max },
    minGapMs: percentile(gaps, 0),
    shortGapShare: countUpTo(gaps, periodMs * 0.9) / Math.max(1, gaps.length),
    loadavg: loadavgStart,
  };
}

/** Scenario b: A's backlog, B's single jobs. */
async function fairnessRun(options: {
  ctx: Context;
  engine: Engine;
  target: Child;
  targetOrigin: string;
  adminToken: string;
  backlog: number;
  progress: Progress;
}): Promise<FairnessRun> {
  const { ctx, engine, target, backlog, progress } = options;
  const serve = await startNode({ ctx, engine, name: "flow-fair", targetOrigin: options.targetOrigin, operations: {} });
  const loadavgStart = loadavg();
  await control(serve, options.adminToken, "pause");
  await target.call("reset");
  // users: 1 makes every assertion's sub `user-0`: A.
  const bodies = [JSON.stringify({ operation_id: OPERATION, request: { body: { g: "A" } } })];
  const enqueueRate = await bulkEnqueue({
    ctx,
    serve,
    bodies,
    count: backlog,
    users: 1,
    ridPrefix: `flow-a-${Date.now().toString(36)}`,
    progress,
    label: "fairness: A's backlog",
  });
  const auth = parsedAuth();
  const bTokens = await Promise.all(
    PROBE_SHARES.map((_, i) =>
      mintToken({
        auth,
        clock: systemClock,
        sub: "user-b",
        op: "createUser",
        rid: `flow-b-${Date.now().toString(36)}-${i}`,
        ttlSeconds: 300,
      }),
    ),
  );
  await control(serve, options.adminToken, "resume");
  const answered: number[] = [];
  for (const [i, share] of PROBE_SHARES.entries()) {
    await waitUntil(
      async () => {
        const { counts } = await targetCounts(target);
        progress.update(`fairness: A ${counts["A"] ?? 0}/${backlog} delivered, B ${counts["B"] ?? 0}/${i}`);
        return (counts["A"] ?? 0) >= share * backlog;
      },
      120_000,
      2,
    );
    const response = await request(`${serve.url}/jobs`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${bTokens[i]}` },
      body: JSON.stringify({ operation_id: OPERATION, request: { body: { g: "B", k: i } } }),
    });
    const text = await response.body.text();
    answered.push(wallNow());
    if (response.statusCode !== 201) throw new Error(`B's enqueue ${i}: ${response.statusCode} ${text}`);
  }
  await waitUntil(
    async () => {
      const { counts } = await targetCounts(target);
      progress.update(
        `fairness: A ${counts["A"] ?? 0}/${backlog} delivered, B ${counts["B"] ?? 0}/${PROBE_SHARES.length}`,
      );
      return (counts["A"] ?? 0) >= backlog && (counts["B"] ?? 0) >= PROBE_SHARES.length;
    },
    backlog * 2 + 60_000,
    100,
  );
  const { duplicates } = await targetCounts(target);
  const arrivals = await target.call<Arrival[]>("arrivals");
  await serve.stop();

  const aTimes = arrivals
    .filter(([group]) => group === "A")
    .map(([, , wall]) => wall)
    .sort((a, b) => a - b);
  const aRate = ((aTimes.length - 1) / ((aTimes.at(-1) ?? 0) - (aTimes[0] ?? 0))) * 1000;
  const probes: FairnessProbe[] = PROBE_SHARES.map((share, i) => {
    const arrival = arrivals.find(([group, key]) => group === "B" && key === String(i));
    const at = answered[i] ?? 0;
    const deliveredAt = arrival?.[2] ?? Number.NaN;
    const aBefore = countUpTo(aTimes, at);
    const fifoAhead = backlog - aBefore;
    return {
      aDeliveredShare: aBefore / backlog,
      waitMs: deliveredAt - at,
      aDeliveriesMeanwhile: countUpTo(aTimes, deliveredAt) - aBefore,
      fifoAhead,
      fifoWaitMs: (fifoAhead / aRate) * 1000,
    };
  });
  return { backlog, enqueueRate, aRate, probes, duplicates, loadavg: loadavgStart };
}

function gitState(): { commit: string; srcDirty: boolean } {
  try {
    const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim();
    const dirty = execFileSync("git", ["status", "--porcelain", "--", "src", "migrations"], {
      cwd: ROOT,
      encoding: "utf8",
    }).trim();
    return { commit, srcDirty: dirty !== "" };
  } catch {
    return { commit: "?", srcDirty: false };
  }
}

/** Puts section 6 of `file` into BENCHMARKS.md, leaving the rest as it is. */
function writeSection(file: string): void {
  const results = JSON.parse(readFileSync(file, "utf8")) as FlowResults;
  const path = join(ROOT, "BENCHMARKS.md");
  const section = flowSection(results, relative(ROOT, file));
  writeFileSync(path, spliceFlowSection(readFileSync(path, "utf8"), section));
  console.log(section);
}

async function main(): Promise<void> {
  if (values.report) {
    writeSection(resolve(values.report));
    return;
  }
  requireBuild(ROOT, "this checkout");
  const engines = (values.engine ?? "").split(",").filter(Boolean) as Engine[];
  for (const engine of engines)
    if (engine !== "sqlite" && engine !== "postgres") throw new Error(`unknown engine ${engine}`);
  const runs = Number(values.runs);
  const keys = Number(values.keys);
  const jobsPerKey = Number(values["jobs-per-key"]);
  const backlog = Number(values.backlog);
  const started = performance.now();
  const git = gitState();
  const environment = await describeEnvironment();
  const busyCoresBefore = await sampleBusyCores();
  const command = `npx tsx bench/flow.ts${process.argv.length > 2 ? ` ${process.argv.slice(2).join(" ")}` : ""}`;
  process.stderr.write(
    `${command}: engines ${engines.join(", ")}, load average ${environment.machine["loadavg_at_start"]}\n`,
  );

  // The sizes are unused here; the context gives the load generator, a temporary folder and clean-up.
  const ctx = new Context("quick", SIZES.quick, engines, { peers: false });
  const stop = () => {
    process.stderr.write("\ninterrupted: cleaning up\n");
    void ctx.close().finally(() => process.exit(130));
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  const rate: FlowResults["rate"] = {};
  const fairness: FlowResults["fairness"] = {};
  try {
    const target = await Child.start({ name: "flow-target", file: "bench/peers/flow-target.ts" });
    ctx.defer(() => target.stop());
    const targetOrigin = `http://127.0.0.1:${(target.info as { port: number }).port}`;
    const adminToken = await mintToken({ auth: parsedAuth(), clock: systemClock, sub: "bench-admin", siteAdmin: true });
    for (let run = 0; run < runs; run++) {
      for (const engine of engines) {
        const progress = new Progress(`flow ${engine} run ${run + 1}/${runs}`);
        const rateResult = await rateRun({ ctx, engine, target, targetOrigin, adminToken, keys, jobsPerKey, progress });
        (rate[engine] ??= []).push(rateResult);
        progress.update(
          `rate: ${Math.round(rateResult.steadyRate)}/s (expected ${rateResult.expectedRate}), per key ` +
            `${rateResult.perKeyRate.min.toFixed(2)}–${rateResult.perKeyRate.max.toFixed(2)}/s`,
          true,
        );
        const fairResult = await fairnessRun({ ctx, engine, target, targetOrigin, adminToken, backlog, progress });
        (fairness[engine] ??= []).push(fairResult);
        progress.done(
          `fairness: A ${Math.round(fairResult.aRate)}/s; B waited ${fairResult.probes.map((p) => Math.round(p.waitMs)).join(", ")} ms`,
        );
      }
    }
  } finally {
    await ctx.close();
  }

  const date = new Date().toISOString().slice(0, 10);
  const out = resolve(values.out ?? join(ROOT, "bench/results", `flow-${date}.json`));
  mkdirSync(join(out, ".."), { recursive: true });
  // The drain regression figures (bench/drain-compare.ts --into) stay.
  const previous = existsSync(out) ? (JSON.parse(readFileSync(out, "utf8")) as Partial<FlowResults>) : {};
  const results: FlowResults = {
    date,
    command,
    git,
    machine: environment.machine,
    versions: environment.versions,
    settings: {
      SQLite: "WAL, synchronous=FULL (a temporary file)",
      PostgreSQL: "synchronous_commit on, a fresh schema",
      "worker.concurrency": "64",
      enqueues: `${ENQUEUE_CONNECTIONS} keep-alive connections, a fresh assertion per request`,
      "log level": "warn",
    },
    busyCoresBefore,
    rate,
    fairness,
    seconds: Math.round((performance.now() - started) / 1000),
    ...(previous.drain ? { drain: previous.drain } : {}),
  };
  writeFileSync(out, `${JSON.stringify(results, null, 2)}\n`);
  console.log(flowSection(results, relative(ROOT, out)));
  console.log(
    `\nresults: ${out} (put section 6 into BENCHMARKS.md with \`npx tsx bench/flow.ts --report ${relative(ROOT, out)}\`)`,
  );
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);

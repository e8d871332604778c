/**
 * The capacity model checked against a PostgreSQL server held to a share of one core: `npx tsx bench/capacity.ts
 * [options]` (as root: it needs the cgroup v1 `cpu` controller at /sys/fs/cgroup/cpu).
 *
 * BENCHMARKS.md's "Capacity of one PostgreSQL core" predicts, from a run's medians, the jobs per second one server
 * core carries through their whole life: a million µs divided by the server's CPU to enqueue a job and to drain it
 * (the drain's with as many nodes as this check starts, from scenario 9, when the run measured it).
 * Issue 31 asks for that to be checked on a server pinned to one core and driven until it saturates. On two cores,
 * the nodes, the load generator and the target (about 200 µs of CPU per job between them) cannot saturate a whole
 * server core with the other, so this holds the server to a share of a core instead (`--cores`, a CFS quota on a
 * cgroup holding the postmaster and every process under it, which new backends inherit) and compares the measured
 * ceiling with the model's rate times that share.
 *
 * Each run, on a fresh schema: `--nodes` serve processes start and warm up, unthrottled, and the tables are analyzed
 * (autovacuum's work, off on the benchmark machine, with every job sampled finished); then the server is held to
 * its share, and the load generator enqueues `--seconds` worth of the model's rate through the first node's API,
 * due at once, as fast as it is answered (single jobs from 32 connections, or batches of 500 from 8), while every
 * node drains them to the no-op target. The ceiling is the jobs divided by the time from the first enqueue to the
 * last arrival; the server's CPU over that time, divided by the share's, shows it was saturated.
 *
 * Options:
 *   --cores X         the server's share of one core (default 0.25)
 *   --period-us N     the CFS period (default 10,000: a short period spreads the share evenly)
 *   --shape S         single, batch or both (default both)
 *   --seconds N       jobs per run: the model's rate times N (default 30)
 *   --nodes N         serve processes (default 3)
 *   --runs N          runs per shape (default 2)
 *   --users N         the assertions' users, each a lane of its own (default 32)
 *   --sql FILE        run FILE's statements in each fresh schema before its ANALYZE (an experiment: a setting, a
 *                     function restated), with the schema first on the search path
 *   --whole-life      also the whole-life model: each run of a shape is preceded by the same run with the server free
 *                     (no quota), whose CPU per job, read over the whole life of every job at once (enqueue, claim,
 *                     outcome, the sweepers, as they cost each other), makes a second model: cores × 1,000,000 ÷ its
 *                     median. The model above adds parts measured apart, and misses what they cost each other
 *   --results FILE    the results whose medians make the model (default the newest in bench/results/)
 *   --merge-into FILE also record the check in FILE (a results file), which BENCHMARKS.md then shows
 */
import { mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Context, SIZES } from "./lib/context.js";
import { serverCpuMedian, SystemCpu, treeOrder, type CpuReading, type CpuRoot } from "./lib/cpu.js";
import type { ServeProcess } from "./lib/opqueue.js";
import { adminClient, assertNoHeldSnapshot } from "./lib/pg.js";
import { Progress } from "./lib/progress.js";
import { nodesSystem, type CapacityCheck, type Results, type ScenarioId } from "./lib/results.js";
import { OpqueueDb, waitForDrain, warmUp } from "./scenarios/common.js";

const { values } = parseArgs({
  options: {
    cores: { type: "string", default: "0.25" },
    "period-us": { type: "string", default: "10000" },
    shape: { type: "string", default: "both" },
    seconds: { type: "string", default: "30" },
    nodes: { type: "string", default: "3" },
    runs: { type: "string", default: "2" },
    users: { type: "string", default: "32" },
    sql: { type: "string", multiple: true },
    results: { type: "string" },
    "merge-into": { type: "string" },
    "whole-life": { type: "boolean", default: false },
  },
});
const cores = Number(values.cores);
const periodUs = Number(values["period-us"]);
const seconds = Number(values.seconds);
const nodes = Number(values.nodes);
const runs = Number(values.runs);
if (!(cores > 0 && cores <= 1)) throw new Error("--cores must be above 0 and at most 1");

type Shape = "single" | "batch";
const shapes: Shape[] = values.shape === "both" ? ["single", "batch"] : [values.shape as Shape];
for (const shape of shapes) if (shape !== "single" && shape !== "batch") throw new Error(`no shape ${shape}`);

const CGROUP_ROOT = "/sys/fs/cgroup/cpu";
const CGROUP = join(CGROUP_ROOT, "opqueue-bench-capacity");

/** The PostgreSQL server's processes held to `cores` of one core, until `release`. */
class CpuQuota {
  static hold(postmaster: number): CpuQuota {
    mkdirSync(CGROUP, { recursive: true });
    writeFileSync(join(CGROUP, "cpu.cfs_period_us"), String(periodUs));
    writeFileSync(join(CGROUP, "cpu.cfs_quota_us"), String(Math.round(cores * periodUs)));
    // Parents first: a backend forked meanwhile lands in its parent's group, or is moved here by its own write.
    for (const pid of treeOrder(postmaster)) moveTo(CGROUP, pid);
    return new CpuQuota();
  }

  /** How often the quota ran out, from the group's own counters. */
  throttled(): { periods: number; throttled: number } {
    const stat = readFileSync(join(CGROUP, "cpu.stat"), "utf8");
    const read = (name: string) => Number(new RegExp(`^${name} (\\d+)`, "m").exec(stat)?.[1] ?? 0);
    return { periods: read("nr_periods"), throttled: read("nr_throttled") };
  }

  release(): void {
    releaseGroup();
  }
}

function moveTo(group: string, pid: number): void {
  try {
    writeFileSync(join(group, "cgroup.procs"), String(pid));
  } catch (error) {
    // A backend that exited meanwhile.
    if ((error as NodeJS.ErrnoException).code !== "ESRCH") throw error;
  }
}

/** Moves every process of the group back to the root group and removes it (also what a previous run left). */
function releaseGroup(): void {
  let pids: string[];
  try {
    pids = readFileSync(join(CGROUP, "cgroup.procs"), "utf8").split("\n").filter(Boolean);
  } catch {
    return;
  }
  for (const pid of pids) moveTo(CGROUP_ROOT, Number(pid));
  rmdirSync(CGROUP);
}

/** The newest results file under bench/results/. */
function newestResults(): string {
  const files = readdirSync("bench/results")
    .filter((name) => /^\d{4}-\d{2}-\d{2}\.json$/.test(name))
    .sort();
  const newest = files.at(-1);
  if (!newest) throw new Error("no results file in bench/results/: give --results");
  return join("bench/results", newest);
}

/**
 * The model's server CPU per job, in µs, for a shape: the enqueue's median plus the drain's. The drain's is that of
 * as many nodes draining together as this check starts (scenario 9) when the results hold it, else one node's
 * (scenario 2).
 */
function modelUs(results: Results, shape: Shape): { enqueueUs: number; drainUs: number } {
  const db = (scenario: ScenarioId, system: string) => {
    const value = serverCpuMedian(results, scenario, system);
    if (value === undefined) throw new Error(`the results hold no ${scenario} figure of ${system}'s server CPU`);
    return value;
  };
  return {
    enqueueUs: shape === "single" ? db("enqueue", "opqueue-postgres") : db("batch", "opqueue-postgres-batch"),
    drainUs: serverCpuMedian(results, "nodes", nodesSystem(nodes)) ?? db("drain", "opqueue-postgres"),
  };
}

/** Enqueue bodies due at once: one job each, or `size` jobs each for POST /jobs/batch. */
function bodies(shape: Shape): string[] {
  const job = (n: number) => ({ operation_id: "buildReport", request: { body: { report: "daily", n } } });
  if (shape === "single") return Array.from({ length: 64 }, (_, n) => JSON.stringify(job(n)));
  return Array.from({ length: 8 }, (_, b) =>
    JSON.stringify({ jobs: Array.from({ length: 500 }, (_, i) => job(b * 500 + i)) }),
  );
}

/**
 * The server's CPU, in ms a second, while `nodes` serve processes run with nothing to do (unthrottled, 10 s after 3 s
 * of start-up): their polls, heartbeats and maintenance passes, which a share of a core pays before any job.
 */
async function idleServerCpu(ctx: Context, origin: string, server: CpuRoot): Promise<number> {
  const db = await OpqueueDb.create(ctx, "postgres", "capacity-idle", origin);
  const serves = await db.startIdleNodes(nodes);
  try {
    const cpu = new SystemCpu({ system: [], database: server });
    const before = cpu.read().databaseMs ?? 0;
    await new Promise((resolve) => setTimeout(resolve, 10_000));
    return ((cpu.read().databaseMs ?? 0) - before) / 10;
  } finally {
    for (const serve of serves) await serve.stop();
  }
}

/** ANALYZE of every table of a schema. */
async function analyze(schema: string): Promise<void> {
  const client = await adminClient();
  try {
    await client.query(`ANALYZE ${schema}.job_specs, ${schema}.job_state, ${schema}.job_attempts, ${schema}.chains`);
  } finally {
    await client.end();
  }
}

/** Runs each `--sql` file's statements in the schema (an experiment: a function restated, a setting). */
async function experiment(schema: string): Promise<void> {
  if (!values.sql) return;
  const client = await adminClient();
  try {
    for (const file of values.sql) {
      await client.query(`SET search_path = ${schema}; ${readFileSync(file, "utf8")}; RESET search_path`);
    }
  } finally {
    await client.end();
  }
}

/** What one run measured, the server held to its share or free. */
interface Measured {
  /** Jobs per second from the first enqueue to the last arrival. */
  rate: number;
  enqueueSeconds: number;
  serverUsPerJob: number;
  nodeUsPerJob: number;
  /** The server's CPU over the run, in cores. */
  coresUsed: number;
  /** Held: the CFS periods in which the quota ran out, as a share of all. */
  throttledShare?: number;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = (sorted.length - 1) / 2;
  return ((sorted[Math.floor(middle)] ?? Number.NaN) + (sorted[Math.ceil(middle)] ?? Number.NaN)) / 2;
}

const fmt = (value: number, digits = 0) =>
  value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });

async function main(): Promise<void> {
  const resultsFile = values.results ?? newestResults();
  const results = JSON.parse(readFileSync(resultsFile, "utf8")) as Results;
  await assertNoHeldSnapshot();
  const ctx = new Context("quick", SIZES.quick, ["postgres"], { peers: false });
  const progress = new Progress("capacity");
  const checks: CapacityCheck[] = [];
  let idleMsPerSecond = Number.NaN;
  releaseGroup();
  try {
    const server = await ctx.postgresServer();
    if (server.root === null) throw new Error(`the server's processes cannot be held: ${server.reason}`);
    const origin = await ctx.targetOrigin();
    const root = server.root;
    /**
     * One run: nodes started and warmed, the tables analyzed, then `jobs` enqueued and drained, with the server held to
     * its share (`held`) or free. Its CPU and the rate are read from the first enqueue to the last arrival.
     */
    const measure = async (run: { shape: Shape; jobs: number; label: string; held: boolean }): Promise<Measured> => {
      const { shape, jobs, label } = run;
      const perRequest = shape === "batch" ? 500 : 1;
      const db = await OpqueueDb.create(ctx, "postgres", "capacity", origin);
      const serves: ServeProcess[] = [];
      let quota: CpuQuota | undefined;
      try {
        serves.push(...(await db.startNodes(nodes, "bench-capacity")));
        progress.update(`${label}: warming ${nodes} node(s) up`, true);
        for (const serve of serves) await warmUp(ctx, serve, ctx.sizes.drain.warmupJobs);
        // What autovacuum does within a minute of a new schema's first rows (it is off on the benchmark machine):
        // without statistics, the planner takes the tables for empty and scans them whole as they grow.
        await experiment(db.schema ?? "");
        await analyze(db.schema ?? "");
        const cpu = new SystemCpu({
          system: serves.map((s) => ({ pid: s.pid, scope: "process" })),
          database: root,
        });
        let end: CpuReading | undefined;
        await ctx.resetTarget({ expect: jobs, onEdge: (edge) => (edge === "end" ? (end = cpu.read()) : undefined) });
        if (run.held) quota = CpuQuota.hold(root.pid);
        const throttledBefore = quota?.throttled();
        const startWall = Date.now();
        const start = cpu.read();
        progress.update(
          `${label}: ${fmt(jobs)} jobs through a server ${run.held ? `held to ${cores} of a core` : "held to nothing"}`,
          true,
        );
        const load = await ctx.load({
          origin: serves[0]?.url ?? "",
          path: shape === "batch" ? "/jobs/batch" : "/jobs",
          method: "POST",
          connections: shape === "batch" ? 8 : 32,
          count: jobs / perRequest,
          headers: { "content-type": "application/json" },
          bodies: bodies(shape),
          mint: { ridPrefix: `bench-capacity-${Date.now().toString(36)}`, users: Number(values.users) },
          expectStatus: shape === "batch" ? 200 : 201,
          ...(shape === "batch" ? { items: { expectStatus: 201 } } : {}),
        });
        const accepted = load.items ? load.items.ok : load.ok;
        if (accepted !== jobs) throw new Error(`${accepted}/${jobs} jobs enqueued (${load.firstError ?? "-"})`);
        const enqueuedMs = Date.now() - startWall;
        const drained = await waitForDrain(ctx, { count: jobs, fromWall: startWall, progress, label });
        const throttledAfter = quota?.throttled();
        quota?.release();
        quota = undefined;
        if (!end) throw new Error("the last arrival was not heard");
        const elapsedMs = drained.rateFromStart > 0 ? (jobs / drained.rateFromStart) * 1000 : Number.NaN;
        const serverMs = (end.databaseMs ?? 0) - (start.databaseMs ?? 0);
        const figures: Measured = {
          rate: drained.rateFromStart,
          enqueueSeconds: enqueuedMs / 1000,
          serverUsPerJob: (serverMs * 1000) / jobs,
          nodeUsPerJob: ((end.systemMs - start.systemMs) * 1000) / jobs,
          coresUsed: serverMs / elapsedMs,
        };
        if (throttledBefore && throttledAfter) {
          figures.throttledShare =
            (throttledAfter.throttled - throttledBefore.throttled) /
            Math.max(1, throttledAfter.periods - throttledBefore.periods);
        }
        if (!run.held) {
          progress.update(
            `${label}: ${fmt(figures.rate)} jobs/s, server ${fmt(figures.serverUsPerJob, 1)} µs a job, ` +
              `${fmt(figures.coresUsed, 2)} of a core used`,
            true,
          );
        }
        return figures;
      } finally {
        quota?.release();
        for (const serve of serves) await serve.stop();
      }
    };
    idleMsPerSecond = await idleServerCpu(ctx, origin, root);
    progress.update(`${nodes} idle node(s): the server's CPU ${fmt(idleMsPerSecond, 1)} ms a second`, true);
    for (const shape of shapes) {
      const { enqueueUs, drainUs } = modelUs(results, shape);
      const predicted = (cores * 1_000_000) / (enqueueUs + drainUs);
      const perRequest = shape === "batch" ? 500 : 1;
      const jobs = Math.ceil((predicted * seconds) / perRequest) * perRequest;
      const measured: CapacityCheck["runs"] = [];
      const free: Measured[] = [];
      for (let run = 0; run < runs; run++) {
        if (values["whole-life"]) {
          free.push(await measure({ shape, jobs, label: `${shape} run ${run + 1}/${runs}, free`, held: false }));
        }
        const figures = await measure({ shape, jobs, label: `${shape} run ${run + 1}/${runs}`, held: true });
        measured.push({
          rate: figures.rate,
          enqueueSeconds: figures.enqueueSeconds,
          serverUsPerJob: figures.serverUsPerJob,
          nodeUsPerJob: figures.nodeUsPerJob,
          saturation: figures.coresUsed / cores,
          throttledShare: figures.throttledShare ?? 0,
        });
        progress.update(
          `${shape} run ${run + 1}/${runs}: ${fmt(figures.rate)} jobs/s (model ${fmt(predicted)}), enqueued in ` +
            `${fmt(figures.enqueueSeconds, 1)} s, node ${fmt(figures.nodeUsPerJob)} µs, server ` +
            `${fmt(figures.serverUsPerJob, 1)} µs a job, ${fmt((figures.coresUsed / cores) * 100)} % of its share used, ` +
            `throttled in ${fmt((figures.throttledShare ?? 0) * 100)} % of periods`,
          true,
        );
      }
      const rate = median(measured.map((r) => r.rate));
      const check: CapacityCheck = {
        shape,
        cores,
        nodes,
        jobs,
        enqueueUs,
        drainUs,
        predicted,
        runs: measured,
        ratio: rate / predicted,
      };
      if (free.length > 0) {
        const serverUsPerJob = median(free.map((r) => r.serverUsPerJob));
        const wholeLifePredicted = (cores * 1_000_000) / serverUsPerJob;
        check.wholeLife = {
          runs: free.map(({ rate, serverUsPerJob, nodeUsPerJob, coresUsed }) => ({
            rate,
            serverUsPerJob,
            nodeUsPerJob,
            coresUsed,
          })),
          serverUsPerJob,
          predicted: wholeLifePredicted,
          ratio: rate / wholeLifePredicted,
        };
      }
      checks.push(check);
    }
  } finally {
    releaseGroup();
    await ctx.close();
  }
  const lines = [
    "",
    `| jobs enqueued by | model (µs a job) | model at ${cores} of a core (jobs/s) | measured (jobs/s) | measured ÷ model | server µs a job, measured | share used |`,
    "|---|---:|---:|---:|---:|---:|---:|",
    ...checks.map(
      (c) =>
        `| ${c.shape} | ${fmt(c.enqueueUs + c.drainUs)} | ${fmt(c.predicted)} | ${c.runs.map((r) => fmt(r.rate)).join(", ")} | ` +
        `${fmt(c.ratio, 2)} | ${c.runs.map((r) => fmt(r.serverUsPerJob)).join(", ")} | ` +
        `${c.runs.map((r) => `${fmt(r.saturation * 100)} %`).join(", ")} |`,
    ),
    ...(checks.some((c) => c.wholeLife)
      ? [
          "",
          `| jobs enqueued by | server free: µs a job (each run) | whole-life model at ${cores} of a core (jobs/s) | measured ÷ it |`,
          "|---|---:|---:|---:|",
          ...checks.map(
            (c) =>
              `| ${c.shape} | ${c.wholeLife?.runs.map((r) => fmt(r.serverUsPerJob)).join(", ") ?? "-"} | ` +
              `${c.wholeLife ? fmt(c.wholeLife.predicted) : "-"} | ${c.wholeLife ? fmt(c.wholeLife.ratio, 2) : "-"} |`,
          ),
        ]
      : []),
  ];
  progress.done(`model from ${resultsFile}`);
  console.log(lines.join("\n"));
  if (values["merge-into"]) {
    const file = values["merge-into"];
    const target = JSON.parse(readFileSync(file, "utf8")) as Results;
    // A check of another share (or another number of nodes) is kept beside this one.
    const kept = (target.capacityCheck?.checks ?? []).filter((c) => c.cores !== cores || c.nodes !== nodes);
    target.capacityCheck = {
      commands: [
        ...(target.capacityCheck?.commands ?? []),
        `npx tsx bench/capacity.ts ${process.argv.slice(2).join(" ")}`,
      ],
      periodUs,
      idle: { nodes, serverMsPerSecond: idleMsPerSecond },
      checks: [...kept, ...checks],
    };
    writeFileSync(file, `${JSON.stringify(target, null, 2)}\n`);
  }
}

await main();

/**
 * Scenario 2, drain: N due jobs (pre-inserted in bulk) delivered to a no-op target answering 204, opqueue's worker
 * concurrency 64. The rate is read at the target, between the first and the last arrival. References in the same
 * run: the load generator hitting the target directly with the same request (the delivery limit), graphile-worker
 * (default settings, and with its batched local queue) and pg-boss, whose tasks POST the same request to the same
 * target over an undici keep-alive pool.
 */
import { ENGINE_LABEL, jobsPerRun, type Context } from "../lib/context.js";
import { Child } from "../lib/ipc.js";
import { freshSchema, dropSchema, PG_URL } from "../lib/pg.js";
import { Progress } from "../lib/progress.js";
import { ScenarioRecorder, type ScenarioResult } from "../lib/results.js";
import { OpqueueDb, opqueueDrainRun, waitForDrain, wallNow } from "./common.js";
import { summaryLine } from "./enqueue.js";

/** Drain runs of opqueue on one database (empty, or holding a backlog); records rate and peak RSS. */
export async function opqueueDrain(
  ctx: Context,
  db: OpqueueDb,
  recorder: ScenarioRecorder,
  progress: Progress,
  system: string,
  label: string,
): Promise<void> {
  const { sizes } = ctx;
  const rates: number[] = [];
  const fromStart: number[] = [];
  const rss: number[] = [];
  const cpu: number[] = [];
  for (let run = 0; run < sizes.runs; run++) {
    const result = await opqueueDrainRun(ctx, db, {
      count: sizes.drain.jobs,
      progress,
      label: `${label} run ${run + 1}/${sizes.runs}`,
    });
    rates.push(result.rate);
    fromStart.push(result.rateFromStart);
    if (result.peakRssMb !== null) rss.push(result.peakRssMb);
    if (result.cpuUsPerJob !== null) cpu.push(result.cpuUsPerJob);
    if (result.duplicates > 0) recorder.note(`${label} run ${run + 1}: ${result.duplicates} repeated deliveries`);
    if (result.overrunMs > 0) recorder.note(`${label} run ${run + 1}: the warm-up ended ${result.overrunMs} ms after the jobs were due`);
    if (result.succeeded !== sizes.drain.jobs) {
      recorder.note(`${label} run ${run + 1}: ${result.succeeded} jobs succeeded, expected ${sizes.drain.jobs}`);
    }
    progress.update(`${label} run ${run + 1}/${sizes.runs}: ${Math.round(result.rate)}/s`, true);
  }
  const engine = db.engine;
  recorder.add({ system, label, engine, metric: "rate", unit: "jobs/s", values: rates });
  recorder.add({ system, label, engine, metric: "rate_from_start", unit: "jobs/s", values: fromStart });
  recorder.add({ system, label, engine, metric: "peak_rss", unit: "MB", values: rss });
  if (cpu.length > 0) recorder.add({ system, label, engine, metric: "cpu_per_job", unit: "µs", values: cpu });
}

/**
 * Drain runs of a peer worker (graphile-worker or pg-boss child) that inserts its own jobs. A warm-up drain of
 * `warmupJobs` comes first, unmeasured, as opqueue's nodes get one.
 */
async function peerDrain(
  ctx: Context,
  recorder: ScenarioRecorder,
  progress: Progress,
  options: { system: string; label: string; child: Child; startArgs: unknown },
): Promise<void> {
  const { sizes } = ctx;
  const rates: number[] = [];
  const fromStart: number[] = [];
  const target = await ctx.target();
  for (let run = -1; run < sizes.runs; run++) {
    const warmup = run < 0;
    const count = warmup ? sizes.drain.warmupJobs : sizes.drain.peerJobs;
    if (count === 0) continue;
    const label = warmup ? `${options.label} warm-up` : `${options.label} run ${run + 1}/${sizes.runs}`;
    progress.update(`${label}: inserting ${count} due jobs`, true);
    await options.child.call("insert", { count, delayMs: 0 });
    await target.call("reset");
    const fromWall = wallNow();
    await options.child.call("startWorker", options.startArgs);
    const result = await waitForDrain(ctx, { count, fromWall, progress, label });
    await options.child.call("stopWorker");
    if (warmup) continue;
    rates.push(result.rate);
    fromStart.push(result.rateFromStart);
    if (result.duplicates > 0) recorder.note(`${label}: ${result.duplicates} repeated deliveries`);
    progress.update(`${label}: ${Math.round(result.rate)}/s`, true);
  }
  const common = { system: options.system, label: options.label, engine: null };
  recorder.add({ ...common, metric: "rate", unit: "jobs/s", values: rates });
  recorder.add({ ...common, metric: "rate_from_start", unit: "jobs/s", values: fromStart });
}

export async function runDrain(ctx: Context): Promise<ScenarioResult> {
  const { sizes } = ctx;
  const recorder = new ScenarioRecorder("drain", "Drain to a no-op target", {
    jobs: `${jobsPerRun(sizes.drain)} jobs per run, pre-inserted in bulk`,
    runs: sizes.runs,
    "opqueue worker": `concurrency ${sizes.drain.concurrency}, a fresh serve process per run, warmed up with ${sizes.drain.warmupJobs.toLocaleString("en-US")} jobs over HTTP before the measured jobs fall due`,
    peers: `one warm-up drain of ${sizes.drain.warmupJobs.toLocaleString("en-US")} jobs, then the runs in the same process`,
    target: "node:http answering 204, own process",
    rate: "at the target, first to last arrival",
  });
  const progress = new Progress("drain");
  const origin = await ctx.targetOrigin();
  for (const engine of ctx.engines) {
    const db = await OpqueueDb.create(ctx, engine, "drain", origin);
    await opqueueDrain(ctx, db, recorder, progress, `opqueue-${engine}`, `opqueue (${ENGINE_LABEL[engine]})`);
  }

  if (!ctx.peers) {
    progress.done(summaryLine(recorder, ["opqueue-sqlite", "opqueue-postgres"]));
    return recorder.finish();
  }
  // The delivery limit: the load generator sends the same request straight to the target.
  const direct: number[] = [];
  for (let run = 0; run < sizes.runs; run++) {
    const result = await ctx.load(
      {
        origin,
        path: "/reports",
        method: "POST",
        connections: sizes.drain.concurrency,
        durationMs: sizes.enqueue.durationMs,
        warmupMs: 500,
        headers: { "content-type": "application/json", authorization: "Bearer peer-delivery" },
        bodies: Array.from({ length: 64 }, (_, n) => JSON.stringify({ n })),
        expectStatus: 204,
      },
      (ok) => progress.update(`target alone run ${run + 1}/${sizes.runs}: ${ok}`),
    );
    direct.push(result.rate);
  }
  recorder.add({ system: "target", label: "target alone (load generator, 64 connections)", engine: null, metric: "rate", unit: "req/s", values: direct });

  const gwSchema = freshSchema("bench_gw");
  const bossSchema = freshSchema("bench_boss");
  try {
    const graphile = await Child.start({
      name: "graphile-worker",
      file: "bench/peers/graphile.ts",
      args: ["--database", PG_URL, "--schema", gwSchema, "--target", origin],
    });
    try {
      await peerDrain(ctx, recorder, progress, {
        system: "graphile-default",
        label: "graphile-worker (default)",
        child: graphile,
        startArgs: { batched: false },
      });
      await peerDrain(ctx, recorder, progress, {
        system: "graphile-batched",
        label: "graphile-worker (batched local queue)",
        child: graphile,
        startArgs: { batched: true },
      });
    } finally {
      await graphile.stop();
    }
    const boss = await Child.start({
      name: "pg-boss",
      file: "bench/peers/pgboss.ts",
      args: ["--database", PG_URL, "--schema", bossSchema, "--target", origin],
    });
    try {
      await peerDrain(ctx, recorder, progress, { system: "pgboss", label: "pg-boss", child: boss, startArgs: {} });
    } finally {
      await boss.stop();
    }
  } finally {
    await dropSchema(gwSchema);
    await dropSchema(bossSchema);
  }
  progress.done(
    summaryLine(recorder, ["opqueue-sqlite", "opqueue-postgres", "target", "graphile-default", "graphile-batched", "pgboss"]),
  );
  return recorder.finish();
}

/**
 * Scenario 2, drain: N due jobs (pre-inserted in bulk) delivered to a no-op target answering 204, opqueue's worker
 * concurrency 64. The rate is read at the target, between the first and the last arrival. References in the same
 * run: the load generator hitting the target directly with the same request (the delivery limit), graphile-worker
 * (default settings, and with its batched local queue), pg-boss and BullMQ (bench/lib/bullmq.ts's backends), whose
 * tasks POST the same request to the same target over an undici keep-alive pool.
 */
import { prepareBullmqBackends } from "../lib/bullmq.js";
import { ENGINE_LABEL, jobsPerRun, type Context } from "../lib/context.js";
import { CpuSeries, CpuWindow, SystemCpu, type CpuRoot } from "../lib/cpu.js";
import { Child } from "../lib/ipc.js";
import { freshSchema, dropSchema, PG_URL } from "../lib/pg.js";
import { Progress } from "../lib/progress.js";
import { ScenarioRecorder, type ScenarioResult } from "../lib/results.js";
import { OpqueueDb, opqueueDrainRun, turnOrder, waitForDrain, wallNow, type DrainRun } from "./common.js";
import { summaryLine } from "./enqueue.js";

/**
 * Drain runs of opqueue on one database (empty, or holding a backlog), one at a time; `record` adds their figures.
 * With `allCpuOf`, the CPU per job of every process of the system is read too: the node, and `allCpuOf.database`.
 */
class OpqueueDrainSeries {
  private readonly rates: number[] = [];
  private readonly fromStart: number[] = [];
  private readonly rss: number[] = [];
  private readonly cpu: number[] = [];
  private readonly mainCpu: number[] = [];
  private readonly allCpu = new CpuSeries();

  constructor(
    private readonly ctx: Context,
    private readonly db: OpqueueDb,
    private readonly recorder: ScenarioRecorder,
    private readonly progress: Progress,
    readonly system: string,
    readonly label: string,
    private readonly allCpuOf?: { database: CpuRoot | null },
  ) {}

  async run(run: number): Promise<void> {
    const { sizes } = this.ctx;
    const label = `${this.label} run ${run + 1}/${sizes.runs}`;
    const result = await opqueueDrainRun(this.ctx, this.db, {
      count: sizes.drain.jobs,
      progress: this.progress,
      label,
      ...(this.allCpuOf ? { cpu: this.allCpuOf } : {}),
    });
    this.rates.push(result.rate);
    this.allCpu.push(result.cpuAll);
    this.fromStart.push(result.rateFromStart);
    if (result.peakRssMb !== null) this.rss.push(result.peakRssMb);
    if (result.cpuUsPerJob !== null) this.cpu.push(result.cpuUsPerJob);
    if (result.mainCpuUsPerJob !== null) this.mainCpu.push(result.mainCpuUsPerJob);
    if (result.duplicates > 0) this.recorder.note(`${label}: ${result.duplicates} repeated deliveries`);
    if (result.overrunMs > 0)
      this.recorder.note(`${label}: the warm-up ended ${result.overrunMs} ms after the jobs were due`);
    if (result.succeeded !== sizes.drain.jobs) {
      this.recorder.note(`${label}: ${result.succeeded} jobs succeeded, expected ${sizes.drain.jobs}`);
    }
    this.progress.update(`${label}: ${Math.round(result.rate)}/s`, true);
  }

  record(): void {
    const common = { system: this.system, label: this.label, engine: this.db.engine };
    this.recorder.add({ ...common, metric: "rate", unit: "jobs/s", values: this.rates });
    this.recorder.add({ ...common, metric: "rate_from_start", unit: "jobs/s", values: this.fromStart });
    this.recorder.add({ ...common, metric: "peak_rss", unit: "MB", values: this.rss });
    if (this.cpu.length > 0) this.recorder.add({ ...common, metric: "cpu_per_job", unit: "µs", values: this.cpu });
    if (this.mainCpu.length > 0) {
      this.recorder.add({ ...common, metric: "cpu_main_per_job", unit: "µs", values: this.mainCpu });
    }
    this.allCpu.record(this.recorder, common);
  }
}

/**
 * Drain runs of opqueue on several databases (one empty, one holding a backlog), in turns: every database's first
 * run, then every database's second, and so on, so a change in the machine's speed reaches them alike. Each turn runs
 * them in the order the turn before reversed (A B, B A, A B), so that none is always the first of its turn. Records
 * them.
 */
export async function opqueueDrainInTurns(
  ctx: Context,
  subjects: Array<{ db: OpqueueDb; system: string; label: string; cpu?: { database: CpuRoot | null } }>,
  recorder: ScenarioRecorder,
  progress: Progress,
): Promise<void> {
  const series = subjects.map(
    ({ db, system, label, cpu }) => new OpqueueDrainSeries(ctx, db, recorder, progress, system, label, cpu),
  );
  for (let run = 0; run < ctx.sizes.runs; run++) {
    for (const one of turnOrder(series, run)) await one.run(run);
  }
  for (const one of series) one.record();
}

/**
 * Drain runs of a peer worker (a graphile-worker, pg-boss or BullMQ child) that inserts its own jobs, one at a time.
 * `warmUp` drains `warmupJobs` unmeasured, as opqueue's nodes get a warm-up. The CPU per job of the peer's process
 * and of its `database` server is read over the rate's window (first to last arrival).
 */
class PeerDrainSeries {
  private readonly rates: number[] = [];
  private readonly fromStart: number[] = [];
  private readonly allCpu = new CpuSeries();
  private readonly cpu: SystemCpu;

  constructor(
    private readonly ctx: Context,
    private readonly recorder: ScenarioRecorder,
    private readonly progress: Progress,
    readonly options: { system: string; label: string; child: Child; startArgs: unknown; database: CpuRoot | null },
  ) {
    this.cpu = new SystemCpu({
      system: [{ pid: options.child.process.pid ?? 0, scope: "process" }],
      database: options.database,
    });
  }

  async warmUp(): Promise<void> {
    const count = this.ctx.sizes.drain.warmupJobs;
    if (count > 0) await this.drain(count, `${this.options.label} warm-up`);
  }

  async run(run: number): Promise<void> {
    const { sizes } = this.ctx;
    const label = `${this.options.label} run ${run + 1}/${sizes.runs}`;
    const window = new CpuWindow(this.cpu);
    const result = await this.drain(sizes.drain.peerJobs, label, window);
    this.rates.push(result.rate);
    this.fromStart.push(result.rateFromStart);
    this.allCpu.push(window.perJob(sizes.drain.peerJobs - 1));
    if (result.duplicates > 0) this.recorder.note(`${label}: ${result.duplicates} repeated deliveries`);
    this.progress.update(`${label}: ${Math.round(result.rate)}/s`, true);
  }

  private async drain(count: number, label: string, window?: CpuWindow): Promise<DrainRun> {
    const { child, startArgs } = this.options;
    this.progress.update(`${label}: inserting ${count} due jobs`, true);
    await child.call("insert", { count, delayMs: 0 });
    await this.ctx.resetTarget(window ? { expect: count, onEdge: window.edge } : undefined);
    const fromWall = wallNow();
    await child.call("startWorker", startArgs);
    const result = await waitForDrain(this.ctx, { count, fromWall, progress: this.progress, label });
    await child.call("stopWorker");
    return result;
  }

  record(): void {
    const common = { system: this.options.system, label: this.options.label, engine: null };
    this.recorder.add({ ...common, metric: "rate", unit: "jobs/s", values: this.rates });
    this.recorder.add({ ...common, metric: "rate_from_start", unit: "jobs/s", values: this.fromStart });
    this.allCpu.record(this.recorder, common);
  }
}

/** The delivery limit: the load generator sends the same request straight to the target, one run at a time. */
class TargetAloneSeries {
  private readonly rates: number[] = [];

  constructor(
    private readonly ctx: Context,
    private readonly recorder: ScenarioRecorder,
    private readonly progress: Progress,
    private readonly origin: string,
  ) {}

  async run(run: number): Promise<void> {
    const { sizes } = this.ctx;
    const result = await this.ctx.load(
      {
        origin: this.origin,
        path: "/reports",
        method: "POST",
        connections: sizes.drain.concurrency,
        durationMs: sizes.enqueue.durationMs,
        warmupMs: 500,
        headers: { "content-type": "application/json", authorization: "Bearer peer-delivery" },
        bodies: Array.from({ length: 64 }, (_, n) => JSON.stringify({ n })),
        expectStatus: 204,
      },
      (ok) => this.progress.update(`target alone run ${run + 1}/${sizes.runs}: ${ok}`),
    );
    this.rates.push(result.rate);
  }

  record(): void {
    this.recorder.add({
      system: "target",
      label: "target alone (load generator, 64 connections)",
      engine: null,
      metric: "rate",
      unit: "req/s",
      values: this.rates,
    });
  }
}

export async function runDrain(ctx: Context): Promise<ScenarioResult> {
  const { sizes } = ctx;
  const recorder = new ScenarioRecorder("drain", "Drain to a no-op target", {
    jobs: `${jobsPerRun(sizes.drain)} jobs per run, pre-inserted in bulk`,
    runs: sizes.runs,
    "opqueue worker": `concurrency ${sizes.drain.concurrency}, a fresh serve process per run, warmed up with ${sizes.drain.warmupJobs.toLocaleString("en-US")} jobs over HTTP before the measured jobs fall due`,
    peers: `one warm-up drain of ${sizes.drain.warmupJobs.toLocaleString("en-US")} jobs, then the runs in the same process`,
    order:
      "in turns: every system's first run, then every system's second, and so on, so a change in the machine's speed during the scenario reaches them alike",
    target: "node:http answering 204, own process",
    rate: "at the target, first to last arrival",
  });
  const progress = new Progress("drain");
  const origin = await ctx.targetOrigin();
  const postgres = await ctx.postgresCpuRoot((text) => recorder.note(text));
  const series: Array<{ run: (run: number) => Promise<void>; record: () => void }> = [];
  for (const engine of ctx.engines) {
    const db = await OpqueueDb.create(ctx, engine, "drain", origin);
    const database = engine === "postgres" ? postgres : null;
    series.push(
      new OpqueueDrainSeries(ctx, db, recorder, progress, `opqueue-${engine}`, `opqueue (${ENGINE_LABEL[engine]})`, {
        database,
      }),
    );
  }
  const children: Child[] = [];
  const schemas: string[] = [];
  const cleanups: Array<() => Promise<void>> = [];
  try {
    if (ctx.peers) {
      series.push(new TargetAloneSeries(ctx, recorder, progress, origin));
      const gwSchema = freshSchema("bench_gw");
      const bossSchema = freshSchema("bench_boss");
      schemas.push(gwSchema, bossSchema);
      const graphile = await Child.start({
        name: "graphile-worker",
        file: "bench/peers/graphile.ts",
        args: ["--database", PG_URL, "--schema", gwSchema, "--target", origin],
      });
      children.push(graphile);
      const boss = await Child.start({
        name: "pg-boss",
        file: "bench/peers/pgboss.ts",
        args: ["--database", PG_URL, "--schema", bossSchema, "--target", origin],
      });
      children.push(boss);
      const peerOptions = [
        {
          system: "graphile-default",
          label: "graphile-worker (default)",
          child: graphile,
          startArgs: { batched: false },
          database: postgres,
        },
        {
          system: "graphile-batched",
          label: "graphile-worker (batched local queue)",
          child: graphile,
          startArgs: { batched: true },
          database: postgres,
        },
        { system: "pgboss", label: "pg-boss", child: boss, startArgs: {}, database: postgres },
      ];
      const bullmq = await prepareBullmqBackends(ctx, recorder, cleanups);
      for (const backend of bullmq) {
        const label = `BullMQ (${backend.label})`;
        const child = await Child.start({
          name: label,
          file: "bench/peers/bullmq.ts",
          args: [...backend.args, "--target", origin],
        });
        children.push(child);
        peerOptions.push({ system: backend.system, label, child, startArgs: {}, database: backend.redis ?? postgres });
      }
      const peers = peerOptions.map((options) => new PeerDrainSeries(ctx, recorder, progress, options));
      for (const peer of peers) await peer.warmUp();
      series.push(...peers);
    }
    // In turns: every system's first run, then every system's second, and so on.
    for (let run = 0; run < sizes.runs; run++) {
      for (const one of series) await one.run(run);
    }
    for (const one of series) one.record();
  } finally {
    for (const child of children) await child.stop();
    for (const schema of schemas) await dropSchema(schema);
    for (const cleanup of cleanups) await cleanup();
  }
  progress.done(
    summaryLine(recorder, [
      "opqueue-sqlite",
      "opqueue-postgres",
      "target",
      "graphile-default",
      "graphile-batched",
      "pgboss",
      "bullmq",
      "bullmq-postgres",
    ]),
  );
  return recorder.finish();
}

/**
 * Scenario 9, several nodes: scenario 2's drain on PostgreSQL by one node and by several draining together (1, 3, 6
 * in the full mode; 1 and 3 in the quick one), each count on a schema of its own, in turns. What it is for: the
 * server's CPU per delivered job as nodes are added, which should stay where one node's is (wake-ups, `SKIP LOCKED`
 * misses, lane walks and heartbeats all count). The nodes start and warm up with nothing due; then the measured jobs
 * are pre-inserted due shortly after, and the CPU of every node and of the server is read between the first and the
 * last arrival at the target.
 */
import { type Context } from "../lib/context.js";
import { CpuSeries, CpuWindow, SystemCpu, type CpuRoot } from "../lib/cpu.js";
import { Progress } from "../lib/progress.js";
import { NODE_COUNTS, nodesSystem, ScenarioRecorder, type ScenarioResult } from "../lib/results.js";
import { OpqueueDb, waitForDrain, warmUp } from "./common.js";
import { summaryLine } from "./enqueue.js";

/** How long the measured jobs wait after their insert before they fall due: the nodes are warm by then. */
const DUE_AFTER_INSERT_MS = 1500;

class NodesSeries {
  private readonly rates: number[] = [];
  private readonly cpu = new CpuSeries();

  constructor(
    private readonly ctx: Context,
    private readonly db: OpqueueDb,
    private readonly recorder: ScenarioRecorder,
    private readonly progress: Progress,
    private readonly database: CpuRoot | null,
    readonly nodes: number,
  ) {}

  get label(): string {
    return `opqueue (PostgreSQL), ${this.nodes} node${this.nodes === 1 ? "" : "s"}`;
  }

  async run(run: number): Promise<void> {
    const { ctx, db, progress } = this;
    const jobs = ctx.sizes.drain.jobs;
    const label = `${this.label} run ${run + 1}/${ctx.sizes.runs}`;
    const serves = await db.startNodes(this.nodes, "bench-nodes", ctx.serveNodeArgs());
    try {
      progress.update(`${label}: warming ${this.nodes} node(s) up`, true);
      for (const serve of serves) await warmUp(ctx, serve, ctx.sizes.drain.warmupJobs);
      const window = new CpuWindow(
        new SystemCpu({
          system: serves.map((serve) => ({ pid: serve.pid, scope: "process" as const })),
          database: this.database,
        }),
      );
      await ctx.resetTarget({ expect: jobs, onEdge: window.edge });
      progress.update(`${label}: inserting ${jobs.toLocaleString("en-US")} due jobs`, true);
      const dueAt = Date.now() + DUE_AFTER_INSERT_MS;
      await db.preinsert(jobs, dueAt);
      const drained = await waitForDrain(ctx, { count: jobs, fromWall: dueAt, progress, label });
      this.rates.push(drained.rate);
      this.cpu.push(window.perJob(jobs - 1));
      if (drained.duplicates > 0) this.recorder.note(`${label}: ${drained.duplicates} repeated deliveries`);
      progress.update(`${label}: ${Math.round(drained.rate)}/s`, true);
    } finally {
      for (const serve of serves) await serve.stop();
    }
  }

  record(): void {
    const common = { system: nodesSystem(this.nodes), label: this.label, engine: "postgres" as const };
    this.recorder.add({ ...common, metric: "rate", unit: "jobs/s", values: this.rates });
    this.cpu.record(this.recorder, common);
  }
}

export async function runNodes(ctx: Context): Promise<ScenarioResult> {
  const counts = NODE_COUNTS[ctx.mode];
  const recorder = new ScenarioRecorder("nodes", "Several nodes draining together (PostgreSQL)", {
    nodes: counts.join(", "),
    jobs: `${ctx.sizes.drain.jobs.toLocaleString("en-US")} jobs per run, pre-inserted in bulk once the nodes are warm, due ${DUE_AFTER_INSERT_MS / 1000} s after the insert`,
    runs: ctx.sizes.runs,
    "each node": `concurrency ${ctx.sizes.drain.concurrency}, warmed up with ${ctx.sizes.drain.warmupJobs.toLocaleString("en-US")} jobs over its own API`,
    order: "in turns, each node count on a schema of its own",
    CPU: "every node and the server, first to last arrival at the target",
  });
  const progress = new Progress("nodes");
  if (!ctx.engines.includes("postgres")) {
    recorder.note("not run: PostgreSQL is not among this run's engines");
    return recorder.finish();
  }
  const origin = await ctx.targetOrigin();
  const database = await ctx.postgresCpuRoot((text) => recorder.note(text));
  const series: NodesSeries[] = [];
  for (const nodes of counts) {
    const db = await OpqueueDb.create(ctx, "postgres", `nodes-${nodes}`, origin);
    series.push(new NodesSeries(ctx, db, recorder, progress, database, nodes));
  }
  for (let run = 0; run < ctx.sizes.runs; run++) {
    for (const one of series) await one.run(run);
  }
  for (const one of series) one.record();
  progress.done(summaryLine(recorder, counts.map(nodesSystem)));
  return recorder.finish();
}

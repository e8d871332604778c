/**
 * Scenario 1, enqueue over HTTP: 32 keep-alive clients POST /jobs for `buildReport` due in an hour (nothing is
 * delivered), each request with a freshly minted valid assertion (its own chain), as a product whose every request
 * enqueues a job would send; in the full mode also with 256 assertions reused in turn (which opqueue's cache of
 * verified tokens serves). References in the same run: a bare Fastify route that parses the same body and answers
 * 201 (the HTTP limit), and Fastify routes that validate the same body and call graphile-worker's `addJob` or
 * pg-boss's `send` (what a user would build instead).
 */
import { Child } from "../lib/ipc.js";
import { ENGINE_LABEL, type Context } from "../lib/context.js";
import { mintAssertions, type ServeProcess } from "../lib/opqueue.js";
import { freshSchema, dropSchema, PG_URL } from "../lib/pg.js";
import { Progress } from "../lib/progress.js";
import { ScenarioRecorder, type ScenarioResult } from "../lib/results.js";
import { measureEnqueue, OpqueueDb } from "./common.js";

/** Measures opqueue's enqueue on one engine (the database as it is: empty, or with a backlog). */
export async function opqueueEnqueue(
  ctx: Context,
  db: OpqueueDb,
  recorder: ScenarioRecorder,
  progress: Progress,
  system: string,
  label: string,
  assertions: "fresh" | "reused" = "fresh",
): Promise<{ rates: number[]; peakRssMb: number | null }> {
  let serve: ServeProcess | undefined;
  try {
    serve = await db.start(ctx);
    const ridPrefix = `bench-enqueue-${Date.now().toString(36)}`;
    const auth = assertions === "fresh" ? { mint: { ridPrefix, users: 32 } } : { tokens: await mintAssertions(256, ridPrefix) };
    const measured = await measureEnqueue(ctx, { url: serve.url ?? "", ...auth, progress, label, notes: recorder.result.notes });
    const peakRssMb = await serve.stop();
    serve = undefined;
    const engine = db.engine;
    recorder.add({ system, label, engine, metric: "rate", unit: "jobs/s", values: measured.rates });
    recorder.add({ system, label, engine, metric: "p50", unit: "ms", values: measured.p50 });
    recorder.add({ system, label, engine, metric: "p99", unit: "ms", values: measured.p99 });
    if (peakRssMb !== null) recorder.add({ system, label, engine, metric: "peak_rss", unit: "MB", values: [peakRssMb] });
    return { rates: measured.rates, peakRssMb };
  } finally {
    await serve?.stop();
  }
}

/** Measures a reference server (a child process answering POST /jobs on `port` from its ready info). */
async function referenceEnqueue(
  ctx: Context,
  recorder: ScenarioRecorder,
  progress: Progress,
  options: { system: string; label: string; file: string; args?: string[]; startApi?: boolean },
): Promise<void> {
  const child = await Child.start({ name: options.system, file: options.file, args: options.args ?? [] });
  try {
    const port = options.startApi
      ? (await child.call<{ port: number }>("startApi")).port
      : (child.info as { port: number }).port;
    const measured = await measureEnqueue(ctx, {
      url: `http://127.0.0.1:${port}`,
      progress,
      label: options.label,
      notes: recorder.result.notes,
    });
    const common = { system: options.system, label: options.label, engine: null };
    recorder.add({ ...common, metric: "rate", unit: "jobs/s", values: measured.rates });
    recorder.add({ ...common, metric: "p50", unit: "ms", values: measured.p50 });
    recorder.add({ ...common, metric: "p99", unit: "ms", values: measured.p99 });
  } finally {
    await child.stop();
  }
}

export async function runEnqueue(ctx: Context): Promise<ScenarioResult> {
  const { sizes } = ctx;
  const recorder = new ScenarioRecorder("enqueue", "Enqueue over HTTP", {
    clients: `${sizes.enqueue.clients} keep-alive connections, one request in flight each`,
    runs: `${sizes.runs} × ${sizes.enqueue.durationMs / 1000} s (after ${sizes.enqueue.warmupMs / 1000} s warm-up)`,
    body: "buildReport, delay_ms 3,600,000 (nothing delivered)",
    assertions:
      ctx.mode === "full"
        ? "a fresh one per request (its own chain); the second opqueue rows reuse 256 in turn"
        : "a fresh one per request (its own chain)",
  });
  const progress = new Progress("enqueue");
  const origin = await ctx.targetOrigin();
  for (const engine of ctx.engines) {
    const db = await OpqueueDb.create(ctx, engine, "enqueue", origin);
    await opqueueEnqueue(ctx, db, recorder, progress, `opqueue-${engine}`, `opqueue (${ENGINE_LABEL[engine]})`);
    if (ctx.mode === "full") {
      const label = `opqueue (${ENGINE_LABEL[engine]}), 256 reused assertions`;
      await opqueueEnqueue(ctx, db, recorder, progress, `opqueue-${engine}-reused`, label, "reused");
    }
  }
  if (!ctx.peers) {
    progress.done(summaryLine(recorder, ["opqueue-sqlite", "opqueue-postgres"]));
    return recorder.finish();
  }
  await referenceEnqueue(ctx, recorder, progress, { system: "bare", label: "bare Fastify route", file: "bench/peers/bare.ts" });
  const gwSchema = freshSchema("bench_gw");
  const bossSchema = freshSchema("bench_boss");
  try {
    await referenceEnqueue(ctx, recorder, progress, {
      system: "graphile-route",
      label: "Fastify + graphile-worker addJob",
      file: "bench/peers/graphile.ts",
      args: ["--database", PG_URL, "--schema", gwSchema],
      startApi: true,
    });
    await referenceEnqueue(ctx, recorder, progress, {
      system: "pgboss-route",
      label: "Fastify + pg-boss send",
      file: "bench/peers/pgboss.ts",
      args: ["--database", PG_URL, "--schema", bossSchema],
      startApi: true,
    });
  } finally {
    await dropSchema(gwSchema);
    await dropSchema(bossSchema);
  }
  progress.done(summaryLine(recorder, ["opqueue-sqlite", "opqueue-postgres", "bare", "graphile-route", "pgboss-route"]));
  return recorder.finish();
}

/** "system 1,234/s, ..." for the end of a live line. */
export function summaryLine(recorder: ScenarioRecorder, systems: string[], metric = "rate"): string {
  return systems
    .map((system) => recorder.result.figures.find((f) => f.system === system && f.metric === metric))
    .filter((figure) => figure !== undefined)
    .map((figure) => `${figure.system} ${Math.round(figure.summary.median).toLocaleString("en-US")}${figure.unit === "ms" ? " ms" : "/s"}`)
    .join(", ");
}



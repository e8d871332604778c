/**
 * Scenario 3, latency: enqueue-to-target p50/p95/p99 at a fixed rate (100 jobs/s) on an idle service, read on one
 * clock by the latency probe (bench/peers/latency-probe.ts), which both enqueues over HTTP and is the target.
 * opqueue on one node (SQLite, PostgreSQL), and on PostgreSQL across two nodes (enqueue on an API-only node,
 * delivery from a worker-only node, woken by NOTIFY). Reference: graphile-worker measured the same way (a Fastify
 * route calling addJob and a runner with default settings in one process, like one opqueue node).
 */
import { ENGINE_LABEL, type Context } from "../lib/context.js";
import { Child } from "../lib/ipc.js";
import { dropSchema, freshSchema, PG_URL, waitForApplication } from "../lib/pg.js";
import { Progress } from "../lib/progress.js";
import { ScenarioRecorder, type Engine, type ScenarioResult } from "../lib/results.js";
import { OpqueueDb } from "./common.js";
import { summaryLine } from "./enqueue.js";

interface ProbeResult {
  p50: number;
  p95: number;
  p99: number;
  max: number;
  delivered: number;
  sent: number;
  refused: number;
}

async function probeRuns(
  ctx: Context,
  probe: Child,
  recorder: ScenarioRecorder,
  progress: Progress,
  options: { system: string; label: string; engine: Engine | null; url: string; withTokens: boolean },
): Promise<void> {
  const { sizes } = ctx;
  const runs: ProbeResult[] = [];
  for (let run = 0; run < sizes.runs; run++) {
    progress.update(
      `${options.label} run ${run + 1}/${sizes.runs}: ${sizes.latency.jobs} jobs at ${sizes.latency.rate}/s`,
      true,
    );
    const result = await probe.call<ProbeResult>("run", {
      url: options.url,
      ...(options.withTokens ? { mint: { ridPrefix: `bench-latency-${Date.now().toString(36)}`, users: 32 } } : {}),
      rate: sizes.latency.rate,
      count: sizes.latency.jobs,
      warmup: sizes.latency.warmup,
    });
    if (result.delivered !== result.sent || result.refused > 0) {
      recorder.note(
        `${options.label} run ${run + 1}: ${result.delivered}/${result.sent} delivered, ${result.refused} refused`,
      );
    }
    runs.push(result);
  }
  for (const metric of ["p50", "p95", "p99", "max"] as const) {
    recorder.add({
      system: options.system,
      label: options.label,
      engine: options.engine,
      metric,
      unit: "ms",
      values: runs.map((run) => run[metric]),
    });
  }
}

export async function runLatency(ctx: Context): Promise<ScenarioResult> {
  const { sizes } = ctx;
  const recorder = new ScenarioRecorder("latency", "Enqueue-to-target latency", {
    rate: `${sizes.latency.rate} jobs/s`,
    jobs: `${sizes.latency.jobs} per run after ${sizes.latency.warmup} warm-up jobs`,
    runs: sizes.runs,
    clock: "one process enqueues and receives (performance.now())",
    assertions: "a fresh one per enqueue (opqueue)",
  });
  const progress = new Progress("latency");
  const probe = await Child.start({ name: "latency-probe", file: "bench/peers/latency-probe.ts" });
  try {
    const origin = `http://127.0.0.1:${(probe.info as { port: number }).port}`;
    for (const engine of ctx.engines) {
      const db = await OpqueueDb.create(ctx, engine, "latency", origin);
      const serve = await db.start(ctx);
      try {
        await probeRuns(ctx, probe, recorder, progress, {
          system: `opqueue-${engine}`,
          label: `opqueue (${ENGINE_LABEL[engine]}, one node)`,
          engine,
          url: serve.url ?? "",
          withTokens: true,
        });
      } finally {
        await serve.stop();
      }
      if (engine === "postgres") {
        const api = await db.start(ctx, { worker: false, applicationName: "bench-api" });
        const worker = await db.start(ctx, { api: false, applicationName: "bench-worker" });
        try {
          // The worker node is ready once its LISTEN connection is open.
          await waitForApplication("bench-worker-listener");
          await probeRuns(ctx, probe, recorder, progress, {
            system: "opqueue-postgres-2nodes",
            label: "opqueue (PostgreSQL, API node + worker node)",
            engine,
            url: api.url ?? "",
            withTokens: true,
          });
        } finally {
          await api.stop();
          await worker.stop();
        }
      }
    }
    if (ctx.peers) {
      const gwSchema = freshSchema("bench_gw");
      try {
        const graphile = await Child.start({
          name: "graphile-worker",
          file: "bench/peers/graphile.ts",
          args: ["--database", PG_URL, "--schema", gwSchema, "--target", origin],
        });
        try {
          const { port } = await graphile.call<{ port: number }>("startApi");
          await graphile.call("startWorker", { batched: false });
          await probeRuns(ctx, probe, recorder, progress, {
            system: "graphile",
            label: "graphile-worker (default, route + runner in one process)",
            engine: null,
            url: `http://127.0.0.1:${port}`,
            withTokens: false,
          });
        } finally {
          await graphile.stop();
        }
      } finally {
        await dropSchema(gwSchema);
      }
    }
  } finally {
    await probe.stop();
  }
  progress.done(
    summaryLine(recorder, ["opqueue-sqlite", "opqueue-postgres", "opqueue-postgres-2nodes", "graphile"], "p99") +
      " (p99)",
  );
  return recorder.finish();
}

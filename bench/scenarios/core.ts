/**
 * Scenario 5, core: the store alone, no HTTP, to show where time goes. opqueue's built store in its own process
 * (bench/peers/core.ts): `jobInsert` from 32 concurrent callers, then claim 64 / complete 64 with a no-op delivery
 * until empty. References: graphile-worker (`addJob`, 32 at a time; runner with a no-op task, default and batched),
 * pg-boss (`send`, 32 at a time; workers with a no-op handler) and BullMQ on each of its backends (`add`, 32 at a
 * time; a Worker of concurrency 64 with a no-op processor), the drain timed from the first job handled to the queue
 * found empty (polled every 10 ms).
 */
import { join } from "node:path";
import { prepareBullmqBackends } from "../lib/bullmq.js";
import { ENGINE_LABEL, jobsPerRun, type Context } from "../lib/context.js";
import { Child } from "../lib/ipc.js";
import { mintAssertions } from "../lib/opqueue.js";
import { dropSchema, freshSchema, opqueueUrl, PG_URL } from "../lib/pg.js";
import { Progress } from "../lib/progress.js";
import { ScenarioRecorder, type ScenarioResult } from "../lib/results.js";
import { summaryLine } from "./enqueue.js";

const CONCURRENCY = 32;

export async function runCore(ctx: Context): Promise<ScenarioResult> {
  const { sizes } = ctx;
  const n = sizes.core.jobs;
  const recorder = new ScenarioRecorder("core", "The store alone (no HTTP)", {
    enqueue: `${jobsPerRun(sizes.core)} jobs per run, ${CONCURRENCY} concurrent library calls`,
    drain: `the same jobs (due now): opqueue claims 64 and completes 64 (no-op delivery) in a loop; peers run no-op handlers`,
    runs: sizes.runs,
  });
  const progress = new Progress("core");
  const [assertion] = await mintAssertions(1, "bench-core");

  for (const engine of ctx.engines) {
    const label = `opqueue store (${ENGINE_LABEL[engine]})`;
    let url: string;
    if (engine === "sqlite") {
      url = `sqlite:${join(ctx.tmp, `core-${Date.now().toString(36)}.db`)}`;
    } else {
      const schema = freshSchema("bench_opq");
      ctx.defer(() => dropSchema(schema));
      url = opqueueUrl(schema, "bench-core");
    }
    const child = await Child.start({ name: `core-${engine}`, file: "bench/peers/core.ts" });
    try {
      await child.call("open", { url });
      const enqueueRates: number[] = [];
      const drainRates: number[] = [];
      for (let run = 0; run < sizes.runs; run++) {
        progress.update(`${label} run ${run + 1}/${sizes.runs}: enqueue`, true);
        const enq = await child.call<{ elapsedMs: number }>("enqueue", {
          count: n,
          concurrency: CONCURRENCY,
          delayMs: 0,
          assertion,
        });
        enqueueRates.push((n / enq.elapsedMs) * 1000);
        progress.update(`${label} run ${run + 1}/${sizes.runs}: drain`, true);
        const drained = await child.call<{ elapsedMs: number; jobs: number }>("drain", { limit: 64 });
        if (drained.jobs !== n) recorder.note(`${label} run ${run + 1}: drained ${drained.jobs} jobs, expected ${n}`);
        drainRates.push((drained.jobs / drained.elapsedMs) * 1000);
      }
      const system = `opqueue-${engine}`;
      recorder.add({ system, label, engine, metric: "enqueue_rate", unit: "jobs/s", values: enqueueRates });
      recorder.add({ system, label, engine, metric: "drain_rate", unit: "jobs/s", values: drainRates });
    } finally {
      await child.call("close").catch(() => undefined);
      await child.stop();
    }
  }

  const peers = [
    {
      system: "graphile",
      label: "graphile-worker addJob",
      file: "bench/peers/graphile.ts",
      prefix: "bench_gw",
      enqueue: "addMany",
    },
    { system: "pgboss", label: "pg-boss", file: "bench/peers/pgboss.ts", prefix: "bench_boss", enqueue: "sendMany" },
  ];
  for (const peer of ctx.peers ? peers : []) {
    const count = sizes.core.peerJobs;
    const schema = freshSchema(peer.prefix);
    try {
      const child = await Child.start({
        name: peer.label,
        file: peer.file,
        args: ["--database", PG_URL, "--schema", schema],
      });
      try {
        const variants =
          peer.system === "graphile"
            ? [
                {
                  system: "graphile-default",
                  label: "graphile-worker (default)",
                  startArgs: { batched: false, noop: true },
                },
                {
                  system: "graphile-batched",
                  label: "graphile-worker (batched local queue)",
                  startArgs: { batched: true, noop: true },
                },
              ]
            : [{ system: "pgboss", label: "pg-boss", startArgs: { noop: true } }];
        const enqueueRates: number[] = [];
        for (const variant of variants) {
          const drainRates: number[] = [];
          for (let run = 0; run < sizes.runs; run++) {
            progress.update(`${variant.label} run ${run + 1}/${sizes.runs}: enqueue`, true);
            if (variant === variants[0]) {
              const enq = await child.call<{ elapsedMs: number }>(peer.enqueue, {
                count,
                concurrency: CONCURRENCY,
                delayMs: 0,
              });
              enqueueRates.push((count / enq.elapsedMs) * 1000);
            } else {
              // The enqueue rate is measured once per run; the next variant's jobs go in by batch.
              await child.call("insert", { count, delayMs: 0 });
            }
            progress.update(`${variant.label} run ${run + 1}/${sizes.runs}: drain`, true);
            await child.call("startWorker", variant.startArgs);
            const drained = await child.call<{ elapsedMs: number }>("waitEmpty");
            await child.call("stopWorker");
            drainRates.push((count / drained.elapsedMs) * 1000);
          }
          recorder.add({
            system: variant.system,
            label: variant.label,
            engine: null,
            metric: "drain_rate",
            unit: "jobs/s",
            values: drainRates,
          });
        }
        recorder.add({
          system: peer.system,
          label: peer.label,
          engine: null,
          metric: "enqueue_rate",
          unit: "jobs/s",
          values: enqueueRates,
        });
      } finally {
        await child.stop();
      }
    } finally {
      await dropSchema(schema);
    }
  }
  if (ctx.peers) await runBullmqCore(ctx, recorder, progress);
  progress.done(
    summaryLine(
      recorder,
      ["opqueue-sqlite", "opqueue-postgres", "graphile", "pgboss", "bullmq", "bullmq-postgres"],
      "enqueue_rate",
    ) +
      " enqueue; " +
      summaryLine(
        recorder,
        [
          "opqueue-sqlite",
          "opqueue-postgres",
          "graphile-default",
          "graphile-batched",
          "pgboss",
          "bullmq",
          "bullmq-postgres",
        ],
        "drain_rate",
      ) +
      " drain",
  );
  return recorder.finish();
}

/** BullMQ on each of its backends: `add` 32 at a time, then a no-op Worker of concurrency 64 until empty. */
async function runBullmqCore(ctx: Context, recorder: ScenarioRecorder, progress: Progress): Promise<void> {
  const { sizes } = ctx;
  const count = sizes.core.peerJobs;
  const cleanups: Array<() => Promise<void>> = [];
  try {
    const backends = await prepareBullmqBackends(ctx, recorder, cleanups);
    for (const backend of backends) {
      const label = `BullMQ (${backend.label})`;
      const child = await Child.start({ name: label, file: "bench/peers/bullmq.ts", args: backend.args });
      try {
        const enqueueRates: number[] = [];
        const drainRates: number[] = [];
        for (let run = 0; run < sizes.runs; run++) {
          progress.update(`${label} run ${run + 1}/${sizes.runs}: enqueue`, true);
          const enq = await child.call<{ elapsedMs: number }>("addMany", {
            count,
            concurrency: CONCURRENCY,
            delayMs: 0,
          });
          enqueueRates.push((count / enq.elapsedMs) * 1000);
          progress.update(`${label} run ${run + 1}/${sizes.runs}: drain`, true);
          await child.call("startWorker", { noop: true });
          const drained = await child.call<{ elapsedMs: number }>("waitEmpty");
          await child.call("stopWorker");
          drainRates.push((count / drained.elapsedMs) * 1000);
        }
        const common = { system: backend.system, label, engine: null };
        recorder.add({ ...common, metric: "enqueue_rate", unit: "jobs/s", values: enqueueRates });
        recorder.add({ ...common, metric: "drain_rate", unit: "jobs/s", values: drainRates });
      } finally {
        await child.stop();
      }
    }
  } finally {
    for (const cleanup of cleanups) await cleanup();
  }
}

/**
 * Scenario 7, batch enqueue over HTTP: keep-alive clients POST /jobs/batch with 500 `buildReport` jobs each
 * (scenario 1's body, due in an hour, so nothing is delivered), one request in flight per connection, each request
 * with a freshly minted assertion as scenario 1 sends them. Measured in turns with opqueue's single-job enqueue
 * (scenario 1's shape, on a database of its own, so the ratio's two figures share their turns) and a Fastify route
 * that validates the same batch body and calls BullMQ's `Queue.addBulk` once per request, on Redis with AOF always
 * (the BullMQ rows' settings). Rates count jobs, a batch's items one by one; latencies are per request. Every row also
 * gets the CPU per enqueued job of every process of its system.
 */
import { prepareBullmqBackends } from "../lib/bullmq.js";
import { ENGINE_LABEL, type Context } from "../lib/context.js";
import { Progress } from "../lib/progress.js";
import { ScenarioRecorder, type ScenarioResult } from "../lib/results.js";
import { batchShape, singleJobShape } from "./common.js";
import {
  measureSubjectsInTurns,
  opqueueSubject,
  referenceSubject,
  summaryLine,
  type EnqueueSubject,
} from "./enqueue.js";

export async function runBatch(ctx: Context): Promise<ScenarioResult> {
  const { sizes } = ctx;
  const { jobsPerRequest, clients, durationMs, warmupMs } = sizes.batch;
  const recorder = new ScenarioRecorder("batch", "Batch enqueue over HTTP", {
    batches: `${jobsPerRequest} jobs per POST /jobs/batch (buildReport, delay_ms 3,600,000: nothing delivered), ${clients} keep-alive connections, one request in flight each, a fresh assertion per request`,
    "single-job rows": `scenario 1's POST /jobs from ${sizes.enqueue.clients} connections, on a database of their own, measured in the same turns`,
    runs: `${sizes.runs} × ${durationMs / 1000} s, each after ${warmupMs / 1000} s of warm-up, in turns: every system's first run, then every system's second, and so on`,
    rate: "jobs answered 201 per second within the window, a batch's items counted one by one",
    latency: "per request",
  });
  const progress = new Progress("batch");
  const origin = await ctx.targetOrigin();
  const postgres = await ctx.postgresCpuRoot((text) => recorder.note(text));
  const batch = batchShape(sizes);
  const single = singleJobShape(sizes);
  const subjects: EnqueueSubject[] = [];
  const cleanups: Array<() => Promise<void>> = [];
  try {
    for (const engine of ctx.engines) {
      const label = `opqueue (${ENGINE_LABEL[engine]})`;
      subjects.push(
        await opqueueSubject(ctx, {
          engine,
          origin,
          assertions: "fresh",
          postgres,
          system: `opqueue-${engine}-batch`,
          label: `${label}, batches of ${jobsPerRequest}`,
          shape: batch,
        }),
        await opqueueSubject(ctx, {
          engine,
          origin,
          assertions: "fresh",
          postgres,
          label: `${label}, single jobs`,
          shape: single,
        }),
      );
    }
    if (ctx.peers) {
      for (const backend of await prepareBullmqBackends(ctx, recorder, cleanups, ["always"])) {
        subjects.push(
          await referenceSubject({
            system: `${backend.system}-bulk-route`,
            label: `Fastify + BullMQ addBulk, batches of ${jobsPerRequest} (${backend.label})`,
            file: "bench/peers/bullmq.ts",
            args: backend.args,
            startApi: true,
            database: backend.redis ?? postgres,
            shape: batch,
          }),
        );
      }
    }
    await measureSubjectsInTurns(ctx, { subjects, recorder, progress });
  } finally {
    for (const subject of subjects) await subject.stop().catch(() => null);
    for (const cleanup of cleanups) await cleanup();
  }
  progress.done(
    summaryLine(recorder, [
      "opqueue-sqlite-batch",
      "opqueue-sqlite",
      "opqueue-postgres-batch",
      "opqueue-postgres",
      "bullmq-bulk-route",
    ]),
  );
  return recorder.finish();
}

/**
 * Scenario 4, backlog: scenarios 1 and 2 repeated on a database already holding a backlog of pending jobs due in an
 * hour (inserted in bulk before the run, so they sit in the claim index but are never delivered), with the serve
 * process's peak RSS (VmHWM). The goal compares these rates with scenarios 1 and 2 of the same run. Scenario 8, the
 * deep backlog, is the same over ten times as many jobs (10,000,000 in the full mode).
 */
import { ENGINE_LABEL, type Context } from "../lib/context.js";
import { Progress } from "../lib/progress.js";
import { ScenarioRecorder, type ScenarioResult } from "../lib/results.js";
import { OpqueueDb } from "./common.js";
import { opqueueDrain } from "./drain.js";
import { opqueueEnqueue, summaryLine } from "./enqueue.js";

export function runBacklog(ctx: Context): Promise<ScenarioResult> {
  return runOverBacklog(ctx, "backlog", ctx.sizes.backlog.rows, "Enqueue and drain over a backlog");
}

export function runDeepBacklog(ctx: Context): Promise<ScenarioResult> {
  return runOverBacklog(ctx, "deep-backlog", ctx.sizes.deepBacklog.rows, "Enqueue and drain over a deep backlog");
}

async function runOverBacklog(
  ctx: Context,
  id: "backlog" | "deep-backlog",
  rows: number,
  title: string,
): Promise<ScenarioResult> {
  const { sizes } = ctx;
  const recorder = new ScenarioRecorder(id, title, {
    backlog: `${rows.toLocaleString("en-US")} pending jobs due in an hour, inserted in bulk`,
    enqueue: `as scenario 1 (${sizes.runs} × ${sizes.enqueue.durationMs / 1000} s, 32 clients)`,
    drain: `as scenario 2 (${sizes.drain.jobs.toLocaleString("en-US")} due jobs per run, concurrency ${sizes.drain.concurrency})`,
    rss: "peak RSS (VmHWM) of the serve process",
  });
  const progress = new Progress(id);
  const origin = await ctx.targetOrigin();
  for (const engine of ctx.engines) {
    const label = `opqueue (${ENGINE_LABEL[engine]})`;
    const db = await OpqueueDb.create(ctx, engine, id, origin);
    const started = performance.now();
    await db.preinsert(rows, Date.now() + 3_600_000, (done) =>
      progress.update(`${label}: inserting backlog ${done.toLocaleString("en-US")}/${rows.toLocaleString("en-US")}`),
    );
    recorder.note(
      `${label}: backlog of ${rows.toLocaleString("en-US")} inserted in ${((performance.now() - started) / 1000).toFixed(1)} s`,
    );
    const enqueueRecorder = new ScenarioRecorder(id, "", {});
    await opqueueEnqueue(ctx, db, enqueueRecorder, progress, `opqueue-${engine}`, `${label} enqueue`);
    for (const figure of enqueueRecorder.result.figures) {
      recorder.result.figures.push({ ...figure, metric: `enqueue_${figure.metric}`, label });
    }
    recorder.result.notes.push(...enqueueRecorder.result.notes);
    const drainRecorder = new ScenarioRecorder(id, "", {});
    await opqueueDrain(ctx, db, drainRecorder, progress, `opqueue-${engine}`, `${label} drain`);
    for (const figure of drainRecorder.result.figures) {
      recorder.result.figures.push({ ...figure, metric: `drain_${figure.metric}`, label });
    }
    recorder.result.notes.push(...drainRecorder.result.notes);
    // The peak RSS of the goal: the highest of any serve process over the backlog (enqueue or drain).
    const peaks = recorder.result.figures
      .filter((f) => f.system === `opqueue-${engine}` && f.metric.endsWith("peak_rss"))
      .flatMap((f) => f.summary.runs);
    recorder.add({
      system: `opqueue-${engine}`,
      label,
      engine,
      metric: "peak_rss",
      unit: "MB",
      values: [Math.max(...peaks)],
    });
  }
  progress.done(
    summaryLine(recorder, ["opqueue-sqlite", "opqueue-postgres"], "enqueue_rate") +
      " enqueue; " +
      summaryLine(recorder, ["opqueue-sqlite", "opqueue-postgres"], "drain_rate") +
      " drain",
  );
  return recorder.finish();
}

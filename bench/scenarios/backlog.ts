/**
 * Scenario 4, backlog: scenarios 2 and 1 repeated on a database already holding a backlog of pending jobs due in an
 * hour (inserted in bulk before the run, so they sit in the claim index but are never delivered), with the serve
 * process's peak RSS (VmHWM). Each run is measured in turns with the same run on a database of its own without the
 * backlog, each turn in the order the last one reversed, and the goals compare the two: every drain first (the backlog
 * as inserted), then every enqueue. Scenario 8, the deep backlog, is the same over ten times as many jobs (10,000,000
 * in the full mode).
 */
import { ENGINE_LABEL, type Context } from "../lib/context.js";
import { CPU_METRICS } from "../lib/cpu.js";
import { Progress } from "../lib/progress.js";
import { NO_BACKLOG, ScenarioRecorder, type ScenarioResult } from "../lib/results.js";
import { OpqueueDb } from "./common.js";
import { opqueueDrainInTurns } from "./drain.js";
import { measureSubjectsInTurns, opqueueSubject, summaryLine, type EnqueueSubject } from "./enqueue.js";

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
    drain: `as scenario 2 (${sizes.drain.jobs.toLocaleString("en-US")} due jobs per run, concurrency ${sizes.drain.concurrency})`,
    enqueue: `as scenario 1 (${sizes.runs} × ${sizes.enqueue.durationMs / 1000} s, 32 clients), after the drains`,
    order:
      "in turns with the same runs on a database without the backlog (the rows marked “no backlog”), which the goals compare with; each turn in the order the last one reversed (no backlog first in the first and third turns, last in the second)",
    rss: "peak RSS (VmHWM) of the serve process",
  });
  const progress = new Progress(id);
  const origin = await ctx.targetOrigin();
  const postgres = await ctx.postgresCpuRoot((text) => recorder.note(text));
  for (const engine of ctx.engines) {
    const label = `opqueue (${ENGINE_LABEL[engine]})`;
    const database = engine === "postgres" ? postgres : null;
    const db = await OpqueueDb.create(ctx, engine, id, origin);
    const sides = [
      {
        system: `opqueue-${engine}${NO_BACKLOG}`,
        label: `${label}, no backlog`,
        db: await OpqueueDb.create(ctx, engine, `${id}-none`, origin),
      },
      { system: `opqueue-${engine}`, label, db },
    ];
    const started = performance.now();
    await db.preinsert(rows, Date.now() + 3_600_000, (done) =>
      progress.update(`${label}: inserting backlog ${done.toLocaleString("en-US")}/${rows.toLocaleString("en-US")}`),
    );
    recorder.note(
      `${label}: backlog of ${rows.toLocaleString("en-US")} inserted in ${((performance.now() - started) / 1000).toFixed(1)} s`,
    );

    const drainRecorder = new ScenarioRecorder(id, "", {});
    await opqueueDrainInTurns(
      ctx,
      sides.map((side) => ({ ...side, cpu: { database } })),
      drainRecorder,
      progress,
    );
    // The node's own CPU per job is shown already (`cpu_per_job`); the server's is what the goal is about.
    drainRecorder.result.figures = drainRecorder.result.figures.filter(
      (figure) => figure.metric !== CPU_METRICS.system,
    );
    adopt(recorder, drainRecorder, "drain_");

    const enqueueRecorder = new ScenarioRecorder(id, "", {});
    const subjects: EnqueueSubject[] = [];
    try {
      for (const side of sides) {
        subjects.push(await opqueueSubject(ctx, { engine, origin, assertions: "fresh", postgres: database, ...side }));
      }
      await measureSubjectsInTurns(ctx, { subjects, recorder: enqueueRecorder, progress, alternate: true });
    } finally {
      for (const subject of subjects) await subject.stop();
    }
    // The enqueue's CPU per job is scenario 1's to show; here the table keeps to the rates and the memory.
    enqueueRecorder.result.figures = enqueueRecorder.result.figures.filter(
      (figure) => !Object.values<string>(CPU_METRICS).includes(figure.metric),
    );
    adopt(recorder, enqueueRecorder, "enqueue_");

    // The peak RSS of the goal: the highest of any serve process over the backlog (drain or enqueue).
    for (const { system, label } of sides) {
      const peaks = recorder.result.figures
        .filter((f) => f.system === system && f.metric.endsWith("peak_rss"))
        .flatMap((f) => f.summary.runs);
      recorder.add({ system, label, engine, metric: "peak_rss", unit: "MB", values: [Math.max(...peaks)] });
    }
  }
  progress.done(
    summaryLine(recorder, ["opqueue-sqlite", "opqueue-postgres"], "drain_rate") +
      " drain; " +
      summaryLine(recorder, ["opqueue-sqlite", "opqueue-postgres"], "enqueue_rate") +
      " enqueue",
  );
  return recorder.finish();
}

/** Moves the figures and notes of a part's recorder into the scenario's, each metric named with `prefix`. */
function adopt(recorder: ScenarioRecorder, part: ScenarioRecorder, prefix: string): void {
  for (const figure of part.result.figures) {
    recorder.result.figures.push({ ...figure, metric: `${prefix}${figure.metric}` });
  }
  recorder.result.notes.push(...part.result.notes);
}

/**
 * Scenario 1, enqueue over HTTP: 32 keep-alive clients POST /jobs for `buildReport` due in an hour (nothing is
 * delivered), each request with a freshly minted valid assertion (its own chain), as a product whose every request
 * enqueues a job would send; in the full mode also with 256 assertions reused in turn (which opqueue's cache of
 * verified tokens serves). References in the same run: a bare Fastify route that parses the same body and answers
 * 201 (the HTTP limit), and Fastify routes that validate the same body and call graphile-worker's `addJob`,
 * pg-boss's `send` or BullMQ's `Queue.add` (what a user would build instead). Each row also gets the CPU per enqueued
 * job of every process of that system over the measured window: its server process and its database server.
 */
import { prepareBullmqBackends } from "../lib/bullmq.js";
import { CpuSeries, SystemCpu, type CpuRoot } from "../lib/cpu.js";
import { Child } from "../lib/ipc.js";
import { ENGINE_LABEL, type Context } from "../lib/context.js";
import type { Engine } from "../lib/results.js";
import { mintAssertions } from "../lib/opqueue.js";
import { freshSchema, dropSchema, PG_URL } from "../lib/pg.js";
import { Progress } from "../lib/progress.js";
import { ScenarioRecorder, type ScenarioResult } from "../lib/results.js";
import { measureEnqueueRun, OpqueueDb, turnOrder, type EnqueueAuth, type EnqueueShape } from "./common.js";

/** A server taking enqueues, measured run by run in turn with the others. */
export interface EnqueueSubject {
  system: string;
  label: string;
  engine: Engine | null;
  url: string;
  auth: EnqueueAuth;
  /** How its rows send jobs (scenario 1's when absent). */
  shape?: EnqueueShape;
  /** Every process of the system: its server process and its database server. */
  cpu: SystemCpu;
  /** Stops it; an opqueue node answers its peak RSS. */
  stop: () => Promise<number | null>;
}

/**
 * Starts an opqueue node on a fresh database of `engine` (one per subject: a SQLite file takes one node), or on `db`
 * when given (a backlog's). `postgres` is the PostgreSQL server's processes, counted with a PostgreSQL node's.
 */
export async function opqueueSubject(
  ctx: Context,
  options: {
    engine: Engine;
    origin: string;
    assertions: "fresh" | "reused";
    postgres: CpuRoot | null;
    system?: string;
    label?: string;
    shape?: EnqueueShape;
    db?: OpqueueDb;
  },
): Promise<EnqueueSubject> {
  const { engine, assertions } = options;
  const db =
    options.db ?? (await OpqueueDb.create(ctx, engine, options.system ?? `enqueue-${assertions}`, options.origin));
  const serve = await db.start(ctx);
  const ridPrefix = `bench-enqueue-${Date.now().toString(36)}`;
  const auth =
    assertions === "fresh" ? { mint: { ridPrefix, users: 32 } } : { tokens: await mintAssertions(256, ridPrefix) };
  const reused = assertions === "reused" ? ", 256 reused assertions" : "";
  return {
    system: options.system ?? `opqueue-${engine}${assertions === "reused" ? "-reused" : ""}`,
    label: options.label ?? `opqueue (${ENGINE_LABEL[engine]})${reused}`,
    engine,
    url: serve.url ?? "",
    auth,
    ...(options.shape ? { shape: options.shape } : {}),
    cpu: new SystemCpu({
      system: [{ pid: serve.pid, scope: "process" }],
      database: engine === "postgres" ? options.postgres : null,
    }),
    stop: () => serve.stop(),
  };
}

/**
 * Starts a reference server: a child process answering enqueues on the port of its ready info or `startApi`;
 * `database` is its database server's processes (null for none).
 */
export async function referenceSubject(options: {
  system: string;
  label: string;
  file: string;
  args?: string[];
  startApi?: boolean;
  database: CpuRoot | null;
  shape?: EnqueueShape;
}): Promise<EnqueueSubject> {
  const child = await Child.start({ name: options.system, file: options.file, args: options.args ?? [] });
  try {
    const port = options.startApi
      ? (await child.call<{ port: number }>("startApi")).port
      : (child.info as { port: number }).port;
    return {
      system: options.system,
      label: options.label,
      engine: null,
      url: `http://127.0.0.1:${port}`,
      auth: {},
      ...(options.shape ? { shape: options.shape } : {}),
      cpu: new SystemCpu({ system: [{ pid: child.process.pid ?? 0, scope: "process" }], database: options.database }),
      stop: async () => {
        await child.stop();
        return null;
      },
    };
  } catch (error) {
    await child.stop();
    throw error;
  }
}

/**
 * Measures `subjects` in turns (every subject's first run, then every subject's second, and so on), records their
 * rate, latencies, CPU per enqueued job and (opqueue) peak RSS, and stops each. Stopped subjects leave the list, so
 * the caller's clean-up stops only what is left. With `alternate`, each turn runs them in the order the turn before
 * reversed (`turnOrder`).
 */
export async function measureSubjectsInTurns(
  ctx: Context,
  options: { subjects: EnqueueSubject[]; recorder: ScenarioRecorder; progress: Progress; alternate?: boolean },
): Promise<void> {
  const { subjects, recorder, progress } = options;
  const measured = subjects.map(() => ({
    rates: [] as number[],
    p50: [] as number[],
    p99: [] as number[],
    cpu: new CpuSeries(),
  }));
  for (let run = 0; run < ctx.sizes.runs; run++) {
    const entries = [...subjects.entries()];
    for (const [index, subject] of options.alternate ? turnOrder(entries, run) : entries) {
      const result = await measureEnqueueRun(ctx, {
        url: subject.url,
        ...subject.auth,
        ...(subject.shape ? { shape: subject.shape } : {}),
        cpu: subject.cpu,
        run,
        progress,
        label: subject.label,
        notes: recorder.result.notes,
      });
      measured[index]?.rates.push(result.rate);
      measured[index]?.p50.push(result.p50);
      measured[index]?.p99.push(result.p99);
      measured[index]?.cpu.push(result.cpu);
    }
  }
  for (const [index, subject] of subjects.entries()) {
    const figures = measured[index];
    if (!figures) continue;
    const common = { system: subject.system, label: subject.label, engine: subject.engine };
    recorder.add({ ...common, metric: "rate", unit: "jobs/s", values: figures.rates });
    recorder.add({ ...common, metric: "p50", unit: "ms", values: figures.p50 });
    recorder.add({ ...common, metric: "p99", unit: "ms", values: figures.p99 });
    figures.cpu.record(recorder, common);
    const peakRssMb = await subject.stop();
    if (peakRssMb !== null) recorder.add({ ...common, metric: "peak_rss", unit: "MB", values: [peakRssMb] });
  }
  subjects.length = 0;
}

export async function runEnqueue(ctx: Context): Promise<ScenarioResult> {
  const { sizes } = ctx;
  const recorder = new ScenarioRecorder("enqueue", "Enqueue over HTTP", {
    clients: `${sizes.enqueue.clients} keep-alive connections, one request in flight each`,
    runs: `${sizes.runs} × ${sizes.enqueue.durationMs / 1000} s (after ${sizes.enqueue.warmupMs / 1000} s warm-up), in turns: every system's first run, then every system's second, and so on, so a change in the machine's speed during the scenario reaches them alike`,
    body: "buildReport, delay_ms 3,600,000 (nothing delivered)",
    assertions:
      ctx.mode === "full"
        ? "a fresh one per request (its own chain); the second opqueue rows reuse 256 in turn"
        : "a fresh one per request (its own chain)",
  });
  const progress = new Progress("enqueue");
  const origin = await ctx.targetOrigin();
  const postgres = await ctx.postgresCpuRoot((text) => recorder.note(text));
  const subjects: EnqueueSubject[] = [];
  const schemas: string[] = [];
  const cleanups: Array<() => Promise<void>> = [];
  try {
    for (const engine of ctx.engines) {
      subjects.push(await opqueueSubject(ctx, { engine, origin, assertions: "fresh", postgres }));
      if (ctx.mode === "full")
        subjects.push(await opqueueSubject(ctx, { engine, origin, assertions: "reused", postgres }));
    }
    if (ctx.peers) {
      subjects.push(
        await referenceSubject({
          system: "bare",
          label: "bare Fastify route",
          file: "bench/peers/bare.ts",
          database: null,
        }),
      );
      // The routes a user would build instead, each library in a fresh schema of its own.
      const routes = [
        {
          system: "graphile-route",
          label: "Fastify + graphile-worker addJob",
          file: "bench/peers/graphile.ts",
          schema: freshSchema("bench_gw"),
        },
        {
          system: "pgboss-route",
          label: "Fastify + pg-boss send",
          file: "bench/peers/pgboss.ts",
          schema: freshSchema("bench_boss"),
        },
      ];
      for (const { schema, ...route } of routes) {
        schemas.push(schema);
        subjects.push(
          await referenceSubject({
            ...route,
            args: ["--database", PG_URL, "--schema", schema],
            startApi: true,
            database: postgres,
          }),
        );
      }
      const bullmq = await prepareBullmqBackends(ctx, recorder, cleanups);
      for (const backend of bullmq) {
        subjects.push(
          await referenceSubject({
            system: `${backend.system}-route`,
            label: `Fastify + BullMQ add (${backend.label})`,
            file: "bench/peers/bullmq.ts",
            args: backend.args,
            startApi: true,
            database: backend.redis ?? postgres,
          }),
        );
      }
    }
    await measureSubjectsInTurns(ctx, { subjects, recorder, progress });
  } finally {
    for (const subject of subjects) await subject.stop().catch(() => null);
    for (const schema of schemas) await dropSchema(schema);
    for (const cleanup of cleanups) await cleanup();
  }
  progress.done(
    summaryLine(recorder, [
      "opqueue-sqlite",
      "opqueue-postgres",
      "bare",
      "graphile-route",
      "pgboss-route",
      "bullmq-route",
      "bullmq-postgres-route",
    ]),
  );
  return recorder.finish();
}

/** "system 1,234/s, ..." for the end of a live line. */
export function summaryLine(recorder: ScenarioRecorder, systems: string[], metric = "rate"): string {
  return systems
    .map((system) => recorder.result.figures.find((f) => f.system === system && f.metric === metric))
    .filter((figure) => figure !== undefined)
    .map(
      (figure) =>
        `${figure.system} ${Math.round(figure.summary.median).toLocaleString("en-US")}${figure.unit === "ms" ? " ms" : "/s"}`,
    )
    .join(", ");
}

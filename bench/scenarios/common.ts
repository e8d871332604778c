/** What the scenarios share: a fresh opqueue database per engine, and the enqueue and drain measurements. */
import { join } from "node:path";
import type { MintSpec } from "../lib/assertions.js";
import type { Context, Sizes } from "../lib/context.js";
import { waitUntil } from "../lib/context.js";
import { CpuWindow, SystemCpu, type CpuPerJob, type CpuRoot } from "../lib/cpu.js";
import {
  countPostgres,
  countSqlite,
  migrate,
  mintAssertions,
  preinsertPostgres,
  preinsertSqlite,
  ServeProcess,
  writeOpqueueConfig,
  type OpqueueSetup,
} from "../lib/opqueue.js";
import { adminClient, dropSchema, freshSchema, opqueueUrl } from "../lib/pg.js";
import type { Progress } from "../lib/progress.js";
import type { Engine } from "../lib/results.js";

/** One opqueue database (a SQLite file, or a PostgreSQL schema), migrated, with its config. */
export class OpqueueDb {
  /** How long the last drain run took from its insert to the end of its warm-up, in ms (sets the next lead). */
  lastPrepMs: number | undefined;

  private constructor(
    readonly engine: Engine,
    readonly setup: OpqueueSetup,
    readonly sqlitePath: string | null,
    readonly schema: string | null,
  ) {}

  /** Creates and migrates a fresh database; PostgreSQL schemas are dropped when the context closes. */
  static async create(ctx: Context, engine: Engine, name: string, targetOrigin: string): Promise<OpqueueDb> {
    const dir = join(ctx.tmp, `${name}-${engine}-${Date.now().toString(36)}`);
    let database: string;
    let sqlitePath: string | null = null;
    let schema: string | null = null;
    if (engine === "sqlite") {
      sqlitePath = join(dir, "opqueue.db");
      database = `sqlite:${sqlitePath}`;
    } else {
      schema = freshSchema("bench_opq");
      database = opqueueUrl(schema);
      const dropping = schema;
      ctx.defer(() => dropSchema(dropping));
    }
    const setup = writeOpqueueConfig({ dir, database, targetOrigin, concurrency: ctx.sizes.drain.concurrency });
    await migrate(setup);
    return new OpqueueDb(engine, setup, sqlitePath, schema);
  }

  /**
   * Inserts `count` pending jobs due at `runAt` straight into the database. On SQLite no serve process may be
   * running (the file is locked exclusively by a running node).
   */
  async preinsert(count: number, runAt: number, progress?: (done: number) => void): Promise<void> {
    const [assertion] = await mintAssertions(1, "bench-preinsert");
    const rid = `bench-preinsert-${Date.now().toString(36)}`;
    if (this.sqlitePath) {
      preinsertSqlite({
        path: this.sqlitePath,
        count,
        runAt,
        assertion: assertion ?? "",
        rid,
        ...(progress ? { onProgress: progress } : {}),
      });
      return;
    }
    const client = await adminClient();
    try {
      await preinsertPostgres({
        client,
        schema: this.schema ?? "",
        count,
        runAt,
        assertion: assertion ?? "",
        rid,
        ...(progress ? { onProgress: progress } : {}),
      });
    } finally {
      await client.end();
    }
  }

  /** Job counts by status (on SQLite only while no node runs). */
  async counts(): Promise<Record<string, number>> {
    if (this.sqlitePath) return countSqlite(this.sqlitePath);
    const client = await adminClient();
    try {
      return await countPostgres(client, this.schema ?? "");
    } finally {
      await client.end();
    }
  }

  /**
   * Starts `count` serve nodes on this PostgreSQL schema, each its own application name (`name-0`, `name-1`, ...);
   * when one fails to start, stops those already started.
   */
  async startNodes(count: number, name: string, nodeArgs: string[] = []): Promise<ServeProcess[]> {
    const serves: ServeProcess[] = [];
    try {
      for (let n = 0; n < count; n++) {
        serves.push(
          await ServeProcess.start({
            setup: this.setup,
            database: opqueueUrl(this.schema ?? "", `${name}-${n}`),
            nodeArgs,
          }),
        );
      }
    } catch (error) {
      for (const serve of serves) await serve.stop();
      throw error;
    }
    return serves;
  }

  /**
   * Starts `count` serve nodes and waits 3 s past their start-up: nodes with nothing to do, whose polls and
   * maintenance passes are what is then measured.
   */
  async startIdleNodes(count: number): Promise<ServeProcess[]> {
    const serves = await this.startNodes(count, "bench-idle");
    await new Promise((resolve) => setTimeout(resolve, 3000));
    return serves;
  }

  /** Starts a serve node on this database. */
  start(
    ctx: Context,
    options: { api?: boolean; worker?: boolean; applicationName?: string } = {},
  ): Promise<ServeProcess> {
    return ServeProcess.start({
      setup: this.setup,
      ...(options.api !== undefined ? { api: options.api } : {}),
      ...(options.worker !== undefined ? { worker: options.worker } : {}),
      ...(options.applicationName && this.schema ? { database: opqueueUrl(this.schema, options.applicationName) } : {}),
      nodeArgs: ctx.serveNodeArgs(),
    });
  }
}

/** One enqueue body: a job for buildReport due in an hour (nothing is delivered during the measurement). */
function enqueueBody(n: number): { operation_id: string; request: { body: unknown }; delay_ms: number } {
  return { operation_id: "buildReport", request: { body: { report: "daily", n } }, delay_ms: 3_600_000 };
}

/** The enqueue bodies, `count` distinct ones. */
export function enqueueBodies(count = 64): string[] {
  return Array.from({ length: count }, (_, n) => JSON.stringify(enqueueBody(n)));
}

/** Batch bodies for POST /jobs/batch: `count` distinct ones of `size` enqueue bodies each. */
export function batchBodies(size: number, count = 8): string[] {
  return Array.from({ length: count }, (_, b) =>
    JSON.stringify({ jobs: Array.from({ length: size }, (_, i) => enqueueBody(b * size + i)) }),
  );
}

/** How an enqueue run sends its jobs: one per POST /jobs, or many per POST /jobs/batch. */
export interface EnqueueShape {
  path: string;
  clients: number;
  durationMs: number;
  /** Warm-up before the first run, which warms connections and the JIT; `rewarmMs` before each later one. */
  warmupMs: number;
  rewarmMs: number;
  bodies: string[];
  /** The answer expected of each request. */
  expectStatus: number;
  /** A batch: the status expected of each item; the rate counts items, not requests. */
  itemStatus?: number;
}

/** Scenario 1's shape: 32 clients, one job per request, 201 each. */
export function singleJobShape(sizes: Sizes): EnqueueShape {
  const { clients, durationMs, warmupMs } = sizes.enqueue;
  return { path: "/jobs", clients, durationMs, warmupMs, rewarmMs: 300, bodies: enqueueBodies(), expectStatus: 201 };
}

/**
 * Scenario 7's shape: batches of `jobsPerRequest` jobs, 200 for the request and 201 for each item. A batch takes
 * hundreds of ms on a loaded machine, so every run gets the whole warm-up: the window opens on connections that each
 * have had a request answered, as in the steady state.
 */
export function batchShape(sizes: Sizes): EnqueueShape {
  const { clients, durationMs, warmupMs, jobsPerRequest } = sizes.batch;
  const bodies = batchBodies(jobsPerRequest);
  return {
    path: "/jobs/batch",
    clients,
    durationMs,
    warmupMs,
    rewarmMs: warmupMs,
    bodies,
    expectStatus: 200,
    itemStatus: 201,
  };
}

/** What to send to an enqueue endpoint: fresh assertions minted as the load goes (opqueue), reused ones, or none. */
export interface EnqueueAuth {
  tokens?: string[];
  mint?: MintSpec;
}

/**
 * One enqueue measurement run (number `run`, from 0) against `url` in `shape` (scenario 1's by default): its rate
 * (jobs/s), request latencies, and, with `cpu`, the CPU per enqueued job of the system's processes over the measured
 * window. Answers other than the expected ones are noted in `notes`.
 */
export async function measureEnqueueRun(
  ctx: Context,
  options: EnqueueAuth & {
    url: string;
    shape?: EnqueueShape;
    cpu?: SystemCpu;
    run: number;
    progress: Progress;
    label: string;
    notes: string[];
  },
): Promise<{ rate: number; p50: number; p99: number; cpu: CpuPerJob | null }> {
  const { sizes } = ctx;
  const { run } = options;
  const shape = options.shape ?? singleJobShape(sizes);
  const window = new CpuWindow(options.cpu);
  const result = await ctx.load(
    {
      origin: options.url,
      path: shape.path,
      method: "POST",
      connections: shape.clients,
      durationMs: shape.durationMs,
      warmupMs: run === 0 ? shape.warmupMs : shape.rewarmMs,
      headers: { "content-type": "application/json" },
      bodies: shape.bodies,
      ...(options.tokens ? { tokens: options.tokens } : {}),
      ...(options.mint ? { mint: { ...options.mint, ridPrefix: `${options.mint.ridPrefix}-r${run}` } } : {}),
      expectStatus: shape.expectStatus,
      ...(shape.itemStatus !== undefined ? { items: { expectStatus: shape.itemStatus } } : {}),
    },
    (ok) => options.progress.update(`${options.label} run ${run + 1}/${sizes.runs}: ${ok} accepted`),
    window.edge,
  );
  const refused = Object.values(result.other).reduce((a, b) => a + b, 0) + result.errors;
  if (refused > 0) {
    options.notes.push(
      `${options.label} run ${run + 1}: ${refused} requests not answered ${shape.expectStatus} (${JSON.stringify(result.other)}, ${result.errors} errors${result.firstError ? `: ${result.firstError}` : ""})`,
    );
  }
  const refusedItems = Object.values(result.items?.other ?? {}).reduce((a, b) => a + b, 0);
  if (refusedItems > 0) {
    options.notes.push(
      `${options.label} run ${run + 1}: ${refusedItems} items not answered ${shape.itemStatus} (${JSON.stringify(result.items?.other)})`,
    );
  }
  options.progress.update(`${options.label} run ${run + 1}/${sizes.runs}: ${Math.round(result.rate)}/s`, true);
  const jobs = result.items ? result.items.ok : result.ok;
  return { rate: result.rate, p50: result.p50, p99: result.p99, cpu: window.perJob(jobs) };
}

/** What one drain run measured at the target. */
export interface DrainRun {
  /** Jobs per second between the first and the last arrival at the target. */
  rate: number;
  /**
   * Jobs per second from the moment the work could start (opqueue: the jobs' due time, on a warm node; peers: the
   * worker's start call) to the last arrival: the rate with the ramp-up included.
   */
  rateFromStart: number;
  duplicates: number;
  /** Warm-up overran the due time by this many ms (opqueue only; 0 when it did not). */
  overrunMs: number;
}

/** Waits until the target has received `count` measured requests (it must have been reset), and reads the rates. */
export async function waitForDrain(
  ctx: Context,
  options: { count: number; fromWall: number; progress: Progress; label: string },
): Promise<DrainRun> {
  let stats = await ctx.targetStats();
  await waitUntil(
    async () => {
      stats = await ctx.targetStats();
      options.progress.update(`${options.label}: ${stats.requests}/${options.count} delivered`);
      return stats.requests >= options.count;
    },
    60_000 + options.count * 5,
    50,
  );
  return {
    rate: ((stats.requests - 1) / stats.spanMs) * 1000,
    rateFromStart: (stats.requests / (stats.lastWall - options.fromWall)) * 1000,
    duplicates: stats.requests - stats.distinct,
    overrunMs: 0,
  };
}

/** Enqueues `count` warm-up jobs over HTTP and waits until the target has received them all. */
export async function warmUp(ctx: Context, serve: ServeProcess, count: number): Promise<void> {
  const already = (await ctx.targetStats()).others;
  const warm = await ctx.load({
    origin: serve.url ?? "",
    path: "/jobs",
    method: "POST",
    connections: 32,
    count,
    headers: { "content-type": "application/json" },
    bodies: Array.from({ length: 16 }, (_, n) => JSON.stringify({ operation_id: "warmUp", request: { body: { n } } })),
    mint: { ridPrefix: `bench-warmup-${Date.now().toString(36)}`, users: 32 },
    expectStatus: 201,
  });
  if (warm.ok !== count)
    throw new Error(`warm-up: ${warm.ok}/${count} enqueued (${warm.firstError ?? JSON.stringify(warm.other)})`);
  await waitUntil(async () => (await ctx.targetStats()).others - already >= count, 60_000, 20);
}

/** Epoch milliseconds with sub-millisecond precision, comparable across processes. */
export function wallNow(): number {
  return performance.timeOrigin + performance.now();
}

/**
 * One opqueue drain run on a fresh, warmed-up node. The measured jobs are pre-inserted (with the node stopped, as
 * SQLite requires) due `leadMs` from now; then a node starts, enqueues and delivers `warmupJobs` warm-up jobs over
 * HTTP (so its code is compiled and its connections open, like the long-lived peer processes), and the measured
 * jobs become due and are drained; the rate is read at the target. Returns the run and the node's peak RSS.
 */
export async function opqueueDrainRun(
  ctx: Context,
  db: OpqueueDb,
  options: {
    count: number;
    progress: Progress;
    label: string;
    /** Read the CPU of the node and of `database` (its PostgreSQL server; null on SQLite) over the rate's window. */
    cpu?: { database: CpuRoot | null };
  },
): Promise<
  DrainRun & {
    peakRssMb: number | null;
    succeeded: number;
    cpuUsPerJob: number | null;
    mainCpuUsPerJob: number | null;
    /** CPU per job of every process of the system, first to last arrival; null unless asked for. */
    cpuAll: CpuPerJob | null;
  }
> {
  const { warmupJobs, leadMs } = ctx.sizes.drain;
  // The first run on a database finds out how long insert, start-up and warm-up take (a backlog can make the
  // warm-up slow), so the measured jobs of every run fall due only once the node is warm.
  if (db.lastPrepMs === undefined && warmupJobs > 0) {
    options.progress.update(`${options.label}: timing start-up and warm-up`, true);
    const started = performance.now();
    const serve = await ServeProcess.start({ setup: db.setup, nodeArgs: ctx.serveNodeArgs() });
    try {
      await warmUp(ctx, serve, warmupJobs);
    } finally {
      await serve.stop();
    }
    db.lastPrepMs = performance.now() - started;
  }
  const before = (await db.counts())["succeeded"] ?? 0;
  options.progress.update(`${options.label}: inserting ${options.count} jobs`, true);
  const prepStarted = performance.now();
  const dueAt = Date.now() + Math.max(leadMs, Math.round((db.lastPrepMs ?? 0) * 1.3) + 500);
  await db.preinsert(options.count, dueAt);
  // Reset before the node starts (its jobs may be due by the time it is ready); its processes join the window then.
  const window = new CpuWindow();
  await ctx.resetTarget(options.cpu ? { expect: options.count, onEdge: window.edge } : undefined);
  let serve: ServeProcess | undefined;
  try {
    serve = await ServeProcess.start({ setup: db.setup, nodeArgs: ctx.serveNodeArgs() });
    if (options.cpu)
      window.attach(new SystemCpu({ system: [{ pid: serve.pid, scope: "process" }], database: options.cpu.database }));
    if (warmupJobs > 0) {
      options.progress.update(`${options.label}: warming up`, true);
      await warmUp(ctx, serve, warmupJobs);
    }
    db.lastPrepMs = performance.now() - prepStarted;
    const overrunMs = Math.max(0, Date.now() - dueAt);
    const cpuBefore = serve.cpuMs();
    const mainCpuBefore = serve.cpuMs("main");
    const run = await waitForDrain(ctx, {
      count: options.count,
      fromWall: dueAt,
      progress: options.progress,
      label: options.label,
    });
    // The node's CPU over the drain (every thread, and the main thread alone), which stays steady where the rate
    // moves with the machine's other load: the last outcomes may still be queued, so this is a slight undercount.
    const cpuAfter = serve.cpuMs();
    const mainCpuAfter = serve.cpuMs("main");
    // Not measured when the warm-up ran past the due time: part of the drain happened before the first reading.
    const perJob = (before: number | null, after: number | null) =>
      before === null || after === null || overrunMs > 0 ? null : ((after - before) * 1000) / options.count;
    const cpuUsPerJob = perJob(cpuBefore, cpuAfter);
    const mainCpuUsPerJob = perJob(mainCpuBefore, mainCpuAfter);
    // Over the rate's window (first to last arrival), as the peers' is read; an overrun puts warm-up work in it.
    const cpuAll = overrunMs > 0 ? null : window.perJob(options.count - 1);
    // A graceful stop writes the outcomes still queued in the node's completer.
    const peakRssMb = await serve.stop();
    serve = undefined;
    const succeeded = ((await db.counts())["succeeded"] ?? 0) - before - warmupJobs;
    return { ...run, overrunMs, peakRssMb, succeeded, cpuUsPerJob, mainCpuUsPerJob, cpuAll };
  } finally {
    await serve?.stop();
  }
}

/** `items` in the order of turn `turn`: as given in even turns, reversed in odd ones. */
export function turnOrder<T>(items: readonly T[], turn: number): T[] {
  return turn % 2 === 0 ? [...items] : [...items].reverse();
}

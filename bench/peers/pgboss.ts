/**
 * pg-boss as the reference: a Fastify route that validates opqueue's enqueue body and calls `send`, and workers
 * whose handler POSTs each job's request to the target. Everything lives in its own schema; pg-boss runs with its
 * defaults (maintenance and scheduling on, pool of 10), on PostgreSQL's durable defaults.
 *
 * pg-boss 10 workers poll: each `work()` loop fetches up to `batchSize` jobs, runs the handler, completes the
 * batch and waits out the rest of `pollingIntervalSeconds` (0.5 s at least) unless the batch took longer. So its
 * throughput is bounded by loops × batchSize / interval. The drain uses 8 loops × batchSize 64 at the minimum
 * interval, each batch delivered in parallel over one undici pool of 64 connections (at most 64 requests on the
 * wire, like opqueue's worker concurrency of 64).
 *
 * Usage: pgboss.ts --database URL --schema NAME [--target ORIGIN]
 * Commands: startApi → {port}, insert {count, delayMs}, startWorker {noop?}, stopWorker, counts, sendMany
 * {count, concurrency, delayMs} (library enqueue rate, for the core scenario).
 */
import { parseArgs } from "node:util";
import pg from "pg";
import PgBoss from "pg-boss";
import { serveCommands } from "../lib/ipc.js";
import {
  addConcurrently,
  EnqueueBody,
  listenApp,
  PeerDeliverer,
  runAtOf,
  untilEmpty,
  type PeerPayload,
} from "../lib/peer-common.js";

const QUEUE = "deliver";
const LOOPS = 8;
const BATCH_SIZE = 64;

const { values } = parseArgs({
  options: { database: { type: "string" }, schema: { type: "string" }, target: { type: "string" } },
});
const connectionString = values.database ?? "postgres://postgres@127.0.0.1:5432/postgres";
const schema = values.schema ?? "pgboss_bench";

const boss = new PgBoss({ connectionString, schema });
/** The harness's own connection, for counting jobs. */
const pool = new pg.Pool({ connectionString, max: 1 });
boss.on("error", (error: Error) => process.stderr.write(`pg-boss: ${error.message}\n`));
await boss.start();
await boss.createQueue(QUEUE);

let deliverer: PeerDeliverer | undefined;
/** When the current worker ran its first job, and when it was started (performance.now()). */
let firstHandledAt = Number.NaN;
let workerStartedAt = Number.NaN;
let working = false;
let api: Awaited<ReturnType<typeof listenApp>> | undefined;

async function insert(args: { count: number; delayMs: number }): Promise<void> {
  const startAfter = new Date(Date.now() + args.delayMs);
  for (let done = 0; done < args.count; done += 2000) {
    const size = Math.min(2000, args.count - done);
    await boss.insert(
      Array.from({ length: size }, (_, i) => ({
        name: QUEUE,
        data: { operation_id: "buildReport", request: { body: { n: done + i } } } satisfies PeerPayload,
        startAfter,
      })),
    );
  }
}

/** Library enqueue rate: `count` single `send` calls, `concurrency` at a time. */
async function sendMany(args: { count: number; concurrency: number; delayMs: number }): Promise<{ elapsedMs: number }> {
  return addConcurrently(args, (n) =>
    boss.send(
      QUEUE,
      { operation_id: "buildReport", request: { body: { n } } },
      {
        startAfter: new Date(Date.now() + args.delayMs),
      },
    ),
  );
}

async function startWorker(args: { noop?: boolean }): Promise<void> {
  if (working) throw new Error("worker already running");
  if (!values.target && !args.noop) throw new Error("--target is required for a delivering worker");
  working = true;
  deliverer = args.noop ? undefined : new PeerDeliverer(values.target ?? "");
  const active = deliverer;
  firstHandledAt = Number.NaN;
  workerStartedAt = performance.now();
  for (let i = 0; i < LOOPS; i++) {
    await boss.work<PeerPayload>(QUEUE, { batchSize: BATCH_SIZE, pollingIntervalSeconds: 0.5 }, async (jobs) => {
      if (Number.isNaN(firstHandledAt)) firstHandledAt = performance.now();
      if (active) await Promise.all(jobs.map((job) => active.deliver(job.id, job.data)));
    });
  }
}

async function stopWorker(): Promise<void> {
  if (!working) return;
  await boss.offWork(QUEUE);
  // offWork stops the loops asynchronously; give in-flight batches a moment to complete.
  await new Promise((resolve) => setTimeout(resolve, 1500));
  await deliverer?.close();
  deliverer = undefined;
  working = false;
}

async function startApi(): Promise<{ port: number }> {
  api ??= await listenApp((app) => {
    app.post("/jobs", { schema: { body: EnqueueBody } }, async (request, reply) => {
      const body = request.body as PeerPayload & { delay_ms?: number; run_at?: string; priority?: number };
      const id = await boss.send(
        QUEUE,
        { operation_id: body.operation_id, request: body.request } satisfies PeerPayload,
        { startAfter: runAtOf(body), ...(body.priority !== undefined ? { priority: body.priority } : {}) },
      );
      return reply.code(201).send({ job: { id, operation_id: body.operation_id } });
    });
  });
  return { port: api.port };
}

/** Jobs not finished yet (created, retry or active). */
async function counts(): Promise<{ remaining: number }> {
  const { rows } = await pool.query<{ n: string }>(
    `SELECT count(*) AS n FROM ${schema}.job WHERE name = $1 AND state IN ('created', 'retry', 'active')`,
    [QUEUE],
  );
  return { remaining: Number(rows[0]?.n ?? 0) };
}

/** Waits until no job is left unfinished (see `counts`). */
async function waitEmpty(): Promise<{ elapsedMs: number; fromStartMs: number }> {
  const now = await untilEmpty(counts);
  return { elapsedMs: now - firstHandledAt, fromStartMs: now - workerStartedAt };
}

serveCommands({ startApi, insert, sendMany, startWorker, stopWorker, counts, waitEmpty }, {}, async () => {
  await api?.app.close();
  await boss.stop({ graceful: false, wait: true }).catch(() => undefined);
  await pool.end();
});

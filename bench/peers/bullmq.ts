/**
 * BullMQ as a reference: a Fastify route that validates opqueue's enqueue body and calls `Queue.add` (`POST /jobs`),
 * one that validates a batch of them as opqueue's `POST /jobs/batch` takes it and calls `Queue.addBulk` once with
 * every job (`POST /jobs/batch`, answering each item 201 in order, as opqueue does), and a Worker
 * whose processor POSTs each job's request to the target. Its backend is one of bench/lib/bullmq.ts's: a Redis
 * server of the harness's own (bench/lib/redis.ts) with the settings of BullMQ's production guide (AOF on,
 * `maxmemory-policy noeviction`, `maxRetriesPerRequest: null`), or BullMQ 6's PostgreSQL backend in a fresh schema
 * (migrated on connect). Jobs are kept after they finish, BullMQ's default, as opqueue keeps them.
 *
 * The drain uses one Worker of `concurrency` 64 (at most 64 deliveries on the wire, like opqueue's worker) over one
 * undici pool of 64 connections.
 *
 * Usage: bullmq.ts (--redis-port PORT | --database URL --schema NAME) [--target ORIGIN]
 * Commands: startApi → {port}, insert {count, delayMs}, startWorker {noop?}, stopWorker, counts, waitEmpty,
 * addMany {count, concurrency, delayMs} (library enqueue rate, for the core scenario).
 */
import { parseArgs } from "node:util";
import { createPostgresBackend, Queue, Worker } from "bullmq";
import { serveCommands } from "../lib/ipc.js";
import {
  addConcurrently,
  BatchEnqueueBody,
  EnqueueBody,
  listenApp,
  PeerDeliverer,
  runAtOf,
  untilEmpty,
  type PeerPayload,
} from "../lib/peer-common.js";

const QUEUE = "deliver";
const CONCURRENCY = 64;
/** Jobs per `addBulk` call when inserting a drain's jobs. */
const INSERT_CHUNK = 2000;

const { values } = parseArgs({
  options: {
    "redis-port": { type: "string" },
    database: { type: "string" },
    schema: { type: "string" },
    target: { type: "string" },
  },
});

/** What this file uses of a BullMQ Queue, whichever its backend. */
interface BenchQueue {
  add(name: string, data: PeerPayload, opts?: { delay?: number }): Promise<{ id?: string }>;
  addBulk(jobs: Array<{ name: string; data: PeerPayload; opts?: { delay?: number } }>): Promise<Array<{ id?: string }>>;
  getJobCounts(...states: string[]): Promise<Record<string, number>>;
  close(): Promise<void>;
}

/** What this file uses of a BullMQ Worker. */
interface BenchWorker {
  close(): Promise<void>;
}

const redisConnection = { host: "127.0.0.1", port: Number(values["redis-port"] ?? 6379), maxRetriesPerRequest: null };
const postgresConnection = {
  connectionString: values.database ?? "",
  schema: values.schema ?? "bench_bmq",
  migrate: true,
};

function newQueue(): BenchQueue {
  const queue = values.database
    ? new Queue(QUEUE, { connection: postgresConnection }, createPostgresBackend)
    : new Queue(QUEUE, { connection: redisConnection });
  queue.on("error", (error: Error) => process.stderr.write(`bullmq queue: ${error.message}\n`));
  return queue;
}

function newWorker(processor: (job: { id?: string; data: PeerPayload }) => Promise<void>): BenchWorker {
  const worker = values.database
    ? new Worker(QUEUE, processor, { connection: postgresConnection, concurrency: CONCURRENCY }, createPostgresBackend)
    : new Worker(QUEUE, processor, { connection: redisConnection, concurrency: CONCURRENCY });
  worker.on("error", (error: Error) => process.stderr.write(`bullmq worker: ${error.message}\n`));
  worker.on("failed", (job: { id?: string } | undefined, error: Error) =>
    process.stderr.write(`bullmq job ${job?.id ?? "?"} failed: ${error.message}\n`),
  );
  return worker;
}

const queue = newQueue();

let worker: BenchWorker | undefined;
let deliverer: PeerDeliverer | undefined;
/** When the current worker ran its first job, and when it was started (performance.now()). */
let firstHandledAt = Number.NaN;
let workerStartedAt = Number.NaN;
let api: Awaited<ReturnType<typeof listenApp>> | undefined;

/** BullMQ's delay in ms from a wanted run time (0: due now). */
function delayUntil(runAt: Date): number {
  return Math.max(0, runAt.getTime() - Date.now());
}

async function insert(args: { count: number; delayMs: number }): Promise<void> {
  for (let done = 0; done < args.count; done += INSERT_CHUNK) {
    const size = Math.min(INSERT_CHUNK, args.count - done);
    await queue.addBulk(
      Array.from({ length: size }, (_, i) => ({
        name: "buildReport",
        data: { operation_id: "buildReport", request: { body: { n: done + i } } },
        opts: args.delayMs > 0 ? { delay: args.delayMs } : {},
      })),
    );
  }
}

/** Library enqueue rate: `count` single `add` calls, `concurrency` at a time. */
async function addMany(args: { count: number; concurrency: number; delayMs: number }): Promise<{ elapsedMs: number }> {
  return addConcurrently(args, (n) =>
    queue.add(
      "buildReport",
      { operation_id: "buildReport", request: { body: { n } } },
      {
        ...(args.delayMs > 0 ? { delay: args.delayMs } : {}),
      },
    ),
  );
}

async function startWorker(args: { noop?: boolean }): Promise<void> {
  if (worker) throw new Error("worker already running");
  if (!values.target && !args.noop) throw new Error("--target is required for a delivering worker");
  deliverer = args.noop ? undefined : new PeerDeliverer(values.target ?? "");
  const active = deliverer;
  firstHandledAt = Number.NaN;
  workerStartedAt = performance.now();
  worker = newWorker(async (job) => {
    if (Number.isNaN(firstHandledAt)) firstHandledAt = performance.now();
    if (active) await active.deliver(String(job.id), job.data);
  });
}

async function stopWorker(): Promise<void> {
  await worker?.close();
  worker = undefined;
  await deliverer?.close();
  deliverer = undefined;
}

async function startApi(): Promise<{ port: number }> {
  api ??= await listenApp((app) => {
    app.post("/jobs", { schema: { body: EnqueueBody } }, async (request, reply) => {
      const body = request.body as PeerPayload & { delay_ms?: number; run_at?: string };
      const job = await queue.add(
        body.operation_id,
        { operation_id: body.operation_id, request: body.request },
        { delay: delayUntil(runAtOf(body)) },
      );
      return reply.code(201).send({ job: { id: job.id, operation_id: body.operation_id } });
    });
    app.post("/jobs/batch", { schema: { body: BatchEnqueueBody } }, async (request, reply) => {
      const items = (request.body as { jobs: Array<PeerPayload & { delay_ms?: number; run_at?: string }> }).jobs;
      const jobs = await queue.addBulk(
        items.map((body) => ({
          name: body.operation_id,
          data: { operation_id: body.operation_id, request: body.request },
          opts: { delay: delayUntil(runAtOf(body)) },
        })),
      );
      const results = jobs.map((job, i) => ({
        status: 201,
        job: { id: job.id, operation_id: items[i]?.operation_id },
      }));
      return reply.code(200).send({ results });
    });
  });
  return { port: api.port };
}

/** Jobs not finished yet (waiting, delayed, prioritized or active). */
async function counts(): Promise<{ remaining: number }> {
  const byState = await queue.getJobCounts("waiting", "delayed", "prioritized", "active");
  return { remaining: Object.values(byState).reduce((sum, n) => sum + n, 0) };
}

/** Waits until no job is left unfinished (see `counts`). */
async function waitEmpty(): Promise<{ elapsedMs: number; fromStartMs: number }> {
  const now = await untilEmpty(counts);
  return { elapsedMs: now - firstHandledAt, fromStartMs: now - workerStartedAt };
}

serveCommands({ startApi, insert, addMany, startWorker, stopWorker, counts, waitEmpty }, {}, async () => {
  await api?.app.close();
  await stopWorker().catch(() => undefined);
  await queue.close().catch(() => undefined);
});

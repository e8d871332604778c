/**
 * graphile-worker as the reference: a Fastify route that validates opqueue's enqueue body and calls `addJob` (what
 * a user would build instead of opqueue's API), and a runner whose `deliver` task POSTs the job's request to the
 * target (what a user would run instead of opqueue's worker). Everything lives in its own schema.
 *
 * Settings: `concurrency: 64` (opqueue's worker concurrency in the drain) and `maxPoolSize: 65` (graphile-worker
 * warns when the pool is smaller than the concurrency); otherwise its defaults ("default"), or in addition the
 * batching of its performance guide, `localQueue: {size: 500}, completeJobBatchDelay: 0, failJobBatchDelay: 0`
 * ("batched"). PostgreSQL's durable defaults apply (synchronous_commit on).
 *
 * Usage: graphile.ts --database URL --schema NAME [--target ORIGIN]
 * Commands: migrate, startApi → {port}, insert {count, delayMs}, startWorker {batched}, stopWorker, counts, addMany
 * {count, concurrency} (library enqueue rate, for the core scenario).
 */
import { parseArgs } from "node:util";
import { Logger, makeWorkerUtils, run, type Runner, type WorkerUtils } from "graphile-worker";
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

const { values } = parseArgs({
  options: { database: { type: "string" }, schema: { type: "string" }, target: { type: "string" } },
});
const connectionString = values.database ?? "postgres://postgres@127.0.0.1:5432/postgres";
const schema = values.schema ?? "graphile_worker_bench";

/** Only errors are printed (graphile-worker logs every job at info otherwise). */
const logger = new Logger(() => (level, message) => {
  if (level === "error") process.stderr.write(`graphile-worker: ${message}\n`);
});

const utils: WorkerUtils = await makeWorkerUtils({ connectionString, schema, logger });
await utils.migrate();

let runner: Runner | undefined;
let deliverer: PeerDeliverer | undefined;
/** When the current worker ran its first job, and when it was started (performance.now()). */
let firstHandledAt = Number.NaN;
let workerStartedAt = Number.NaN;
let api: Awaited<ReturnType<typeof listenApp>> | undefined;

/** Adds `count` jobs due after `delayMs`, in batches of 2,000 (one statement each). */
async function insert(args: { count: number; delayMs: number }): Promise<void> {
  const runAt = new Date(Date.now() + args.delayMs);
  for (let done = 0; done < args.count; done += 2000) {
    const size = Math.min(2000, args.count - done);
    await utils.addJobs(
      Array.from({ length: size }, (_, i) => ({
        identifier: "deliver",
        payload: { operation_id: "buildReport", request: { body: { n: done + i } } } satisfies PeerPayload,
        runAt,
      })),
    );
  }
}

/** Library enqueue rate: `count` single `addJob` calls, `concurrency` at a time. */
async function addMany(args: { count: number; concurrency: number; delayMs: number }): Promise<{ elapsedMs: number }> {
  return addConcurrently(args, (n) =>
    utils.addJob(
      "deliver",
      { operation_id: "buildReport", request: { body: { n } } },
      {
        runAt: new Date(Date.now() + args.delayMs),
      },
    ),
  );
}

async function startWorker(args: { batched: boolean; noop?: boolean }): Promise<void> {
  if (runner) throw new Error("worker already running");
  if (!values.target && !args.noop) throw new Error("--target is required for a delivering worker");
  deliverer = args.noop ? undefined : new PeerDeliverer(values.target ?? "");
  const active = deliverer;
  firstHandledAt = Number.NaN;
  workerStartedAt = performance.now();
  runner = await run({
    connectionString,
    schema,
    concurrency: 64,
    maxPoolSize: 65,
    noHandleSignals: true,
    logger,
    taskList: {
      deliver: async (payload, helpers) => {
        if (Number.isNaN(firstHandledAt)) firstHandledAt = performance.now();
        if (active) await active.deliver(String(helpers.job.id), payload as PeerPayload);
      },
    },
    ...(args.batched
      ? { preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } } }
      : {}),
  });
}

async function stopWorker(): Promise<void> {
  await runner?.stop();
  runner = undefined;
  await deliverer?.close();
  deliverer = undefined;
}

async function startApi(): Promise<{ port: number }> {
  api ??= await listenApp((app) => {
    app.post("/jobs", { schema: { body: EnqueueBody } }, async (request, reply) => {
      const body = request.body as PeerPayload & { delay_ms?: number; run_at?: string; priority?: number };
      const job = await utils.addJob(
        "deliver",
        { operation_id: body.operation_id, request: body.request } satisfies PeerPayload,
        { runAt: runAtOf(body), ...(body.priority !== undefined ? { priority: -body.priority } : {}) },
      );
      return reply.code(201).send({ job: { id: String(job.id), operation_id: body.operation_id } });
    });
  });
  return { port: api.port };
}

async function counts(): Promise<{ remaining: number; locked: number }> {
  const rows = await utils.withPgClient((client) =>
    client.query<{ pending: string; locked: string }>(
      `SELECT count(*) AS pending, count(*) FILTER (WHERE locked_at IS NOT NULL) AS locked FROM ${schema}._private_jobs`,
    ),
  );
  const row = rows.rows[0];
  return { remaining: Number(row?.pending ?? 0), locked: Number(row?.locked ?? 0) };
}

/** Waits until no job is left (graphile-worker deletes completed jobs). */
async function waitEmpty(): Promise<{ elapsedMs: number; fromStartMs: number }> {
  const now = await untilEmpty(counts);
  return { elapsedMs: now - firstHandledAt, fromStartMs: now - workerStartedAt };
}

serveCommands(
  {
    waitEmpty,
    startApi,
    insert,
    addMany,
    startWorker,
    stopWorker,
    counts,
  },
  {},
  async () => {
    await stopWorker();
    await api?.app.close();
    await utils.release();
  },
);

/**
 * What erasing one user's data costs as their jobs grow (docs/api.md, "Erasing a user's data"; docs/performance.md,
 * "Erasing a user of many jobs"): `npx tsx bench/erasure.ts [--jobs 200000] [--limit 1000] [--engine sqlite,postgres]`.
 *
 * Puts `--jobs` finished jobs in a fresh store (nine in ten of one user, the rest of another), claimed and finished
 * through the store as a node would, then calls `userErase` for the first user until `more` is false, as
 * `opqueue erase` does (the job tables analyzed first, as a worker node's statistics keeper would), and prints the
 * calls, their total time and the time of the first and last few. PostgreSQL is BENCH_DATABASE_URL's server (a schema
 * of its own, dropped after).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { systemClock } from "../src/clock.js";
import { newJobId } from "../src/job/job-id.js";
import { PostgresStore } from "../src/store/postgres/postgres-store.js";
import { SqliteStore } from "../src/store/sqlite/sqlite-store.js";
import type { JobInsertParams, Store } from "../src/store/store.js";
import { dropSchema, freshSchema, PG_URL } from "./lib/pg.js";

const { values } = parseArgs({
  options: {
    jobs: { type: "string", default: "200000" },
    limit: { type: "string", default: "1000" },
    engine: { type: "string", default: "sqlite,postgres" },
  },
});
const JOBS = Number(values.jobs);
const LIMIT = Number(values.limit);
const BATCH = 500;

function job(index: number): JobInsertParams {
  const userId = index % 10 === 9 ? "bob" : "ada";
  const requestId = `bench-${Math.floor(index / 900)}`;
  return {
    id: newJobId(),
    operationId: "sendWelcomeEmail",
    priority: 0,
    maxAttempts: 1,
    dedupeKey: null,
    concurrencyKey: null,
    rateKey: null,
    enqueuedByOperationId: "createUser",
    parentJobId: null,
    originalRequestId: requestId,
    userId,
    authority: { kind: "request", request_id: requestId, user_id: userId, assertion: "header.payload.signature" },
    request: { path_params: { userId: String(index) }, body: { email: `user${index}@example.com` } },
    spawnCap: 1000,
    traceparent: null,
    expiry: null,
    callbacks: null,
    runTime: { at: 0 },
  };
}

/** Inserts the jobs, then claims and finishes them all (every tenth one dead, with an error body). */
async function fill(store: Store): Promise<void> {
  for (let index = 0; index < JOBS; index += BATCH) {
    const batch = [];
    for (let k = index; k < Math.min(JOBS, index + BATCH); k++) batch.push(store.jobInsert(job(k)));
    await Promise.all(batch);
  }
  for (;;) {
    const claimed = await store.jobClaimMany({ limit: BATCH });
    if (claimed.length === 0) return;
    await store.jobSetStateIfRunningMany({
      outcomes: claimed.map((row, index) => ({
        id: row.id,
        attempt: row.attempt,
        ...(index % 10 === 0
          ? {
              status: "dead",
              result: { status_code: 400, error_body: "no such user", terminal_reason: "permanent-status" },
            }
          : { status: "succeeded", result: { status_code: 200, error_body: null, terminal_reason: null } }),
      })),
    });
  }
}

async function measure(engine: string, store: Store): Promise<void> {
  await fill(store);
  // What a worker node's statistics keeper does once the tables have grown (src/maintenance/statistics.ts).
  await store.statisticsRefresh();
  const times: number[] = [];
  let erased = 0;
  const started = performance.now();
  for (;;) {
    const call = performance.now();
    const outcome = await store.userErase({
      userId: "ada",
      cancelWaiting: false,
      limit: LIMIT,
      actor: "bench",
      role: "admin",
      subject: "bench-subject",
    });
    times.push(performance.now() - call);
    erased += outcome.erased;
    if (!outcome.more) break;
  }
  const ms = (list: number[]) => list.map((time) => Math.round(time)).join(", ");
  console.log(
    `${engine}: ${erased} jobs erased of ${JOBS} in ${times.length} calls of ${LIMIT}, ` +
      `${Math.round(performance.now() - started)} ms; ` +
      `first calls ${ms(times.slice(0, 3))} ms, last ${ms(times.slice(-3))} ms`,
  );
}

for (const engine of values.engine.split(",")) {
  if (engine === "sqlite") {
    const dir = mkdtempSync(join(tmpdir(), "opqueue-erasure-"));
    const store = await SqliteStore.open({ path: join(dir, "opqueue.db"), clock: systemClock });
    try {
      await measure(engine, store);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  } else {
    const schema = freshSchema("bench_opq");
    const store = await PostgresStore.open({ url: PG_URL, clock: systemClock, schema, poolSize: 8 });
    try {
      await measure(engine, store);
    } finally {
      await store.close();
      await dropSchema(schema);
    }
  }
}

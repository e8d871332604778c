/**
 * Where the PostgreSQL server's work per job goes, during a drain: `npx tsx bench/pg-profile.ts [options]`.
 *
 * Pre-inserts due jobs (beside an optional backlog of jobs due in an hour), starts `--nodes` warm serve processes
 * on one fresh schema, and reads, between the drain's first and last arrival at the target, per delivered job:
 * - the server's CPU (the postmaster and every process under it, as `npm run bench` reads it);
 * - WAL records and bytes (`pg_stat_wal`);
 * - per statement (`pg_stat_statements`, when the server loads it): calls, execution time, rows, WAL bytes, buffers
 *   touched, and planning (its time, and how many calls were planned; counted when the server's
 *   `pg_stat_statements.track_planning` is on), for the statements of the top-level calls opqueue makes (PL/pgSQL
 *   bodies are counted in their caller's time, and also on their own when the server's `pg_stat_statements.track` is
 *   `all`);
 * - per table of the schema (`pg_stat_user_tables`): rows inserted, updated (and how many of those HOT), deleted.
 *
 * Options:
 *   --jobs N          jobs drained per run (default 20,000)
 *   --runs N          runs, each on a fresh schema (default 1)
 *   --drains N        drains per run, one after the other by the same nodes (default 1), each reported; a later
 *                     drain finds the row versions the earlier ones left (autovacuum is off on the benchmark machine)
 *   --nodes N         serve processes draining together (default 1)
 *   --backlog N       jobs due in an hour inserted before the run (default 0)
 *   --top N           statements listed (default 15)
 *   --json FILE       also write the figures as JSON
 *   --sql FILE        run FILE's statements in each fresh schema after its migration (an experiment: an index
 *                     dropped, a function restated), with the schema first on the search path
 *   --perf FILE       with --store: `perf record -a -g` into FILE over the drain alone (then `perf report -i FILE
 *                     --comm postgres`)
 *   --retention       with --store: then delete the drained jobs as retention does (jobDeleteFinishedMany, batches of
 *                     CLEAN_BATCH, both rows of each job and its attempts), then VACUUM their tables (autovacuum's
 *                     work, off on the benchmark machine), and report the server's CPU per job of each
 *   --finished N      N succeeded jobs (with an attempt each) that finished 30 days ago, inserted before the run:
 *                     what retention deletes
 *   --delete-during   with --finished: delete them while the drain runs, as the retention cleaner does
 *                     (jobDeleteFinishedMany, batches of CLEAN_BATCH, from this process), from the drain's first
 *                     arrival until it ends; reports the jobs deleted in the window (docs/performance.md, Retention)
 *   --store           no serve process: `--loops` loops in this process claim `--limit` jobs through the store and
 *                     complete them (no delivery), as scenario 5 does; the quick loop for changing the SQL
 *   --index-stats     with --store (not --retention): then close the store's connections, wait until their backends
 *                     have exited (a backend writes its counters out as it exits; a live one may hold them back for
 *                     seconds), and list per drained job each index's scans, entries read and rows fetched through it
 *                     (`pg_stat_user_indexes`, over the whole run): the entries a scan steps over that a vacuum has
 *                     not cleared yet show here
 *
 * pg_stat_statements needs `shared_preload_libraries = 'pg_stat_statements'` in the server's configuration and a
 * restart; `CREATE EXTENSION pg_stat_statements` in the bench database is done here when the library is loaded.
 * Without it, the statement table is left out and says why. The figures are for finding where the work goes; the
 * figures compared with peers are `npm run bench`'s.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Context, SIZES } from "./lib/context.js";
import { systemClock } from "../src/clock.js";
import { CLEAN_BATCH } from "../src/maintenance/cleaner.js";
import { openStore } from "../src/store/open-store.js";
import { SystemCpu, type CpuReading, type CpuRoot } from "./lib/cpu.js";
import { adminClient, assertNoHeldSnapshot, opqueueUrl } from "./lib/pg.js";
import { Progress } from "./lib/progress.js";
import { OpqueueDb, waitForDrain, warmUp } from "./scenarios/common.js";

const { values } = parseArgs({
  options: {
    jobs: { type: "string", default: "20000" },
    runs: { type: "string", default: "1" },
    drains: { type: "string", default: "1" },
    nodes: { type: "string", default: "1" },
    backlog: { type: "string", default: "0" },
    top: { type: "string", default: "15" },
    json: { type: "string" },
    store: { type: "boolean", default: false },
    sql: { type: "string", multiple: true },
    perf: { type: "string" },
    retention: { type: "boolean", default: false },
    finished: { type: "string", default: "0" },
    "delete-during": { type: "boolean", default: false },
    "index-stats": { type: "boolean", default: false },
    loops: { type: "string", default: "2" },
    limit: { type: "string", default: "32" },
  },
});
const jobs = Number(values.jobs);
const runs = Number(values.runs);
const drains = Number(values.drains);
const nodes = Number(values.nodes);
const backlog = Number(values.backlog);
const finished = Number(values.finished);
const top = Number(values.top);
const storeLoops = values.store ? Number(values.loops) : 0;
const claimLimit = Number(values.limit);
if (values["index-stats"] && (!values.store || values.retention)) {
  throw new Error("--index-stats goes with --store, and not with --retention");
}

interface Statement {
  queryid: string;
  query: string;
  calls: number;
  ms: number;
  /** Planning: counted only with `pg_stat_statements.track_planning` on (zero otherwise). */
  plans: number;
  planMs: number;
  rows: number;
  walBytes: number;
  blocks: number;
}

interface Snapshot {
  cpu: CpuReading;
  wal: { records: number; bytes: number };
  statements: Map<string, Statement> | null;
  tables: Map<string, { ins: number; upd: number; hot: number; del: number }>;
}

/** Reads every counter at once (the server's CPU first, as close to the edge as it can be). */
async function snapshot(client: import("pg").Client, cpu: SystemCpu, schema: string, statements: boolean) {
  const reading = cpu.read();
  const wal = await client.query<{ records: string; bytes: string }>(
    "SELECT wal_records AS records, wal_bytes AS bytes FROM pg_stat_wal",
  );
  const tables = await client.query<{ relname: string; ins: string; upd: string; hot: string; del: string }>(
    `SELECT relname, n_tup_ins AS ins, n_tup_upd AS upd, n_tup_hot_upd AS hot, n_tup_del AS del
     FROM pg_stat_user_tables WHERE schemaname = $1`,
    [schema],
  );
  let byQuery: Map<string, Statement> | null = null;
  if (statements) {
    const rows = await client.query<Record<string, string>>(
      `SELECT queryid::text, query, calls, total_exec_time AS ms, plans, total_plan_time AS plan_ms, rows, wal_bytes,
         shared_blks_hit + shared_blks_read + shared_blks_dirtied AS blocks
       FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    );
    byQuery = new Map(
      rows.rows.map((row) => [
        row["queryid"] ?? "",
        {
          queryid: row["queryid"] ?? "",
          query: row["query"] ?? "",
          calls: Number(row["calls"]),
          ms: Number(row["ms"]),
          plans: Number(row["plans"]),
          planMs: Number(row["plan_ms"]),
          rows: Number(row["rows"]),
          walBytes: Number(row["wal_bytes"]),
          blocks: Number(row["blocks"]),
        },
      ]),
    );
  }
  const snap: Snapshot = {
    cpu: reading,
    wal: { records: Number(wal.rows[0]?.records), bytes: Number(wal.rows[0]?.bytes) },
    statements: byQuery,
    tables: new Map(
      tables.rows.map((row) => [
        row.relname,
        { ins: Number(row.ins), upd: Number(row.upd), hot: Number(row.hot), del: Number(row.del) },
      ]),
    ),
  };
  return snap;
}

/** One line of a statement: its text squeezed to one line and cut. */
function shortQuery(query: string, width = 90): string {
  const flat = query.replace(/\s+/g, " ").trim();
  return flat.length > width ? `${flat.slice(0, width - 1)}…` : flat;
}

const fmt = (value: number, digits = 1) =>
  value.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });

async function statementsLoaded(client: import("pg").Client): Promise<string | null> {
  const loaded = await client.query<{ setting: string }>(
    "SELECT setting FROM pg_settings WHERE name = 'shared_preload_libraries'",
  );
  if (!(loaded.rows[0]?.setting ?? "").includes("pg_stat_statements")) {
    return "pg_stat_statements is not in shared_preload_libraries (add it to the server's configuration and restart)";
  }
  await client.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
  return null;
}

async function main(): Promise<void> {
  await assertNoHeldSnapshot();
  const ctx = new Context("full", { ...SIZES.full, drain: { ...SIZES.full.drain, jobs } }, ["postgres"], {
    peers: false,
  });
  const progress = new Progress("pg-profile");
  const admin = await adminClient();
  const results: unknown[] = [];
  try {
    const whyNoStatements = await statementsLoaded(admin);
    const server = await ctx.postgresServer();
    if (server.root === null) throw new Error(server.reason);
    for (let run = 0; run < runs; run++) {
      const db = await OpqueueDb.create(ctx, "postgres", "profile", await ctx.targetOrigin());
      const schema = db.schema ?? "";
      for (const file of values.sql ?? []) {
        await admin.query(`SET search_path = ${schema}; ${readFileSync(file, "utf8")}; RESET search_path`);
      }
      if (backlog > 0) {
        progress.update(`run ${run + 1}: inserting a backlog of ${backlog.toLocaleString("en-US")}`, true);
        await db.preinsert(backlog, Date.now() + 3_600_000);
      }
      if (finished > 0) {
        progress.update(
          `run ${run + 1}: inserting ${finished.toLocaleString("en-US")} jobs finished 30 days ago`,
          true,
        );
        await insertFinished(admin, schema, finished);
      }
      if (storeLoops > 0) {
        results.push(
          await storeRun({
            run,
            schema,
            db,
            server: server.root,
            admin,
            statements: whyNoStatements === null,
            whyNoStatements,
          }),
        );
        continue;
      }
      // Start and warm the nodes first, with nothing due, then insert the measured jobs due shortly after.
      const serves = await db.startNodes(nodes, "bench-opqueue");
      try {
        progress.update(`run ${run + 1}: warming ${nodes} node(s) up`, true);
        for (const serve of serves) await warmUp(ctx, serve, ctx.sizes.drain.warmupJobs);
        const cpu = new SystemCpu({
          system: serves.map((s) => ({ pid: s.pid, scope: "process" })),
          database: server.root,
        });
        for (let drain = 0; drain < drains; drain++) {
          const label = drains > 1 ? `run ${run + 1}, drain ${drain + 1}` : `run ${run + 1}`;
          let start: Promise<Snapshot> | undefined;
          let end: Promise<Snapshot> | undefined;
          const statements = whyNoStatements === null;
          const deleter = values["delete-during"] ? await Deleter.open(schema) : undefined;
          await ctx.resetTarget({
            expect: jobs,
            onEdge: (edge) => {
              if (edge === "start") {
                start = snapshot(admin, cpu, schema, statements);
                deleter?.start();
              } else {
                end = snapshot(admin, cpu, schema, statements);
                deleter?.stop();
              }
            },
          });
          const dueAt = Date.now() + 1500;
          progress.update(`${label}: inserting ${jobs.toLocaleString("en-US")} due jobs`, true);
          await db.preinsert(jobs, dueAt);
          const drained = await waitForDrain(ctx, { count: jobs, fromWall: dueAt, progress, label });
          const [a, b] = await Promise.all([start, end]);
          if (!a || !b) throw new Error("a window edge was missed");
          const deleted = await deleter?.close();
          results.push({
            ...report({ run, drain, drains, drained: drained.rate, a, b, whyNoStatements }),
            deletedDuring: deleted,
          });
          if (deleted !== undefined) {
            console.log(
              `retention during the drain: ${deleted.toLocaleString("en-US")} finished jobs deleted in the drain's window`,
            );
          }
        }
      } finally {
        for (const serve of serves) await serve.stop();
      }
    }
    if (values.json) writeFileSync(values.json, JSON.stringify(results, null, 2));
  } finally {
    await admin.end();
    await ctx.close();
    progress.done("done");
  }
}

/**
 * `count` succeeded jobs that finished 30 days ago, each with its attempt row, in one chain: what the retention cleaner
 * deletes (its age is 7 days here as by default).
 */
async function insertFinished(client: import("pg").Client, schema: string, count: number): Promise<void> {
  const chunk = 100_000;
  const prefix = `old-${Date.now().toString(36)}-`;
  for (let done = 0; done < count; done += chunk) {
    const last = Math.min(done + chunk, count) - 1;
    await client.query(
      `WITH specs AS (
         INSERT INTO ${schema}.job_specs (id, operation_id, max_attempts, created_at, enqueued_by_operation_id,
           original_request_id, user_id, authority, request)
         SELECT $1 || lpad(g::text, 10, '0'), 'buildReport', 5, now() - interval '30 days', 'createUser',
           'bench-finished', 'bench', '{"kind":"request","request_id":"bench-finished","user_id":"bench"}'::json,
           json_build_object('body', json_build_object('n', g))
         FROM generate_series($2::int, $3::int) AS g
         RETURNING seq, id),
       state AS (
         INSERT INTO ${schema}.job_state (seq, status, attempt, priority, run_at, started_at, finished_at, result,
           operation_id, lane)
         SELECT seq, 'succeeded', 1, 0, now() - interval '30 days', now() - interval '30 days',
           now() - interval '30 days', '{"status_code":204,"error_body":null,"terminal_reason":null}'::json,
           'buildReport', 'u:bench' FROM specs)
       INSERT INTO ${schema}.job_attempts (job_id, attempt, started_at, finished_at, outcome, status_code)
       SELECT id, 1, now() - interval '30 days', now() - interval '30 days', 'succeeded', 204 FROM specs`,
      [prefix, done, last],
    );
  }
  await client.query(
    `INSERT INTO ${schema}.chains (original_request_id, jobs_created, created_at, settled_at)
     VALUES ('bench-finished', $1, now() - interval '30 days', now() - interval '30 days')`,
    [count],
  );
  await client.query(`ANALYZE ${schema}.job_specs, ${schema}.job_state, ${schema}.job_attempts`);
}

/** Deletes finished jobs past a 7-day retention as the cleaner does, in a loop from `start` until `stop`. */
class Deleter {
  private running = false;
  private loop: Promise<void> = Promise.resolve();
  deleted = 0;

  private constructor(private readonly store: Awaited<ReturnType<typeof openStore>>) {}

  static async open(schema: string): Promise<Deleter> {
    return new Deleter(await openStore({ url: opqueueUrl(schema, "bench-retention"), clock: systemClock }));
  }

  start(): void {
    this.running = true;
    this.loop = (async () => {
      while (this.running) {
        const n = await this.store.jobDeleteFinishedMany({ olderThanMs: 7 * 24 * 3600 * 1000, limit: CLEAN_BATCH });
        this.deleted += n;
        if (n < CLEAN_BATCH) break;
        await new Promise((resolve) => setImmediate(resolve));
      }
    })();
  }

  stop(): void {
    this.running = false;
  }

  /** Waits for the loop, closes the store, and answers how many jobs were deleted. */
  async close(): Promise<number> {
    this.running = false;
    await this.loop;
    await this.store.close();
    return this.deleted;
  }
}

/** `perf record` of the whole machine until `stop` (SIGINT, then its exit). */
async function startPerf(file: string): Promise<{ stop: () => Promise<void> }> {
  const child = spawn("perf", ["record", "-F", "2999", "-a", "-g", "-o", file], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  await new Promise<void>((resolve, reject) => {
    child.once("error", reject);
    // perf says nothing until it stops; give it a moment to open its buffers.
    setTimeout(resolve, 500);
  });
  return {
    stop: async () => {
      const exited = once(child, "exit");
      child.kill("SIGINT");
      await exited;
    },
  };
}

/** A drain through the store alone: loops of claim and complete, the server's work read around them. */
async function storeRun(options: {
  run: number;
  schema: string;
  db: OpqueueDb;
  server: CpuRoot;
  admin: import("pg").Client;
  statements: boolean;
  whyNoStatements: string | null;
}) {
  const store = await openStore({ url: opqueueUrl(options.schema, "bench-store"), clock: systemClock });
  let closed = false;
  try {
    await options.db.preinsert(jobs, Date.now() - 1000);
    const cpu = new SystemCpu({ system: [{ pid: process.pid, scope: "process" }], database: options.server });
    const perf = values.perf ? await startPerf(values.perf) : undefined;
    const a = await snapshot(options.admin, cpu, options.schema, options.statements);
    const started = performance.now();
    let done = 0;
    await Promise.all(
      Array.from({ length: storeLoops }, async () => {
        for (;;) {
          const claimed = await store.jobClaimMany({ limit: claimLimit });
          if (claimed.length === 0) break;
          await store.jobSetStateIfRunningMany({
            outcomes: claimed.map((job) => ({
              id: job.id,
              attempt: job.attempt,
              status: "succeeded" as const,
              result: { status_code: 204, error_body: null, terminal_reason: null },
            })),
          });
          done += claimed.length;
        }
      }),
    );
    const rate = (done / (performance.now() - started)) * 1000;
    const b = await snapshot(options.admin, cpu, options.schema, options.statements);
    await perf?.stop();
    if (done !== jobs) throw new Error(`${done} jobs claimed, expected ${jobs}`);
    const figures = report({
      run: options.run,
      drain: 0,
      drains: 1,
      drained: rate,
      a,
      b,
      whyNoStatements: options.whyNoStatements,
    });
    if (values["index-stats"]) {
      closed = true;
      await store.close();
      await indexStats(options.admin, options.schema);
    }
    if (!values.retention) return figures;
    const before = cpu.read();
    let deleted = 0;
    for (;;) {
      const n = await store.jobDeleteFinishedMany({ olderThanMs: 0, limit: CLEAN_BATCH });
      deleted += n;
      if (n < CLEAN_BATCH) break;
    }
    const after = cpu.read();
    const retentionUs = (((after.databaseMs ?? 0) - (before.databaseMs ?? 0)) * 1000) / deleted;
    // What autovacuum would do after them (it is off on the benchmark machine): the dead rows of every step.
    const vacuumFrom = cpu.read();
    const tables = ["job_state", "job_specs", "job_attempts", "chains", "attempt_counts"];
    await options.admin.query(`VACUUM ${tables.map((table) => `${options.schema}.${table}`).join(", ")}`);
    const vacuumUs = (((cpu.read().databaseMs ?? 0) - (vacuumFrom.databaseMs ?? 0)) * 1000) / deleted;
    console.log(
      `retention: ${deleted.toLocaleString("en-US")} jobs deleted, server CPU ${fmt(retentionUs)} µs per job; ` +
        `a VACUUM of their tables afterwards ${fmt(vacuumUs)} µs per job`,
    );
    return { ...figures, retentionUs, vacuumUs };
  } finally {
    if (!closed) await store.close();
  }
}

/**
 * Per drained job, each index's scans, entries read and rows fetched (`pg_stat_user_indexes`), once the store's
 * backends are gone: a backend sends its counters at most once a second while it works, and at the latest as it exits.
 */
async function indexStats(admin: import("pg").Client, schema: string): Promise<void> {
  for (;;) {
    const { rows } = await admin.query("SELECT 1 FROM pg_stat_activity WHERE application_name = 'bench-store'");
    if (rows.length === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const { rows } = await admin.query<{ index: string; scans: number; read: number; fetched: number }>(
    `SELECT indexrelname AS index, idx_scan::float8 / $2 AS scans, idx_tup_read::float8 / $2 AS read,
       idx_tup_fetch::float8 / $2 AS fetched
     FROM pg_stat_user_indexes WHERE schemaname = $1 AND idx_scan > 0 ORDER BY idx_tup_read DESC`,
    [schema, jobs],
  );
  console.log("\n| index | scans per job | entries read per job | rows fetched per job |\n|---|---:|---:|---:|");
  for (const row of rows) {
    console.log(`| ${row.index} | ${row.scans.toFixed(3)} | ${row.read.toFixed(2)} | ${row.fetched.toFixed(2)} |`);
  }
}

/** Prints one run's figures per delivered job, and answers them. */
function report(options: {
  run: number;
  drain: number;
  drains: number;
  drained: number;
  a: Snapshot;
  b: Snapshot;
  whyNoStatements: string | null;
}) {
  const { a, b } = options;
  const per = jobs - 1;
  const serverUs = (((b.cpu.databaseMs ?? 0) - (a.cpu.databaseMs ?? 0)) * 1000) / per;
  const nodeUs = ((b.cpu.systemMs - a.cpu.systemMs) * 1000) / per;
  const lines: string[] = [];
  lines.push(
    `\n## Run ${options.run + 1}${options.drains > 1 ? `, drain ${options.drain + 1} of ${options.drains}` : ""}: ${jobs.toLocaleString("en-US")} jobs, ${nodes} node(s), backlog ${backlog.toLocaleString("en-US")}`,
    `rate ${Math.round(options.drained).toLocaleString("en-US")} jobs/s; per delivered job: server CPU ${fmt(serverUs)} µs, ` +
      `node CPU ${fmt(nodeUs)} µs, WAL ${fmt((b.wal.records - a.wal.records) / per, 2)} records, ` +
      `${fmt((b.wal.bytes - a.wal.bytes) / per, 0)} bytes`,
    "",
    "| table | inserted | updated | of which HOT | deleted |",
    "|---|---:|---:|---:|---:|",
  );
  const tables: Record<string, unknown> = {};
  for (const [name, after] of b.tables) {
    const before = a.tables.get(name) ?? { ins: 0, upd: 0, hot: 0, del: 0 };
    const d = {
      ins: (after.ins - before.ins) / per,
      upd: (after.upd - before.upd) / per,
      hot: (after.hot - before.hot) / per,
      del: (after.del - before.del) / per,
    };
    tables[name] = d;
    if (d.ins + d.upd + d.del === 0) continue;
    lines.push(`| ${name} | ${fmt(d.ins, 3)} | ${fmt(d.upd, 3)} | ${fmt(d.hot, 3)} | ${fmt(d.del, 3)} |`);
  }
  const statements: unknown[] = [];
  if (a.statements && b.statements) {
    const deltas: Statement[] = [];
    for (const [id, after] of b.statements) {
      const before = a.statements.get(id);
      const d = {
        queryid: id,
        query: after.query,
        calls: after.calls - (before?.calls ?? 0),
        ms: after.ms - (before?.ms ?? 0),
        plans: after.plans - (before?.plans ?? 0),
        planMs: after.planMs - (before?.planMs ?? 0),
        rows: after.rows - (before?.rows ?? 0),
        walBytes: after.walBytes - (before?.walBytes ?? 0),
        blocks: after.blocks - (before?.blocks ?? 0),
      };
      if (d.calls > 0) deltas.push(d);
    }
    deltas.sort((x, y) => y.ms + y.planMs - (x.ms + x.planMs));
    const totalMs = deltas.reduce((sum, d) => sum + d.ms, 0);
    const totalPlanMs = deltas.reduce((sum, d) => sum + d.planMs, 0);
    lines.push(
      "",
      `statements (execution time in all ${fmt((totalMs * 1000) / per)} µs per job, planning ${fmt((totalPlanMs * 1000) / per)}` +
        " (counted with pg_stat_statements.track_planning on)):",
      "",
      "| µs per job | planning µs per job | calls per job | planned, of calls | rows per call | WAL bytes per job | blocks per job | statement |",
      "|---:|---:|---:|---:|---:|---:|---:|---|",
    );
    for (const d of deltas.slice(0, top)) {
      lines.push(
        `| ${fmt((d.ms * 1000) / per)} | ${fmt((d.planMs * 1000) / per)} | ${fmt(d.calls / per, 4)} | ${fmt(d.plans / d.calls, 2)} | ${fmt(d.rows / d.calls)} | ${fmt(d.walBytes / per, 0)} | ${fmt(d.blocks / per)} | \`${shortQuery(d.query)}\` |`,
      );
      statements.push({ ...d, usPerJob: (d.ms * 1000) / per, planUsPerJob: (d.planMs * 1000) / per });
    }
  } else if (options.whyNoStatements) {
    lines.push("", `statements: not broken down: ${options.whyNoStatements}`);
  }
  console.log(lines.join("\n"));
  return {
    run: options.run,
    drain: options.drain,
    jobs,
    nodes,
    backlog,
    rate: options.drained,
    serverUs,
    nodeUs,
    tables,
    statements,
  };
}

await main();

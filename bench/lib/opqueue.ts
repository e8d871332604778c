/**
 * opqueue as the benchmarks run it: a real `node dist/cli.js serve` child process with a generated config, its
 * assertions, and bulk pre-insertion of jobs straight into its database (never over HTTP).
 *
 * Durability stays on: SQLite runs WAL with `synchronous=FULL` (the store sets it; nothing here changes it) and
 * PostgreSQL keeps the server's `synchronous_commit` (on; the harness checks and records it).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import Database from "better-sqlite3";
import type pg from "pg";
import { request } from "undici";
import { mintToken } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import { parseConfig } from "../../src/config.js";
import { PayloadCipher } from "../../src/store/payload-cipher.js";
import { AUTH } from "./assertions.js";
import { clockTicksPerSecond, readProcStat } from "./cpu.js";
import { ROOT } from "./ipc.js";

/**
 * The product the benchmarks enqueue for: `createUser` may enqueue the background operations `buildReport` (what
 * is measured) and `warmUp` (jobs that warm a fresh node up before a drain; the target does not count them).
 */
const OPENAPI = `openapi: "3.1.0"
info: { title: Benchmark product, version: "1.0.0" }
paths:
  /users:
    post:
      operationId: createUser
      tags: [users]
      responses: { "201": { description: created } }
  /reports:
    post:
      operationId: buildReport
      tags: [background]
      responses: { "204": { description: built } }
  /warmup:
    post:
      operationId: warmUp
      tags: [background]
      responses: { "204": { description: done } }
`;

/** A free TCP port on 127.0.0.1. */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  server.close();
  return port;
}

/** One opqueue deployment: a config file (several nodes may share it with different ports). */
export interface OpqueueSetup {
  dir: string;
  configPath: string;
  database: string;
  raw: Record<string, unknown>;
}

/** Writes the product's OpenAPI document and a config into `dir`. */
export function writeOpqueueConfig(options: {
  dir: string;
  database: string;
  targetOrigin: string;
  concurrency?: number;
  port?: number;
}): OpqueueSetup {
  mkdirSync(options.dir, { recursive: true });
  writeFileSync(join(options.dir, "product.openapi.yaml"), OPENAPI);
  const raw = {
    listen: { host: "127.0.0.1", port: options.port ?? 0 },
    database: options.database,
    openapi: "product.openapi.yaml",
    target: { base_url: options.targetOrigin, audience: "product" },
    auth: AUTH,
    triggers: { createUser: ["buildReport", "warmUp"] },
    // One assertion is one chain: without a high cap, a chain would stop at 1,000 jobs.
    limits: { spawn_cap: 2_000_000_000 },
    worker: {
      concurrency: options.concurrency ?? 64,
      poll_ms: 1000,
      // An experiment's setting (docs/performance.md, "Gathering claims"): the default unless set.
      ...(process.env["BENCH_CLAIM_GATHER_MS"]
        ? { claim_gather_ms: Number(process.env["BENCH_CLAIM_GATHER_MS"]) }
        : {}),
    },
  };
  // BENCH_ENCRYPTION=1 measures payloads encrypted at rest (docs/encryption.md): one key, from a variable every serve
  // process inherits.
  if (benchCipher()) {
    (raw as Record<string, unknown>)["encryption"] = { keys: [{ id: BENCH_KEY_ID, key_env: "BENCH_PAYLOAD_KEY" }] };
  }
  const configPath = join(options.dir, "opqueue.json");
  writeFileSync(configPath, JSON.stringify(raw, null, 2));
  return { dir: options.dir, configPath, database: options.database, raw };
}

/** `count` enqueue assertions for `createUser`, each its own chain (`rid`), minted now (valid 300 s). */
export async function mintAssertions(count: number, ridPrefix = "bench"): Promise<string[]> {
  const config = parseConfig({
    raw: {
      openapi: "x",
      target: { base_url: "http://127.0.0.1:1", audience: "product" },
      auth: AUTH,
    },
    baseDir: ROOT,
    env: {},
  });
  return Promise.all(
    Array.from({ length: count }, (_, i) =>
      mintToken({
        auth: config.auth,
        clock: systemClock,
        sub: `user-${i % 32}`,
        op: "createUser",
        rid: `${ridPrefix}-${i}`,
        ttlSeconds: 300,
      }),
    ),
  );
}

/** Throws unless `dir` holds a build of opqueue (dist/cli.js); `what` names the directory in the message. */
export function requireBuild(dir: string, what: string): void {
  if (!existsSync(join(dir, "dist/cli.js")))
    throw new Error(`${what} ${dir}: no dist/cli.js (run \`npm run build\` there first)`);
}

/** The opqueue build that serve and migrate processes run: this checkout's, unless `useOpqueueBuild` named another. */
let opqueueCli = join(ROOT, "dist/cli.js");

/** Serve and migrate processes run the build in `dir` (its `dist/cli.js`): an older build, measured by this harness. */
export function useOpqueueBuild(dir: string): void {
  opqueueCli = join(dir, "dist/cli.js");
}

/** Where serve processes write their standard output (`serve-<n>.out`), or undefined: discarded. */
let serveOutputDir: string | undefined;
let serveOutputs = 0;

/** Serve processes write their standard output (what `--trace-gc` and the like print) into files in `dir`. */
export function keepServeOutput(dir: string): void {
  mkdirSync(dir, { recursive: true });
  serveOutputDir = dir;
}

/** Applies the schema migrations (`opqueue migrate`) so the database can be filled before a node starts. */
export async function migrate(setup: OpqueueSetup): Promise<void> {
  const child = spawn(process.execPath, [opqueueCli, "migrate", "--config", setup.configPath], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
  const [code] = (await once(child, "exit")) as [number | null];
  if (code !== 0) throw new Error(`opqueue migrate failed (${code}): ${stderr}`);
}

/** A running `opqueue serve` process. */
export class ServeProcess {
  private exitCode: number | null | undefined;

  private constructor(
    readonly child: ChildProcess,
    readonly url: string | null,
  ) {
    child.on("exit", (code) => (this.exitCode = code));
  }

  /**
   * Starts `node dist/cli.js serve` on `port` (API and worker unless `api`/`worker` say otherwise) and waits until
   * it is ready (`/readyz` answers 200; a worker-only node is waited for by the caller).
   */
  static async start(options: {
    setup: OpqueueSetup;
    port?: number;
    api?: boolean;
    worker?: boolean;
    /** Overrides the database URL (a second node's application_name). */
    database?: string;
    /** e.g. ["--cpu-prof", "--cpu-prof-dir", DIR] */
    nodeArgs?: string[];
  }): Promise<ServeProcess> {
    const api = options.api ?? true;
    const port = options.port ?? (await freePort());
    const flags = [...(api ? [] : ["--no-api"]), ...(options.worker === false ? ["--no-worker"] : [])];
    const stdout =
      serveOutputDir === undefined ? "ignore" : openSync(join(serveOutputDir, `serve-${++serveOutputs}.out`), "w");
    const child = spawn(
      process.execPath,
      [...(options.nodeArgs ?? []), opqueueCli, "serve", "--config", options.setup.configPath, ...flags],
      {
        env: {
          ...process.env,
          OPQUEUE_LOG_LEVEL: "warn",
          OPQUEUE_PORT: String(port),
          ...(options.database ? { OPQUEUE_DATABASE_URL: options.database } : {}),
        },
        stdio: ["ignore", stdout, "pipe"],
      },
    );
    if (typeof stdout === "number") closeSync(stdout);
    child.stderr?.on("data", (chunk: Buffer) =>
      process.stderr.write(`\n[opqueue ${child.pid}] ${chunk.toString("utf8")}`),
    );
    const url = api ? `http://127.0.0.1:${port}` : null;
    const serve = new ServeProcess(child, url);
    if (url) {
      const deadline = Date.now() + 60_000;
      for (;;) {
        if (serve.exitCode !== undefined)
          throw new Error(`opqueue serve exited (${serve.exitCode}) before it was ready`);
        try {
          const response = await request(`${url}/readyz`);
          await response.body.dump();
          if (response.statusCode === 200) break;
        } catch {
          // not listening yet
        }
        if (Date.now() > deadline) throw new Error("opqueue serve did not become ready within 60 s");
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
    }
    return serve;
  }

  get pid(): number {
    return this.child.pid ?? 0;
  }

  /** Peak resident set size so far (VmHWM), in MB; null when it cannot be read. */
  peakRssMb(): number | null {
    try {
      const status = readFileSync(`/proc/${this.pid}/status`, "utf8");
      const match = /^VmHWM:\s+(\d+) kB/m.exec(status);
      return match ? Number(match[1]) / 1024 : null;
    } catch {
      return null;
    }
  }

  /**
   * CPU time used so far (user + system), in ms; null when it cannot be read. By default the whole process's (every
   * thread); `"main"` reads the main thread's alone (its task id is the process id): the HTTP server, the dispatcher
   * and the deliveries. SQLite's own thread and V8's helper threads make up the rest.
   */
  cpuMs(thread: "all" | "main" = "all"): number | null {
    const stat = readProcStat(thread === "main" ? `/proc/${this.pid}/task/${this.pid}/stat` : `/proc/${this.pid}/stat`);
    return stat ? (stat.ownTicks * 1000) / clockTicksPerSecond() : null;
  }

  /** Graceful stop (SIGTERM, as an orchestrator would), SIGKILL after 30 s. Returns the peak RSS in MB. */
  async stop(): Promise<number | null> {
    const peak = this.peakRssMb();
    if (this.exitCode !== undefined) return peak;
    const exited = once(this.child, "exit");
    this.child.kill("SIGTERM");
    const timer = setTimeout(() => this.child.kill("SIGKILL"), 30_000);
    await exited;
    clearTimeout(timer);
    return peak;
  }
}

/** A stored authority as opqueue writes it for a root call (the assertion kept as evidence). */
const BENCH_KEY_ID = "bench";

/**
 * With BENCH_ENCRYPTION=1, the cipher of the run: one key, in BENCH_PAYLOAD_KEY, which every serve process inherits
 * and the pre-inserts seal with, so that a drain opens what it claims as it would in production. Null otherwise.
 */
function benchCipher(): PayloadCipher | null {
  if (process.env["BENCH_ENCRYPTION"] !== "1") return null;
  process.env["BENCH_PAYLOAD_KEY"] ??= Buffer.alloc(32, 9).toString("base64");
  return new PayloadCipher([{ id: BENCH_KEY_ID, key: Buffer.from(process.env["BENCH_PAYLOAD_KEY"], "base64") }]);
}

/** The request of pre-inserted job `n` as its column holds it: JSON text, sealed when the run encrypts. */
function requestColumn(n: number, cipher: PayloadCipher | null): string {
  const request = { body: { n } };
  return JSON.stringify(cipher ? cipher.seal(request) : request);
}

function authorityJson(rid: string, assertion: string): string {
  return JSON.stringify({ kind: "request", request_id: rid, user_id: "bench", assertion });
}

let idPrefixCounter = 0;
/** A prefix that makes pre-inserted job ids unique across calls (ids are 8–32 URL-safe characters). */
function idPrefix(): string {
  idPrefixCounter++;
  return `b${process.pid.toString(36)}${idPrefixCounter.toString(36)}x`;
}

/**
 * Inserts `count` pending `buildReport` jobs into a SQLite database (no process may hold it), in one transaction
 * with a prepared statement, and charges their chain. `runAt` is epoch ms. `onProgress` gets the rows done.
 */
export function preinsertSqlite(options: {
  path: string;
  count: number;
  runAt: number;
  assertion: string;
  rid: string;
  onProgress?: (done: number) => void;
}): void {
  const db = new Database(options.path, { timeout: 5000 });
  try {
    db.pragma("journal_mode = WAL");
    db.pragma("synchronous = FULL");
    const insert = db.prepare(
      `INSERT INTO jobs (id, operation_id, status, attempt, max_attempts, priority, run_at, created_at,
         enqueued_by_operation_id, original_request_id, user_id, authority, request)
       VALUES (?, 'buildReport', 'pending', 0, 5, 0, ?, ?, 'createUser', ?, 'bench', ?, ?)`,
    );
    const chain = db.prepare(
      `INSERT INTO chains (original_request_id, jobs_created) VALUES (?, ?)
       ON CONFLICT (original_request_id) DO UPDATE SET jobs_created = jobs_created + excluded.jobs_created`,
    );
    const authority = authorityJson(options.rid, options.assertion);
    const cipher = benchCipher();
    const prefix = idPrefix();
    const now = Date.now();
    const chunk = 50_000;
    for (let done = 0; done < options.count; done += chunk) {
      const size = Math.min(chunk, options.count - done);
      db.transaction(() => {
        for (let i = done; i < done + size; i++) {
          insert.run(
            `${prefix}${i.toString(36).padStart(8, "0")}`,
            options.runAt,
            now,
            options.rid,
            authority,
            requestColumn(i, cipher),
          );
        }
        if (done === 0) chain.run(options.rid, options.count);
      })();
      options.onProgress?.(done + size);
    }
  } finally {
    db.close();
  }
}

/**
 * Inserts `count` pending `buildReport` jobs into opqueue's PostgreSQL schema with `INSERT ... SELECT
 * generate_series` in statements of 100,000 rows, charges their chain, and analyzes the tables when autovacuum
 * would soon after: when the jobs are more than its threshold, 50 rows and a tenth of the table (the defaults of
 * `autovacuum_analyze_threshold` and `autovacuum_analyze_scale_factor`). A drain's 20,000 jobs beside a backlog of
 * 10,000,000 are not; analyzing that table takes seconds, which ran into the drain's lead. `runAt` is epoch ms.
 */
export async function preinsertPostgres(options: {
  client: pg.Client;
  schema: string;
  count: number;
  runAt: number;
  assertion: string;
  rid: string;
  onProgress?: (done: number) => void;
}): Promise<void> {
  const { client, schema } = options;
  const prefix = idPrefix();
  const authority = authorityJson(options.rid, options.assertion);
  const cipher = benchCipher();
  const before = await client.query<{ rows: number }>(
    `SELECT greatest(reltuples, 0)::float8 AS rows FROM pg_class WHERE oid = $1::regclass`,
    [`${schema}.job_state`],
  );
  const analyze = options.count > 50 + 0.1 * (before.rows[0]?.rows ?? 0);
  const chunk = 100_000;
  for (let done = 0; done < options.count; done += chunk) {
    const size = Math.min(chunk, options.count - done);
    // Sealed requests are made here, one per job ($8); clear ones by the statement.
    const sealed = cipher ? Array.from({ length: size }, (_, i) => requestColumn(done + i, cipher)) : null;
    // A job is a job_specs row and a job_state row (migration 0004), which keeps its operation and lane (0010).
    await client.query(
      `WITH specs AS (
         INSERT INTO ${schema}.job_specs (id, operation_id, max_attempts, created_at, enqueued_by_operation_id,
           original_request_id, user_id, authority, request)
         SELECT $1 || lpad(g::text, 10, '0'), 'buildReport', 5, $3::timestamptz, 'createUser', $4, 'bench', $5::json,
           coalesce(($8::text[])[g - $6 + 1]::json, json_build_object('body', json_build_object('n', g)))
         FROM generate_series($6::int, $7::int) AS g
         RETURNING seq)
       INSERT INTO ${schema}.job_state (seq, status, attempt, priority, run_at, operation_id, lane)
       SELECT seq, 'pending', 0, 0, $2::timestamptz, 'buildReport', 'u:bench' FROM specs`,
      [prefix, new Date(options.runAt), new Date(), options.rid, authority, done, done + size - 1, sealed],
    );
    options.onProgress?.(done + size);
  }
  await client.query(
    `INSERT INTO ${schema}.chains AS c (original_request_id, jobs_created) VALUES ($1, $2)
     ON CONFLICT (original_request_id) DO UPDATE SET jobs_created = c.jobs_created + excluded.jobs_created`,
    [options.rid, options.count],
  );
  if (analyze) await client.query(`ANALYZE ${schema}.job_specs, ${schema}.job_state`);
}

/** Job counts by status in a SQLite database no process holds. */
export function countSqlite(path: string): Record<string, number> {
  const db = new Database(path, { readonly: true, timeout: 5000 });
  try {
    const rows = db.prepare("SELECT status, count(*) AS n FROM jobs GROUP BY status").all() as Array<{
      status: string;
      n: number;
    }>;
    return Object.fromEntries(rows.map((row) => [row.status, row.n]));
  } finally {
    db.close();
  }
}

/** Job counts by status in opqueue's PostgreSQL schema. */
export async function countPostgres(client: pg.Client, schema: string): Promise<Record<string, number>> {
  const { rows } = await client.query<{ status: string; n: string }>(
    `SELECT status, count(*) AS n FROM ${schema}.jobs GROUP BY status`,
  );
  return Object.fromEntries(rows.map((row) => [row.status, Number(row.n)]));
}

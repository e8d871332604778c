/**
 * Database outages under real `opqueue serve` processes on PostgreSQL (docs/delivery.md, DESIGN-NOTES "Outcomes
 * and leases"): while the database is away every request answers 2xx or 503 `unavailable` with `Retry-After`,
 * readiness fails and the process keeps running; when the database returns the node recovers by itself, and every
 * job acknowledged with 201 is delivered (at least once) and ends `succeeded`.
 *
 * The shared PostgreSQL server is never touched. A node reaches it through a TCP proxy in this process: "the
 * database goes away" is the proxy cutting every open connection (RST or FIN) and cutting new ones at once, "it
 * returns" is the proxy passing traffic again. Terminations use `pg_terminate_backend` only on backends whose
 * `application_name` is one of this test's nodes (`opq_<schema>…`, set with `?application_name=`).
 *
 * Each test has its own schema (dropped afterwards), temporary folder, ports, target and processes (killed
 * afterwards). Nothing waits for time to pass to decide a result: the test waits for what it can observe (an
 * answer, a log line, a row, a request at the target), polling in bounded loops.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { mintToken } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import { parseConfig, type Config } from "../../src/config.js";
import { dropSchema, freshSchemaName, POSTGRES_SKIP, POSTGRES_URL } from "../helpers/postgres.js";
import { rawTestConfig } from "../helpers/service.js";
import { deferred, reply, startTarget, type Target, type TargetHandler } from "../helpers/target.js";
import { freePort } from "../helpers/ports.js";

const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));
/** Upper bound of every wait; far above what a passing run needs. */
const WAIT_MS = 20_000;
const POLL_MS = 25;
/** How long "the database is down" lasts in the run-time outage. */
const OUTAGE_MS = 2_000;
/** Enqueues per second of the traffic loop. */
const ENQUEUE_EVERY_MS = 50;

// ---------------------------------------------------------------------------------------------------------
// Cleanup: one stack per test, run last-in first-out (processes die before their schema is dropped).

class Cleanup {
  private readonly steps: Array<() => unknown> = [];

  constructor(t: TestContext) {
    t.after(async () => {
      let first: unknown;
      for (const step of this.steps.reverse()) {
        try {
          // Bounded: a stuck step (a connection that died under the test, say) must not hold the run.
          let timer: NodeJS.Timeout | undefined;
          await Promise.race([
            Promise.resolve(step()).finally(() => clearTimeout(timer)),
            new Promise((_resolve, reject) => {
              timer = setTimeout(
                () => reject(new Error(`cleanup step did not finish within ${WAIT_MS} ms: ${String(step)}`)),
                WAIT_MS,
              );
            }),
          ]);
        } catch (error) {
          first ??= error;
        }
      }
      if (first !== undefined) throw first;
    });
  }

  add(step: () => unknown): void {
    this.steps.push(step);
  }
}

// ---------------------------------------------------------------------------------------------------------
// The proxy between a node and PostgreSQL

/** How the proxy cuts a connection: `reset` sends RST (a crash, a network drop), `end` closes with FIN. */
type Cut = "reset" | "end";

/** A server that refuses connections: its SQLSTATE and message, as PostgreSQL sends them. */
interface Refusal {
  code: string;
  message: string;
}

/**
 * PostgreSQL's answer to a startup message it refuses: an ErrorResponse ('E', then its length, then fields: severity
 * 'S' and 'V', SQLSTATE 'C', message 'M', each NUL-terminated, and a final NUL), after which the server closes.
 */
function errorResponse(refusal: Refusal): Buffer {
  const fields = Buffer.concat(
    [
      ["S", "FATAL"],
      ["V", "FATAL"],
      ["C", refusal.code],
      ["M", refusal.message],
    ].map(([type, value]) => Buffer.from(`${type}${value}\0`, "utf8")),
  );
  const body = Buffer.concat([fields, Buffer.from([0])]);
  const header = Buffer.alloc(5);
  header.write("E", 0, "ascii");
  header.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([header, body]);
}

/** A TCP proxy to the test server that can play "the database is down". */
class PgProxy {
  port = 0;
  /** Connections passed through while up. */
  accepted = 0;
  /** Connection attempts cut at once while down. */
  refused = 0;
  private mode: "up" | Cut | Refusal = "up";
  private readonly open = new Set<net.Socket>();
  private readonly server = net.createServer((socket) => this.onConnection(socket));

  constructor(private readonly upstream: { host: string; port: number }) {}

  async listen(): Promise<void> {
    this.server.listen(0, "127.0.0.1");
    await once(this.server, "listening");
    this.port = (this.server.address() as net.AddressInfo).port;
  }

  private onConnection(client: net.Socket): void {
    client.on("error", () => undefined);
    const mode = this.mode;
    if (typeof mode === "object") {
      this.refused++;
      // As the server does: read the startup message, answer it with the error, close.
      client.once("data", () => client.end(errorResponse(mode)));
      return;
    }
    if (mode !== "up") {
      this.refused++;
      cut(client, mode);
      return;
    }
    this.accepted++;
    const server = net.connect(this.upstream.port, this.upstream.host);
    server.on("error", () => undefined);
    for (const [socket, other] of [
      [client, server],
      [server, client],
    ] as const) {
      this.open.add(socket);
      socket.on("close", () => {
        this.open.delete(socket);
        other.destroy();
      });
    }
    client.pipe(server);
    server.pipe(client);
  }

  /** The database goes away: every open connection is cut, and every new one is cut as soon as it arrives. */
  down(how: Cut): void {
    this.mode = how;
    for (const socket of [...this.open]) cut(socket, how);
  }

  /**
   * The server refuses new connections with `refusal` (starting up, not accepting connections, too many clients...);
   * every open connection is cut, as a restart or `pg_terminate_backend` would.
   */
  refuse(refusal: Refusal): void {
    this.mode = refusal;
    for (const socket of [...this.open]) cut(socket, "reset");
  }

  /** The database is back. */
  up(): void {
    this.mode = "up";
  }

  async close(): Promise<void> {
    this.mode = "reset";
    for (const socket of [...this.open]) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

function cut(socket: net.Socket, how: Cut): void {
  if (how === "reset" && !socket.destroyed) socket.resetAndDestroy();
  else socket.destroy();
}

// ---------------------------------------------------------------------------------------------------------
// The scenario: schema, folder, config, direct database access

/** What the test itself knows about the PostgreSQL server (straight to it, never through a proxy). */
const PG_TARGET = (() => {
  if (!POSTGRES_URL) return { host: "127.0.0.1", port: 5432 };
  const url = new URL(POSTGRES_URL);
  return { host: url.hostname || "127.0.0.1", port: Number(url.port || 5432) };
})();

interface Scenario {
  t: TestContext;
  cleanup: Cleanup;
  schema: string;
  dir: string;
  target: Target;
  /** The config every node shares (auth, for minting tokens). */
  config: Config;
  /** A connection of the test's own, straight to the server. */
  db: pg.Client;
  adminToken: string;
}

async function scenario(t: TestContext, handler?: TargetHandler): Promise<Scenario> {
  assert.ok(POSTGRES_URL);
  const cleanup = new Cleanup(t);
  const schema = freshSchemaName();
  cleanup.add(() => dropSchema(schema));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "opqueue-outage-"));
  cleanup.add(() => fs.rmSync(dir, { recursive: true, force: true }));
  const target = await startTarget(t, handler);
  const raw = rawTestConfig(dir);
  const config = parseConfig({ raw, baseDir: dir, env: {} });
  const db = new pg.Client({ connectionString: POSTGRES_URL, application_name: `opq_${schema}_test` });
  db.on("error", () => undefined);
  await db.connect();
  cleanup.add(() => db.end());
  const adminToken = await mintToken({ auth: config.auth, clock: systemClock, sub: "admin", siteAdmin: true });
  return { t, cleanup, schema, dir, target, config, db, adminToken };
}

async function startProxy(s: Scenario): Promise<PgProxy> {
  const proxy = new PgProxy(PG_TARGET);
  await proxy.listen();
  s.cleanup.add(() => proxy.close());
  return proxy;
}

/** Jobs by id, read straight from the schema. */
async function readJobs(
  s: Scenario,
  ids: string[],
): Promise<Map<string, { status: string; attempt: number; result: { status_code?: number } | null }>> {
  const rows = await s.db.query<{
    id: string;
    status: string;
    attempt: number;
    result: { status_code?: number } | null;
  }>(`SELECT id, status, attempt, result FROM ${s.schema}.jobs WHERE id = ANY($1::text[])`, [ids]);
  return new Map(rows.rows.map((row) => [row.id, row]));
}

/** Waits until every job of `ids` is `succeeded`; fails with the stragglers (and the nodes' output) otherwise. */
async function waitForSucceeded(s: Scenario, ids: string[], nodes: Node[]): Promise<void> {
  let pending: string[] = [];
  await waitUntil(
    `every acknowledged job (${ids.length}) ends succeeded`,
    async () => {
      for (const node of nodes) assertAlive(node);
      const jobs = await readJobs(s, ids);
      pending = ids.filter((id) => jobs.get(id)?.status !== "succeeded");
      return pending.length === 0;
    },
    () => {
      const lines = pending
        .slice(0, 10)
        .map(
          (id) =>
            `${id}: ${s.target.requests.some((r) => r.headers["idempotency-key"] === id) ? "delivered" : "never delivered"}`,
        );
      return `not succeeded: ${pending.length}\n${lines.join("\n")}\n${nodes.map((node) => node.output()).join("\n")}`;
    },
  );
}

/** Backends of the server whose application_name is one of `names` (never anyone else's). */
async function backendsOf(
  s: Scenario,
  names: string[],
): Promise<Array<{ pid: number; name: string; query: string; wait: string | null }>> {
  const rows = await s.db.query<{ pid: number; name: string; query: string; wait: string | null }>(
    `SELECT pid, application_name AS name, query, wait_event_type AS wait FROM pg_stat_activity
     WHERE application_name = ANY($1::text[]) AND pid <> pg_backend_pid()`,
    [names],
  );
  return rows.rows;
}

/**
 * Terminates the backends whose application_name is one of `names` and returns their names. The guard sits in a
 * CASE, which PostgreSQL evaluates in order: a condition beside `pg_terminate_backend(pid)` in a WHERE clause may
 * be evaluated after it, and so terminate backends of anyone on the server.
 */
async function terminateBackendsOf(s: Scenario, names: string[]): Promise<string[]> {
  assert.ok(names.length > 0 && names.every((name) => name.startsWith(`opq_${s.schema}_`)), "only this test's nodes");
  const rows = await s.db.query<{ name: string; terminated: boolean }>(
    `SELECT application_name AS name,
       CASE WHEN application_name = ANY($1::text[]) AND pid <> pg_backend_pid() THEN pg_terminate_backend(pid) ELSE false END
         AS terminated
     FROM pg_stat_activity WHERE application_name = ANY($1::text[])`,
    [names],
  );
  return rows.rows.filter((row) => row.terminated).map((row) => row.name);
}

/**
 * Holds the row of chain `rid` in an open transaction of the test's connection, so that a chain cancel of the same
 * chain on a node waits inside its own transaction until `release`.
 */
async function holdChainRow(s: Scenario, rid: string): Promise<{ release: () => Promise<void> }> {
  await s.db.query("BEGIN");
  await s.db.query(`INSERT INTO ${s.schema}.chains (original_request_id) VALUES ($1)`, [rid]);
  let released = false;
  const release = async () => {
    if (released) return;
    released = true;
    await s.db.query("ROLLBACK");
  };
  s.cleanup.add(release);
  return { release };
}

// ---------------------------------------------------------------------------------------------------------
// Nodes: real `opqueue serve` processes

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

interface Node {
  name: string;
  /** The application_name of the node's pool (its listener adds `-listener`). */
  applicationName: string;
  child: ChildProcess;
  /** The API's base URL (the port is chosen even for --no-api nodes). */
  url: string;
  exited: Promise<Exit>;
  /** Set once the process has exited. */
  exit: Exit | undefined;
  output(): string;
  hasLogged(message: string): boolean;
}

/** The child's environment: this process's, without anything that could steer opqueue or the test runner. */
function childEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (name.startsWith("OPQUEUE_") || name.startsWith("NODE_TEST") || name === "NODE_OPTIONS") continue;
    env[name] = value;
  }
  return env;
}

/**
 * Writes the node's config and spawns `opqueue serve`. Leases as the brief has them (heartbeat 200 ms, grace 1 s,
 * check 200 ms), `worker.poll_ms` 200, a short delivery timeout (a lease lost with a claim's answer is rescued soon)
 * and fast retries. `change` adjusts the raw config.
 */
async function spawnNode(
  s: Scenario,
  options: {
    name: string;
    proxy?: PgProxy;
    api?: boolean;
    worker?: boolean;
    change?: (raw: Record<string, unknown>) => void;
  },
): Promise<Node> {
  assert.ok(POSTGRES_URL);
  const port = await freePort();
  const applicationName = `opq_${s.schema}_${options.name}`;
  const database = new URL(POSTGRES_URL);
  if (options.proxy) {
    database.hostname = "127.0.0.1";
    database.port = String(options.proxy.port);
  }
  database.searchParams.set("schema", s.schema);
  database.searchParams.set("application_name", applicationName);
  const raw = rawTestConfig(s.dir);
  raw["database"] = database.toString();
  raw["database_pool_size"] = 4;
  raw["listen"] = { host: "127.0.0.1", port };
  raw["target"] = { base_url: s.target.url, audience: "product" };
  raw["lease"] = { heartbeat_ms: 200, grace_ms: 1000, check_ms: 200 };
  raw["worker"] = { concurrency: 16, poll_ms: 200 };
  raw["defaults"] = { max_attempts: 5, timeout_ms: 3000 };
  raw["retry"] = { base_ms: 50, factor: 1, max_ms: 50 };
  raw["shutdown"] = { grace_ms: 1000 };
  raw["cron"] = [];
  options.change?.(raw);
  const configFile = path.join(s.dir, `${options.name}.json`);
  // JSON is YAML too.
  fs.writeFileSync(configFile, JSON.stringify(raw, null, 2));

  const args = ["--import", "tsx", "src/cli.ts", "serve", "--config", configFile];
  if (options.api === false) args.push("--no-api");
  if (options.worker === false) args.push("--no-worker");
  const child = spawn(process.execPath, args, { cwd: REPO_ROOT, env: childEnv(), stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout?.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const node: Node = {
    name: options.name,
    applicationName,
    child,
    url: `http://127.0.0.1:${port}`,
    exit: undefined,
    exited: new Promise<Exit>((resolve, reject) => {
      child.on("error", reject);
      child.on("close", (code, signal) => {
        node.exit = { code, signal };
        resolve(node.exit);
      });
    }),
    output: () => `--- ${options.name} stderr:\n${stderr}\n--- ${options.name} stdout:\n${stdout}`,
    hasLogged: (message) =>
      stdout.split("\n").some((line) => {
        if (!line.startsWith("{")) return false;
        try {
          return (JSON.parse(line) as { msg?: unknown }).msg === message;
        } catch {
          return false;
        }
      }),
  };
  s.cleanup.add(async () => {
    if (node.exit === undefined) {
      child.kill("SIGKILL");
      await node.exited;
    }
  });
  return node;
}

/** Spawns a node and waits until it serves: /readyz answers (API nodes; /healthz answers while it still opens its database) or it logged "opqueue started". */
async function startNode(s: Scenario, options: Parameters<typeof spawnNode>[1]): Promise<Node> {
  const node = await spawnNode(s, options);
  await waitUntil(
    `${options.name} starts`,
    async () => {
      assertAlive(node);
      if (options.api === false) return node.hasLogged("opqueue started");
      return (await call(`${node.url}/readyz`)).status === 200;
    },
    node.output,
  );
  return node;
}

function assertAlive(node: Node): void {
  if (node.exit !== undefined) {
    assert.fail(`${node.name} exited (code ${node.exit.code}, signal ${node.exit.signal}):\n${node.output()}`);
  }
}

// ---------------------------------------------------------------------------------------------------------
// HTTP

interface Answer {
  status: number;
  /** `code` of an error body. */
  code: string | undefined;
  retryAfter: string | null;
  body: string;
  /** A connection error (status 0). */
  error?: string;
}

async function call(url: string, init: RequestInit = {}): Promise<Answer> {
  try {
    const response = await fetch(url, { ...init, signal: AbortSignal.timeout(WAIT_MS / 2) });
    const body = await response.text();
    let code: string | undefined;
    try {
      code = (JSON.parse(body) as { code?: string }).code;
    } catch {
      code = undefined;
    }
    return { status: response.status, code, retryAfter: response.headers.get("retry-after"), body };
  } catch (error) {
    const cause = (error as { cause?: { code?: string } }).cause?.code;
    return {
      status: 0,
      code: undefined,
      retryAfter: null,
      body: "",
      error: `${String(error)}${cause ? ` (${cause})` : ""}`,
    };
  }
}

/** The contract's answers during an outage: 2xx, or 503 `unavailable` with `Retry-After`. Anything else is a finding. */
function acceptable(answer: Answer): boolean {
  if (answer.status >= 200 && answer.status < 300) return true;
  return (
    answer.status === 503 &&
    answer.code === "unavailable" &&
    answer.retryAfter !== null &&
    /^\d+$/.test(answer.retryAfter)
  );
}

function describe(what: string, answer: Answer): string {
  return (
    `${what}: ${answer.status === 0 ? `no answer: ${answer.error}` : `${answer.status} ${answer.body.slice(0, 300)}`}` +
    ` (retry-after: ${answer.retryAfter ?? "none"})`
  );
}

/** The path the target sees for a `sendWelcomeEmail` job of `userId`. */
const welcomePath = (userId: string) => `/users/${encodeURIComponent(userId)}/welcome-email`;

/** `POST /jobs` for `sendWelcomeEmail` with a fresh chain per job; the answer and, on 201, the job id. */
async function enqueue(s: Scenario, node: Node, userId: string): Promise<{ answer: Answer; id: string | undefined }> {
  const token = await mintToken({
    auth: s.config.auth,
    clock: systemClock,
    sub: "u1",
    op: "createUser",
    rid: `signup-${userId}`,
  });
  const answer = await call(`${node.url}/jobs`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ operation_id: "sendWelcomeEmail", request: { path_params: { userId } } }),
  });
  const id = answer.status === 201 ? (JSON.parse(answer.body) as { job: { id: string } }).job.id : undefined;
  return { answer, id };
}

function admin(s: Scenario, node: Node, pathAndQuery: string, method = "GET"): Promise<Answer> {
  return call(`${node.url}${pathAndQuery}`, {
    method,
    headers: {
      authorization: `Bearer ${s.adminToken}`,
      ...(method === "POST" ? { "content-type": "application/json" } : {}),
    },
  });
}

/** Polls GET /readyz until it answers `status`; returns that answer. */
async function waitForReadiness(node: Node, status: 200 | 503): Promise<Answer> {
  let last: Answer | undefined;
  await waitUntil(
    `${node.name} /readyz answers ${status}`,
    async () => {
      assertAlive(node);
      last = await call(`${node.url}/readyz`);
      return last.status === status;
    },
    () => `${last ? describe("last /readyz", last) : ""}\n${node.output()}`,
  );
  assert.ok(last);
  return last;
}

/** Polls `probe` until it returns something truthy; fails after WAIT_MS with `context()`. */
async function waitUntil<T>(
  what: string,
  probe: () => Promise<T> | T,
  context: () => string = () => "",
): Promise<NonNullable<T>> {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const value = await probe();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) assert.fail(`gave up waiting (${WAIT_MS} ms): ${what}\n${context()}`);
    await sleep(POLL_MS);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Traffic: enqueues at ~20/s and admin requests, every answer checked against the contract

class Traffic {
  /** Jobs acknowledged with 201, with the phase they were acknowledged in. */
  readonly acked: Array<{ id: string; userId: string; phase: string }> = [];
  /** Answers outside the contract. */
  readonly findings: string[] = [];
  /** Answers by `kind phase status`, for the report. */
  readonly tally = new Map<string, number>();
  phase = "before";
  private running = true;
  private readonly pending = new Set<Promise<void>>();
  private readonly loops: Array<Promise<void>>;
  private count = 0;

  constructor(
    private readonly s: Scenario,
    private readonly node: Node,
    private readonly label: string,
  ) {
    this.loops = [this.enqueueLoop(), this.adminLoop()];
  }

  private record(kind: string, what: string, answer: Answer): void {
    const key = `${kind} ${this.phase} ${answer.status}`;
    this.tally.set(key, (this.tally.get(key) ?? 0) + 1);
    if (!acceptable(answer)) this.findings.push(describe(`${what} (${this.phase})`, answer));
  }

  /** Answers of `kind` with `status` so far (any phase unless given). */
  answered(kind: string, status: number, phase?: string): number {
    let total = 0;
    for (const [key, count] of this.tally) {
      const [k, p, st] = key.split(" ");
      if (k === kind && Number(st) === status && (phase === undefined || p === phase)) total += count;
    }
    return total;
  }

  private async enqueueLoop(): Promise<void> {
    while (this.running) {
      const userId = `${this.label}-${this.count++}`;
      const phase = this.phase;
      const one = enqueue(this.s, this.node, userId).then(({ answer, id }) => {
        this.record("enqueue", `POST /jobs ${userId}`, answer);
        if (id) this.acked.push({ id, userId, phase });
      });
      this.pending.add(one);
      void one.finally(() => this.pending.delete(one));
      await sleep(ENQUEUE_EVERY_MS);
    }
  }

  private async adminLoop(): Promise<void> {
    for (let round = 0; this.running; round++) {
      const last = this.acked.at(-1);
      if (last) this.record("admin", `GET /jobs/${last.id}`, await admin(this.s, this.node, `/jobs/${last.id}`));
      this.record("admin", "GET /jobs", await admin(this.s, this.node, "/jobs?limit=5&status=pending&status=running"));
      // A chain nobody enqueues into: cancelling it is a write transaction that always answers 200.
      const chain = `/chains/${this.label}-idle-chain-${round}/cancel`;
      this.record("admin", `POST ${chain}`, await admin(this.s, this.node, chain, "POST"));
      await sleep(2 * ENQUEUE_EVERY_MS);
    }
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
    await Promise.all([...this.pending]);
  }

  summary(): string {
    return [...this.tally]
      .sort()
      .map(([key, count]) => `${key}: ${count}`)
      .join(", ");
  }
}

/** Deliveries the target received per job id (by idempotency key). */
function deliveriesById(target: Target): Map<string, number> {
  const counts = new Map<string, number>();
  for (const request of target.requests) {
    const key = request.headers["idempotency-key"];
    if (typeof key === "string") counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return counts;
}

/** Every acknowledged job was delivered at least once; returns how many deliveries were repeats. */
function checkDeliveredAtLeastOnce(target: Target, ids: string[]): number {
  const counts = deliveriesById(target);
  const never = ids.filter((id) => (counts.get(id) ?? 0) === 0);
  assert.deepEqual(never, [], "every acknowledged job reached the target");
  return ids.reduce((sum, id) => sum + (counts.get(id) ?? 0) - 1, 0);
}

/**
 * Starts a chain cancel on `node` that waits, inside its transaction, on a chain row the test holds; resolves once
 * the node's backend is seen waiting on the lock. The database going away now catches a checked-out connection in
 * the middle of a transaction.
 */
async function startBlockedAdminWrite(
  s: Scenario,
  node: Node,
  rid: string,
): Promise<{ answer: Promise<Answer>; release: () => Promise<void> }> {
  const lock = await holdChainRow(s, rid);
  const answer = admin(s, node, `/chains/${rid}/cancel`, "POST");
  await waitUntil(`${node.name}'s chain cancel waits on the held row`, async () =>
    (await backendsOf(s, [node.applicationName])).some((backend) => backend.wait === "Lock"),
  );
  return { answer, release: lock.release };
}

// ---------------------------------------------------------------------------------------------------------

test(
  "the database goes away for 2 s under load: requests answer 2xx or 503 unavailable with Retry-After, readiness fails then recovers, the process keeps running, and every acknowledged job is delivered and ends succeeded",
  { skip: POSTGRES_SKIP, timeout: 60_000 },
  async (t) => {
    const s = await scenario(t);
    const proxy = await startProxy(s);
    const node = await startNode(s, { name: "node", proxy });
    await waitForReadiness(node, 200);

    const traffic = new Traffic(s, node, "load");
    s.cleanup.add(() => traffic.stop());
    await waitUntil(
      "deliveries flow before the outage",
      () => s.target.requests.length >= 10,
      traffic.summary.bind(traffic),
    );

    // A write waiting inside its transaction when the connections are cut.
    const blocked = await startBlockedAdminWrite(s, node, "outage-probe");
    traffic.phase = "down";
    proxy.down("reset");
    const blockedAnswer = await blocked.answer;
    await blocked.release();
    assert.ok(
      acceptable(blockedAnswer),
      `${describe("the chain cancel caught in its transaction", blockedAnswer)}\n${node.output()}`,
    );
    const notReady = await waitForReadiness(node, 503);
    assert.equal(notReady.code, "unavailable");
    assert.ok(notReady.retryAfter, "/readyz's 503 has Retry-After");
    await sleep(OUTAGE_MS);
    assertAlive(node);

    proxy.up();
    traffic.phase = "after";
    await waitForReadiness(node, 200);
    // The LISTEN connection, cut with the rest, is back too (it reconnects with its own backoff).
    await waitUntil("the node listens again", async () => {
      assertAlive(node);
      return (await backendsOf(s, [`${node.applicationName}-listener`])).some((backend) =>
        backend.query.startsWith("LISTEN"),
      );
    });
    await waitUntil("enqueues are acknowledged again after the outage", () => {
      assertAlive(node);
      return traffic.acked.filter((job) => job.phase === "after").length >= 10;
    });
    await traffic.stop();

    t.diagnostic(`answers: ${traffic.summary()}`);
    t.diagnostic(
      `the chain cancel caught in its transaction answered ${blockedAnswer.status} ${blockedAnswer.code ?? ""}`,
    );
    assert.deepEqual(
      traffic.findings,
      [],
      `answers outside the contract:\n${traffic.findings.join("\n")}\n${node.output()}`,
    );
    assert.ok(traffic.answered("enqueue", 503, "down") > 0, "the outage was seen by enqueues (503 unavailable)");
    assertAlive(node);

    const ids = traffic.acked.map((job) => job.id);
    await waitForSucceeded(s, ids, [node]);
    const repeats = checkDeliveredAtLeastOnce(s.target, ids);
    t.diagnostic(`${ids.length} jobs acknowledged, all succeeded; ${repeats} repeated deliveries (at-least-once)`);
    assertAlive(node);
  },
);

test(
  "pg_terminate_backend of every connection of two nodes mid-run: requests answer 2xx or 503, the processes keep running, acknowledged jobs are delivered, and the worker's LISTEN connection comes back so a later enqueue on the other node wakes it",
  { skip: POSTGRES_SKIP, timeout: 60_000 },
  async (t) => {
    const s = await scenario(t);
    const api = await startNode(s, { name: "api", worker: false });
    // A poll interval no wait here comes near: an idle worker is woken only by NOTIFY (or its own deliveries ending).
    const worker = await startNode(s, {
      name: "worker",
      api: false,
      change: (raw) => (raw["worker"] = { concurrency: 16, poll_ms: 600_000 }),
    });
    const listenerName = `${worker.applicationName}-listener`;
    const names = [api.applicationName, worker.applicationName, listenerName];
    const listenerBefore = await waitUntil("the worker listens", async () =>
      (await backendsOf(s, [listenerName])).find((backend) => backend.query.startsWith("LISTEN")),
    );

    const traffic = new Traffic(s, api, "terminate");
    s.cleanup.add(() => traffic.stop());
    await waitUntil(
      "deliveries flow before the terminations",
      () => s.target.requests.length >= 10,
      traffic.summary.bind(traffic),
    );

    const blocked = await startBlockedAdminWrite(s, api, "terminate-probe");
    traffic.phase = "terminated";
    const terminated = await terminateBackendsOf(s, names);
    const byName = (name: string) => terminated.filter((row) => row === name).length;
    t.diagnostic(
      `terminated: api ${byName(api.applicationName)}, worker pool ${byName(worker.applicationName)}, worker listener ${byName(listenerName)}`,
    );
    assert.ok(byName(listenerName) >= 1, "the worker's LISTEN connection was terminated");
    assert.ok(byName(worker.applicationName) >= 1, "a connection of the worker's pool was terminated");
    assert.ok(byName(api.applicationName) >= 1, "a connection of the API node's pool was terminated");
    const blockedAnswer = await blocked.answer;
    await blocked.release();
    assert.ok(
      acceptable(blockedAnswer),
      `${describe("the chain cancel caught in its transaction", blockedAnswer)}\n${api.output()}`,
    );
    assertAlive(api);

    // A new LISTEN connection (the terminated backend may still be listed for a moment).
    await waitUntil("the worker listens again", async () => {
      assertAlive(worker);
      return (await backendsOf(s, [listenerName])).some(
        (backend) => backend.pid !== listenerBefore.pid && backend.query.startsWith("LISTEN"),
      );
    });
    traffic.phase = "after";
    await waitUntil("enqueues are acknowledged after the terminations", () => {
      assertAlive(api);
      assertAlive(worker);
      return traffic.acked.filter((job) => job.phase === "after").length >= 10;
    });
    await traffic.stop();

    t.diagnostic(`answers: ${traffic.summary()}`);
    t.diagnostic(
      `the chain cancel caught in its transaction answered ${blockedAnswer.status} ${blockedAnswer.code ?? ""}`,
    );
    assert.deepEqual(
      traffic.findings,
      [],
      `answers outside the contract:\n${traffic.findings.join("\n")}\n${api.output()}`,
    );
    assertAlive(api);
    assertAlive(worker);

    const ids = traffic.acked.map((job) => job.id);
    await waitForSucceeded(s, ids, [api, worker]);
    const repeats = checkDeliveredAtLeastOnce(s.target, ids);
    t.diagnostic(`${ids.length} jobs acknowledged, all succeeded; ${repeats} repeated deliveries (at-least-once)`);

    // The worker is idle now (its last claim found nothing and armed the 600 s poll): only a notification on the
    // new LISTEN connection can wake it for a job enqueued on the API node. The pause lets the claim pass that
    // followed the last outcome write finish, so that it cannot pick the job up instead (which would hide a lost
    // LISTEN); it can only make the test pass wrongly, never fail.
    await sleep(500);
    const { answer, id } = await enqueue(s, api, "after-terminations");
    assert.equal(answer.status, 201, describe("POST /jobs", answer));
    assert.ok(id);
    await waitUntil(
      "the job enqueued on the API node is delivered by the worker",
      () => s.target.requests.some((request) => request.path === welcomePath("after-terminations")),
      worker.output,
    );
    await waitForSucceeded(s, [id], [api, worker]);
    assertAlive(api);
    assertAlive(worker);
  },
);

test(
  "an outcome that cannot be written while the database is away is written when it returns: the job ends succeeded after one delivery (the lease never expired)",
  { skip: POSTGRES_SKIP, timeout: 60_000 },
  async (t) => {
    const held = deferred();
    const heldPath = welcomePath("held");
    const s = await scenario(t, async (request, res) => {
      if (request.path === heldPath) await held.promise;
      reply(res, 204);
    });
    const proxy = await startProxy(s);
    const node = await startNode(s, {
      name: "node",
      proxy,
      change: (raw) => {
        raw["lease"] = { heartbeat_ms: 200, grace_ms: 5000, check_ms: 200 };
        raw["defaults"] = { max_attempts: 5, timeout_ms: 10_000 };
      },
    });

    const { answer, id } = await enqueue(s, node, "held");
    assert.equal(answer.status, 201, describe("POST /jobs", answer));
    assert.ok(id);
    await waitUntil("the delivery reaches the target", () =>
      s.target.requests.some((request) => request.path === heldPath),
    );

    proxy.down("end");
    await waitForReadiness(node, 503);
    held.resolve();
    // The answer arrived and the completer tried to write the outcome while the database was away.
    await waitUntil("the outcome write fails", () => node.hasLogged("outcome write failed; retrying"), node.output);
    const whileDown = (await readJobs(s, [id])).get(id);
    assert.equal(whileDown?.status, "running", "the outcome is not written while the database is away");

    proxy.up();
    await waitForSucceeded(s, [id], [node]);
    const stored = (await readJobs(s, [id])).get(id);
    assert.equal(stored?.attempt, 1, "one attempt");
    assert.equal(stored?.result?.status_code, 204);
    assert.equal(s.target.requests.filter((request) => request.path === heldPath).length, 1, "delivered once");
    await waitForReadiness(node, 200);
    assertAlive(node);
  },
);

test(
  "serve started while the database refuses connections keeps retrying, then serves by itself when the database answers",
  { skip: POSTGRES_SKIP, timeout: 60_000 },
  async (t) => {
    const s = await scenario(t);
    const proxy = await startProxy(s);
    proxy.down("reset");
    const node = await spawnNode(s, { name: "node", proxy });

    await waitUntil(
      "serve tries to reach the database twice",
      () => {
        if (node.exit !== undefined) {
          assert.fail(
            `serve exited (code ${node.exit.code}, signal ${node.exit.signal}) instead of waiting for the database:\n${node.output()}`,
          );
        }
        return proxy.refused >= 2;
      },
      node.output,
    );
    t.diagnostic(`connection attempts refused before the database came up: ${proxy.refused}`);

    proxy.up();
    await waitForReadiness(node, 200);
    const { answer, id } = await enqueue(s, node, "after-start");
    assert.equal(answer.status, 201, describe("POST /jobs", answer));
    assert.ok(id);
    await waitForSucceeded(s, [id], [node]);
    assertAlive(node);
  },
);

test(
  "SIGTERM while serve waits for the database at start-up exits 0",
  { skip: POSTGRES_SKIP, timeout: 60_000 },
  async (t) => {
    const s = await scenario(t);
    const proxy = await startProxy(s);
    proxy.down("reset");
    const node = await spawnNode(s, { name: "node", proxy });
    // Past the first retry: the process has been waiting a while.
    await waitUntil(
      "serve tries to reach the database three times",
      () => {
        assertAlive(node);
        return proxy.refused >= 3;
      },
      node.output,
    );
    node.child.kill("SIGTERM");
    const exit = await node.exited;
    assert.deepEqual(exit, { code: 0, signal: null }, node.output());
  },
);

test(
  "SIGTERM while the database is away still exits 0; the outcome it could not write is left to the lease",
  { skip: POSTGRES_SKIP, timeout: 60_000 },
  async (t) => {
    const held = deferred();
    const heldPath = welcomePath("held-at-shutdown");
    const s = await scenario(t, async (request, res) => {
      if (request.path === heldPath) await held.promise;
      reply(res, 204);
    });
    t.after(() => held.resolve());
    const proxy = await startProxy(s);
    const node = await startNode(s, { name: "node", proxy, change: (raw) => (raw["shutdown"] = { grace_ms: 300 }) });
    const { answer, id } = await enqueue(s, node, "held-at-shutdown");
    assert.equal(answer.status, 201, describe("POST /jobs", answer));
    assert.ok(id);
    await waitUntil("the delivery reaches the target", () =>
      s.target.requests.some((request) => request.path === heldPath),
    );

    proxy.down("reset");
    await waitForReadiness(node, 503);
    node.child.kill("SIGTERM");
    const exit = await waitUntil("serve exits after SIGTERM", () => node.exit, node.output);
    assert.deepEqual(exit, { code: 0, signal: null }, node.output());
    const stored = (await readJobs(s, [id])).get(id);
    assert.equal(stored?.status, "running", "nothing could be written; the lease will expire and the rescuer retry it");
  },
);

/** What a PostgreSQL server answers new connections with when it cannot serve them now. */
const REFUSALS: Refusal[] = [
  { code: "57P03", message: "the database system is starting up" },
  { code: "55000", message: 'database "opqueue" is not currently accepting connections' },
  { code: "53300", message: "sorry, too many clients already" },
  { code: "08004", message: "the server rejected the connection" },
  { code: "57P01", message: "terminating connection due to administrator command" },
];

test(
  "a server refusing new connections with each SQLSTATE of 'cannot serve now' answers enqueues and admin reads 503 unavailable with Retry-After, never 500, and the node recovers when it accepts them again",
  { skip: POSTGRES_SKIP, timeout: 60_000 },
  async (t) => {
    const s = await scenario(t);
    const proxy = await startProxy(s);
    const node = await startNode(s, { name: "node", proxy });
    await waitForReadiness(node, 200);
    for (const refusal of REFUSALS) {
      proxy.refuse(refusal);
      await waitForReadiness(node, 503);
      // Several tries, so that at least one goes through a new connection (the first may find a pooled one cut).
      for (let i = 0; i < 3; i++) {
        const { answer } = await enqueue(s, node, `refused-${refusal.code}-${i}`);
        assert.ok(
          answer.status === 503 && acceptable(answer),
          `${refusal.code}: ${describe("POST /jobs", answer)}\n${node.output()}`,
        );
        const list = await admin(s, node, "/jobs?limit=1");
        assert.ok(list.status === 503 && acceptable(list), `${refusal.code}: ${describe("GET /jobs", list)}`);
      }
      // As the node's JSON log writes it.
      const logged = JSON.stringify(refusal.message).slice(1, -1);
      assert.ok(node.output().includes(logged), `the node met the refusal ${refusal.code}:\n${node.output()}`);
      proxy.up();
      await waitForReadiness(node, 200);
    }
    const { answer, id } = await enqueue(s, node, "after-refusals");
    assert.equal(answer.status, 201, describe("POST /jobs", answer));
    assert.ok(id);
    await waitForSucceeded(s, [id], [node]);
    assertAlive(node);
  },
);

test(
  "a database that stops accepting connections (ALLOW_CONNECTIONS false) with its backends terminated answers enqueues 503 unavailable, not 500, until it accepts them again",
  { skip: POSTGRES_SKIP, timeout: 60_000 },
  async (t) => {
    const s = await scenario(t);
    // A database of this test's own: only its connections are refused and terminated.
    const database = `${s.schema}_db`;
    await s.db.query(`CREATE DATABASE ${database}`);
    s.cleanup.add(() => s.db.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`));
    const url = new URL(POSTGRES_URL ?? "");
    url.pathname = `/${database}`;
    const node = await startNode(s, {
      name: "node",
      change: (raw) => {
        const own = new URL(String(raw["database"]));
        url.search = own.search;
        raw["database"] = url.toString();
      },
    });
    await waitForReadiness(node, 200);

    await s.db.query(`ALTER DATABASE ${database} ALLOW_CONNECTIONS false`);
    s.cleanup.add(() => s.db.query(`ALTER DATABASE ${database} ALLOW_CONNECTIONS true`).catch(() => undefined));
    await s.db.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", [database]);
    await waitForReadiness(node, 503);
    for (let i = 0; i < 5; i++) {
      const { answer } = await enqueue(s, node, `not-accepting-${i}`);
      assert.ok(answer.status === 503 && acceptable(answer), `${describe("POST /jobs", answer)}\n${node.output()}`);
    }
    assert.ok(node.output().includes("not currently accepting connections"), node.output());

    await s.db.query(`ALTER DATABASE ${database} ALLOW_CONNECTIONS true`);
    await waitForReadiness(node, 200);
    const { answer, id } = await enqueue(s, node, "accepting-again");
    assert.equal(answer.status, 201, describe("POST /jobs", answer));
    const job = await waitUntil(
      "the job enqueued afterwards succeeds",
      async () => {
        const read = await admin(s, node, `/jobs/${id ?? ""}`);
        return read.status === 200 && (JSON.parse(read.body) as { job: { status: string } }).job.status === "succeeded";
      },
      node.output,
    );
    assert.ok(job);
    assertAlive(node);
  },
);

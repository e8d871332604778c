/**
 * The multi-node harness: real `opqueue serve` processes on one PostgreSQL database, and a recording target. Used by
 * test/multinode/*.test.ts; test/multinode/cluster.test.ts says what each part does and why.
 */
import type { TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { EventEmitter, once } from "node:events";
import fs from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { Agent, request } from "undici";
import { mintToken } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import { parseConfig, type Config } from "../../src/config.js";
import type { Job } from "../../src/job/schemas.js";
import { dropSchema, freshSchemaName, POSTGRES_URL } from "./postgres.js";
import { rawTestConfig } from "./service.js";
import { freePort } from "./ports.js";

export const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));
/** Upper bound of a wait for something a node or the target does; far above what a passing test needs. */
export const WAIT_MS = 20_000;
/** Upper bound of a wait for a whole load to drain. */
export const DRAIN_MS = 90_000;
export const POLL_MS = 50;

/** The load of the throughput cases: jobs, concurrency keys, enqueue batch size. */
export const LOAD_JOBS = 5_000;
export const LOAD_KEYS = 20;
export const BATCH = 50;
export const CONCURRENCY = 16;

// ---------------------------------------------------------------------------------------------------------
// The target

/** One request the target received. */
export interface Delivery {
  jobId: string;
  attempt: number;
  /** x-request-id: the job's original_request_id. */
  requestId: string;
  path: string;
  /** The job's concurrency key, from its request body; null for jobs without one. */
  key: string | null;
  /** The target answered it. */
  answered: boolean;
  /** The connection closed before the target answered (its node died, or gave up). */
  aborted: boolean;
  /** The client's port: which node sent it, for a test that can look the port up (see `tcpPortsOf`). */
  remotePort: number;
  /** When it arrived (Date.now()), for the tests that measure a rate. */
  at: number;
  /** The delivery token it carried (a target calls back with it after taking the attempt asynchronously). */
  token: string;
}

/** A delivery that arrived while others of its key were in flight. */
export interface Overlap {
  key: string;
  arriving: Delivery;
  inFlight: Delivery[];
}

/** A status code for a delivery, or a status with headers (202 and x-job-async: 1); 204 unless the test says otherwise. */
export type Answer = (delivery: Delivery) => number | { status: number; headers: Record<string, string> };

export class RecordingTarget {
  readonly deliveries: Delivery[] = [];
  readonly overlaps: Overlap[] = [];
  readonly maxInFlight = new Map<string, number>();
  private readonly inFlight = new Map<string, Set<Delivery>>();
  private readonly events = new EventEmitter();
  private readonly server: http.Server;
  private answer: Answer = () => 204;
  /** While set, the answers to the deliveries it picks are held. */
  private holding: ((delivery: Delivery) => boolean) | null = null;
  private held: Array<{ delivery: Delivery; respond: () => void }> = [];
  url = "";

  constructor() {
    this.events.setMaxListeners(0);
    this.server = http.createServer((req, res) => {
      res.on("error", () => undefined);
      const chunks: Buffer[] = [];
      req.on("data", (chunk: Buffer) => chunks.push(chunk));
      req.on("end", () => this.receive(req, res, Buffer.concat(chunks).toString("utf8")));
    });
  }

  private receive(req: http.IncomingMessage, res: http.ServerResponse, body: string): void {
    const header = (name: string) => String(req.headers[name] ?? "");
    let key: string | null = null;
    try {
      const parsed = JSON.parse(body) as { key?: unknown } | null;
      if (parsed && typeof parsed.key === "string") key = parsed.key;
    } catch {
      // No JSON body (cron jobs): no key.
    }
    const delivery: Delivery = {
      jobId: header("x-job-id"),
      attempt: Number(header("x-job-attempt")),
      requestId: header("x-request-id"),
      path: (req.url ?? "").split("?")[0] ?? "",
      key,
      answered: false,
      aborted: false,
      remotePort: req.socket.remotePort ?? 0,
      at: Date.now(),
      token: header("authorization").replace(/^Bearer /, ""),
    };
    this.deliveries.push(delivery);
    let running: Set<Delivery> | undefined;
    if (key !== null) {
      running = this.inFlight.get(key) ?? new Set<Delivery>();
      this.inFlight.set(key, running);
      if (running.size > 0) this.overlaps.push({ key, arriving: delivery, inFlight: [...running] });
      running.add(delivery);
      this.maxInFlight.set(key, Math.max(this.maxInFlight.get(key) ?? 0, running.size));
    }
    res.on("close", () => {
      if (delivery.answered) return;
      delivery.aborted = true;
      running?.delete(delivery);
    });
    const respond = () => {
      if (delivery.aborted || delivery.answered) return;
      delivery.answered = true;
      running?.delete(delivery);
      const answer = this.answer(delivery);
      if (typeof answer === "number") res.writeHead(answer);
      else res.writeHead(answer.status, answer.headers);
      res.end();
    };
    // A tiny asynchronous delay: a second delivery of the same key arriving meanwhile would be counted above.
    setTimeout(() => {
      if (!this.holding?.(delivery)) return respond();
      this.held.push({ delivery, respond });
      this.events.emit("change");
    }, 1);
    this.events.emit("change");
  }

  /** Holds the answers to later deliveries that `which` picks (they stay in flight) until `release`. */
  hold(which: (delivery: Delivery) => boolean = () => true): void {
    this.holding = which;
  }

  /** Deliveries held and still waiting for their answer. */
  heldNow(): Delivery[] {
    return this.held.map(({ delivery }) => delivery).filter((delivery) => !delivery.answered && !delivery.aborted);
  }

  /** Answers every held delivery still open, and answers at once again. */
  release(): void {
    this.holding = null;
    for (const { respond } of this.held.splice(0)) respond();
  }

  async start(): Promise<void> {
    this.server.listen(0, "127.0.0.1");
    await once(this.server, "listening");
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Answers later deliveries with `answer`'s status. */
  setAnswer(answer: Answer): void {
    this.answer = answer;
  }

  /** Distinct job ids delivered so far. */
  distinctJobs(): number {
    return new Set(this.deliveries.map((delivery) => delivery.jobId)).size;
  }

  /** Resolves once `done()` holds (checked on every delivery and every held answer); fails after a bounded wait. */
  waitUntil(what: string, done: () => boolean, limitMs = WAIT_MS): Promise<void> {
    if (done()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = () => {
        if (!done()) return;
        clearTimeout(timer);
        this.events.off("change", check);
        resolve();
      };
      const timer = setTimeout(() => {
        this.events.off("change", check);
        reject(new Error(`the target did not see ${what} (${this.deliveries.length} deliveries so far)`));
      }, limitMs);
      this.events.on("change", check);
    });
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

// ---------------------------------------------------------------------------------------------------------
// Nodes and the cluster

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** A running `opqueue serve` process. */
export interface Node {
  name: string;
  port: number;
  /** http://127.0.0.1:PORT (a --no-api node serves /healthz, /readyz and /metrics alone there). */
  url: string;
  /** The application_name of its pool connections (its LISTEN connection adds "-listener"). */
  applicationName: string;
  child: ChildProcess;
  exited: Promise<Exit>;
  /** stderr and stdout so far. */
  output(): string;
  /** The JSON log lines it printed so far. */
  logLines(): Array<Record<string, unknown>>;
}

export interface Cluster {
  schema: string;
  config: Config;
  target: RecordingTarget;
  /** A connection of the test to the cluster's schema. */
  db: pg.Client;
  agent: Agent;
  nodes: Node[];
  /** Starts a node and waits until it serves (/readyz, or its start-up log line without the API). */
  start(name: string, options?: { args?: string[] }): Promise<Node>;
}

/** The test server's URL (the tests that call this are skipped without it). */
export function testDatabaseUrl(): string {
  assert.ok(POSTGRES_URL, "OPQUEUE_TEST_DATABASE_URL is not set");
  return POSTGRES_URL;
}

/** The child's environment: this process's, without anything that could steer opqueue or the test runner. */
export function childEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (name.startsWith("OPQUEUE_") || name.startsWith("NODE_TEST") || name === "NODE_OPTIONS") continue;
    env[name] = value;
  }
  return { ...env, ...extra };
}

/** Polls `probe` until it answers something other than undefined; fails after `limitMs`. */
export async function until<T>(what: string, probe: () => Promise<T | undefined>, limitMs = WAIT_MS): Promise<T> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    const answer = await probe();
    if (answer !== undefined) return answer;
    if (Date.now() > deadline) assert.fail(`gave up waiting for ${what} after ${limitMs} ms`);
    await sleep(POLL_MS);
  }
}

/**
 * A cluster's shared parts: schema, folder, config file, target. `change` adjusts the raw config; `logLevel` is
 * the nodes' OPQUEUE_LOG_LEVEL. One after-hook kills every node, then closes the rest and drops the schema.
 */
export async function createCluster(
  t: TestContext,
  options: { change?: (raw: Record<string, unknown>) => void; logLevel?: string } = {},
): Promise<Cluster> {
  const baseUrl = testDatabaseUrl();
  const schema = freshSchemaName();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "opqueue-cluster-"));
  const target = new RecordingTarget();
  const agent = new Agent({ connections: 256 });
  const db = new pg.Client({ connectionString: baseUrl, options: `-c search_path=${schema}` });
  const nodes: Node[] = [];
  t.after(async () => {
    await Promise.all(
      nodes.map(async (node) => {
        if (node.child.exitCode === null && node.child.signalCode === null) node.child.kill("SIGKILL");
        await node.exited;
      }),
    );
    await agent.close().catch(() => undefined);
    await target.close();
    await db.end().catch(() => undefined);
    await dropSchema(schema);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  await target.start();
  await db.connect();

  const databaseUrl = (applicationName: string) => {
    const url = new URL(baseUrl);
    url.searchParams.set("schema", schema);
    url.searchParams.set("application_name", applicationName);
    return url.toString();
  };
  const raw = rawTestConfig(dir);
  raw["database"] = databaseUrl(`opq_${schema}`);
  raw["database_pool_size"] = 4;
  raw["target"] = { base_url: target.url, audience: "product" };
  raw["lease"] = { heartbeat_ms: 200, grace_ms: 500, check_ms: 200 };
  raw["defaults"] = { max_attempts: 5, timeout_ms: 2000 };
  raw["retry"] = { base_ms: 100, factor: 1, max_ms: 100 };
  raw["worker"] = { concurrency: CONCURRENCY, poll_ms: 1000 };
  raw["cron"] = [];
  options.change?.(raw);
  const configFile = path.join(dir, "opqueue.json");
  fs.writeFileSync(configFile, JSON.stringify(raw, null, 2));
  const config = parseConfig({ raw, baseDir: dir, env: {} });

  const start = async (name: string, startOptions: { args?: string[] } = {}): Promise<Node> => {
    const args = startOptions.args ?? [];
    const port = await freePort();
    const applicationName = `opq_${schema}_${name}`;
    const child = spawn(process.execPath, ["--import", "tsx", "src/cli.ts", "serve", "--config", configFile, ...args], {
      cwd: REPO_ROOT,
      // Same config file; only the port and the connections' name differ.
      env: childEnv({
        OPQUEUE_PORT: String(port),
        OPQUEUE_DATABASE_URL: databaseUrl(applicationName),
        OPQUEUE_LOG_LEVEL: options.logLevel ?? "warn",
      }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    child.stderr?.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    const exited = new Promise<Exit>((resolve) => child.on("close", (code, signal) => resolve({ code, signal })));
    let exit: Exit | undefined;
    void exited.then((result) => (exit = result));
    const node: Node = {
      name,
      port,
      url: `http://127.0.0.1:${port}`,
      applicationName,
      child,
      exited,
      output: () => `${stderr}${stdout}`,
      logLines: () =>
        stdout.split("\n").flatMap((line) => {
          if (!line.startsWith("{")) return [];
          try {
            return [JSON.parse(line) as Record<string, unknown>];
          } catch {
            return [];
          }
        }),
    };
    nodes.push(node);
    const api = !args.includes("--no-api");
    const worker = !args.includes("--no-worker");
    await until(`${name} to serve`, async () => {
      if (exit)
        assert.fail(`${name} exited (code ${exit.code}, signal ${exit.signal}) before serving:\n${node.output()}`);
      if (!api) return node.logLines().some((line) => line["msg"] === "opqueue started") || undefined;
      try {
        return (await fetch(`${node.url}/readyz`)).ok || undefined;
      } catch {
        return undefined; // Not listening yet.
      }
    });
    // A worker is fully up once its LISTEN connection is: from then on, other nodes' enqueues wake it.
    if (worker) await waitForListener(db, node);
    return node;
  };
  return { schema, config, target, db, agent, nodes, start };
}

/** The LISTEN connections a node holds open right now. */
export async function listenerConnections(db: pg.Client, node: Node): Promise<number> {
  const result = await db.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'",
    [`${node.applicationName}-listener`],
  );
  return result.rows[0]?.n ?? 0;
}

export async function waitForListener(db: pg.Client, node: Node): Promise<void> {
  await until(`${node.name}'s LISTEN connection`, async () =>
    (await listenerConnections(db, node)) > 0 ? true : undefined,
  );
}

/** Database connections a node holds right now (pool and listener). */
export async function connectionsOf(db: pg.Client, node: Node): Promise<number> {
  const result = await db.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name IN ($1, $2)",
    [node.applicationName, `${node.applicationName}-listener`],
  );
  return result.rows[0]?.n ?? 0;
}

/**
 * The local ports of the TCP sockets process `pid` has open (Linux: its socket descriptors in /proc/PID/fd, looked
 * up in /proc/net/tcp{,6}). A delivery's client port tells which node sent it.
 */
export function tcpPortsOf(pid: number): Set<number> {
  const inodes = new Set<string>();
  for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
    try {
      const inode = /^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/${pid}/fd/${fd}`))?.[1];
      if (inode) inodes.add(inode);
    } catch {
      // Closed meanwhile.
    }
  }
  const ports = new Set<number>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    if (!fs.existsSync(table)) continue;
    for (const line of fs.readFileSync(table, "utf8").split("\n").slice(1)) {
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
      const columns = line.trim().split(/\s+/);
      const local = columns[1]?.split(":")[1];
      if (local && columns[9] && inodes.has(columns[9])) ports.add(Number.parseInt(local, 16));
    }
  }
  return ports;
}

// ---------------------------------------------------------------------------------------------------------
// Steps

/** Jobs by status, straight from the database. */
export async function statusCounts(db: pg.Client): Promise<Record<string, number>> {
  const result = await db.query<{ status: string; n: number }>(
    "SELECT status, count(*)::int AS n FROM jobs GROUP BY status",
  );
  return Object.fromEntries(result.rows.map((row) => [row.status, row.n]));
}

/** Waits until `total` jobs are succeeded; fails with the counts (and the nodes' output) otherwise. */
export async function waitAllSucceeded(c: Cluster, total: number): Promise<void> {
  let last: Record<string, number> = {};
  try {
    await until(
      `${total} succeeded jobs`,
      async () => {
        last = await statusCounts(c.db);
        return last["succeeded"] === total ? true : undefined;
      },
      DRAIN_MS,
    );
  } catch (error) {
    const outputs = c.nodes.map((node) => `--- ${node.name}:\n${node.output().slice(-4000)}`).join("\n");
    assert.fail(`${(error as Error).message}; jobs by status: ${JSON.stringify(last)}\n${outputs}`);
  }
}

/** The concurrency key of the load's job `n`. */
export const keyOf = (n: number) => `key-${String(n % LOAD_KEYS).padStart(2, "0")}`;

/**
 * Enqueues jobs `from..to-1` of the load over HTTP, in batches of BATCH parallel requests, batch `b` to node
 * `b % nodes.length`, one lane of batches per node running at once. Each batch is one chain (its own `rid`, so
 * the spawn cap is never reached) with one assertion. Returns the created job ids.
 */
export async function enqueueLoad(c: Cluster, nodes: Node[], total: number): Promise<string[]> {
  const batches: number[][] = [];
  for (let n = 0; n < total; n += BATCH) {
    batches.push(Array.from({ length: Math.min(BATCH, total - n) }, (_, i) => n + i));
  }
  const ids: string[] = [];
  await Promise.all(
    nodes.map(async (node, lane) => {
      for (let b = lane; b < batches.length; b += nodes.length) {
        const assertion = await mintToken({
          auth: c.config.auth,
          clock: systemClock,
          sub: "loader",
          op: "createUser",
          rid: `load-${b}`,
        });
        const created = await Promise.all(
          (batches[b] ?? []).map(async (n) => {
            const response = await request(`${node.url}/jobs`, {
              method: "POST",
              dispatcher: c.agent,
              headers: { authorization: `Bearer ${assertion}`, "content-type": "application/json" },
              body: JSON.stringify({
                operation_id: "sendWelcomeEmail",
                concurrency_key: keyOf(n),
                request: { path_params: { userId: `user-${n}` }, body: { key: keyOf(n), n } },
              }),
            });
            const text = await response.body.text();
            assert.equal(
              response.statusCode,
              201,
              `enqueue of job ${n} on ${node.name} answered ${response.statusCode}: ${text}`,
            );
            return (JSON.parse(text) as { job: Job }).job.id;
          }),
        );
        ids.push(...created);
      }
    }),
  );
  return ids;
}

/** The sum of a counter's samples in a node's /metrics. */
export async function metricSum(node: Node, name: string): Promise<number> {
  const text = await (await fetch(`${node.url}/metrics`)).text();
  let sum = 0;
  for (const match of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, "gm"))) sum += Number(match[1]);
  return sum;
}

export async function adminToken(c: Cluster): Promise<string> {
  return mintToken({ auth: c.config.auth, clock: systemClock, sub: "admin", siteAdmin: true });
}

export async function getJob(c: Cluster, node: Node, id: string): Promise<Job> {
  const response = await fetch(`${node.url}/jobs/${id}`, {
    headers: { authorization: `Bearer ${await adminToken(c)}` },
  });
  const text = await response.text();
  assert.equal(response.status, 200, text);
  return (JSON.parse(text) as { job: Job }).job;
}

export async function waitForStatus(c: Cluster, node: Node, id: string, status: Job["status"]): Promise<Job> {
  let last: Job | undefined;
  try {
    return await until(`job ${id} to be ${status}`, async () => {
      last = await getJob(c, node, id);
      return last.status === status ? last : undefined;
    });
  } catch (error) {
    assert.fail(`${(error as Error).message}; last seen: ${JSON.stringify(last)}`);
  }
}

/** Deliveries grouped by job id. */
export function byJob(deliveries: Delivery[]): Map<string, Delivery[]> {
  const map = new Map<string, Delivery[]>();
  for (const delivery of deliveries) map.set(delivery.jobId, [...(map.get(delivery.jobId) ?? []), delivery]);
  return map;
}

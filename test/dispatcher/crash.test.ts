/**
 * Crashes and graceful stops of a real `opqueue serve` process (docs/delivery.md, "Leases, heartbeats and rescue", §10): a `kill -9` in the middle of a
 * delivery loses nothing that was acknowledged and the interrupted job is delivered again (same idempotency key,
 * next attempt); SIGTERM lets an in-flight delivery finish, or puts it back to `retrying` when it outlasts
 * `shutdown.grace_ms`, and exits 0 either way.
 *
 * The target is an HTTP server in this process that records every request and holds the first request to a
 * chosen path without answering (a "slow delivery"), until the test releases it.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { EventEmitter, once } from "node:events";
import fs from "node:fs";
import http, { type IncomingHttpHeaders, type ServerResponse } from "node:http";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { mintToken } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import { parseConfig, type Config } from "../../src/config.js";
import type { Job } from "../../src/job/schemas.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { rawTestConfig } from "../helpers/service.js";
import { freePort } from "../helpers/ports.js";

const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));
/** Bounded waits: how long to wait for something a real process or the target does, at most. */
const WAIT_MS = 15_000;
const POLL_MS = 50;

// ---------------------------------------------------------------------------------------------------------
// The target

/** One request the target received. */
interface Received {
  path: string;
  method: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/** A request the target holds without answering. */
interface Held {
  request: Received;
  response: ServerResponse;
  /** True once the client (opqueue) closed the connection without an answer. */
  closedByClient: boolean;
  /** Answers the held request (if its connection is still open). */
  release(status?: number): void;
}

/** The target app: answers 204 to everything, except that the first request to each of `holdFirst` is held. */
class Target {
  readonly requests: Received[] = [];
  readonly held = new Map<string, Held>();
  private readonly events = new EventEmitter();
  private readonly server: http.Server;
  url = "";

  constructor(private readonly holdFirst: ReadonlySet<string>) {
    this.server = http.createServer((req, res) => {
      let body = "";
      req.setEncoding("utf8");
      req.on("data", (chunk: string) => (body += chunk));
      req.on("end", () => {
        const received: Received = { path: req.url ?? "", method: req.method ?? "", headers: req.headers, body };
        this.requests.push(received);
        if (this.holdFirst.has(received.path) && !this.held.has(received.path)) {
          const held: Held = {
            request: received,
            response: res,
            closedByClient: false,
            release(status = 204) {
              if (!res.writableEnded && !res.destroyed) res.writeHead(status).end();
            },
          };
          res.on("close", () => {
            if (!res.writableEnded) held.closedByClient = true;
          });
          this.held.set(received.path, held);
        } else {
          res.writeHead(204).end();
        }
        this.events.emit("request", received);
      });
    });
  }

  async start(t: TestContext): Promise<void> {
    this.server.listen(0, "127.0.0.1");
    await once(this.server, "listening");
    const address = this.server.address();
    assert.ok(address !== null && typeof address === "object");
    this.url = `http://127.0.0.1:${address.port}`;
    t.after(async () => {
      this.server.closeAllConnections();
      await new Promise<void>((resolve) => this.server.close(() => resolve()));
    });
  }

  /** Every request received so far to `path`. */
  requestsTo(path: string): Received[] {
    return this.requests.filter((request) => request.path === path);
  }

  /** Resolves with the first request (received already or to come) that matches `predicate`. */
  waitFor(what: string, predicate: (request: Received) => boolean): Promise<Received> {
    const found = this.requests.find(predicate);
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.events.off("request", listener);
        reject(new Error(`the target did not receive ${what} within ${WAIT_MS} ms`));
      }, WAIT_MS);
      const listener = (request: Received) => {
        if (!predicate(request)) return;
        clearTimeout(timer);
        this.events.off("request", listener);
        resolve(request);
      };
      this.events.on("request", listener);
    });
  }
}

// ---------------------------------------------------------------------------------------------------------
// The serve process

interface ServeResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** A running `opqueue serve`. */
interface Serve {
  child: ChildProcess;
  url: string;
  exited: Promise<ServeResult>;
  output(): string;
  /** Resolves when the process has logged a line whose `msg` is `message`. */
  logged(message: string): Promise<void>;
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

/** Starts `opqueue serve --config FILE` from source and waits until it is ready (/readyz; /healthz answers while it still opens its database). */
async function startServe(t: TestContext, configFile: string, port: number): Promise<Serve> {
  const child = spawn(process.execPath, ["--import", "tsx", "src/cli.ts", "serve", "--config", configFile], {
    cwd: REPO_ROOT,
    env: childEnv(),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  const lines = new EventEmitter();
  child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk;
    lines.emit("data");
  });
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<ServeResult>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
  let result: ServeResult | undefined;
  void exited.then((r) => (result = r));
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await exited;
    }
  });
  const hasLogged = (message: string) =>
    stdout.split("\n").some((line) => {
      if (!line.startsWith("{")) return false;
      try {
        return (JSON.parse(line) as { msg?: unknown }).msg === message;
      } catch {
        return false;
      }
    });
  const serve: Serve = {
    child,
    url: `http://127.0.0.1:${port}`,
    exited,
    output: () => `${stderr}${stdout}`,
    logged: (message) =>
      new Promise<void>((resolve, reject) => {
        if (hasLogged(message)) return resolve();
        const timer = setTimeout(() => {
          lines.off("data", check);
          reject(new Error(`serve did not log "${message}" within ${WAIT_MS} ms:\n${serve.output()}`));
        }, WAIT_MS);
        const check = () => {
          if (!hasLogged(message)) return;
          clearTimeout(timer);
          lines.off("data", check);
          resolve();
        };
        lines.on("data", check);
      }),
  };
  for (let waited = 0; waited < WAIT_MS; waited += POLL_MS) {
    if (result)
      assert.fail(`serve exited (code ${result.code}, signal ${result.signal}) before answering:\n${serve.output()}`);
    try {
      if ((await fetch(`${serve.url}/readyz`)).ok) return serve;
    } catch {
      // Not listening yet.
    }
    await sleep(POLL_MS);
  }
  assert.fail(`serve was not ready on port ${port}:\n${serve.output()}`);
}

// ---------------------------------------------------------------------------------------------------------
// Setup and HTTP steps

interface Setup {
  dir: string;
  config: Config;
  configFile: string;
  port: number;
  databasePath: string;
}

/**
 * A temporary folder with a config for the test product delivering to `targetUrl`: short leases, a short timeout
 * and fast retries, so a crash is recovered quickly; `change` adjusts the raw config. The poll interval is far
 * longer than any wait here: every claim must come from a wake-up (an enqueue, a finished delivery, a rescue, the
 * timer to the next due job), never from the `worker.poll_ms` fallback (docs/delivery.md, "Dispatch").
 */
async function setup(
  t: TestContext,
  targetUrl: string,
  change: (raw: Record<string, unknown>) => void = () => {},
): Promise<Setup> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "opqueue-crash-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const port = await freePort();
  const raw = rawTestConfig(dir);
  raw["listen"] = { host: "127.0.0.1", port };
  raw["target"] = { base_url: targetUrl, audience: "product" };
  raw["lease"] = { heartbeat_ms: 100, grace_ms: 200, check_ms: 100 };
  raw["defaults"] = { max_attempts: 5, timeout_ms: 1000 };
  raw["retry"] = { base_ms: 50, factor: 1, max_ms: 50 };
  raw["worker"] = { concurrency: 32, poll_ms: 60_000 };
  raw["cron"] = [];
  change(raw);
  const configFile = path.join(dir, "opqueue.yaml");
  // JSON is YAML too.
  fs.writeFileSync(configFile, JSON.stringify(raw, null, 2));
  const config = parseConfig({ raw, baseDir: dir, env: {} });
  return { dir, config, configFile, port, databasePath: path.join(dir, "opqueue.db") };
}

/** The path the target sees for a `sendWelcomeEmail` job of `userId`. */
const welcomePath = (userId: string) => `/users/${encodeURIComponent(userId)}/welcome-email`;

/** `POST /jobs` for `sendWelcomeEmail` with a freshly minted assertion (system clock); the status and job. */
async function enqueueWelcome(setupInfo: Setup, serve: Serve, userId: string): Promise<{ status: number; job: Job }> {
  const token = await mintToken({
    auth: setupInfo.config.auth,
    clock: systemClock,
    sub: "u1",
    op: "createUser",
    rid: `signup-${userId}`,
  });
  const response = await fetch(`${serve.url}/jobs`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ operation_id: "sendWelcomeEmail", request: { path_params: { userId } } }),
  });
  const text = await response.text();
  assert.ok(response.status === 201, `enqueue answered ${response.status}: ${text}`);
  return { status: response.status, job: (JSON.parse(text) as { job: Job }).job };
}

/** `GET /jobs/{id}` with an admin token. */
async function getJob(setupInfo: Setup, serve: Serve, id: string): Promise<Job> {
  const token = await mintToken({ auth: setupInfo.config.auth, clock: systemClock, sub: "admin", siteAdmin: true });
  const response = await fetch(`${serve.url}/jobs/${id}`, { headers: { authorization: `Bearer ${token}` } });
  const text = await response.text();
  assert.equal(response.status, 200, text);
  return (JSON.parse(text) as { job: Job }).job;
}

/** Polls `GET /jobs/{id}` until every job of `ids` is `status`; returns them. Fails after a bounded wait. */
async function waitForStatus(setupInfo: Setup, serve: Serve, ids: string[], status: Job["status"]): Promise<Job[]> {
  let jobs: Job[] = [];
  for (let waited = 0; waited < WAIT_MS; waited += POLL_MS) {
    jobs = await Promise.all(ids.map((id) => getJob(setupInfo, serve, id)));
    if (jobs.every((job) => job.status === status)) return jobs;
    await sleep(POLL_MS);
  }
  const summary = jobs.map((job) => `${job.id}: ${job.status} (attempt ${job.attempt})`).join("\n");
  assert.fail(`not every job became ${status}:\n${summary}\n--- serve output:\n${serve.output()}`);
}

/** Reads jobs straight from the SQLite file of a stopped service. */
async function readJobsFromFile(databasePath: string, ids: string[]) {
  const store = await SqliteStore.open({ path: databasePath, clock: systemClock });
  try {
    return await Promise.all(ids.map((id) => store.jobGet({ id })));
  } finally {
    await store.close();
  }
}

// ---------------------------------------------------------------------------------------------------------

test(
  "kill -9 during a delivery: after a restart the lease is rescued and the job delivered again (attempt 2, same idempotency key) until it succeeds, and no acknowledged job is lost",
  { timeout: 60_000 },
  async (t) => {
    const slow = welcomePath("slow");
    const target = new Target(new Set([slow]));
    await target.start(t);
    // The slow delivery must outlast the twenty enqueues and their deliveries below: 5 s, far longer than they take on
    // a starved machine (1 s was not always). Its lease (timeout plus grace) is what the restarted process waits out
    // before it rescues the job.
    const s = await setup(t, target.url, (raw) => {
      raw["defaults"] = { max_attempts: 5, timeout_ms: 5000 };
    });
    const first = await startServe(t, s.configFile, s.port);

    const { job: slowJob } = await enqueueWelcome(s, first, "slow");
    const firstDelivery = await target.waitFor("the slow delivery", (request) => request.path === slow);
    assert.equal(firstDelivery.headers["x-job-attempt"], "1");
    assert.equal(firstDelivery.headers["idempotency-key"], slowJob.id);

    // Twenty more jobs, each acknowledged with 201 just before the crash.
    const more = await Promise.all(Array.from({ length: 20 }, (_, i) => enqueueWelcome(s, first, `fast-${i}`)));
    assert.deepEqual(
      more.map(({ status }) => status),
      Array.from({ length: 20 }, () => 201),
    );

    // The slow delivery is still in flight in the first process when it dies.
    const held = target.held.get(slow);
    assert.ok(held, "the first delivery is held");
    assert.equal(held.closedByClient, false, "the first attempt had not given up (timed out) before the kill");
    assert.equal(target.requestsTo(slow).length, 1);
    first.child.kill("SIGKILL");
    const killed = await first.exited;
    assert.equal(killed.signal, "SIGKILL");

    const second = await startServe(t, s.configFile, s.port);
    const redelivery = await target.waitFor(
      "the redelivery of the slow job",
      (request) => request.path === slow && request !== firstDelivery,
    );
    assert.equal(redelivery.headers["x-job-attempt"], "2");
    assert.equal(redelivery.headers["idempotency-key"], firstDelivery.headers["idempotency-key"]);
    assert.equal(redelivery.headers["x-job-id"], slowJob.id);

    const [done] = await waitForStatus(s, second, [slowJob.id], "succeeded");
    assert.equal(done?.attempt, 2);
    assert.deepEqual(done?.result, { status_code: 204, error_body: null, terminal_reason: null });

    const moreIds = more.map(({ job }) => job.id);
    const finished = await waitForStatus(s, second, moreIds, "succeeded");
    assert.equal(finished.length, 20);
    for (const [i, job] of finished.entries()) {
      assert.equal(job.request.path_params?.["userId"], `fast-${i}`);
      assert.ok(target.requestsTo(welcomePath(`fast-${i}`)).length >= 1, `fast-${i} was delivered`);
    }

    // The restarted process counted the lease it recovered.
    const metrics = await (await fetch(`${second.url}/metrics`)).text();
    const rescued = /^opqueue_leases_rescued_total\{outcome="retrying"\} (\d+)$/m.exec(metrics);
    assert.ok(rescued && Number(rescued[1]) >= 1, `a rescued lease in /metrics:\n${metrics}`);

    second.child.kill("SIGTERM");
    const stopped = await second.exited;
    assert.equal(stopped.code, 0, stopped.stderr);
  },
);

test(
  "kill -9 right after a batch was acknowledged: every item is in the file and delivered after a restart, and its idempotency keys still answer",
  { timeout: 60_000 },
  async (t) => {
    const target = new Target(new Set());
    await target.start(t);
    const s = await setup(t, target.url);
    const first = await startServe(t, s.configFile, s.port);
    const token = await mintToken({
      auth: s.config.auth,
      clock: systemClock,
      sub: "u1",
      op: "createUser",
      rid: "batch-crash",
    });
    const post = (serve: Serve, jobs: unknown[]) =>
      fetch(`${serve.url}/jobs/batch`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ jobs }),
      });
    const items = Array.from({ length: 200 }, (_, i) => ({
      operation_id: "sendWelcomeEmail",
      request: { path_params: { userId: `batch-${i}` } },
      delay_ms: 60_000,
      idempotency_key: `batch-key-${i}`,
    }));
    const answer = await post(first, items);
    assert.equal(answer.status, 200);
    const results = ((await answer.json()) as { results: Array<{ status: number; id: string }> }).results;
    assert.ok(results.every((result) => result.status === 201));
    first.child.kill("SIGKILL");
    await first.exited;

    const ids = results.map((result) => result.id);
    const stored = await readJobsFromFile(s.databasePath, ids);
    assert.ok(
      stored.every((job) => job?.status === "pending"),
      "every acknowledged item is in the file",
    );

    const second = await startServe(t, s.configFile, s.port);
    const replay = await post(second, items.slice(0, 5));
    const replayed = ((await replay.json()) as { results: Array<{ status: number; id: string; replayed?: boolean }> })
      .results;
    assert.deepEqual(
      replayed.map((result) => [result.status, result.replayed, result.id]),
      ids.slice(0, 5).map((id) => [200, true, id]),
    );
    const admin = await mintToken({ auth: s.config.auth, clock: systemClock, sub: "admin", siteAdmin: true });
    await Promise.all(
      ids
        .slice(0, 20)
        .map((id) =>
          fetch(`${second.url}/jobs/${id}/run-now`, { method: "POST", headers: { authorization: `Bearer ${admin}` } }),
        ),
    );
    await waitForStatus(s, second, ids.slice(0, 20), "succeeded");
    second.child.kill("SIGTERM");
    assert.equal((await second.exited).code, 0);
  },
);

test(
  "SIGTERM during a delivery stops accepting, lets the delivery finish within shutdown.grace_ms, and exits 0 with the job succeeded",
  { timeout: 60_000 },
  async (t) => {
    const slow = welcomePath("slow");
    const target = new Target(new Set([slow]));
    await target.start(t);
    // A long attempt timeout, so that only the release below can end the delivery.
    const s = await setup(t, target.url, (raw) => {
      raw["defaults"] = { max_attempts: 5, timeout_ms: 20_000 };
      raw["shutdown"] = { grace_ms: 20_000 };
    });
    const serve = await startServe(t, s.configFile, s.port);
    const { job } = await enqueueWelcome(s, serve, "slow");
    await target.waitFor("the slow delivery", (request) => request.path === slow);

    serve.child.kill("SIGTERM");
    // The dispatcher has stopped claiming and is waiting for the in-flight delivery: answer it now.
    await serve.logged("waiting for in-flight deliveries");
    // Stopped accepting: a new enqueue cannot get in any more.
    const token = await mintToken({
      auth: s.config.auth,
      clock: systemClock,
      sub: "u1",
      op: "createUser",
      rid: "late",
    });
    const late = await fetch(`${serve.url}/jobs`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ operation_id: "sendWelcomeEmail", request: { path_params: { userId: "late" } } }),
    }).then(
      (response) => response.status,
      () => "refused",
    );
    assert.ok(late === "refused" || late === 503, `an enqueue during the shutdown answered ${late}`);
    const held = target.held.get(slow);
    assert.ok(held);
    assert.equal(held.closedByClient, false, "the delivery is still in flight during the shutdown");
    held.release(204);

    const result = await serve.exited;
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.signal, null);
    assert.equal(target.requestsTo(slow).length, 1, "delivered once");

    const [stored] = await readJobsFromFile(s.databasePath, [job.id]);
    assert.equal(stored?.status, "succeeded");
    assert.equal(stored?.attempt, 1);
    assert.deepEqual(stored?.result, { status_code: 204, error_body: null, terminal_reason: null });
  },
);

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  test(
    `${signal} with a delivery outlasting shutdown.grace_ms exits 0 and leaves the job retrying, due at once`,
    { timeout: 60_000 },
    async (t) => {
      const slow = welcomePath("slow");
      const target = new Target(new Set([slow]));
      await target.start(t);
      const s = await setup(t, target.url, (raw) => {
        raw["defaults"] = { max_attempts: 5, timeout_ms: 20_000 };
        raw["shutdown"] = { grace_ms: 300 };
      });
      const serve = await startServe(t, s.configFile, s.port);
      const { job } = await enqueueWelcome(s, serve, "slow");
      await target.waitFor("the slow delivery", (request) => request.path === slow);

      serve.child.kill(signal);
      const result = await serve.exited;
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.signal, null);
      assert.equal(target.held.get(slow)?.response.writableEnded, false, "the target never answered");

      const [stored] = await readJobsFromFile(s.databasePath, [job.id]);
      assert.ok(stored);
      assert.equal(stored.status, "retrying");
      assert.ok(stored.runAt <= Date.now(), `run_at ${new Date(stored.runAt).toISOString()} is due now`);
      assert.equal(stored.attempt, 1, "the interrupted attempt is counted");
      assert.equal(stored.result?.terminal_reason, null);
      assert.match(stored.result?.error_body ?? "", /shutdown/);
    },
  );
}

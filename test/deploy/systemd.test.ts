/**
 * The systemd unit of examples/systemd/opqueue.service, run as systemd would run it (docs/deploying.md, "Running under
 * systemd"): its ExecStart with its environment, secrets read from its EnvironmentFile, the working directory it names;
 * then SIGTERM to the node process while a delivery is in flight. The delivery finishes, its outcome is written, and
 * node exits 0 well within TimeoutStopSec.
 *
 * The unit runs the installed build (node_modules/opqueue/dist/cli.js); the test runs the same command from the
 * sources (src/cli.ts through tsx), which that build is compiled from, so a stale dist/ cannot decide the result.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcessByStdio } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { mintToken } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import { parseConfig } from "../../src/config.js";
import { logLines, REPO_ROOT } from "../helpers/cli-process.js";
import { freePort } from "../helpers/ports.js";
import { rawTestConfig, TEST_DELIVERY_SECRET, TEST_SECRET } from "../helpers/service.js";
import { deferred, reply, startTarget } from "../helpers/target.js";

const UNIT_FILE = fileURLToPath(new URL("../../examples/systemd/opqueue.service", import.meta.url));

/** Upper bound of each wait for the service; far above what a passing test needs. */
const WAIT_LIMIT_MS = 20_000;

/** The `[Service]` settings of a unit file, each key with its values in order (a key may repeat). */
function serviceSection(text: string): Map<string, string[]> {
  const settings = new Map<string, string[]>();
  let section = "";
  for (const rawLine of text.split("\n")) {
    const line = rawLine.trim();
    if (line === "" || line.startsWith("#") || line.startsWith(";")) continue;
    const header = /^\[(.+)\]$/.exec(line);
    if (header) {
      section = header[1] ?? "";
      continue;
    }
    if (section !== "Service") continue;
    const equals = line.indexOf("=");
    assert.ok(equals > 0, `not a setting: ${line}`);
    const key = line.slice(0, equals);
    settings.set(key, [...(settings.get(key) ?? []), line.slice(equals + 1)]);
  }
  return settings;
}

/** The one value of `key`. */
function single(settings: Map<string, string[]>, key: string): string {
  const values = settings.get(key) ?? [];
  assert.equal(values.length, 1, `the unit sets ${key} once`);
  return values[0] as string;
}

/** `KEY=VALUE` lines, as systemd reads Environment= values and EnvironmentFile= files. */
function environmentOf(lines: string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of lines) {
    if (line.trim() === "" || line.startsWith("#")) continue;
    const equals = line.indexOf("=");
    env[line.slice(0, equals)] = line.slice(equals + 1);
  }
  return env;
}

/** systemd's time spans as the unit uses them: plain seconds, or a number with `s`, `min` or `ms`. */
function timeSpanMs(value: string): number {
  const match = /^(\d+)(ms|s|min)?$/.exec(value);
  assert.ok(match, `a time span this test reads: ${value}`);
  const unit = match[2] ?? "s";
  return Number(match[1]) * (unit === "ms" ? 1 : unit === "s" ? 1000 : 60_000);
}

/** A started process: its output so far, and when it ends. */
interface Running {
  child: ChildProcessByStdio<null, Readable, Readable>;
  output(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Resolves once `predicate` holds for the output so far; fails with the output if the process ends first. */
function waitForOutput(running: Running, predicate: (output: string) => boolean): Promise<void> {
  return new Promise((resolve, reject) => {
    let done = false;
    // A bound for a broken service, never a pause: a passing test is woken by the output itself.
    const timer = setTimeout(
      () => finish(new Error(`not seen within ${WAIT_LIMIT_MS} ms:\n${running.output()}`)),
      WAIT_LIMIT_MS,
    );
    const onData = () => {
      if (predicate(running.output())) finish();
    };
    running.child.stdout.on("data", onData);
    void running.exited.then(() =>
      finish(predicate(running.output()) ? undefined : new Error(`the process exited first:\n${running.output()}`)),
    );
    onData();
    function finish(error?: Error): void {
      if (done) return;
      done = true;
      clearTimeout(timer);
      running.child.stdout.off("data", onData);
      if (error) reject(error);
      else resolve();
    }
  });
}

function tempDir(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "opqueue-systemd-test-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test(
  "the unit file passes systemd-analyze verify",
  { skip: spawnSync("systemd-analyze", ["--version"]).error ? "systemd-analyze is not installed" : false },
  () => {
    const result = spawnSync("systemd-analyze", ["verify", UNIT_FILE], { encoding: "utf8", cwd: os.tmpdir() });
    assert.equal(result.status, 0, result.stderr);
    assert.equal(result.stderr.trim(), "", "no warnings");
  },
);

test("the unit's ExecStart runs node itself, and SIGTERM lets the delivery in flight finish before node exits 0", async (t) => {
  const settings = serviceSection(fs.readFileSync(UNIT_FILE, "utf8"));
  const execStart = single(settings, "ExecStart").split(/\s+/);
  // node itself is the main process, so systemd's SIGTERM reaches the process that drains deliveries.
  assert.equal(path.basename(execStart[0] ?? ""), "node", "ExecStart starts node, not npx or npm");
  assert.ok(path.isAbsolute(execStart[0] ?? ""), "systemd wants an absolute path");
  assert.match(execStart[1] ?? "", /\/node_modules\/opqueue\/dist\/cli\.js$/);
  assert.deepEqual(execStart.slice(2, 4), ["serve", "--config"]);
  assert.equal(execStart.length, 5);
  assert.equal(single(settings, "KillSignal"), "SIGTERM");
  const stopLimitMs = timeSpanMs(single(settings, "TimeoutStopSec"));

  // The machine as docs/deploying.md sets it up: a config, secrets in the environment file, a state directory.
  const root = tempDir(t);
  const workingDirectory = path.join(root, "srv");
  const stateDirectory = path.join(root, "var-lib-opqueue");
  fs.mkdirSync(workingDirectory);
  fs.mkdirSync(stateDirectory);
  const target = await startTarget(t);
  const held = deferred();
  target.setHandler(async (_request, res) => {
    await held.promise;
    reply(res, 204);
  });
  const raw = rawTestConfig(stateDirectory);
  raw["target"] = { base_url: target.url, audience: "product" };
  raw["auth"] = {
    audience: "opqueue",
    keys: [{ kid: "k1", alg: "HS256", secret_env: "OPQUEUE_ENQUEUE_SECRET" }],
    delivery_key: { kid: "q1", alg: "HS256", secret_env: "OPQUEUE_DELIVERY_SECRET" },
  };
  const configFile = path.join(root, "opqueue.yaml");
  fs.writeFileSync(configFile, JSON.stringify(raw));
  const port = await freePort();
  const envFile = path.join(root, "opqueue.env");
  fs.writeFileSync(
    envFile,
    `OPQUEUE_ENQUEUE_SECRET=${TEST_SECRET}\nOPQUEUE_DELIVERY_SECRET=${TEST_DELIVERY_SECRET}\nOPQUEUE_PORT=${port}\n`,
  );
  const env = environmentOf(settings.get("Environment") ?? []);
  assert.equal(env["NODE_ENV"], "production");
  assert.deepEqual(settings.get("EnvironmentFile"), ["-/etc/opqueue/opqueue.env"], "optional, in /etc/opqueue");
  Object.assign(env, environmentOf(fs.readFileSync(envFile, "utf8").split("\n")));

  // ExecStart, with this machine's paths: the sources instead of their build, the test's config.
  const tsx = fileURLToPath(import.meta.resolve("tsx"));
  const args = ["--import", tsx, path.join(REPO_ROOT, "src/cli.ts"), "serve", "--config", configFile];
  const child = spawn(process.execPath, args, {
    cwd: workingDirectory,
    // systemd starts a service with a clean environment: PATH and what the unit gives, nothing of the caller's.
    env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (output += chunk));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (output += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on("close", (code, signal) => resolve({ code, signal })),
  );
  const running: Running = { child, output: () => output, exited };
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  });
  const logged = (msg: string) => (text: string) => logLines(text).some((line) => line["msg"] === msg);
  await waitForOutput(running, logged("opqueue started"));

  const config = parseConfig({ raw, baseDir: root, env });
  const token = await mintToken({
    auth: config.auth,
    clock: systemClock,
    sub: "u1",
    op: "createUser",
    rid: "systemd-test-1",
  });
  const response = await fetch(`http://127.0.0.1:${port}/jobs`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ operation_id: "sendWelcomeEmail", request: { path_params: { userId: "u1" } } }),
  });
  assert.equal(response.status, 201, await response.clone().text());
  const { job } = (await response.json()) as { job: { id: string } };
  await target.waitForRequests(1);

  // systemctl stop: SIGTERM to node. It stops taking work and waits for the delivery it holds.
  const stopAsked = Date.now();
  child.kill("SIGTERM");
  await waitForOutput(running, logged("shutting down"));
  held.resolve();
  const result = await exited;
  const stoppedAfterMs = Date.now() - stopAsked;
  assert.deepEqual(result, { code: 0, signal: null }, output);
  assert.ok(stoppedAfterMs < stopLimitMs, `stopped within TimeoutStopSec (${stoppedAfterMs} ms)`);
  assert.ok(logged("opqueue stopped")(output), output);
  // Shutdown's grace period fits in TimeoutStopSec, with room for closing the database after it.
  assert.ok(config.shutdown.grace_ms + 5_000 <= stopLimitMs, "TimeoutStopSec exceeds shutdown.grace_ms by 5 s or more");

  const db = new Database(path.join(stateDirectory, "opqueue.db"), { readonly: true });
  t.after(() => db.close());
  const row = db.prepare("SELECT status FROM jobs WHERE id = ?").get(job.id) as { status: string } | undefined;
  assert.equal(row?.status, "succeeded", "the delivery in flight at SIGTERM finished and its outcome was written");
});

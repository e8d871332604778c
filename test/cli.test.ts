/**
 * The `opqueue` command run as a real process, from source (never from a possibly stale dist/):
 * exit codes, messages, help, migrate, token, the one-node lock of the SQLite engine, and what an operator watches
 * (the ops listener, the log).
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import fs from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import Database from "better-sqlite3";
import { jwtVerify } from "jose";
import { mintToken } from "../src/auth/tokens.js";
import { systemClock } from "../src/clock.js";
import { parseConfig } from "../src/config.js";
import { VERSION } from "../src/version.js";
import {
  REPO_ROOT,
  runCli,
  startCli,
  tempDir as tempDirOf,
  writeConfig,
  type CliProcess,
  type CliResult,
} from "./helpers/cli-process.js";
import { TEST_SECRET } from "./helpers/service.js";
import { freePort } from "./helpers/ports.js";

/** How often, and how many times, to poll for a starting server: ~20 s at most, for a slow machine. */
const POLL_MS = 50;
const POLL_ATTEMPTS = 400;

/** A fresh temporary folder, removed when the test ends. */
const tempDir = (t: TestContext): string => tempDirOf(t, "cli");

function databaseFile(dir: string): string {
  return path.join(dir, "opqueue.db");
}

/**
 * Waits until `serve` is ready: GET /readyz answers 200 (/healthz answers from the start, while the node still opens
 * its database); fails early with its output if it exits first.
 */
async function waitForReady(cli: CliProcess, port: number): Promise<void> {
  let exited: CliResult | undefined;
  void cli.exited.then((result) => (exited = result));
  for (let attempt = 0; attempt < POLL_ATTEMPTS; attempt++) {
    if (exited) {
      assert.fail(
        `serve exited (code ${exited.code}, signal ${exited.signal}) before answering:\n${exited.stderr}${exited.stdout}`,
      );
    }
    try {
      const response = await fetch(`http://127.0.0.1:${port}/readyz`);
      if (response.ok) {
        assert.deepEqual(await response.json(), { status: "ready" });
        assert.deepEqual(await (await fetch(`http://127.0.0.1:${port}/healthz`)).json(), { status: "ok" });
        return;
      }
    } catch {
      // Not listening yet.
    }
    await sleep(POLL_MS);
  }
  assert.fail(`serve was not ready on port ${port}:\n${cli.stderr()}${cli.stdout()}`);
}

/** Starts `serve --config FILE` on a free port and waits until it answers. */
async function startServe(t: TestContext, configFile: string): Promise<{ cli: CliProcess; port: number }> {
  const port = await freePort();
  const cli = startCli(t, ["serve", "--config", configFile], { OPQUEUE_PORT: String(port) });
  await waitForReady(cli, port);
  return { cli, port };
}

/** Asserts the process printed exactly one non-empty line on stderr, with no stack trace, and returns it. */
function assertOneLineMessage(result: CliResult): string {
  const lines = result.stderr.trim().split("\n");
  assert.equal(lines.length, 1, `expected one line on stderr, got:\n${result.stderr}`);
  assert.doesNotMatch(result.stderr, /^\s+at /m, "no stack trace");
  return lines[0] ?? "";
}

function jwtPart(token: string, index: number): Record<string, unknown> {
  const part = token.split(".")[index];
  assert.ok(part !== undefined, `not a JWT: ${token}`);
  return JSON.parse(Buffer.from(part, "base64url").toString("utf8")) as Record<string, unknown>;
}

// ---------------------------------------------------------------------------------------------------------
// Usage

test("--version prints the package version and exits 0", async (t) => {
  const packageVersion = (
    JSON.parse(fs.readFileSync(path.join(REPO_ROOT, "package.json"), "utf8")) as { version: string }
  ).version;
  assert.equal(VERSION, packageVersion);
  const result = await runCli(t, ["--version"]);
  assert.equal(result.code, 0, result.stderr);
  assert.equal(result.stdout.trim(), packageVersion);
});

test("an unknown command exits 2 and prints the usage on stderr", async (t) => {
  const result = await runCli(t, ["frobnicate"]);
  assert.equal(result.code, 2);
  assert.match(result.stderr, /unknown command "frobnicate"/);
  assert.match(result.stderr, /Usage:/);
  assert.match(result.stderr, /opqueue serve/);
  assert.equal(result.stdout, "");
});

test("an unknown option exits 2 with the usage", async (t) => {
  const result = await runCli(t, ["migrate", "--confg", "x.yaml"]);
  assert.equal(result.code, 2);
  assert.match(result.stderr, /--confg/);
  assert.match(result.stderr, /Usage:/);
});

// ---------------------------------------------------------------------------------------------------------
// A bad config: exit 2, one message naming the key, no stack trace

test("serve with a trigger target lacking the background tag exits 2 with one message naming the key", async (t) => {
  const dir = tempDir(t);
  const config = writeConfig(dir, (raw) => {
    raw["triggers"] = { createUser: ["getUser"] };
    raw["cron"] = [];
  });
  const result = await runCli(t, ["serve", "--config", config]);
  assert.equal(result.code, 2, result.stderr);
  const message = assertOneLineMessage(result);
  assert.match(message, /^opqueue: config: triggers\.createUser: /);
  assert.match(message, /"getUser"/);
  assert.match(message, /"background" tag/);
  assert.equal(fs.existsSync(databaseFile(dir)), false, "a refused config touches no database");
});

test("serve with a secret under 32 bytes exits 2 with one message naming the key", async (t) => {
  const dir = tempDir(t);
  const config = writeConfig(dir, (raw) => {
    (raw["auth"] as Record<string, unknown>)["keys"] = [{ kid: "k1", alg: "HS256", secret: "too-short" }];
  });
  const result = await runCli(t, ["serve", "--config", config]);
  assert.equal(result.code, 2, result.stderr);
  assert.match(assertOneLineMessage(result), /^opqueue: config: auth\.keys\.0\.secret: must be at least 32 bytes/);
});

test("serve with an unknown config key exits 2 with one message naming the key", async (t) => {
  const dir = tempDir(t);
  const config = writeConfig(dir, (raw) => {
    raw["workers"] = { concurrency: 4 };
  });
  const result = await runCli(t, ["serve", "--config", config]);
  assert.equal(result.code, 2, result.stderr);
  assert.match(assertOneLineMessage(result), /^opqueue: config: unknown key "workers"/);
});

test("serve with a non-numeric OPQUEUE_PORT exits 2 with one message naming the variable", async (t) => {
  const dir = tempDir(t);
  const result = await runCli(t, ["serve", "--config", writeConfig(dir)], { OPQUEUE_PORT: "eighty" });
  assert.equal(result.code, 2, result.stderr);
  assert.match(assertOneLineMessage(result), /OPQUEUE_PORT/);
});

test("serve with no --config and no OPQUEUE_CONFIG exits 2 saying how to give one", async (t) => {
  const result = await runCli(t, ["serve"]);
  assert.equal(result.code, 2, result.stderr);
  const message = assertOneLineMessage(result);
  assert.match(message, /--config/);
  assert.match(message, /OPQUEUE_CONFIG/);
});

test("OPQUEUE_CONFIG names the config file when --config is absent", async (t) => {
  const dir = tempDir(t);
  const result = await runCli(t, ["migrate"], { OPQUEUE_CONFIG: writeConfig(dir) });
  assert.equal(result.code, 0, result.stderr);
  assert.ok(fs.existsSync(databaseFile(dir)));
});

// ---------------------------------------------------------------------------------------------------------
// migrate

test("migrate creates and migrates the SQLite file and exits 0", async (t) => {
  const dir = tempDir(t);
  const result = await runCli(t, ["migrate", "--config", writeConfig(dir)]);
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stdout, /migrated sqlite:/);
  const db = new Database(databaseFile(dir), { readonly: true });
  try {
    assert.ok((db.pragma("user_version", { simple: true }) as number) > 0);
    const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'jobs'").all();
    assert.equal(tables.length, 1);
  } finally {
    db.close();
  }
});

// ---------------------------------------------------------------------------------------------------------
// token

test("token --sub --op --rid prints an HS256 enqueue assertion valid for 300 s", async (t) => {
  const dir = tempDir(t);
  const result = await runCli(t, [
    "token",
    "--config",
    writeConfig(dir),
    "--sub",
    "alice",
    "--op",
    "createUser",
    "--rid",
    "r1",
  ]);
  assert.equal(result.code, 0, result.stderr);
  const token = result.stdout.trim();
  assert.match(token, /^[\w-]+\.[\w-]+\.[\w-]+$/);
  assert.deepEqual(jwtPart(token, 0), { alg: "HS256", kid: "k1", typ: "JWT" });
  const payload = jwtPart(token, 1);
  assert.equal(payload["aud"], "opqueue");
  assert.equal(payload["sub"], "alice");
  assert.equal(payload["op"], "createUser");
  assert.equal(payload["rid"], "r1");
  assert.equal(payload["site_admin"], undefined);
  assert.equal((payload["exp"] as number) - (payload["iat"] as number), 300);
  // Signed with the first configured key.
  await jwtVerify(token, new TextEncoder().encode(TEST_SECRET), { audience: "opqueue" });
});

test("token --site-admin prints an admin token with site_admin true, and the dashboard's sign-in link on stderr", async (t) => {
  const dir = tempDir(t);
  const result = await runCli(t, ["token", "--config", writeConfig(dir), "--site-admin", "--sub", "admin"], {
    OPQUEUE_PORT: "9123",
  });
  assert.equal(result.code, 0, result.stderr);
  const token = result.stdout.trim();
  assert.equal(result.stdout, `${token}\n`, "stdout is the bare token");
  const payload = jwtPart(token, 1);
  assert.equal(payload["site_admin"], true);
  assert.equal(payload["sub"], "admin");
  assert.equal(payload["aud"], "opqueue");
  assert.equal(payload["op"], undefined);
  // 128 random bits in hex: never a leading "-", which `revoke --jti JTI` would read as an option.
  assert.match(String(payload["jti"]), /^[0-9a-f]{32}$/, "a random jti, by which it can be revoked");
  assert.equal(
    result.stderr,
    `jti: ${String(payload["jti"])} (opqueue revoke --jti ${String(payload["jti"])} cuts this token off)\n` +
      `Sign-in link: http://127.0.0.1:9123/ui/#token=${token}\n`,
  );
});

test("token --role operator --ops mints an operator limited to those operations, each with its own jti", async (t) => {
  const dir = tempDir(t);
  const args = ["token", "--config", writeConfig(dir), "--sub", "oncall", "--role", "operator", "--ops", "a,b"];
  const first = await runCli(t, args);
  const second = await runCli(t, args);
  assert.equal(first.code, 0, first.stderr);
  const payload = jwtPart(first.stdout.trim(), 1);
  assert.equal(payload["role"], "operator");
  assert.deepEqual(payload["ops"], ["a", "b"]);
  assert.equal(payload["site_admin"], undefined);
  assert.notEqual(payload["jti"], jwtPart(second.stdout.trim(), 1)["jti"]);
  assert.match(first.stderr, /^Sign-in link: /m);
});

test("token refuses an unknown role, --ops without --role operator, and a role on an assertion, with exit 2", async (t) => {
  const dir = tempDir(t);
  const config = writeConfig(dir);
  for (const [extra, message] of [
    [["--role", "root"], /--role takes viewer, operator, admin/],
    [["--role", "viewer", "--ops", "a"], /--ops limits an operator/],
    [["--ops", "a"], /--ops limits an operator/],
    [["--role", "admin", "--site-admin"], /not both/],
    [["--role", "operator", "--ops", "a,,b"], /separated by commas/],
    [["--role", "admin", "--op", "createUser", "--rid", "r1"], /--op makes an enqueue assertion/],
  ] as const) {
    const result = await runCli(t, ["token", "--config", config, "--sub", "x", ...extra]);
    assert.equal(result.code, 2, result.stderr);
    assert.match(result.stderr, message);
    assert.equal(result.stdout, "");
  }
});

test("erase --user-id --cancel-waiting cancels and erases a user's jobs through a running serve", async (t) => {
  const dir = tempDir(t);
  const config = writeConfig(dir);
  const { port } = await startServe(t, config);
  const parsed = parseConfig({ raw: JSON.parse(fs.readFileSync(config, "utf8")), baseDir: dir, env: {} });
  const assertion = await mintToken({ auth: parsed.auth, clock: systemClock, sub: "ada", op: "createUser", rid: "r1" });
  const created = await fetch(`http://127.0.0.1:${port}/jobs`, {
    method: "POST",
    headers: { authorization: `Bearer ${assertion}`, "content-type": "application/json" },
    body: JSON.stringify({
      operation_id: "buildReport",
      request: { body: { email: "ada@example.com" } },
      delay_ms: 3_600_000,
    }),
  });
  assert.equal(created.status, 201, await created.clone().text());
  const { job } = (await created.json()) as { job: { id: string } };
  const url = `http://127.0.0.1:${port}`;
  const result = await runCli(t, ["erase", "--config", config, "--url", url, "--user-id", "ada", "--cancel-waiting"]);
  assert.equal(result.code, 0, result.stderr);
  assert.match(
    result.stdout,
    /^erased the data of 1 job\(s\) of the user \(subject [0-9a-f]{64}\), cancelled 1; 0 waiting and 0 running job\(s\) left\n$/,
  );
  const admin = await mintToken({ auth: parsed.auth, clock: systemClock, sub: "a", role: "viewer" });
  const read = await fetch(`${url}/jobs/${job.id}`, { headers: { authorization: `Bearer ${admin}` } });
  const after = ((await read.json()) as { job: { status: string; request: unknown } }).job;
  assert.deepEqual([after.status, after.request], ["cancelled", {}]);
  const usage = await runCli(t, ["erase", "--config", config, "--url", url]);
  assert.equal(usage.code, 2);
  assert.match(usage.stderr, /--user-id USER is required/);
});

test("rewrap seals a running serve's stored payloads under its first key", async (t) => {
  const dir = tempDir(t);
  const key = Buffer.alloc(32, 3).toString("base64");
  const config = writeConfig(dir, (raw) => {
    raw["encryption"] = { keys: [{ id: "k1", key_env: "OPQ_TEST_KEY" }] };
  });
  const port = await freePort();
  const serve = startCli(t, ["serve", "--config", config], { OPQUEUE_PORT: String(port), OPQ_TEST_KEY: key });
  await waitForReady(serve, port);
  const parsed = parseConfig({
    raw: JSON.parse(fs.readFileSync(config, "utf8")),
    baseDir: dir,
    env: { OPQ_TEST_KEY: key },
  });
  const assertion = await mintToken({ auth: parsed.auth, clock: systemClock, sub: "ada", op: "createUser", rid: "r1" });
  const created = await fetch(`http://127.0.0.1:${port}/jobs`, {
    method: "POST",
    headers: { authorization: `Bearer ${assertion}`, "content-type": "application/json" },
    body: JSON.stringify({ operation_id: "buildReport", request: { body: {} }, delay_ms: 3_600_000 }),
  });
  assert.equal(created.status, 201);
  const result = await runCli(t, ["rewrap", "--config", config, "--url", `http://127.0.0.1:${port}`, "--limit", "10"], {
    OPQ_TEST_KEY: key,
  });
  assert.equal(result.code, 0, result.stderr);
  // The job was sealed under k1 when it was written: the pass reads it and its chain's row, and rewrites nothing.
  assert.match(result.stdout, /^rewrote 0 stored payload\(s\) of 2 row\(s\) under key k1\n$/);
});

test("revoke --jti and --issued-before cut admin tokens off through a running serve", async (t) => {
  const dir = tempDir(t);
  const config = writeConfig(dir);
  const { port } = await startServe(t, config);
  const minted = await runCli(t, ["token", "--config", config, "--sub", "oncall", "--role", "viewer"]);
  const leaked = minted.stdout.trim();
  const stats = async () =>
    (await fetch(`http://127.0.0.1:${port}/stats`, { headers: { authorization: `Bearer ${leaked}` } })).status;
  assert.equal(await stats(), 200);
  const jti = String(jwtPart(leaked, 1)["jti"]);
  const url = `http://127.0.0.1:${port}`;
  const revoked = await runCli(t, ["revoke", "--config", config, "--url", url, "--jti", jti]);
  assert.equal(revoked.code, 0, revoked.stderr);
  assert.match(revoked.stdout, new RegExp(`^revoked jti ${jti} \\(at .+ by opqueue-revoke\\)\n$`));
  assert.equal(await stats(), 401);
  const cutoff = await runCli(t, ["revoke", "--config", config, "--url", url, "--issued-before", "now"]);
  assert.equal(cutoff.code, 0, cutoff.stderr);
  assert.match(cutoff.stdout, /^revoked every admin token issued before \S+Z/);
  const usage = await runCli(t, ["revoke", "--config", config, "--url", url]);
  assert.equal(usage.code, 2);
  assert.match(usage.stderr, /--jti JTI or --issued-before/);
  const weak = await runCli(t, ["revoke", "--config", config, "--url", url, "--jti", "x", "--token", leaked]);
  assert.equal(weak.code, 1, "a refusal by the service is a failure at run time");
  assert.match(weak.stderr, /answered 401/);
});

test("token without --site-admin prints no sign-in link", async (t) => {
  const dir = tempDir(t);
  const result = await runCli(t, [
    "token",
    "--config",
    writeConfig(dir),
    "--sub",
    "alice",
    "--op",
    "createUser",
    "--rid",
    "r1",
  ]);
  assert.equal(result.code, 0, result.stderr);
  assert.equal(result.stderr, "");
});

test("token --op without --rid or --job exits 2 and prints no token", async (t) => {
  const dir = tempDir(t);
  const result = await runCli(t, ["token", "--config", writeConfig(dir), "--sub", "alice", "--op", "createUser"]);
  assert.equal(result.code, 2);
  assert.match(result.stderr, /--rid/);
  assert.match(result.stderr, /--job/);
  assert.equal(result.stdout, "");
});

test("token without --sub exits 2", async (t) => {
  const dir = tempDir(t);
  const result = await runCli(t, ["token", "--config", writeConfig(dir), "--site-admin"]);
  assert.equal(result.code, 2);
  assert.match(result.stderr, /--sub/);
});

test("token with a --rid that is not 1..255 visible ASCII characters, or is a dot-segment, exits 2 and prints no token", async (t) => {
  const config = writeConfig(tempDir(t));
  const results = await Promise.all(
    ["", "req 1", "req\n1", "réq", "..", "x".repeat(256)].map(async (rid) => ({
      rid,
      result: await runCli(t, ["token", "--config", config, "--sub", "alice", "--op", "createUser", `--rid=${rid}`]),
    })),
  );
  for (const { rid, result } of results) {
    assert.equal(result.code, 2, `rid ${JSON.stringify(rid)}: ${result.stderr}`);
    assert.match(result.stderr, /--rid must be 1\.\.255 characters of visible ASCII/, JSON.stringify(rid));
    assert.equal(result.stdout, "", JSON.stringify(rid));
  }
});

// ---------------------------------------------------------------------------------------------------------
// serve and the one-node lock of SQLite

test("a second serve on the same SQLite file refuses to start; SIGTERM stops the first with 0 and frees the file", async (t) => {
  const dir = tempDir(t);
  const config = writeConfig(dir);
  const first = await startServe(t, config);

  const secondPort = await freePort();
  const second = await runCli(t, ["serve", "--config", config], { OPQUEUE_PORT: String(secondPort) });
  assert.notEqual(second.code, 0, "the second serve must not run");
  assert.equal(second.signal, null);
  assert.match(second.stderr, /in use by another opqueue process/);
  assert.doesNotMatch(second.stderr, /^\s+at /m, "no stack trace");
  // The first one is still serving.
  assert.equal((await fetch(`http://127.0.0.1:${first.port}/healthz`)).status, 200);

  // migrate is refused as well while the file is held.
  const lockedMigrate = await runCli(t, ["migrate", "--config", config]);
  assert.notEqual(lockedMigrate.code, 0);
  assert.match(lockedMigrate.stderr, /in use by another opqueue process/);

  first.cli.child.kill("SIGTERM");
  const stopped = await first.cli.exited;
  assert.equal(stopped.code, 0, stopped.stderr);
  assert.equal(stopped.signal, null);

  const migrate = await runCli(t, ["migrate", "--config", config]);
  assert.equal(migrate.code, 0, migrate.stderr);
});

test("serve starts at once on a SQLite file whose previous serve was killed with SIGKILL", async (t) => {
  const dir = tempDir(t);
  const config = writeConfig(dir);
  const killed = await startServe(t, config);
  killed.cli.child.kill("SIGKILL");
  const gone = await killed.cli.exited;
  assert.equal(gone.signal, "SIGKILL");

  const restarted = await startServe(t, config);
  restarted.cli.child.kill("SIGTERM");
  const stopped = await restarted.cli.exited;
  assert.equal(stopped.code, 0, stopped.stderr);
});

// ---------------------------------------------------------------------------------------------------------
// What an operator watches: help, the ops listener, the log

test("serve --help and token --help print that command's help and exit 0", async (t) => {
  for (const [command, usage] of [
    ["serve", /^Usage: opqueue serve \[--config FILE\]/],
    ["token", /^Usage: opqueue token /],
    ["migrate", /^Usage: opqueue migrate/],
  ] as const) {
    for (const flag of ["--help", "-h"]) {
      const result = await runCli(t, [command, flag]);
      assert.equal(result.code, 0, result.stderr);
      assert.match(result.stdout, usage);
      assert.equal(result.stderr, "");
    }
  }
});

/** GET `url`: its status and body text. */
async function get(url: string): Promise<{ status: number; body: string }> {
  const response = await fetch(url);
  return { status: response.status, body: await response.text() };
}

test("a worker-only node (serve --no-api) serves /healthz, /readyz and /metrics on listen.port, and answers API routes with 404 api_disabled", async (t) => {
  const dir = tempDir(t);
  const port = await freePort();
  const config = writeConfig(dir);
  const cli = startCli(t, ["serve", "--config", config, "--no-api"], { OPQUEUE_PORT: String(port) });
  await waitForReady(cli, port);
  const base = `http://127.0.0.1:${port}`;
  assert.equal((await get(`${base}/readyz`)).status, 200);
  const metrics = await get(`${base}/metrics`);
  assert.equal(metrics.status, 200);
  assert.match(metrics.body, /^opqueue_jobs\{status="pending"\} 0$/m);
  assert.match(metrics.body, /^opqueue_process_cpu_seconds_total /m);
  for (const [method, route] of [
    ["POST", "/jobs"],
    ["GET", "/jobs"],
    ["GET", "/jobs?status=dead"],
    ["GET", "/openapi.json"],
    ["GET", "/ui/"],
    ["GET", "/"],
  ]) {
    const response = await fetch(`${base}${route}`, { method });
    assert.equal(response.status, 404, `${method} ${route}`);
    const body = (await response.json()) as { code: string; message: string };
    assert.equal(body.code, "api_disabled", `${method} ${route}`);
    assert.match(body.message, /--no-api/);
  }
  cli.child.kill("SIGTERM");
  assert.equal((await cli.exited).code, 0);
});

test("listen.ops_port gives an API node a second listener with /healthz, /readyz and /metrics alone", async (t) => {
  const dir = tempDir(t);
  const [port, opsPort] = [await freePort(), await freePort()];
  const config = writeConfig(dir, (raw) => (raw["listen"] = { ops_port: opsPort }));
  const { cli } = await startServeOn(t, config, port);
  const ops = `http://127.0.0.1:${opsPort}`;
  assert.equal((await get(`${ops}/healthz`)).status, 200);
  assert.equal((await get(`${ops}/readyz`)).status, 200);
  assert.equal((await get(`${ops}/metrics`)).status, 200);
  assert.equal((await get(`${ops}/jobs`)).status, 404);
  assert.equal((await get(`http://127.0.0.1:${port}/metrics`)).status, 200, "the API keeps its own /metrics");
  cli.child.kill("SIGTERM");
  assert.equal((await cli.exited).code, 0);
});

/** Starts `serve --config FILE` on `port` and waits until it answers. */
async function startServeOn(t: TestContext, configFile: string, port: number): Promise<{ cli: CliProcess }> {
  const cli = startCli(t, ["serve", "--config", configFile], { OPQUEUE_PORT: String(port) });
  await waitForReady(cli, port);
  return { cli };
}

/** The JSON lines of a serve process's log. */
function logLines(output: string): Array<Record<string, unknown>> {
  return output
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

test("the log has one line per finished attempt (info; warn with the reason when the job goes dead), ISO times, and no probe access lines", async (t) => {
  const dir = tempDir(t);
  // A target of this test's own: the first attempt of each job fails with 503, then job "ok" succeeds and job
  // "bad" is refused for good.
  const seen = new Map<string, number>();
  const target = createServer((req, res) => {
    const attempt = (seen.get(req.url ?? "") ?? 0) + 1;
    seen.set(req.url ?? "", attempt);
    req.resume();
    if (attempt === 1) res.writeHead(503, { "retry-after": "0" }).end("busy");
    else if (req.url?.includes("bad")) res.writeHead(400).end("no such user");
    else res.writeHead(204).end();
  });
  await new Promise<void>((resolve) => target.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise<void>((resolve) => target.close(() => resolve())));
  const targetPort = (target.address() as { port: number }).port;
  const config = writeConfig(dir, (raw) => {
    raw["target"] = { base_url: `http://127.0.0.1:${targetPort}`, audience: "product" };
    raw["retry"] = { base_ms: 1, factor: 1, max_ms: 1 };
  });
  const port = await freePort();
  const { cli } = await startServeOn(t, config, port);
  for (let i = 0; i < 3; i++) await get(`http://127.0.0.1:${port}/healthz`);
  await get(`http://127.0.0.1:${port}/metrics`);

  const parsed = parseConfig({
    raw: JSON.parse(fs.readFileSync(config, "utf8")) as Record<string, unknown>,
    baseDir: dir,
    env: {},
  });
  for (const userId of ["ok", "bad"]) {
    const token = await mintToken({
      auth: parsed.auth,
      clock: systemClock,
      sub: "u1",
      op: "createUser",
      rid: `log-${userId}`,
    });
    const response = await fetch(`http://127.0.0.1:${port}/jobs`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ operation_id: "sendWelcomeEmail", request: { path_params: { userId } } }),
    });
    assert.equal(response.status, 201, await response.text());
  }
  let lines: Array<Record<string, unknown>> = [];
  for (let attempt = 0; attempt < POLL_ATTEMPTS; attempt++) {
    lines = logLines(cli.stdout());
    if (lines.some((line) => line["msg"] === "attempt succeeded") && lines.some((line) => line["msg"] === "job dead"))
      break;
    await sleep(POLL_MS);
  }
  const attempts = lines.filter((line) => typeof line["jobId"] === "string" && typeof line["attempt"] === "number");
  const retries = attempts.filter((line) => line["msg"] === "attempt failed; will retry");
  assert.equal(retries.length, 2, JSON.stringify(lines));
  for (const retry of retries) {
    assert.equal(retry["level"], 30);
    assert.equal(retry["statusCode"], 503);
    assert.equal(retry["outcome"], "retrying");
    assert.match(String(retry["nextRunAt"]), /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
    assert.equal(retry["error"], "busy");
  }
  const succeeded = attempts.find((line) => line["msg"] === "attempt succeeded");
  assert.deepEqual(
    [succeeded?.["level"], succeeded?.["operationId"], succeeded?.["attempt"], succeeded?.["statusCode"]],
    [30, "sendWelcomeEmail", 2, 204],
  );
  const dead = attempts.find((line) => line["msg"] === "job dead");
  assert.deepEqual(
    [dead?.["level"], dead?.["reason"], dead?.["statusCode"], dead?.["error"]],
    [40, "permanent-status", 400, "no such user"],
  );
  assert.match(String(dead?.["time"]), /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/, "ISO timestamps");
  const probes = lines.filter((line) => /\/(healthz|readyz|metrics)/.test(JSON.stringify(line["req"] ?? "")));
  assert.deepEqual(probes, [], "no access lines for probes");
  assert.ok(
    lines.some((line) => JSON.stringify(line["req"] ?? "").includes("/jobs")),
    "other requests are logged",
  );
  cli.child.kill("SIGTERM");
  assert.equal((await cli.exited).code, 0);
});

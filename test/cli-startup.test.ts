/**
 * Start-up as an operator meets it, with real `opqueue` processes: every mistake of the database setting or the config
 * ends in one line naming the setting, the value and the fix, exit 2, no stack trace, and at once; a database that is
 * not up yet is waited for with the node alive to its liveness probe and unready to its readiness probe.
 *
 * PostgreSQL cases use the server of OPQUEUE_TEST_DATABASE_URL (skipped without it); the wrong password and the
 * server starting up come from a small fake server speaking the first message of PostgreSQL's protocol, because the
 * test server trusts every local connection (pg_hba.conf `trust`), so no password is ever wrong there.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { jwtVerify } from "jose";
import { parseConfig } from "../src/config.js";
import {
  REPO_ROOT,
  logLines,
  runCli,
  startCli,
  tempDir as tempDirOf,
  writeConfig,
  type CliProcess,
  type CliResult,
} from "./helpers/cli-process.js";
import { dropSchema, freshSchemaName, POSTGRES_SKIP, POSTGRES_URL } from "./helpers/postgres.js";
import { freePort } from "./helpers/ports.js";
import { rawTestConfig, TEST_SECRET } from "./helpers/service.js";

/** Bound of each case: a start-up mistake that hangs (as `sqlite:/proc/...` did) fails it instead of the run. */
const CASE_LIMIT = { timeout: 60_000 };

/** A fresh temporary folder, removed when the test ends. */
const tempDir = (t: TestContext): string => tempDirOf(t, "startup");

/** Asserts the process exited 2 with exactly one line on stderr and no stack trace; returns the line. */
function assertConfigMistake(result: CliResult): string {
  assert.equal(result.code, 2, `exit code (stderr: ${result.stderr})`);
  const lines = result.stderr.trim().split("\n");
  assert.equal(lines.length, 1, `expected one line on stderr, got:\n${result.stderr}`);
  assert.doesNotMatch(result.stderr, /^\s+at /m, "no stack trace");
  return lines[0] ?? "";
}

/** `serve` with `database` set to `url` (through OPQUEUE_DATABASE_URL, as an operator would override it). */
function serveWith(t: TestContext, dir: string, url: string, args: string[] = []): Promise<CliResult> {
  return runCli(t, ["serve", "--config", writeConfig(dir), ...args], { OPQUEUE_DATABASE_URL: url, OPQUEUE_PORT: "0" });
}

/** Resolves when `cli` has logged a line `match` accepts; fails if it exits first. */
function waitForLog(
  cli: CliProcess,
  match: (line: Record<string, unknown>) => boolean,
): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const look = () => {
      const found = logLines(cli.stdout()).find(match);
      if (!found) return;
      cli.child.stdout?.off("data", look);
      resolve(found);
    };
    cli.child.stdout?.on("data", look);
    void cli.exited.then((result) =>
      reject(new Error(`serve exited (code ${result.code}) first:\n${result.stderr}${result.stdout}`)),
    );
    look();
  });
}

/** GET `url`: status and JSON body. */
async function getJson(url: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(url);
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

// ---------------------------------------------------------------------------------------------------------
// SQLite paths that cannot hold the database

test(
  "serve with a SQLite path on /proc exits 2 at once with one line naming the folder (it spun at full CPU, deaf to SIGTERM)",
  CASE_LIMIT,
  async (t) => {
    const dir = tempDir(t);
    const message = assertConfigMistake(await serveWith(t, dir, "sqlite:/proc/opq/x.db"));
    assert.match(message, /^opqueue: database sqlite:\/proc\/opq\/x\.db: cannot create the folder \/proc\/opq /);
    assert.match(message, /set database to a path on a writable disk/);
    assert.match(message, /OPQUEUE_DATABASE_URL/);
  },
);

test("serve with a SQLite path under a file exits 2 with one line naming the file", CASE_LIMIT, async (t) => {
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, "a-file"), "not a folder");
  const message = assertConfigMistake(await serveWith(t, dir, `sqlite:${dir}/a-file/sub/opqueue.db`));
  assert.match(message, new RegExp(`${dir}/a-file is a file, not a folder`));
});

test("serve with a SQLite path naming a file that is not a database exits 2 with one line", CASE_LIMIT, async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, "notes.txt");
  fs.writeFileSync(file, "x".repeat(4096));
  const message = assertConfigMistake(await serveWith(t, dir, `sqlite:${file}`));
  assert.match(message, /is not a SQLite database/);
});

test(
  "serve with a SQLite path in a folder the service's user may not write in exits 2 with one line naming the folder",
  CASE_LIMIT,
  async (t) => {
    const dir = tempDir(t);
    const locked = path.join(dir, "locked");
    fs.mkdirSync(locked, { mode: 0o555 });
    fs.chmodSync(locked, 0o555);
    fs.chmodSync(dir, 0o755);
    const config = writeConfig(dir);
    fs.chmodSync(config, 0o644);
    // Root writes anywhere: then the service runs as nobody, as a service account would.
    const asRoot = process.getuid?.() === 0;
    const child = spawn(process.execPath, ["--import", "tsx", "src/cli.ts", "serve", "--config", config], {
      cwd: REPO_ROOT,
      env: {
        PATH: process.env["PATH"] ?? "",
        HOME: dir,
        OPQUEUE_DATABASE_URL: `sqlite:${locked}/opqueue.db`,
        OPQUEUE_PORT: "0",
      },
      stdio: ["ignore", "pipe", "pipe"],
      ...(asRoot ? { uid: 65534, gid: 65534 } : {}),
    });
    t.after(() => {
      if (child.exitCode === null) child.kill("SIGKILL");
    });
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    child.stdout.resume();
    const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
    const message = assertConfigMistake({ code, signal: null, stdout: "", stderr });
    assert.match(message, new RegExp(`the folder ${locked} is not writable \\(EACCES`));
    assert.match(message, /chown or chmod/);
  },
);

// ---------------------------------------------------------------------------------------------------------
// Did you mean

test("serve with a misspelt config key exits 2 with one line that suggests the key", CASE_LIMIT, async (t) => {
  const dir = tempDir(t);
  const config = writeConfig(dir, (raw) => {
    raw["tagret"] = raw["target"];
    delete raw["target"];
  });
  const result = await runCli(t, ["serve", "--config", config]);
  assert.match(
    assertConfigMistake(result),
    /^opqueue: config: unknown key "tagret" \(did you mean "target"\?\); target is required$/,
  );
});

test(
  "serve with a misspelt trigger target exits 2 with one line that suggests the operation",
  CASE_LIMIT,
  async (t) => {
    const dir = tempDir(t);
    const config = writeConfig(dir, (raw) => {
      raw["triggers"] = { createUser: ["sendWelcomEmail"] };
      raw["cron"] = [];
    });
    const result = await runCli(t, ["serve", "--config", config]);
    const message = assertConfigMistake(result);
    assert.match(message, /^opqueue: config: triggers\.createUser: target "sendWelcomEmail" is not an operation/);
    assert.match(message, /\(did you mean "sendWelcomeEmail"\?\)/);
    assert.equal(fs.existsSync(path.join(dir, "opqueue.db")), false, "a refused config touches no database");
  },
);

test(
  "serve with a misspelt cron operation_id exits 2 with one line that suggests the operation",
  CASE_LIMIT,
  async (t) => {
    const dir = tempDir(t);
    const config = writeConfig(dir, (raw) => {
      (raw["cron"] as Array<Record<string, unknown>>)[0]!["operation_id"] = "buildRepot";
    });
    const message = assertConfigMistake(await runCli(t, ["serve", "--config", config]));
    assert.match(message, /^opqueue: config: cron\.0\.operation_id: .*"buildRepot".*\(did you mean "buildReport"\?\)/);
  },
);

test("an unknown command suggests the command it resembles", CASE_LIMIT, async (t) => {
  const result = await runCli(t, ["sevre"]);
  assert.equal(result.code, 2);
  assert.match(result.stderr, /^opqueue: unknown command "sevre" \(did you mean "serve"\?\)/);
});

// ---------------------------------------------------------------------------------------------------------
// token and the other admin commands

test(
  "token --op refuses an operation the OpenAPI document lacks, with one line that suggests the operation, and prints no token",
  CASE_LIMIT,
  async (t) => {
    const dir = tempDir(t);
    const result = await runCli(t, [
      "token",
      "--config",
      writeConfig(dir),
      "--sub",
      "u1",
      "--op",
      "createUsr",
      "--rid",
      "r1",
    ]);
    const message = assertConfigMistake(result);
    assert.match(message, /^opqueue: token: --op "createUsr" is not an operation of the product's OpenAPI document/);
    assert.match(message, /\(did you mean "createUser"\?\)/);
    assert.equal(result.stdout, "");
  },
);

test("token --op takes an operation of the document, and cron:NAME", CASE_LIMIT, async (t) => {
  const dir = tempDir(t);
  const config = writeConfig(dir);
  for (const op of ["createUser", "cron:nightly"]) {
    const result = await runCli(t, ["token", "--config", config, "--sub", "u1", "--op", op, "--rid", "r1"]);
    assert.equal(result.code, 0, result.stderr);
  }
});

/** A config whose every secret comes from the environment. */
function writeEnvSecretsConfig(dir: string): string {
  return writeConfig(dir, (raw) => {
    raw["auth"] = {
      audience: "opqueue",
      keys: [{ kid: "k1", alg: "HS256", secret_env: "TEST_ADMIN_SECRET" }],
      delivery_key: { kid: "q1", alg: "HS256", secret_env: "TEST_DELIVERY_SECRET" },
    };
  });
}

test("token mints with auth.keys alone: the delivery secret's variable may be unset", CASE_LIMIT, async (t) => {
  const dir = tempDir(t);
  const config = writeEnvSecretsConfig(dir);
  const result = await runCli(t, ["token", "--config", config, "--sub", "admin", "--site-admin"], {
    TEST_ADMIN_SECRET: TEST_SECRET,
  });
  assert.equal(result.code, 0, result.stderr);
  const { payload } = await jwtVerify(result.stdout.trim(), new TextEncoder().encode(TEST_SECRET), {
    audience: "opqueue",
  });
  assert.equal(payload["site_admin"], true);
  // The signing key's own variable is still required, and named.
  const missing = await runCli(t, ["token", "--config", config, "--sub", "admin"]);
  assert.match(
    assertConfigMistake(missing),
    /^opqueue: config: auth\.keys\.0: environment variable TEST_ADMIN_SECRET is not set$/,
  );
});

test("migrate and restore read no secret: neither key's variable needs to be set", CASE_LIMIT, async (t) => {
  const dir = tempDir(t);
  const config = writeEnvSecretsConfig(dir);
  const migrated = await runCli(t, ["migrate", "--config", config]);
  assert.equal(migrated.code, 0, migrated.stderr);
  const backup = path.join(dir, "copy.db");
  fs.copyFileSync(path.join(dir, "opqueue.db"), backup);
  const restored = await runCli(t, ["restore", "--config", config, "--from", backup]);
  assert.equal(restored.code, 0, restored.stderr);
});

test("backup with --token reads no secret; without it, only auth.keys' signing key", CASE_LIMIT, async (t) => {
  const dir = tempDir(t);
  const config = writeEnvSecretsConfig(dir);
  // Nothing listens on the URL: what matters is that the command gets as far as calling it.
  const url = `http://127.0.0.1:${await freePort()}/`;
  const withToken = await runCli(t, [
    "backup",
    "--config",
    config,
    "--to",
    path.join(dir, "b.db"),
    "--url",
    url,
    "--token",
    "x",
  ]);
  assert.doesNotMatch(withToken.stderr, /environment variable/);
  assert.match(withToken.stderr, /ECONNREFUSED|connect/);
  const minted = await runCli(t, ["backup", "--config", config, "--to", path.join(dir, "b.db"), "--url", url], {
    TEST_ADMIN_SECRET: TEST_SECRET,
  });
  assert.doesNotMatch(minted.stderr, /environment variable/);
});

test("parseConfig with secrets 'minting' resolves only the first HS256 key of auth.keys", () => {
  const raw = rawTestConfig(os.tmpdir());
  raw["auth"] = {
    audience: "opqueue",
    keys: [
      { kid: "p1", alg: "EdDSA", public_key_env: "UNSET_PUBLIC" },
      { kid: "k1", alg: "HS256", secret_env: "ADMIN" },
    ],
    delivery_key: { kid: "q1", alg: "HS256", secret_env: "UNSET_DELIVERY" },
  };
  const config = parseConfig({ raw, baseDir: os.tmpdir(), env: { ADMIN: TEST_SECRET }, secrets: "minting" });
  assert.deepEqual(config.auth.keys[1], { kid: "k1", alg: "HS256", secret: TEST_SECRET });
  assert.throws(
    () => parseConfig({ raw, baseDir: os.tmpdir(), env: { ADMIN: TEST_SECRET } }),
    /UNSET_PUBLIC is not set/,
  );
});

// ---------------------------------------------------------------------------------------------------------
// PostgreSQL mistakes: refused at once

/** The test server's URL with `change` applied. */
function postgresUrl(change: (url: URL) => void): string {
  const url = new URL(POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres");
  change(url);
  return url.href;
}

test(
  "serve with a PostgreSQL database that does not exist exits 2 with one line naming it and the fix",
  { ...CASE_LIMIT, skip: POSTGRES_SKIP },
  async (t) => {
    const dir = tempDir(t);
    const url = postgresUrl((u) => (u.pathname = "/opq_no_such_database"));
    const message = assertConfigMistake(await serveWith(t, dir, url));
    assert.match(
      message,
      /^opqueue: database postgres:\/\/.*\/opq_no_such_database: PostgreSQL at .* has no database "opq_no_such_database": create it/,
    );
  },
);

test(
  "serve with a PostgreSQL role that does not exist exits 2 with one line naming it and the fix",
  { ...CASE_LIMIT, skip: POSTGRES_SKIP },
  async (t) => {
    const dir = tempDir(t);
    const url = postgresUrl((u) => {
      u.username = "opq_no_such_role";
      u.password = "";
    });
    const message = assertConfigMistake(await serveWith(t, dir, url));
    assert.match(message, /has no role "opq_no_such_role": create it \(CREATE ROLE opq_no_such_role LOGIN\)/);
  },
);

test(
  "serve with a PostgreSQL host that does not resolve exits 2 with one line naming the host",
  CASE_LIMIT,
  async (t) => {
    const dir = tempDir(t);
    const message = assertConfigMistake(await serveWith(t, dir, "postgres://postgres@nohost.invalid:5432/postgres"));
    assert.match(
      message,
      /the host name "nohost\.invalid" does not resolve \(ENOTFOUND\): correct the host in the URL/,
    );
  },
);

/** One message of PostgreSQL's protocol: a type byte, a length, a body. */
function pgMessage(type: string, body: Buffer): Buffer {
  const header = Buffer.alloc(5);
  header.write(type, 0, "latin1");
  header.writeInt32BE(4 + body.length, 1);
  return Buffer.concat([header, body]);
}

/** The ErrorResponse a server sends to refuse a connection with SQLSTATE `code`. */
function pgError(code: string, message: string): Buffer {
  const field = (type: string, value: string) => Buffer.from(`${type}${value}\0`, "utf8");
  return pgMessage(
    "E",
    Buffer.concat([field("S", "FATAL"), field("V", "FATAL"), field("C", code), field("M", message), Buffer.from([0])]),
  );
}

/**
 * A server on a free port that, in turn, refuses each connection with an ErrorResponse (`refuseWith`) or passes it to
 * the test server (`forward`). Before `listen`, nothing listens there at all.
 */
async function fakeServer(t: TestContext): Promise<{
  port: number;
  listen(): Promise<void>;
  refuseWith(code: string, message: string): void;
  forward(): void;
}> {
  const port = await freePort();
  let mode: { refuse: Buffer } | "forward" = { refuse: pgError("57P03", "the database system is starting up") };
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    if (mode === "forward") {
      const upstream = new URL(POSTGRES_URL ?? "postgres://127.0.0.1:5432");
      const database = net.connect(Number(upstream.port || 5432), upstream.hostname);
      database.on("error", () => socket.destroy());
      socket.on("close", () => database.destroy());
      socket.pipe(database).pipe(socket);
      return;
    }
    const refusal = mode.refuse;
    // The client speaks first (its startup message); the refusal answers it, as a server does.
    socket.once("data", () => socket.end(refusal));
  });
  t.after(async () => {
    for (const socket of sockets) socket.destroy();
    if (server.listening) await new Promise((resolve) => server.close(resolve));
  });
  return {
    port,
    listen: () => new Promise((resolve) => server.listen(port, "127.0.0.1", () => resolve())),
    refuseWith(code, message) {
      mode = { refuse: pgError(code, message) };
    },
    forward() {
      mode = "forward";
    },
  };
}

test(
  "serve with a wrong PostgreSQL password exits 2 with one line naming the role and the fix",
  CASE_LIMIT,
  async (t) => {
    const dir = tempDir(t);
    const server = await fakeServer(t);
    server.refuseWith("28P01", 'password authentication failed for user "opq_app"');
    await server.listen();
    const message = assertConfigMistake(
      await serveWith(t, dir, `postgres://opq_app:wrong@127.0.0.1:${server.port}/app`),
    );
    assert.match(
      message,
      /^opqueue: database postgres:\/\/opq_app:\*\*\*@127\.0\.0\.1:\d+\/app: /,
      "the password is hidden",
    );
    assert.match(message, /refused the password of role "opq_app": correct the password in the URL/);
    assert.doesNotMatch(message, /wrong/);
  },
);

// ---------------------------------------------------------------------------------------------------------
// Waiting for PostgreSQL

test(
  "a node waiting for PostgreSQL is alive (/healthz 200) and unready (/readyz 503 naming the database), logs one line per attempt, and becomes ready when the database answers",
  { ...CASE_LIMIT, skip: POSTGRES_SKIP },
  async (t) => {
    const dir = tempDir(t);
    const server = await fakeServer(t);
    const schema = freshSchemaName();
    t.after(() => dropSchema(schema));
    const port = await freePort();
    const url = `postgres://postgres@127.0.0.1:${server.port}/${new URL(POSTGRES_URL ?? "").pathname.slice(1)}?schema=${schema}`;
    const cli = startCli(t, ["serve", "--config", writeConfig(dir)], {
      OPQUEUE_DATABASE_URL: url,
      OPQUEUE_PORT: String(port),
    });
    const base = `http://127.0.0.1:${port}`;

    // Nothing listens where the database should be: refused, waited for.
    const first = await waitForLog(cli, (line) => String(line["msg"]).startsWith("waiting for the database"));
    assert.equal(first["level"], 40);
    assert.equal(first["attempt"], 1);
    assert.equal(first["retryInMs"], 1000);
    assert.match(String(first["reason"]), /ECONNREFUSED/);
    assert.equal(first["err"], undefined, "no error object, so no stack");
    assert.deepEqual(await getJson(`${base}/healthz`), { status: 200, body: { status: "ok" } });
    const notReady = await getJson(`${base}/readyz`);
    assert.equal(notReady.status, 503);
    assert.equal(notReady.body["code"], "unavailable");
    assert.match(
      String(notReady.body["message"]),
      new RegExp(
        `^not ready: waiting for the database postgres://postgres@127\\.0\\.0\\.1:${server.port}/.*ECONNREFUSED`,
      ),
    );
    const enqueue = await fetch(`${base}/jobs`, { method: "POST" });
    assert.equal(enqueue.status, 503, "the API is not served yet");

    // The server is up but still starting: waited for too, each wait twice the last (a busy machine may have let another
    // attempt find nothing listening first).
    await server.listen();
    const startingUp = await waitForLog(cli, (line) => /starting up/.test(String(line["reason"])));
    const attempt = Number(startingUp["attempt"]);
    assert.ok(attempt >= 2, `attempt ${attempt}`);
    assert.equal(startingUp["retryInMs"], Math.min(30_000, 1000 * 2 ** (attempt - 1)));

    server.forward();
    await waitForLog(cli, (line) => line["msg"] === "opqueue started");
    assert.deepEqual(await getJson(`${base}/readyz`), { status: 200, body: { status: "ready" } });
    const waits = logLines(cli.stdout()).filter((line) => String(line["msg"]).startsWith("waiting for the database"));
    assert.deepEqual(
      waits.map((line) => line["attempt"]),
      waits.map((_line, index) => index + 1),
      "one line per attempt",
    );
    assert.doesNotMatch(cli.stdout(), /"stack"/);
    cli.child.kill("SIGTERM");
    assert.equal((await cli.exited).code, 0);
  },
);

test(
  "SIGTERM ends a node waiting for PostgreSQL at once with exit 0; a worker-only node answers API routes 404 api_disabled meanwhile",
  CASE_LIMIT,
  async (t) => {
    const dir = tempDir(t);
    const server = await fakeServer(t);
    await server.listen();
    const port = await freePort();
    const cli = startCli(t, ["serve", "--config", writeConfig(dir), "--no-api"], {
      OPQUEUE_DATABASE_URL: `postgres://postgres@127.0.0.1:${server.port}/postgres`,
      OPQUEUE_PORT: String(port),
    });
    const waiting = await waitForLog(cli, (line) => String(line["msg"]).startsWith("waiting for the database"));
    assert.match(String(waiting["reason"]), /the database system is starting up/);
    const base = `http://127.0.0.1:${port}`;
    assert.equal((await getJson(`${base}/healthz`)).status, 200);
    assert.match(String((await getJson(`${base}/readyz`)).body["message"]), /starting up/);
    const jobs = await getJson(`${base}/jobs`);
    assert.equal(jobs.status, 404);
    assert.equal(jobs.body["code"], "api_disabled");
    cli.child.kill("SIGTERM");
    const result = await cli.exited;
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stderr, "");
  },
);

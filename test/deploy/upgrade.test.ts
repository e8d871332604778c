/**
 * Upgrading, as docs/deploying.md ("Upgrading") tells an operator to: a node of this version started on the database
 * an earlier version left migrates it and delivers the jobs it holds (SQLite and PostgreSQL); a database newer than
 * the node is refused with a clear message and exit 2; and during a rolling upgrade across PostgreSQL nodes, a node
 * whose schema a newer node has migrated goes on delivering, with /readyz saying it should be upgraded.
 *
 * The earlier database is built from the migration files up to `EARLIER_*_VERSION`, and its jobs are written with
 * the SQL of that version, so the test keeps checking this upgrade whatever migrations come after.
 */
import { describe, test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import pg from "pg";
import { mintToken } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import { parseConfig, type Config } from "../../src/config.js";
import { readMigrations, type Migration } from "../../src/store/migrations.js";
import { logLines, startCli, stopServe, waitForStart, type CliProcess } from "../helpers/cli-process.js";
import { freePort } from "../helpers/ports.js";
import { dropSchema, freshSchemaName, POSTGRES_SKIP, POSTGRES_URL } from "../helpers/postgres.js";
import { rawTestConfig } from "../helpers/service.js";
import { answer, startTarget, type Target } from "../helpers/target.js";

/** SQLite schema version 2: before administrators' actions were recorded. */
const EARLIER_SQLITE_VERSION = 2;
/** PostgreSQL schema version 8: the same point in opqueue's history. */
const EARLIER_POSTGRES_VERSION = 8;
/** Upper bound of each wait for a node; far above what a passing test needs. */
const WAIT_LIMIT_MS = 20_000;
const T_PAST = Date.parse("2026-01-01T00:00:00.000Z");

function tempDir(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "opqueue-upgrade-test-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A running `serve` of this version. */
interface Node {
  cli: CliProcess;
  config: Config;
  url: string;
}

/** Writes the test config (database `database`, target `target`) to `dir`; returns its path and parsed form. */
function writeConfig(dir: string, database: string, target: Target): { file: string; config: Config } {
  const raw = rawTestConfig(dir);
  raw["database"] = database;
  raw["target"] = { base_url: target.url, audience: "product" };
  const file = path.join(dir, `opqueue-${fs.readdirSync(dir).length}.json`);
  fs.writeFileSync(file, JSON.stringify(raw));
  return { file, config: parseConfig({ raw, baseDir: dir, env: {} }) };
}

async function startNode(t: TestContext, dir: string, database: string, target: Target): Promise<Node> {
  const { file, config } = writeConfig(dir, database, target);
  const port = await freePort();
  const cli = startCli(t, ["serve", "--config", file], { OPQUEUE_PORT: String(port) });
  await waitForStart(cli);
  return { cli, config, url: `http://127.0.0.1:${port}` };
}

/** Resolves once the node has logged the successful attempt of job `id`. */
function succeeded(node: Node, id: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const seen = () =>
      logLines(node.cli.stdout()).some((line) => line["msg"] === "attempt succeeded" && line["jobId"] === id);
    // A bound for a broken node, never a pause: a passing test is woken by the log line itself.
    const timer = setTimeout(
      () => finish(new Error(`job ${id} did not succeed:\n${node.cli.stdout()}`)),
      WAIT_LIMIT_MS,
    );
    const onData = () => seen() && finish();
    node.cli.child.stdout?.on("data", onData);
    onData();
    function finish(error?: Error): void {
      clearTimeout(timer);
      node.cli.child.stdout?.off("data", onData);
      if (error) reject(error);
      else resolve();
    }
  });
}

async function call(
  node: Node,
  method: string,
  pathname: string,
  token?: string,
): Promise<{ status: number; body: unknown }> {
  const response = await fetch(`${node.url}${pathname}`, {
    method,
    headers: token ? { authorization: `Bearer ${token}` } : {},
  });
  return { status: response.status, body: await response.json() };
}

/**
 * What every upgraded node must do with the jobs of the earlier database: deliver the pending one, retry the dead one
 * for an administrator, and show that retry in the job's history (a table the earlier version did not have).
 */
async function checkUpgradedNode(node: Node, ids: { pending: string; dead: string }): Promise<void> {
  await succeeded(node, ids.pending);
  const admin = await mintToken({
    auth: node.config.auth,
    clock: systemClock,
    sub: "ops@example.com",
    siteAdmin: true,
  });
  const retried = await call(node, "POST", `/jobs/${ids.dead}/retry`, admin);
  assert.equal(retried.status, 200, JSON.stringify(retried.body));
  await succeeded(node, ids.dead);
  const history = await call(node, "GET", `/jobs/${ids.dead}/history`, admin);
  assert.equal(history.status, 200);
  const events = (history.body as { events: Array<{ type: string; actor?: string; number?: number }> }).events;
  assert.deepEqual(
    events.map((event) => event.type),
    ["enqueued", "admin", "attempt"],
    "the dead job's earlier attempts were not recorded by the test; its retry and the new attempt are",
  );
  assert.equal(events[1]?.actor, "ops@example.com");
}

/** Enqueue assertion for a job enqueued through `node`. */
function assertion(node: Node, rid: string): Promise<string> {
  return mintToken({ auth: node.config.auth, clock: systemClock, sub: "u1", op: "createUser", rid });
}

/** Enqueues a sendWelcomeEmail job through `node`; answers its id. */
async function enqueue(node: Node, rid: string): Promise<string> {
  const response = await fetch(`${node.url}/jobs`, {
    method: "POST",
    headers: { authorization: `Bearer ${await assertion(node, rid)}`, "content-type": "application/json" },
    body: JSON.stringify({ operation_id: "sendWelcomeEmail", request: { path_params: { userId: "u1" } } }),
  });
  const body = (await response.json()) as { job: { id: string } };
  assert.equal(response.status, 201, JSON.stringify(body));
  return body.job.id;
}

describe("SQLite upgrades", () => {
  /** A database at `EARLIER_SQLITE_VERSION` holding a pending and a dead job, written as that version wrote them. */
  function earlierDatabase(file: string): { pending: string; dead: string } {
    const db = new Database(file);
    try {
      for (const migration of readMigrations("sqlite").slice(0, EARLIER_SQLITE_VERSION)) db.exec(migration.sql);
      db.pragma(`user_version = ${EARLIER_SQLITE_VERSION}`);
      const insert = db.prepare(
        `INSERT INTO jobs (id, operation_id, status, attempt, max_attempts, run_at, created_at, finished_at,
           enqueued_by_operation_id, original_request_id, user_id, authority, request, result)
         VALUES (:id, 'sendWelcomeEmail', :status, :attempt, 5, :at, :at, :finished, 'createUser', :rid, 'u1',
           '{"kind":"request","request_id":"r","user_id":"u1"}', '{"path_params":{"userId":"u1"}}', :result)`,
      );
      insert.run({
        id: "earlier-pending-job-1",
        status: "pending",
        attempt: 0,
        at: T_PAST,
        finished: null,
        rid: "r1",
        result: null,
      });
      insert.run({
        id: "earlier-dead-job-0001",
        status: "dead",
        attempt: 5,
        at: T_PAST,
        finished: T_PAST + 1,
        rid: "r2",
        result: '{"status_code":500,"error_body":"down","terminal_reason":"exhausted"}',
      });
      db.prepare("INSERT INTO chains (original_request_id, jobs_created) VALUES ('r1', 1), ('r2', 1)").run();
    } finally {
      db.close();
    }
    return { pending: "earlier-pending-job-1", dead: "earlier-dead-job-0001" };
  }

  test("a node of this version migrates an earlier database when it starts, and delivers its jobs", async (t) => {
    const dir = tempDir(t);
    const file = path.join(dir, "opqueue.db");
    const ids = earlierDatabase(file);
    const target = await startTarget(t, answer(204));
    const node = await startNode(t, dir, `sqlite:${file}`, target);
    await checkUpgradedNode(node, ids);
    await stopServe(node.cli);
    const db = new Database(file, { readonly: true });
    t.after(() => db.close());
    assert.equal(db.pragma("user_version", { simple: true }), readMigrations("sqlite").length);
  });

  test("a database newer than this opqueue is refused, with what to do, and left as it was", async (t) => {
    const dir = tempDir(t);
    const file = path.join(dir, "opqueue.db");
    earlierDatabase(file);
    const newer = readMigrations("sqlite").length + 1;
    const db = new Database(file);
    db.pragma(`user_version = ${newer}`);
    db.close();
    const target = await startTarget(t, answer(204));
    const { file: configFile } = writeConfig(dir, `sqlite:${file}`, target);
    const result = await startCli(t, ["serve", "--config", configFile], { OPQUEUE_PORT: String(await freePort()) })
      .exited;
    assert.equal(result.code, 2, result.stderr);
    assert.match(
      result.stderr,
      new RegExp(`schema \\(version ${newer}\\) is newer than this opqueue .*run the newer opqueue`),
    );
    assert.doesNotMatch(result.stderr, /\n\s+at /, "a message, not a stack trace");
    const after = new Database(file, { readonly: true });
    t.after(() => after.close());
    assert.equal(after.pragma("user_version", { simple: true }), newer);
  });
});

/** The first PostgreSQL migration that must say whether a rolling upgrade across it is possible (the first release's). */
const FIRST_DECLARED_POSTGRES_VERSION = 9;

test("every PostgreSQL migration of a release says whether nodes of the version before it may keep running", () => {
  const declared = readMigrations("postgres").filter(
    (migration) => migration.version >= FIRST_DECLARED_POSTGRES_VERSION,
  );
  assert.ok(declared.length > 0);
  for (const migration of declared) {
    const header = migration.sql
      .split("\n")
      .filter((line) => line.startsWith("--"))
      .join("\n");
    assert.match(
      header,
      /^-- Rolling upgrade: (yes|no)\. \S/m,
      `${migration.version}_${migration.name}.sql says "Rolling upgrade: yes. ..." or "no. ..."`,
    );
  }
});

describe("PostgreSQL upgrades", { skip: POSTGRES_SKIP }, () => {
  /** A client whose search path is `schema`, closed when the test ends. */
  async function schemaClient(t: TestContext, schema: string): Promise<pg.Client> {
    const client = new pg.Client({ connectionString: POSTGRES_URL, options: `-c search_path=${schema}` });
    await client.connect();
    t.after(() => client.end());
    return client;
  }

  /** The database URL of `schema`. */
  function databaseUrl(schema: string): string {
    const url = new URL(POSTGRES_URL ?? "");
    url.searchParams.set("schema", schema);
    return url.toString();
  }

  /** Applies `migrations` in order as a migrating node would, each in its transaction and recorded. */
  async function applyMigrations(db: pg.Client, migrations: Migration[]): Promise<void> {
    for (const migration of migrations) {
      await db.query("BEGIN");
      await db.query(migration.sql);
      await db.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [
        migration.version,
        migration.name,
      ]);
      await db.query("COMMIT");
    }
  }

  /** A fresh schema at `EARLIER_POSTGRES_VERSION` holding a pending and a dead job, written as that version wrote them. */
  async function earlierSchema(
    t: TestContext,
  ): Promise<{ schema: string; db: pg.Client; ids: { pending: string; dead: string } }> {
    const schema = freshSchemaName();
    t.after(() => dropSchema(schema));
    const db = await schemaClient(t, schema);
    await db.query(`CREATE SCHEMA ${schema}`);
    await db.query(`CREATE TABLE schema_migrations (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    await applyMigrations(db, readMigrations("postgres").slice(0, EARLIER_POSTGRES_VERSION));
    const item = (id: string, rid: string) => ({
      id,
      operation_id: "sendWelcomeEmail",
      max_attempts: 5,
      priority: 0,
      run_at: new Date(T_PAST).toISOString(),
      dedupe_key: null,
      concurrency_key: null,
      enqueued_by_operation_id: "createUser",
      parent_job_id: null,
      original_request_id: rid,
      user_id: "u1",
      authority: { kind: "request", request_id: rid, user_id: "u1" },
      request: { path_params: { userId: "u1" } },
      spawn_cap: 1000,
    });
    const ids = { pending: "earlier-pending-job-1", dead: "earlier-dead-job-0001" };
    await db.query("SELECT opqueue_insert_jobs($1::json, $2)", [
      JSON.stringify([item(ids.pending, "r1"), item(ids.dead, "r2")]),
      new Date(T_PAST),
    ]);
    await db.query(
      `UPDATE job_state SET status = 'dead', attempt = 5, finished_at = $2,
         result = '{"status_code":500,"error_body":"down","terminal_reason":"exhausted"}'
       WHERE seq = (SELECT seq FROM job_specs WHERE id = $1)`,
      [ids.dead, new Date(T_PAST + 1)],
    );
    return { schema, db, ids };
  }

  test("a node of this version migrates an earlier schema when it starts, and delivers its jobs", async (t) => {
    const { schema, db, ids } = await earlierSchema(t);
    const target = await startTarget(t, answer(204));
    const node = await startNode(t, tempDir(t), databaseUrl(schema), target);
    await checkUpgradedNode(node, ids);
    await stopServe(node.cli);
    const versions = await db.query<{ version: number }>("SELECT max(version) AS version FROM schema_migrations");
    assert.equal(versions.rows[0]?.version, readMigrations("postgres").length);
  });

  test("rolling upgrade: a node whose schema a newer node migrated keeps delivering, /readyz says to upgrade it, a new node of its version is refused", async (t) => {
    const { schema, db } = await earlierSchema(t);
    const dir = tempDir(t);
    const target = await startTarget(t, answer(204));
    const current = await startNode(t, dir, databaseUrl(schema), target);
    assert.equal((await call(current, "GET", "/readyz")).status, 200);

    // A newer release starts on another machine and migrates the schema past this one (an additive migration).
    const latest = readMigrations("postgres").length;
    await applyMigrations(db, [
      { version: latest + 1, name: "from_a_newer_release", sql: "CREATE TABLE newer_release_things (id bigint)" },
    ]);

    const ready = await call(current, "GET", "/readyz");
    assert.equal(ready.status, 503);
    assert.deepEqual(ready.body, {
      code: "unavailable",
      message: `not ready: the schema is at version ${latest + 1}, newer than this node's ${latest}: upgrade this node`,
    });
    const id = await enqueue(current, "rolling-1");
    await succeeded(current, id);

    const { file } = writeConfig(dir, databaseUrl(schema), target);
    const refused = await startCli(t, ["serve", "--config", file], { OPQUEUE_PORT: String(await freePort()) }).exited;
    assert.equal(refused.code, 2, refused.stderr);
    assert.match(
      refused.stderr,
      new RegExp(`\\(version ${latest + 1}\\) is newer than this opqueue \\(version ${latest}\\)`),
    );
    assert.doesNotMatch(refused.stderr, /\n\s+at /, "a message, not a stack trace");

    await stopServe(current.cli);
  });
});

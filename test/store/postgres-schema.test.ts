/**
 * Where opqueue keeps its tables on PostgreSQL: in the schema `opqueue` unless the URL names another, so a product's
 * own `jobs` or `schema_migrations` in the same database is never touched; a database of an older opqueue, whose tables
 * are in `public`, keeps them there (with a warning); a schema holding someone else's tables is refused with a clear
 * message, and nothing is created in it. Each test has a database of its own, dropped afterwards.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test, type TestContext } from "node:test";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { systemClock } from "../../src/clock.js";
import { PostgresStore } from "../../src/store/postgres/postgres-store.js";
import { StoreSetupError } from "../../src/store/store.js";
import { POSTGRES_SKIP, POSTGRES_URL } from "../helpers/postgres.js";
import { rawTestConfig } from "../helpers/service.js";

const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** A database of this test's own, with a client connected to it; both gone when the test ends. */
async function ownDatabase(t: TestContext): Promise<{ url: string; client: pg.Client }> {
  assert.ok(POSTGRES_URL);
  const name = `opq_test_db_${randomBytes(5).toString("hex")}`;
  const admin = new pg.Client({ connectionString: POSTGRES_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(POSTGRES_URL);
  url.pathname = `/${name}`;
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  t.after(async () => {
    await client.end();
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  });
  return { url: url.toString(), client };
}

async function tablesOf(client: pg.Client, schema: string): Promise<string[]> {
  const rows = await client.query<{ name: string }>(
    "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name",
    [schema],
  );
  return rows.rows.map((row) => row.name);
}

test(
  "a URL naming no schema keeps opqueue's tables in the schema opqueue, beside a product's own jobs and schema_migrations in public",
  { skip: POSTGRES_SKIP },
  async (t) => {
    const { url, client } = await ownDatabase(t);
    await client.query("CREATE TABLE public.jobs (id serial PRIMARY KEY, title text)");
    await client.query("CREATE TABLE public.schema_migrations (version varchar PRIMARY KEY)");
    await client.query("INSERT INTO public.schema_migrations VALUES ('20240101000000')");
    const warnings: string[] = [];
    const store = await PostgresStore.open({ url, clock: systemClock, onWarning: (message) => warnings.push(message) });
    await store.close();
    assert.deepEqual(warnings, []);
    assert.ok((await tablesOf(client, "opqueue")).includes("job_state"));
    assert.deepEqual(await tablesOf(client, "public"), ["jobs", "schema_migrations"]);
    assert.deepEqual((await client.query("SELECT version FROM public.schema_migrations")).rows, [
      { version: "20240101000000" },
    ]);
  },
);

test(
  "a database whose opqueue tables are in public (an older opqueue) keeps using them, and says how to make that explicit",
  { skip: POSTGRES_SKIP },
  async (t) => {
    const { url, client } = await ownDatabase(t);
    const withPublic = new URL(url);
    withPublic.searchParams.set("schema", "public");
    const older = await PostgresStore.open({ url: withPublic.toString(), clock: systemClock });
    await older.close();
    const warnings: string[] = [];
    const store = await PostgresStore.open({ url, clock: systemClock, onWarning: (message) => warnings.push(message) });
    await store.close();
    assert.equal(warnings.length, 1);
    assert.match(warnings[0] ?? "", /\?schema=public/);
    assert.deepEqual(await tablesOf(client, "opqueue"), [], "no empty second queue is started");
  },
);

test(
  "a schema holding another tool's schema_migrations, or tables named like opqueue's, is refused with a clear message and left untouched",
  { skip: POSTGRES_SKIP },
  async (t) => {
    const { url, client } = await ownDatabase(t);
    await client.query("CREATE SCHEMA rails");
    await client.query("CREATE TABLE rails.schema_migrations (version varchar PRIMARY KEY)");
    await client.query("CREATE SCHEMA app");
    await client.query("CREATE TABLE app.jobs (id serial PRIMARY KEY)");
    for (const [schema, pattern] of [
      ["rails", /schema "rails" holds a schema_migrations table that is not opqueue's.*\?schema=NAME/],
      ["app", /schema "app" already holds jobs, not opqueue's.*\?schema=NAME/],
    ] as const) {
      const named = new URL(url);
      named.searchParams.set("schema", schema);
      await assert.rejects(PostgresStore.open({ url: named.toString(), clock: systemClock }), (error: Error) => {
        assert.ok(error instanceof StoreSetupError, String(error));
        assert.match(error.message, pattern);
        return true;
      });
    }
    assert.deepEqual(await tablesOf(client, "rails"), ["schema_migrations"]);
    assert.deepEqual(await tablesOf(client, "app"), ["jobs"]);

    // `opqueue migrate` says so in one line and exits 2 (a setting to change), no stack trace.
    const dir = mkdtempSync(join(tmpdir(), "opqueue-schema-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const raw = rawTestConfig(dir);
    const named = new URL(url);
    named.searchParams.set("schema", "rails");
    raw["database"] = named.toString();
    writeFileSync(join(dir, "opqueue.json"), JSON.stringify(raw));
    const run = spawnSync(
      process.execPath,
      ["--import", "tsx", "src/cli.ts", "migrate", "--config", join(dir, "opqueue.json")],
      {
        cwd: REPO_ROOT,
        encoding: "utf8",
      },
    );
    assert.equal(run.status, 2, run.stderr);
    assert.match(run.stderr, /^opqueue: the schema "rails" holds a schema_migrations table that is not opqueue's/);
    assert.doesNotMatch(run.stderr, /\n\s+at /, "no stack trace");
  },
);

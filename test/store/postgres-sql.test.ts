/**
 * The current text of the PostgreSQL engine's functions and view, kept in migrations/postgres/current/ (written by
 * `npm run pg-functions`, scripts/pg-functions.ts), against what a migrated database holds: a reader of those files
 * reads the code that runs, never a guess rebuilt from the migrations' history. A migration that restates a function
 * fails this test until the script has written its file again.
 *
 * Two schemas are migrated. In the second, every file is executed (each is a CREATE OR REPLACE); then every function and
 * the view must read the same in both (pg_get_functiondef, pg_get_viewdef): a file that drifted from the migrations
 * changes the second schema's definition. Every function of the migrated schema must have its file, and no file may
 * name a function the migrations do not create.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";
import pg from "pg";
import { ManualClock } from "../../src/clock.js";
import { openPostgresStore, POSTGRES_SKIP, POSTGRES_URL } from "../helpers/postgres.js";

const SQL_DIR = new URL("../../migrations/postgres/current/", import.meta.url);
/** What every failure here asks for. */
const REGENERATE = "run `npm run pg-functions` (scripts/pg-functions.ts) to write migrations/postgres/current/ again";
const FUNCTION_FILES = readdirSync(new URL("functions/", SQL_DIR)).filter((name) => name.endsWith(".sql"));

/** Every function of `schema`, by name, as pg_get_functiondef writes it, with the schema's name taken out. */
async function functionDefinitions(client: pg.Client, schema: string): Promise<Map<string, string>> {
  const rows = await client.query<{ name: string; definition: string }>(
    `SELECT p.proname AS name, pg_get_functiondef(p.oid) AS definition
     FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1`,
    [schema],
  );
  return new Map(rows.rows.map((row) => [row.name, row.definition.replaceAll(`${schema}.`, "")]));
}

test(
  "every PL/pgSQL function and the view jobs in migrations/postgres/current/ read as a migrated database holds them",
  { skip: POSTGRES_SKIP },
  async (t) => {
    const clock = new ManualClock();
    const migrated = await openPostgresStore(clock);
    t.after(migrated.cleanup);
    const rewritten = await openPostgresStore(clock);
    t.after(rewritten.cleanup);
    const client = new pg.Client({ connectionString: POSTGRES_URL });
    await client.connect();
    t.after(() => client.end());

    await client.query(`SET search_path TO ${rewritten.schema}`);
    for (const file of FUNCTION_FILES) await client.query(readFileSync(new URL(`functions/${file}`, SQL_DIR), "utf8"));
    await client.query(readFileSync(new URL("views/jobs.sql", SQL_DIR), "utf8"));

    const expected = await functionDefinitions(client, migrated.schema);
    const actual = await functionDefinitions(client, rewritten.schema);
    assert.deepEqual(
      FUNCTION_FILES.map((file) => file.replace(/\.sql$/, "")).sort(),
      [...expected.keys()].sort(),
      `one file per function of the migrated schema, and no other: ${REGENERATE}`,
    );
    for (const [name, definition] of expected) {
      assert.equal(
        actual.get(name),
        definition,
        `functions/${name}.sql differs from the migrated database's ${name}: ${REGENERATE}`,
      );
    }
    // Qualified or not by the schema depending on the search path: compared without it.
    const view = async (schema: string) =>
      (
        await client.query<{ definition: string }>("SELECT pg_get_viewdef($1::regclass) AS definition", [
          `${schema}.jobs`,
        ])
      ).rows[0]?.definition.replaceAll(`${schema}.`, "");
    assert.equal(
      await view(rewritten.schema),
      await view(migrated.schema),
      `views/jobs.sql differs from the migrated view: ${REGENERATE}`,
    );
  },
);

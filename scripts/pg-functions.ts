/**
 * Writes migrations/postgres/current/: the current text of the PostgreSQL engine's PL/pgSQL functions (functions/)
 * and views (views/), as a freshly migrated database holds them. Run it after a migration that creates, restates or
 * drops one of them, instead of editing these files by hand:
 *
 *   npm run pg-functions [-- postgres://...]     (the URL defaults to OPQUEUE_TEST_DATABASE_URL)
 *
 * It migrates a schema of its own with the engine's own migrations (as a node opens the store), reads every
 * definition (pg_get_functiondef, pg_get_viewdef, the schema's name taken out, as test/store/postgres-sql.test.ts
 * compares them), drops the schema, and writes one file per function or view: a generated header, the prose a
 * reader wrote under it (kept from the file it replaces), then the definition. A file whose function is gone is
 * deleted. A TypeScript script run by tsx, not a .mjs one, so that it migrates through src/store/postgres/ and writes
 * what a node's migration leaves, never what a second migration runner would.
 */
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import pg from "pg";
import { systemClock } from "../src/clock.js";
import { readMigrations, type Migration } from "../src/store/migrations.js";
import { PostgresStore } from "../src/store/postgres/postgres-store.js";

const CURRENT_DIR = new URL("../migrations/postgres/current/", import.meta.url);
/** The longest line of a header, as Prettier's width for the rest of the tree. */
const WIDTH = 120;

/** One function or view of the migrated schema. */
interface Definition {
  kind: "functions" | "views";
  name: string;
  sql: string;
}

/** Every function and view of `schema`, its name taken out of their text. */
async function readDefinitions(client: pg.Client, schema: string): Promise<Definition[]> {
  const unqualified = (text: string) => text.replaceAll(`${schema}.`, "");
  const functions = await client.query<{ name: string; definition: string }>(
    `SELECT p.proname AS name, pg_get_functiondef(p.oid) AS definition
     FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY p.proname`,
    [schema],
  );
  const names = functions.rows.map((row) => row.name);
  const overloaded = names.filter((name, index) => names.indexOf(name) !== index);
  if (overloaded.length > 0) {
    throw new Error(`functions of one name cannot each have their file: ${[...new Set(overloaded)].join(", ")}`);
  }
  const views = await client.query<{ name: string; definition: string }>(
    `SELECT c.relname AS name, pg_get_viewdef(c.oid) AS definition
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'v'
     ORDER BY c.relname`,
    [schema],
  );
  return [
    ...functions.rows.map((row) => ({
      kind: "functions" as const,
      name: row.name,
      sql: `${unqualified(row.definition).trimEnd()};\n`,
    })),
    ...views.rows.map((row) => ({
      kind: "views" as const,
      name: row.name,
      sql: `CREATE OR REPLACE VIEW ${row.name} AS\n${unqualified(row.definition).trimEnd()}\n`,
    })),
  ];
}

/** The migrations that create, restate or drop `definition`, by version. */
function historyOf(definition: Definition, migrations: Migration[]): string[] {
  const noun = definition.kind === "functions" ? "FUNCTION" : "VIEW";
  const named = new RegExp(`\\b(CREATE (OR REPLACE )?|DROP )${noun} (IF EXISTS )?${definition.name}\\b`);
  return migrations
    .filter((migration) => named.test(migration.sql))
    .map((migration) => String(migration.version).padStart(4, "0"));
}

/** `text` as `--` comment lines of at most WIDTH characters. */
function commentLines(text: string): string[] {
  const lines: string[] = [];
  let line = "--";
  for (const word of text.split(" ")) {
    if (line.length + 1 + word.length > WIDTH && line !== "--") {
      lines.push(line);
      line = "--";
    }
    line += ` ${word}`;
  }
  return [...lines, line];
}

/**
 * The prose under the generated header of the file now at `path`: the comment lines after the header's paragraph
 * (the first line that is only `--` ends it), up to the definition.
 */
function keptProse(path: URL): string[] {
  if (!existsSync(path)) return [];
  const comments: string[] = [];
  for (const line of readFileSync(path, "utf8").split("\n")) {
    if (!line.startsWith("--")) break;
    comments.push(line);
  }
  const end = comments.indexOf("--");
  return end === -1 ? [] : comments.slice(end);
}

/** The file of `definition`: the generated header, the prose kept from the file it replaces, the definition. */
function fileText(definition: Definition, history: string[], path: URL): string {
  const what = definition.kind === "functions" ? `${definition.name}` : `The view ${definition.name}`;
  const header = commentLines(
    `${what}: its current text, as a migrated database holds it, written by \`npm run pg-functions\` ` +
      `(scripts/pg-functions.ts) and checked by test/store/postgres-sql.test.ts. The migrations hold its history ` +
      `(${history.join(", ")}): a change to it is a new migration that restates it, after which the script writes ` +
      `this file again, keeping the prose under this paragraph.`,
  );
  return [...header, ...keptProse(path), "", definition.sql].join("\n");
}

async function main(): Promise<void> {
  const url = process.argv[2] ?? process.env["OPQUEUE_TEST_DATABASE_URL"];
  if (!url) {
    console.error("usage: npm run pg-functions -- postgres://... (or set OPQUEUE_TEST_DATABASE_URL)");
    process.exitCode = 2;
    return;
  }
  const schema = `opqueue_pg_functions_${randomBytes(4).toString("hex")}`;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const store = await PostgresStore.open({ url, clock: systemClock, schema, poolSize: 1 });
    await store.close();
    const definitions = await readDefinitions(client, schema);
    const migrations = readMigrations("postgres");
    let changed = 0;
    for (const kind of ["functions", "views"] as const) {
      const folder = new URL(`${kind}/`, CURRENT_DIR);
      mkdirSync(folder, { recursive: true });
      const current = definitions.filter((definition) => definition.kind === kind);
      for (const definition of current) {
        const path = new URL(`${definition.name}.sql`, folder);
        const text = fileText(definition, historyOf(definition, migrations), path);
        const before = existsSync(path) ? readFileSync(path, "utf8") : undefined;
        if (text === before) continue;
        writeFileSync(path, text);
        changed += 1;
        console.log(`${before === undefined ? "created" : "rewrote"} ${kind}/${definition.name}.sql`);
      }
      for (const file of readdirSync(folder).filter((name) => name.endsWith(".sql"))) {
        if (current.some((definition) => `${definition.name}.sql` === file)) continue;
        rmSync(new URL(file, folder));
        changed += 1;
        console.log(`deleted ${kind}/${file}: the migrated database has no such ${kind.slice(0, -1)}`);
      }
    }
    if (changed === 0) console.log("migrations/postgres/current/ already reads as the migrated database");
  } finally {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
    await client.end();
  }
}

await main();

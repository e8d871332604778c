/**
 * A test service's database as stored, for tests of what must not be there (erased or encrypted payloads): every byte
 * it holds on disk (the SQLite file and its WAL, or every relation of the PostgreSQL schema: its tables, their TOAST
 * tables and indexes, read by the server after a checkpoint), and the rows of a query run beside the service.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { POSTGRES_URL } from "./postgres.js";
import { TEST_ENGINE, type TestService } from "./service.js";

/** Every byte of the database: the SQLite file and its WAL, or every relation of the PostgreSQL schema on disk. */
export async function databaseBytes(s: TestService, options: { vacuum: boolean }): Promise<Buffer> {
  if (TEST_ENGINE === "sqlite") {
    const file = join(s.dir, "opqueue.db");
    return Buffer.concat([file, `${file}-wal`].filter((path) => existsSync(path)).map((path) => readFileSync(path)));
  }
  const schema = new URL(s.config.database).searchParams.get("schema") as string;
  const db = new pg.Client({ connectionString: POSTGRES_URL, options: `-c search_path=${schema}` });
  await db.connect();
  try {
    // Dead row versions keep their bytes until the table is rewritten; a checkpoint writes every page to its file.
    // Only the schema's tables (their TOAST tables with them): a VACUUM FULL of the whole database rewrites the
    // catalogs too, under locks that deadlock with another test's DROP SCHEMA (CI saw it, on pg_proc).
    if (options.vacuum) {
      const tables = await db.query<{ name: string }>(
        `SELECT format('%I.%I', n.nspname, c.relname) AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND c.relkind = 'r'`,
        [schema],
      );
      await db.query(`VACUUM FULL ${tables.rows.map((table) => table.name).join(", ")}`);
    }
    await db.query("CHECKPOINT");
    const files = await db.query<{ path: string }>(
      `SELECT pg_relation_filepath(c.oid) AS path FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname IN ($1, 'pg_toast') AND c.relkind IN ('r', 't', 'i', 'm')
         AND (n.nspname = $1 OR c.oid IN (SELECT reltoastrelid FROM pg_class t JOIN pg_namespace tn
           ON tn.oid = t.relnamespace WHERE tn.nspname = $1))
         AND pg_relation_filepath(c.oid) IS NOT NULL`,
      [schema],
    );
    const parts: Buffer[] = [];
    for (const { path } of files.rows) {
      const read = await db.query<{ bytes: Buffer }>("SELECT pg_read_binary_file($1) AS bytes", [path]);
      if (read.rows[0]?.bytes) parts.push(read.rows[0].bytes);
    }
    return Buffer.concat(parts);
  } finally {
    await db.end();
  }
}

/**
 * The rows of a read run on the database directly, past the store (and so past encryption): `sql.sqlite` on the SQLite
 * file (once no node holds it, as SQLite serves one), `sql.postgres` on the service's schema.
 */
export async function queryDatabase(
  s: TestService,
  sql: { sqlite: string; postgres: string },
): Promise<Array<Record<string, unknown>>> {
  if (TEST_ENGINE === "sqlite") {
    const { default: Database } = await import("better-sqlite3");
    const db = new Database(join(s.dir, "opqueue.db"), { readonly: true, fileMustExist: true });
    try {
      return db.prepare(sql.sqlite).all() as Array<Record<string, unknown>>;
    } finally {
      db.close();
    }
  }
  const schema = new URL(s.config.database).searchParams.get("schema") as string;
  const db = new pg.Client({ connectionString: POSTGRES_URL, options: `-c search_path=${schema}` });
  await db.connect();
  try {
    return (await db.query(sql.postgres)).rows as Array<Record<string, unknown>>;
  } finally {
    await db.end();
  }
}

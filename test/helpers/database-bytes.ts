/**
 * Every byte a test service's database holds on disk, for tests that search it for what must not be there (erased or
 * encrypted payloads): the SQLite file and its WAL, or every relation of the PostgreSQL schema (its tables, their
 * TOAST tables and indexes), read by the server after a checkpoint.
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
    if (options.vacuum) await db.query("VACUUM FULL");
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

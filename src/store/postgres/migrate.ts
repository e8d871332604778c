/** The PostgreSQL engine's migrations: numbered files of migrations/postgres/, applied once, under an advisory lock. */
import type pg from "pg";
import { readMigrations } from "../migrations.js";

/** Applies pending migrations under an advisory lock; returns the schema version. */
export async function migrate(pool: pg.Pool): Promise<number> {
  const migrations = readMigrations("postgres");
  const latest = migrations.length;
  const client = await pool.connect();
  // Held outside the pool: without a listener, losing the connection mid-migration would crash the process.
  let broken: Error | undefined;
  const onError = (error: Error) => {
    broken ??= error;
  };
  client.on("error", onError);
  try {
    const schema = (await client.query<{ schema: string }>("SELECT current_schema() AS schema")).rows[0]?.schema ?? "public";
    const lockKey = `opqueue.migrate:${schema}`;
    await client.query("SELECT pg_advisory_lock(hashtext($1))", [lockKey]);
    try {
      await client.query(
        `CREATE TABLE IF NOT EXISTS schema_migrations (
           version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
      );
      const applied = Number(
        (await client.query<{ version: number | null }>("SELECT max(version) AS version FROM schema_migrations")).rows[0]
          ?.version ?? 0,
      );
      if (applied > latest) {
        throw new Error(`the database schema (version ${applied}) is newer than this opqueue (version ${latest})`);
      }
      for (const migration of migrations.slice(applied)) {
        await client.query("BEGIN");
        try {
          await client.query(migration.sql);
          await client.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [
            migration.version,
            migration.name,
          ]);
          await client.query("COMMIT");
        } catch (error) {
          await client.query("ROLLBACK").catch(() => undefined);
          throw error;
        }
      }
    } finally {
      await client.query("SELECT pg_advisory_unlock(hashtext($1))", [lockKey]).catch(() => undefined);
    }
    return latest;
  } finally {
    client.off("error", onError);
    client.release(broken);
  }
}

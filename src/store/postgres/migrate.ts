/** The PostgreSQL engine's migrations: numbered files of migrations/postgres/, applied once, under an advisory lock. */
import type pg from "pg";
import { readMigrations } from "../migrations.js";
import { StoreSetupError } from "../store.js";

/** The tables (and the view) opqueue creates in its schema. */
const OPQUEUE_RELATIONS = [
  "jobs",
  "job_specs",
  "job_state",
  "chains",
  "cron_ticks",
  "job_attempts",
  "attempt_counts",
  "schedules",
];

/**
 * Refuses a schema that holds someone else's tables where opqueue's would go: a `schema_migrations` of another tool
 * (Rails, Knex, ...: not opqueue's columns), or tables named like opqueue's without opqueue's migrations. Nothing is
 * created or changed in such a schema.
 */
async function refuseForeignTables(client: pg.PoolClient, schema: string): Promise<void> {
  const columns = (
    await client.query<{ column_name: string; data_type: string }>(
      `SELECT column_name, data_type FROM information_schema.columns
       WHERE table_schema = $1 AND table_name = 'schema_migrations'`,
      [schema],
    )
  ).rows;
  const advice = `opqueue keeps its tables in a schema of its own: choose another with ?schema=NAME in the database URL`;
  if (columns.length > 0) {
    const ours =
      columns.some((c) => c.column_name === "version" && c.data_type === "integer") &&
      columns.some((c) => c.column_name === "name");
    if (!ours)
      throw new StoreSetupError(
        `the schema "${schema}" holds a schema_migrations table that is not opqueue's; ${advice}`,
      );
    return;
  }
  const taken = (
    await client.query<{ name: string }>(
      "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = $1 AND table_name = ANY($2::text[])",
      [schema, OPQUEUE_RELATIONS],
    )
  ).rows.map((row) => row.name);
  if (taken.length > 0) {
    throw new StoreSetupError(`the schema "${schema}" already holds ${taken.join(", ")}, not opqueue's; ${advice}`);
  }
}

/**
 * Applies pending migrations under an advisory lock; returns the schema version. `onWarning` hears what a migration
 * says it could not do (a notice starting "opqueue ").
 */
export async function migrate(pool: pg.Pool, onWarning?: (message: string) => void): Promise<number> {
  const migrations = readMigrations("postgres");
  const latest = migrations.length;
  const client = await pool.connect();
  // Held outside the pool: without a listener, losing the connection mid-migration would crash the process.
  let broken: Error | undefined;
  const onError = (error: Error) => {
    broken ??= error;
  };
  client.on("error", onError);
  // A migration that cannot do all it would (migration 0021 without a superuser) says so in a notice of its own.
  const onNotice = (notice: { message?: string | undefined }) => {
    if (notice.message?.startsWith("opqueue ")) onWarning?.(notice.message);
  };
  client.on("notice", onNotice);
  try {
    const schema =
      (await client.query<{ schema: string }>("SELECT current_schema() AS schema")).rows[0]?.schema ?? "public";
    const lockKey = `opqueue.migrate:${schema}`;
    await client.query("SELECT pg_advisory_lock(hashtext($1))", [lockKey]);
    try {
      await refuseForeignTables(client, schema);
      await client.query(
        `CREATE TABLE IF NOT EXISTS schema_migrations (
           version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
      );
      const applied = Number(
        (await client.query<{ version: number | null }>("SELECT max(version) AS version FROM schema_migrations"))
          .rows[0]?.version ?? 0,
      );
      if (applied > latest) {
        throw new StoreSetupError(
          `the database schema "${schema}" (version ${applied}) is newer than this opqueue (version ${latest}): ` +
            "run the newer opqueue, or restore a backup taken before the upgrade",
        );
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
    client.off("notice", onNotice);
    client.release(broken);
  }
}

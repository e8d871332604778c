/**
 * PostgreSQL for tests: the server named by OPQUEUE_TEST_DATABASE_URL, one fresh schema per store, dropped when
 * the test ends. Without the variable, PostgreSQL suites are skipped with that reason.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import type { Clock } from "../../src/clock.js";
import { PostgresStore } from "../../src/store/postgres/postgres-store.js";

/** The test server's URL, or undefined. */
export const POSTGRES_URL: string | undefined = process.env["OPQUEUE_TEST_DATABASE_URL"] || undefined;

/** The reason PostgreSQL suites are skipped, or false when they run. */
export const POSTGRES_SKIP: string | false = POSTGRES_URL ? false : "OPQUEUE_TEST_DATABASE_URL is not set";

/** A schema name no other test uses. */
export function freshSchemaName(): string {
  return `opq_test_${randomBytes(6).toString("hex")}`;
}

/** Drops a test schema and everything in it. */
export async function dropSchema(schema: string): Promise<void> {
  if (!POSTGRES_URL) return;
  const client = new pg.Client({ connectionString: POSTGRES_URL });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  } finally {
    await client.end();
  }
}

/**
 * Opens a PostgreSQL store in a fresh schema; `cleanup` closes it and drops the schema. The store reads `clock`
 * (`databaseTime: false`) rather than the database's clock, so tests move its time by hand.
 */
export async function openPostgresStore(
  clock: Clock,
  options: { schema?: string; poolSize?: number } = {},
): Promise<{ store: PostgresStore; schema: string; cleanup: () => Promise<void> }> {
  if (!POSTGRES_URL) throw new Error("OPQUEUE_TEST_DATABASE_URL is not set");
  const schema = options.schema ?? freshSchemaName();
  const store = await PostgresStore.open({
    url: POSTGRES_URL,
    clock,
    databaseTime: false,
    schema,
    poolSize: options.poolSize ?? 4,
  });
  return {
    store,
    schema,
    cleanup: async () => {
      await store.close();
      await dropSchema(schema);
    },
  };
}

/** Opens the engine named by a database URL. */
import type { Clock } from "../clock.js";
import { parseDatabaseUrl, redactDatabaseUrl } from "../database-url.js";
import { PostgresStore } from "./postgres/postgres-store.js";
import { SqliteStore } from "./sqlite/sqlite-store.js";
import type { Store } from "./store.js";

/** Thrown for a database URL no engine serves. */
export class UnsupportedDatabaseError extends Error {
  override readonly name = "UnsupportedDatabaseError";
}

/**
 * Opens and migrates the store for `url`: `sqlite:PATH`, `sqlite::memory:`, or `postgres://…` (`postgresql://…`).
 */
export async function openStore(options: {
  url: string;
  /** This node's clock. */
  clock: Clock;
  /**
   * PostgreSQL only: whether statements read the database's clock (default true); false makes `clock` the database's
   * clock, for tests that move time by hand. SQLite, one process, always uses `clock`.
   */
  databaseTime?: boolean;
  /** PostgreSQL only: connections in the pool. */
  poolSize?: number;
  /** PostgreSQL only: a schema to work in (tests). */
  schema?: string;
  /** PostgreSQL only: errors of idle pooled connections, which must never crash the process. */
  onPoolError?: (error: Error) => void;
  /** PostgreSQL only: choices worth an operator's attention (opqueue's tables found in `public`). */
  onWarning?: (message: string) => void;
}): Promise<Store> {
  const { url, clock } = options;
  const database = parseDatabaseUrl(url);
  if (database?.engine === "sqlite") return SqliteStore.open({ path: database.path, clock });
  if (database?.engine === "postgres") {
    return PostgresStore.open({
      url,
      clock,
      ...(options.databaseTime !== undefined ? { databaseTime: options.databaseTime } : {}),
      ...(options.poolSize !== undefined ? { poolSize: options.poolSize } : {}),
      ...(options.schema !== undefined ? { schema: options.schema } : {}),
      ...(options.onPoolError ? { onPoolError: options.onPoolError } : {}),
      ...(options.onWarning ? { onWarning: options.onWarning } : {}),
    });
  }
  throw new UnsupportedDatabaseError(`database "${redactDatabaseUrl(url)}" is not a supported URL`);
}

/**
 * The PostgreSQL engine's life: opening it (the schema chosen, the pool, the migrations), its readiness (the schema's
 * version against this node's) and the measure of the database's clock against this node's.
 */
import type { Clock } from "../../clock.js";
import { StoreUnavailableError } from "../store.js";
import { connectionSettings, defaultSchema, PgConnection } from "./connection.js";
import { migrate } from "./migrate.js";
import { openError } from "./open-errors.js";
import { DATABASE_CLOCK, SCHEMA_VERSION } from "./sql/maintenance.js";

/** Options of `PostgresStore.open`. */
export interface PostgresStoreOptions {
  url: string;
  /** This node's clock: what `now()` corrects by the measured offset, and the store's time without `databaseTime`. */
  clock: Clock;
  /**
   * Whether statements use the database's clock (the default, and what production uses); false makes `clock` the
   * database's clock too, for tests that move time by hand.
   */
  databaseTime?: boolean;
  /** The schema to work in (created if missing); the URL's `?schema=`, else `opqueue`. */
  schema?: string;
  /** Told about a choice worth an operator's attention (opqueue's tables found in `public`). */
  onWarning?: (message: string) => void;
  /** Pool size (default 10). */
  poolSize?: number;
  /** Told about errors of idle connections (which must never crash the process). */
  onPoolError?: (error: Error) => void;
}

/**
 * Connects and migrates (under an advisory lock, so nodes starting together migrate once); answers the pool, the
 * schema's version and the schema the connections work in.
 */
export async function openDatabase(
  options: PostgresStoreOptions,
): Promise<{ db: PgConnection; schemaVersion: number; schema: string | undefined }> {
  let schema = options.schema ?? (new URL(options.url).searchParams.get("schema") || undefined);
  if (schema === undefined) {
    const chosen = await defaultSchema(options.url);
    if (chosen.warning) options.onWarning?.(chosen.warning);
    schema = chosen.schema;
  }
  const settings = connectionSettings({ url: options.url, schema });
  const db = await PgConnection.open({
    settings,
    poolSize: options.poolSize ?? 10,
    onPoolError: options.onPoolError,
  });
  try {
    const schemaVersion = await migrate(db.pool, options.onWarning);
    const current = (await db.pool.query<{ schema: string }>("SELECT current_schema() AS schema")).rows[0]?.schema;
    return { db, schemaVersion, schema: current };
  } catch (error) {
    await db.pool.end().catch(() => undefined);
    throw openError(error, options.url);
  }
}

/** Refuses (`StoreUnavailableError`) unless the schema is at `expected`, this node's version. */
export async function checkSchemaVersion(db: PgConnection, expected: number): Promise<void> {
  const rows = await db.query(SCHEMA_VERSION);
  const version = Number(rows[0]?.["version"] ?? 0);
  if (version > expected) {
    // A rolling upgrade: a newer node migrated the schema. This one goes on delivering (docs/deploying.md).
    throw new StoreUnavailableError(
      `the schema is at version ${version}, newer than this node's ${expected}: upgrade this node`,
    );
  }
  if (version !== expected) throw new StoreUnavailableError(`schema version ${version}, expected ${expected}`);
}

/** The database's clock minus `clock`, measured over one round trip. */
export async function measureClockOffset(db: PgConnection, clock: Clock): Promise<number> {
  const sentAt = clock.now();
  const rows = await db.query(DATABASE_CLOCK);
  const receivedAt = clock.now();
  // The database read its clock somewhere in the round trip: its middle is the best guess.
  return Number(rows[0]?.["now"]) - (sentAt + receivedAt) / 2;
}

/**
 * The PostgreSQL engine's pool: opening it (schema, application name, time zone), one query, one transaction, and
 * closing once every query under way has ended. Connection trouble becomes `StoreUnavailableError` here, so the
 * store's methods never see a raw driver error of that kind.
 */
import pg from "pg";
import { StoreSetupError, StoreUnavailableError } from "../store.js";
import { isUnavailable, isUniqueViolation, mapError, undoneForAnother } from "./errors.js";
import { openError } from "./open-errors.js";
import type { PgRow } from "./rows.js";

/** The server process id a pool client was given at connection (node-postgres keeps it as `processID`). */
function backendOf(client: pg.PoolClient): number {
  return (client as unknown as { processID: number }).processID;
}

/**
 * How many times `query` sends again a statement the server undid for another transaction's sake. opqueue's
 * set-based statements take the rows they share in one order (migration 0025 for the insert's chains), so among its
 * own statements a deadlock needs two batches whose items go one by one (keyed jobs) meeting in opposite orders. A
 * statement undone a third time is answered 503 `unavailable`, as every such statement was before.
 */
const UNDONE_RETRIES = 2;

/** The schema opqueue keeps its tables in when the URL names none. */
export const DEFAULT_SCHEMA = "opqueue";

/** How the pool connects, kept for the LISTEN connection, which lives outside it. */
export interface ConnectionSettings {
  url: string;
  applicationName: string;
  /** Runtime options of every connection (time zone, search path). */
  options: string;
  /** The schema opqueue's tables are in. */
  schema: string;
}

/**
 * Reads the URL's own parameters: `?schema=NAME` chooses the schema of opqueue's tables (`opqueue` by default, so a
 * product's own `jobs` or `schema_migrations` in the same database is never touched), `?application_name=` names this
 * node's connections in pg_stat_activity (default "opqueue"). Neither goes to the driver as such. `schema` given here
 * wins over the URL's.
 */
export function connectionSettings(options: { url: string; schema?: string | undefined }): ConnectionSettings {
  const parsed = new URL(options.url);
  const schema = options.schema ?? (parsed.searchParams.get("schema") || DEFAULT_SCHEMA);
  parsed.searchParams.delete("schema");
  const applicationName = parsed.searchParams.get("application_name") || "opqueue";
  parsed.searchParams.delete("application_name");
  if (!/^[a-z_][a-z0-9_]*$/.test(schema)) {
    throw new StoreSetupError(`invalid schema name "${schema}" in the database URL (lower-case letters, digits and _)`);
  }
  const options_ = ["-c TimeZone=UTC", `-c search_path=${schema}`].join(" ");
  return { url: parsed.toString(), applicationName, options: options_, schema };
}

/**
 * The schema of a URL that names none. opqueue used to keep its tables in the connection's default schema (`public`):
 * a database holding them there, and no `opqueue` schema yet, keeps using `public`, so an upgrade never starts an
 * empty queue beside the old one. Returns the schema and, for the legacy case, a warning to log.
 */
export async function defaultSchema(url: string): Promise<{ schema: string; warning?: string }> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  client.on("error", () => undefined);
  try {
    await client.connect();
    const row = (
      await client.query<{ has_default: boolean; legacy: boolean }>(
        `SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'schema_migrations')
             AS has_default,
           EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = 'public' AND table_name = 'job_specs')
             AND EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = 'public' AND table_name = 'schema_migrations' AND column_name = 'name') AS legacy`,
        [DEFAULT_SCHEMA],
      )
    ).rows[0];
    if (row && !row.has_default && row.legacy) {
      return {
        schema: "public",
        warning:
          `opqueue's tables are in the schema "public", where earlier versions of opqueue kept them; they stay there. New ` +
          `deployments use the schema "${DEFAULT_SCHEMA}": add ?schema=public to the database URL to keep this one, ` +
          "and this warning goes",
      };
    }
    return { schema: DEFAULT_SCHEMA };
  } catch (error) {
    throw openError(error, url);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** A pool of connections with the engine's query and transaction helpers. */
export class PgConnection {
  private closed = false;
  private readonly inFlight = new Set<Promise<unknown>>();

  private constructor(
    readonly pool: pg.Pool,
    readonly settings: ConnectionSettings,
    /** The server process ids of this pool's open connections (see `ownsBackend`). */
    private readonly backends: ReadonlySet<number>,
  ) {}

  /**
   * Whether server process `pid` is one of this pool's connections: a notification it sent came from this process
   * (live backends' ids are unique on a server, and a connection leaves the set before it closes, so before its id
   * can be given to another). Behind a connection pooler the ids a client sees are not the server's: nothing matches,
   * and nothing is skipped.
   */
  ownsBackend(pid: number): boolean {
    return this.backends.has(pid);
  }

  /** Opens the pool and creates the schema if it is named and missing. */
  static async open(options: {
    settings: ConnectionSettings;
    poolSize: number;
    onPoolError?: ((error: Error) => void) | undefined;
  }): Promise<PgConnection> {
    const { settings } = options;
    const pool = new pg.Pool({
      connectionString: settings.url,
      max: options.poolSize,
      connectionTimeoutMillis: 5000,
      idleTimeoutMillis: 30_000,
      // A network that silently drops packets must not hang a query forever: give up, as on a lost connection.
      query_timeout: 30_000,
      keepAlive: true,
      application_name: settings.applicationName,
      options: settings.options,
    });
    pool.on("error", (error) => options.onPoolError?.(error));
    // Kept from the first connection on: the schema's creation below opens it, and the pool reuses it.
    const backends = new Set<number>();
    pool.on("connect", (client) => backends.add(backendOf(client)));
    pool.on("remove", (client) => backends.delete(backendOf(client)));
    try {
      // IF NOT EXISTS is not safe against itself: of nodes creating the schema at the same moment, all but one fail on
      // pg_namespace's unique index, after the winner committed it. The schema exists either way.
      await pool.query(`CREATE SCHEMA IF NOT EXISTS ${settings.schema}`).catch((error: unknown) => {
        if (!isUniqueViolation(error, "pg_namespace_nspname_index")) throw error;
      });
    } catch (error) {
      await pool.end().catch(() => undefined);
      throw openError(error, settings.url);
    }
    return new PgConnection(pool, settings, backends);
  }

  /** Whether `close` has begun. */
  get isClosed(): boolean {
    return this.closed;
  }

  /** Throws `StoreUnavailableError` once the store is closed. */
  assertOpen(): void {
    if (this.closed) throw new StoreUnavailableError("the store is closed");
  }

  /**
   * `answer`, unless the store is closed: for a call answered without asking the server (a key no row can hold, see
   * `unstorable`), which a closed store refuses all the same.
   */
  answerIfOpen<T>(answer: T): T {
    this.assertOpen();
    return answer;
  }

  /**
   * Runs one statement (a named one is prepared once per connection), turning connection trouble into 503s. A
   * statement the server undid so that another transaction could go on (a deadlock, a serialisation failure) had no
   * effect, being its own transaction: it is sent again, up to `UNDONE_RETRIES` times, before its caller hears of it.
   */
  async query(text: string, values: unknown[] = [], name?: string): Promise<PgRow[]> {
    for (let retries = 0; ; retries++) {
      this.assertOpen();
      const run = this.pool.query<PgRow>(name ? { name, text, values } : { text, values });
      this.inFlight.add(run);
      try {
        return (await run).rows;
      } catch (error) {
        if (retries < UNDONE_RETRIES && undoneForAnother(error)) continue;
        throw mapError(error);
      } finally {
        this.inFlight.delete(run);
      }
    }
  }

  /** Runs `fn` in a transaction on one connection. */
  async transaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    this.assertOpen();
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (error) {
      throw mapError(error);
    }
    // A checked-out client has no 'error' listener of the pool's: a connection lost mid-transaction would be an
    // unhandled 'error' event and end the process. The query in progress fails anyway; remember why.
    let broken: Error | undefined;
    const onError = (error: Error) => {
      broken ??= error;
    };
    client.on("error", onError);
    const work = (async () => {
      try {
        await client.query("BEGIN");
        const result = await fn(client);
        await client.query("COMMIT");
        return result;
      } catch (error) {
        await client.query("ROLLBACK").catch(() => undefined);
        throw error;
      }
    })();
    this.inFlight.add(work);
    try {
      return await work;
    } catch (error) {
      // A connection that failed mid-transaction is not given back to the pool.
      if (isUnavailable(error)) broken ??= error as Error;
      throw mapError(error);
    } finally {
      this.inFlight.delete(work);
      client.off("error", onError);
      client.release(broken);
    }
  }

  /** Refuses new work, waits for the statements under way, and closes the pool. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.allSettled([...this.inFlight]);
    await this.pool.end();
  }
}

/**
 * The PostgreSQL engine (node-postgres): any number of nodes on one database.
 *
 * - Tables: a job is a `job_specs` row (what was asked, written once) and a `job_state` row (where it is in its
 *   life), so claims and outcomes rewrite a narrow row and few index entries (migration 0004). Reads go through the
 *   view `jobs`, which joins them; writes name the table they change.
 * - Durability: every acknowledged write commits with `synchronous_commit` as the server has it (on by default).
 *   The writes no client waits on (claims, outcomes, heartbeats) commit lazily, without waiting for the WAL flush,
 *   as the SQLite engine writes them with `synchronous = NORMAL`: see `LAZY_COMMIT`.
 * - Group commit: inserts arriving within one turn of the event loop go to the server as one call of
 *   `opqueue_insert_jobs` (a PL/pgSQL function, see the migration): one round trip and one commit for the batch,
 *   every step of CONTRACT §3 (dedupe upsert, spawn cap, cancelled chain) decided inside it.
 * - Claims: one statement, a CTE taking candidates with `FOR UPDATE SKIP LOCKED`, so nodes never wait on each
 *   other's claims; at most one per concurrency key, none whose key is already running. Two nodes can still pick
 *   two jobs of one key in the same instant: `pg_try_advisory_xact_lock` per key skips most of those up front, and
 *   the partial unique index refuses the rest, which costs one retried claim.
 * - Batches: outcome writes and heartbeats are one statement each over `unnest` of arrays.
 * - Time: the database's clock. Every "now" a statement uses (what is due, what has expired, every time written) is
 *   the parameter value `'now'`, which PostgreSQL reads as the transaction's timestamp when it binds it; a delay is
 *   added to it in SQL. So nodes whose clocks disagree still agree on one clock (a node running 120 s fast once
 *   delivered delayed jobs early and stole running ones). Tests that move time by hand open the store with
 *   `databaseTime: false`, and the same parameter then carries their clock's time: one SQL text either way.
 */
import pg from "pg";
import type { Clock } from "../../clock.js";
import { JOB_STATUSES, type JobResult, type JobStatus } from "../../job/schemas.js";
import { readMigrations } from "../migrations.js";
import { NotificationListener } from "./listener.js";
import {
  createdJobRow,
  StoreUnavailableError,
  requireWholeMinutes,
  toBuckets,
  type AttemptBucket,
  type DeadJobFilter,
  type JobCancelOutcome,
  type JobInsertOutcome,
  type JobInsertParams,
  type JobListParams,
  type JobRetryOutcome,
  type JobStats,
  type Store,
  type AttemptRefund,
} from "../store.js";
import { type LeaseLimits } from "../../job/job.js";
import { type JobAttemptRow, type JobAttempt, type JobOutcome, type JobRow } from "../../job/job.js";

/** Most inserts sent in one call. */
const MAX_INSERT_BATCH = 512;
/** Insert batches in flight at once; later arrivals wait and form the next, larger batch. */
const MAX_INSERT_FLIGHTS = 4;
/** Claim attempts when a concurrency key race makes the unique index refuse one. */
const CLAIM_TRIES = 3;

const CLAIMABLE = "status IN ('pending', 'retrying')";

/**
 * The rows of `source` (attempts named by job id) with each job's seq, found first and materialized: a statement
 * that joins job_specs and job_state in one go may be planned (from statistics that saw no running job) as a walk
 * of every running job, looking up every item of `source` by id for each: 3,000 lookups for an outcome write of 32
 * jobs with 96 running. Written to job_state by seq afterwards, the rows cost one lookup each.
 */
function BY_SEQ(source: string): string {
  return `MATERIALIZED (SELECT o.*, j.seq FROM ${source} JOIN job_specs j ON j.id = o.id)`;
}

/**
 * A whole job from a job_specs row `j` and its job_state row `s` (migration 0004), as the view `jobs` has it: for
 * RETURNING clauses of statements that change job_state (a view reading after them would see the rows as before).
 */
const JOB_COLUMNS = `j.seq, j.id, j.operation_id, s.status, s.attempt, j.max_attempts, s.priority, s.run_at,
  j.created_at, s.started_at, s.finished_at, s.heartbeat_at, s.dedupe_key, s.concurrency_key, j.enqueued_by_operation_id,
  j.parent_job_id, j.original_request_id, j.user_id, j.authority, j.request, s.result`;

/**
 * SQLSTATEs that mean "the database cannot serve now, try again", answered 503 `unavailable` (CONTRACT §10), never 500:
 * - class 08, connection exceptions (08000, 08003, 08006, 08001, 08004 the server rejected the connection, ...);
 * - class 53, insufficient resources (53300 too many connections, 53100 disk full, 53200 out of memory, ...);
 * - 57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now (starting up, shutting down, in recovery),
 *   57P05 idle session timeout, and 57014 a query cancelled (by an operator, or statement_timeout);
 * - 25006 a read-only transaction (a standby just promoted, or the server set read-only for maintenance);
 * - 40001 and 40P01, a serialisation failure or deadlock: the transaction was rolled back and succeeds when retried;
 * - 58030 an I/O error of the server.
 * 55000 (object not in prerequisite state) means this only with "not currently accepting connections"
 * (`ALTER DATABASE ... ALLOW_CONNECTIONS false`); other 55000s are bugs.
 */
const UNAVAILABLE_SQLSTATE = /^(08...|53...|57P0[1235]|57014|25006|40001|40P01|58030)$/;

/** Errors of the network or the driver that mean the same. */
const UNAVAILABLE_ERRNO = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "ENOTFOUND", "EHOSTUNREACH", "EAI_AGAIN"]);

/** Whether an error means "the database cannot serve now": connection trouble, shutdown, overload. */
export function isUnavailable(error: unknown): boolean {
  const err = error as { code?: string; message?: string };
  const code = err.code ?? "";
  if (UNAVAILABLE_SQLSTATE.test(code) || UNAVAILABLE_ERRNO.has(code)) return true;
  if (code === "55000" && /not currently accepting connections/i.test(err.message ?? "")) return true;
  return /Connection terminated|connection timeout|Query read timeout|timeout exceeded when trying to connect|Client has encountered a connection error|Cannot use a pool after calling end/i.test(
    err.message ?? "",
  );
}

function mapError(error: unknown): unknown {
  return isUnavailable(error) ? new StoreUnavailableError(`PostgreSQL: ${(error as Error).message}`) : error;
}

function isUniqueViolation(error: unknown, constraint: string): boolean {
  const err = error as { code?: string; constraint?: string };
  return err.code === "23505" && err.constraint === constraint;
}

/**
 * PostgreSQL text cannot hold U+0000, so no stored id or key contains it: a lookup by such a string finds
 * nothing, and is answered so without asking the server (which would refuse the parameter).
 */
function unstorable(...values: Array<string | undefined>): boolean {
  return values.some((value) => value !== undefined && value.includes("\u0000"));
}

function toMs(value: unknown): number | null {
  if (value === null || value === undefined) return null;
  if (value instanceof Date) return value.getTime();
  return Date.parse(String(value));
}

function requireMs(value: unknown): number {
  const ms = toMs(value);
  if (ms === null || Number.isNaN(ms)) throw new Error(`bad timestamp from the database: ${String(value)}`);
  return ms;
}

/** A row as node-postgres returns it (Dates, bigint as string) or as `row_to_json` gives it (ISO strings). */
type PgRow = Record<string, unknown>;

function toJobRow(row: PgRow): JobRow {
  return {
    seq: Number(row["seq"]),
    id: row["id"] as string,
    operationId: row["operation_id"] as string,
    status: row["status"] as JobStatus,
    attempt: Number(row["attempt"]),
    maxAttempts: Number(row["max_attempts"]),
    priority: Number(row["priority"]),
    runAt: requireMs(row["run_at"]),
    createdAt: requireMs(row["created_at"]),
    startedAt: toMs(row["started_at"]),
    finishedAt: toMs(row["finished_at"]),
    heartbeatAt: toMs(row["heartbeat_at"]),
    dedupeKey: (row["dedupe_key"] as string | null) ?? null,
    concurrencyKey: (row["concurrency_key"] as string | null) ?? null,
    enqueuedByOperationId: row["enqueued_by_operation_id"] as string,
    parentJobId: (row["parent_job_id"] as string | null) ?? null,
    originalRequestId: row["original_request_id"] as string,
    userId: row["user_id"] as string,
    authority: row["authority"] as JobRow["authority"],
    request: row["request"] as JobRow["request"],
    result: (row["result"] as JobResult | null) ?? null,
  };
}

/** The argument of `opqueue_insert_job`. */
function insertArgument(params: JobInsertParams): object {
  return {
    id: params.id,
    operation_id: params.operationId,
    max_attempts: params.maxAttempts,
    priority: params.priority,
    ...("at" in params.runTime
      ? { run_at: new Date(params.runTime.at).toISOString() }
      : { delay_ms: params.runTime.delayMs }),
    dedupe_key: params.dedupeKey,
    concurrency_key: params.concurrencyKey,
    enqueued_by_operation_id: params.enqueuedByOperationId,
    parent_job_id: params.parentJobId,
    original_request_id: params.originalRequestId,
    user_id: params.userId,
    authority: params.authority,
    request: params.request,
    spawn_cap: params.spawnCap,
  };
}

/**
 * What `opqueue_insert_job` answers: a created job as what the caller cannot know (its seq, its times in ms, whether
 * its chain was cancelled), others whole.
 */
interface InsertAnswer {
  kind: string;
  seq?: number;
  created_at?: number;
  run_at?: number;
  chain_cancelled?: boolean;
  job?: PgRow;
}

function toInsertOutcome(answer: InsertAnswer, params: JobInsertParams): JobInsertOutcome {
  switch (answer.kind) {
    case "created":
      return {
        kind: "created",
        job: createdJobRow(params, {
          seq: Number(answer.seq),
          createdAt: Number(answer.created_at),
          runAt: Number(answer.run_at),
          chainCancelled: answer.chain_cancelled === true,
        }),
      };
    case "deduplicated":
      return { kind: "deduplicated", job: toJobRow(answer.job ?? {}) };
    case "dedupe_conflict":
      return { kind: "dedupe_conflict", holder: toJobRow(answer.job ?? {}) };
    case "spawn_cap_exceeded":
      return { kind: "spawn_cap_exceeded" };
    default:
      throw new Error(`opqueue_insert_job answered an unknown kind "${answer.kind}"`);
  }
}

interface PendingInsert {
  params: JobInsertParams;
  resolve: (outcome: JobInsertOutcome) => void;
  reject: (error: unknown) => void;
}

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
  /** A schema to work in (created if missing); the connection's default search path otherwise. For tests. */
  schema?: string;
  /** Pool size (default 10). */
  poolSize?: number;
  /** Told about errors of idle connections (which must never crash the process). */
  onPoolError?: (error: Error) => void;
}

/** The PostgreSQL engine. Open it with `PostgresStore.open`. */
export class PostgresStore implements Store {
  readonly engine = "postgres";
  private readonly pool: pg.Pool;
  private readonly clock: Clock;
  private readonly databaseTime: boolean;
  /** The database's clock minus this node's, as last measured (see `clockOffset`). */
  private offsetMs = 0;
  private readonly schemaVersion: number;
  private pendingInserts: PendingInsert[] = [];
  private insertFlights = 0;
  private flushScheduled = false;
  private closed = false;
  private readonly inFlight = new Set<Promise<unknown>>();
  private readonly listeners = new Set<NotificationListener>();
  private readonly connection: {
    url: string;
    applicationName: string;
    options: string;
    channel: string;
    onError?: (error: Error) => void;
  };

  private constructor(options: {
    pool: pg.Pool;
    clock: Clock;
    databaseTime: boolean;
    schemaVersion: number;
    connection: PostgresStore["connection"];
  }) {
    this.pool = options.pool;
    this.clock = options.clock;
    this.databaseTime = options.databaseTime;
    this.schemaVersion = options.schemaVersion;
    this.connection = options.connection;
  }

  /** Connects, migrates (under an advisory lock, so nodes starting together migrate once) and returns the store. */
  static async open(options: PostgresStoreOptions): Promise<PostgresStore> {
    // `?schema=NAME` in the URL puts opqueue's tables in their own schema of a shared database.
    const parsed = new URL(options.url);
    const schema = options.schema ?? (parsed.searchParams.get("schema") || undefined);
    parsed.searchParams.delete("schema");
    // `?application_name=` names this node's connections in pg_stat_activity (default "opqueue").
    const applicationName = parsed.searchParams.get("application_name") || "opqueue";
    parsed.searchParams.delete("application_name");
    const url = parsed.toString();
    const runtimeOptions = ["-c TimeZone=UTC"];
    if (schema) {
      if (!/^[a-z_][a-z0-9_]*$/.test(schema)) {
        throw new Error(`invalid schema name "${schema}" (lower-case letters, digits and _)`);
      }
      runtimeOptions.push(`-c search_path=${schema}`);
    }
    const pool = new pg.Pool({
      connectionString: url,
      max: options.poolSize ?? 10,
      connectionTimeoutMillis: 5000,
      idleTimeoutMillis: 30_000,
      // A network that silently drops packets must not hang a query forever: give up, as on a lost connection.
      query_timeout: 30_000,
      keepAlive: true,
      application_name: applicationName,
      options: runtimeOptions.join(" "),
    });
    pool.on("error", (error) => options.onPoolError?.(error));
    try {
      if (schema) {
        // IF NOT EXISTS is not safe against itself: of nodes creating the schema at the same moment, all but one
        // fail on pg_namespace's unique index, after the winner committed it. The schema exists either way.
        await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`).catch((error: unknown) => {
          if (!isUniqueViolation(error, "pg_namespace_nspname_index")) throw error;
        });
      }
      const schemaVersion = await migrate(pool);
      const current = (await pool.query<{ schema: string }>("SELECT current_schema() AS schema")).rows[0]?.schema;
      return new PostgresStore({
        pool,
        clock: options.clock,
        databaseTime: options.databaseTime ?? true,
        schemaVersion,
        connection: {
          url,
          applicationName,
          options: runtimeOptions.join(" "),
          channel: `opqueue_jobs:${current ?? "public"}`,
          ...(options.onPoolError ? { onError: options.onPoolError } : {}),
        },
      });
    } catch (error) {
      await pool.end().catch(() => undefined);
      throw mapError(error);
    }
  }

  /** `answer`, unless the store is closed. */
  private assertOpen<T>(answer: T): T {
    if (this.closed) throw new StoreUnavailableError("the store is closed");
    return answer;
  }

  /**
   * The "now" parameter of a statement: `'now'`, a special input PostgreSQL reads as the current transaction's
   * timestamp when it binds the value (so it is never stale, even in a prepared statement), or the test clock's time.
   */
  private statementNow(): Date | "now" {
    return this.databaseTime ? "now" : new Date(this.clock.now());
  }

  now(): number {
    return this.clock.now() + this.offsetMs;
  }

  async clockOffset(): Promise<number> {
    if (!this.databaseTime) return 0;
    const sentAt = this.clock.now();
    const rows = await this.query("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::float8 AS now");
    const receivedAt = this.clock.now();
    // The database read its clock somewhere in the round trip: its middle is the best guess.
    this.offsetMs = Number(rows[0]?.["now"]) - (sentAt + receivedAt) / 2;
    return this.offsetMs;
  }

  /** Runs a query, turning connection trouble into `StoreUnavailableError`. */
  private async query(text: string, values: unknown[] = [], name?: string): Promise<PgRow[]> {
    if (this.closed) throw new StoreUnavailableError("the store is closed");
    const run = this.pool.query<PgRow>(name ? { name, text, values } : { text, values });
    this.inFlight.add(run);
    try {
      return (await run).rows;
    } catch (error) {
      throw mapError(error);
    } finally {
      this.inFlight.delete(run);
    }
  }

  /** Runs `fn` in a transaction on one connection. */
  private async transaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    if (this.closed) throw new StoreUnavailableError("the store is closed");
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

  async ping(): Promise<void> {
    const rows = await this.query("SELECT max(version) AS version FROM schema_migrations");
    const version = Number(rows[0]?.["version"] ?? 0);
    if (version !== this.schemaVersion) {
      throw new StoreUnavailableError(`schema version ${version}, expected ${this.schemaVersion}`);
    }
  }

  jobInsert(params: JobInsertParams): Promise<JobInsertOutcome> {
    if (this.closed) return Promise.reject(new StoreUnavailableError("the store is closed"));
    return new Promise((resolve, reject) => {
      this.pendingInserts.push({ params, resolve, reject });
      this.scheduleFlush();
    });
  }

  private scheduleFlush(): void {
    if (this.flushScheduled || this.insertFlights >= MAX_INSERT_FLIGHTS || this.pendingInserts.length === 0) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      void this.flushInserts();
    });
  }

  private async flushInserts(): Promise<void> {
    const batch = this.pendingInserts.splice(0, MAX_INSERT_BATCH);
    if (batch.length === 0) return;
    this.insertFlights++;
    try {
      const outcomes = await this.insertBatch(batch.map((item) => item.params));
      batch.forEach((item, index) => {
        const outcome = outcomes[index];
        if (outcome) item.resolve(outcome);
        else item.reject(new Error("opqueue_insert_jobs answered fewer rows than it was given"));
      });
    } catch (error) {
      if (batch.length === 1 || error instanceof StoreUnavailableError) {
        for (const item of batch) item.reject(error);
      } else {
        // One bad item must fail only itself: retry them one by one.
        await Promise.all(
          batch.map((item) =>
            this.insertBatch([item.params]).then(
              ([outcome]) => (outcome ? item.resolve(outcome) : item.reject(error)),
              (itemError: unknown) => item.reject(itemError),
            ),
          ),
        );
      }
    } finally {
      this.insertFlights--;
      this.scheduleFlush();
    }
  }

  private async insertBatch(items: JobInsertParams[]): Promise<JobInsertOutcome[]> {
    const rows = await this.query(
      "SELECT opqueue_insert_jobs($1::json, $2) AS outcome",
      [JSON.stringify(items.map(insertArgument)), this.statementNow()],
      "opqueue_insert_jobs",
    );
    return rows.map((row, index) => toInsertOutcome(row["outcome"] as InsertAnswer, items[index] as JobInsertParams));
  }

  async jobGet(params: { id: string }): Promise<JobRow | undefined> {
    if (unstorable(params.id)) return this.assertOpen(undefined);
    const rows = await this.query("SELECT * FROM jobs WHERE id = $1", [params.id], "opqueue_job_get");
    return rows[0] ? toJobRow(rows[0]) : undefined;
  }

  async jobList(params: JobListParams): Promise<JobRow[]> {
    if (unstorable(params.operationId, params.originalRequestId, params.userId, params.parentJobId, params.dedupeKey)) {
      return this.assertOpen([]);
    }
    const where: string[] = [];
    const values: unknown[] = [];
    const add = (sql: (placeholder: string) => string, value: unknown) => {
      values.push(value);
      where.push(sql(`$${values.length}`));
    };
    if (params.statuses && params.statuses.length > 0) add((p) => `status = ANY(${p}::text[])`, params.statuses);
    if (params.operationId !== undefined) add((p) => `operation_id = ${p}`, params.operationId);
    if (params.originalRequestId !== undefined) add((p) => `original_request_id = ${p}`, params.originalRequestId);
    if (params.userId !== undefined) add((p) => `user_id = ${p}`, params.userId);
    if (params.parentJobId !== undefined) add((p) => `parent_job_id = ${p}`, params.parentJobId);
    if (params.dedupeKey !== undefined) add((p) => `dedupe_key = ${p}`, params.dedupeKey);
    if (params.beforeSeq !== undefined) add((p) => `seq < ${p}`, params.beforeSeq);
    values.push(params.limit);
    const rows = await this.query(
      `SELECT * FROM jobs ${where.length > 0 ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY seq DESC LIMIT $${values.length}`,
      values,
    );
    return rows.map(toJobRow);
  }

  async jobCancel(params: { id: string }): Promise<JobCancelOutcome> {
    if (unstorable(params.id)) return this.assertOpen({ kind: "not_found" });
    const rows = await this.query(
      `UPDATE job_state s SET status = 'cancelled', finished_at = $2,
         result = (coalesce(s.result::jsonb, '{"error_body":null}'::jsonb) || '{"terminal_reason":"cancelled-by-admin"}'::jsonb)::json
       FROM job_specs j
       WHERE j.id = $1 AND s.seq = j.seq AND s.${CLAIMABLE} RETURNING ${JOB_COLUMNS}`,
      [params.id, this.statementNow()],
      "opqueue_job_cancel",
    );
    if (rows[0]) return { kind: "cancelled", job: toJobRow(rows[0]) };
    const job = await this.jobGet(params);
    if (!job) return { kind: "not_found" };
    return job.status === "running" ? { kind: "running", job } : { kind: "not_cancellable", job };
  }

  async jobRetry(params: { id: string }): Promise<JobRetryOutcome> {
    if (unstorable(params.id)) return this.assertOpen({ kind: "not_found" });
    const holderOf = async (client: pg.PoolClient, key: string) =>
      (await client.query<PgRow>(`SELECT * FROM jobs WHERE dedupe_key = $1 AND ${CLAIMABLE}`, [key])).rows[0];
    return this.transaction(async (client) => {
      const row = (
        await client.query<PgRow>(
          `SELECT ${JOB_COLUMNS} FROM job_specs j JOIN job_state s ON s.seq = j.seq WHERE j.id = $1 FOR UPDATE OF s`,
          [params.id],
        )
      ).rows[0];
      if (!row) return { kind: "not_found" } as const;
      const job = toJobRow(row);
      if (job.status !== "dead" && job.status !== "cancelled") return { kind: "not_retryable", job } as const;
      if (job.dedupeKey !== null) {
        const holder = await holderOf(client, job.dedupeKey);
        if (holder) return { kind: "dedupe_conflict", holder: toJobRow(holder) } as const;
      }
      await client.query("SAVEPOINT retry");
      try {
        const updated = await client.query<PgRow>(
          `UPDATE job_state s SET status = 'pending', attempt = 0, result = NULL, started_at = NULL, finished_at = NULL,
             heartbeat_at = NULL, run_at = $2
           FROM job_specs j WHERE j.seq = $1 AND s.seq = j.seq RETURNING ${JOB_COLUMNS}`,
          [job.seq, this.statementNow()],
        );
        await client.query("SELECT opqueue_notify($1)", [updated.rows[0]?.["run_at"]]);
        return { kind: "retried", job: toJobRow(updated.rows[0] ?? {}) } as const;
      } catch (error) {
        // A job of another transaction took the key between the check and the update.
        if (!isUniqueViolation(error, "job_state_dedupe_key") || job.dedupeKey === null) throw error;
        await client.query("ROLLBACK TO SAVEPOINT retry");
        const holder = await holderOf(client, job.dedupeKey);
        if (!holder) throw error;
        return { kind: "dedupe_conflict", holder: toJobRow(holder) } as const;
      }
    });
  }

  async chainCancel(params: { originalRequestId: string }): Promise<JobRow[]> {
    // No job can join such a chain (enqueue refuses U+0000), so there is nothing to cancel or to remember.
    if (unstorable(params.originalRequestId)) return this.assertOpen([]);
    return this.transaction(async (client) => {
      const now = this.statementNow();
      // Marking the chain first takes its row lock: an enqueue into the chain racing this waits for it and then
      // creates its job cancelled; one that came first has committed its job, which the update below sees.
      await client.query(
        `INSERT INTO chains AS c (original_request_id, jobs_created, cancelled_at) VALUES ($1, 0, $2)
         ON CONFLICT (original_request_id) DO UPDATE SET cancelled_at = coalesce(c.cancelled_at, $2)`,
        [params.originalRequestId, now],
      );
      const rows = await client.query<PgRow>(
        `UPDATE job_state s SET status = 'cancelled', finished_at = $2,
           result = (coalesce(s.result::jsonb, '{"error_body":null}'::jsonb) || '{"terminal_reason":"cancelled-by-chain"}'::jsonb)::json
         FROM job_specs j
         WHERE j.original_request_id = $1 AND s.seq = j.seq AND s.${CLAIMABLE} RETURNING ${JOB_COLUMNS}`,
        [params.originalRequestId, now],
      );
      return rows.rows.map(toJobRow).sort((a, b) => b.seq - a.seq);
    });
  }

  async jobClaimMany(params: { limit: number }): Promise<JobRow[]> {
    if (params.limit <= 0) return [];
    for (let tries = 1; ; tries++) {
      try {
        const rows = await this.query(CLAIM_SQL, [this.statementNow(), params.limit, claimCandidates(params.limit)], "opqueue_claim");
        return rows.map((row) => JSON.parse(row["job"] as string) as JobRow).sort((a, b) => b.priority - a.priority || a.runAt - b.runAt || a.seq - b.seq);
      } catch (error) {
        // Another node started a job of one of these keys in the same instant: the unique index refused ours.
        if (tries < CLAIM_TRIES && isUniqueViolation(error, "job_state_running_concurrency_key")) continue;
        throw error;
      }
    }
  }

  async jobCompleteMany(params: { outcomes: JobOutcome[] }): Promise<boolean[]> {
    if (params.outcomes.length === 0) return [];
    const now = this.statementNow();
    const written = new Set<string>();
    const key = (outcome: JobAttempt) => `${outcome.id}:${outcome.attempt}`;
    const finished = params.outcomes.filter((outcome) => outcome.status !== "retrying");
    const retried = params.outcomes.filter(
      (outcome): outcome is Extract<JobOutcome, { status: "retrying" }> => outcome.status === "retrying",
    );
    if (finished.length > 0) {
      const rows = await this.query(
        // A failure of a job whose chain was cancelled ends it cancelled-by-chain (CONTRACT §3); the chain is
        // looked up for failures only. A chain cancel committing meanwhile finds the job running and leaves it,
        // as if the cancel came just after the outcome.
        `WITH ${LAZY_COMMIT},
         o AS MATERIALIZED (
           SELECT o.*, j.seq, CASE WHEN o.status = 'dead' THEN EXISTS (
               SELECT 1 FROM chains c WHERE c.original_request_id = j.original_request_id AND c.cancelled_at IS NOT NULL)
             ELSE false END AS by_chain
           FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $6::bigint[]) AS o(id, attempt, status, result, started_ms)
           JOIN job_specs j ON j.id = o.id),
         done AS (
           UPDATE job_state s SET status = CASE WHEN o.by_chain THEN 'cancelled' ELSE o.status END,
             result = CASE WHEN o.by_chain
               THEN (o.result::jsonb || '{"terminal_reason":"cancelled-by-chain"}'::jsonb)::json ELSE o.result::json END,
             finished_at = $5, heartbeat_at = NULL
           FROM o WHERE s.seq = o.seq AND s.status = 'running' AND s.attempt = o.attempt
             AND (o.started_ms IS NULL OR ${epochMs("s.started_at")} = o.started_ms)
           RETURNING o.id, s.attempt, s.started_at, s.status, s.result
         ), logged AS (${LOG_ATTEMPTS_SQL("done", "$5")}), counted AS (${COUNT_ATTEMPTS_SQL("done", "$5")})
         SELECT id, attempt FROM done, lazy_commit`,
        [
          finished.map((o) => o.id),
          finished.map((o) => o.attempt),
          finished.map((o) => o.status),
          finished.map((o) => JSON.stringify(o.result)),
          now,
          finished.map((o) => o.startedAt ?? null),
        ],
        "opqueue_finish_many",
      );
      for (const row of rows) written.add(`${String(row["id"])}:${Number(row["attempt"])}`);
    }
    if (retried.length > 0) {
      const requeued = await this.requeue(
        retried.map((o) => ({ id: o.id, attempt: o.attempt, startedAt: o.startedAt, delayMs: o.delayMs, result: o.result })),
        { refund: "none", now, lazy: true },
      );
      for (const id of requeued) written.add(id);
    }
    return params.outcomes.map((outcome) => written.has(key(outcome)));
  }

  /**
   * Sends running attempts back to the queue in one statement, or ends them `cancelled-by-chain` when their
   * chain is cancelled. The chain rows are read `FOR SHARE` first, so a chain cancel running at the same time
   * either finishes before (and is seen) or waits, and then finds the job `retrying` and cancels it.
   */
  private async requeue(
    items: Array<JobAttempt & { delayMs: number; result: JobResult }>,
    /** `lazy`: an attempt's outcome (see `LAZY_COMMIT`); a rescue or a shutdown's requeue is durable. */
    options: { refund: AttemptRefund | "none"; now: Date | "now"; lazy: boolean },
  ): Promise<string[]> {
    return this.transaction(async (client) => {
      if (options.lazy) await client.query("SET LOCAL synchronous_commit = off");
      await client.query(
        `SELECT 1 FROM chains
         WHERE original_request_id IN (SELECT original_request_id FROM job_specs WHERE id = ANY($1::text[]))
         FOR SHARE`,
        [items.map((item) => item.id)],
      );
      const rows = await client.query<PgRow>({
        name: "opqueue_requeue_many",
        text: `WITH done AS (${REQUEUE_SQL}), logged AS (${LOG_ATTEMPTS_SQL("done", "$6::timestamptz", "old_attempt")}),
          counted AS (${COUNT_ATTEMPTS_SQL("done", "$6::timestamptz")})
          SELECT id, old_attempt FROM done`,
        values: [
          items.map((item) => item.id),
          items.map((item) => item.attempt),
          items.map((item) => Math.round(item.delayMs)),
          items.map((item) => JSON.stringify(item.result)),
          options.refund,
          options.now,
          items.map((item) => item.startedAt ?? null),
        ],
      });
      return rows.rows.map((row) => `${String(row["id"])}:${Number(row["old_attempt"])}`);
    });
  }

  async jobHeartbeatMany(params: { jobs: JobAttempt[] }): Promise<void> {
    if (params.jobs.length === 0) return;
    await this.query(
      `WITH ${LAZY_COMMIT}, o AS ${BY_SEQ("unnest($1::text[], $2::int[]) AS o(id, attempt)")}
       UPDATE job_state s SET heartbeat_at = $3
       FROM o, lazy_commit
       WHERE s.seq = o.seq AND s.status = 'running' AND s.attempt = o.attempt`,
      [params.jobs.map((job) => job.id), params.jobs.map((job) => job.attempt), this.statementNow()],
      "opqueue_heartbeat_many",
    );
  }

  async jobListExpired(params: { lease: LeaseLimits; limit: number }): Promise<JobRow[]> {
    // Reads every running job through job_state_status_seq and sorts them here: no index reads heartbeat_at, so a
    // heartbeat is a HOT update (migration 0005), and running jobs are few. Each job is held to its operation's
    // lease, on the database's clock.
    const operations = Object.entries(params.lease.byOperation);
    const rows = await this.query(
      `SELECT jobs.* FROM jobs LEFT JOIN unnest($3::text[], $4::bigint[]) AS l(operation_id, lease_ms) USING (operation_id)
       WHERE status = 'running'
         AND heartbeat_at < $1::timestamptz - coalesce(l.lease_ms, $2) * interval '1 millisecond'
       ORDER BY heartbeat_at LIMIT $5`,
      [
        this.statementNow(),
        params.lease.defaultMs,
        operations.map(([operationId]) => operationId),
        operations.map(([, leaseMs]) => leaseMs),
        Math.max(0, params.limit),
      ],
    );
    return rows.map(toJobRow);
  }

  async jobRequeueMany(params: { jobs: JobAttempt[]; delayMs: number; errorBody: string; refund: AttemptRefund }): Promise<number> {
    if (params.jobs.length === 0) return 0;
    const result: JobResult = { error_body: params.errorBody, terminal_reason: null };
    const requeued = await this.requeue(
      params.jobs.map((job) => ({ ...job, delayMs: params.delayMs, result })),
      { refund: params.refund, now: this.statementNow(), lazy: false },
    );
    return requeued.length;
  }

  async jobNextRunAt(): Promise<number | null> {
    // Jobs behind a running key are not claimable: counted, they would make every idle node's timer fire at once,
    // again and again, until the key is free. The node finishing the key's job wakes itself and claims the next.
    const rows = await this.query(
      `SELECT s.run_at AS next FROM job_state s WHERE s.${CLAIMABLE}
         AND (s.concurrency_key IS NULL OR NOT EXISTS (
           SELECT 1 FROM job_state r WHERE r.concurrency_key = s.concurrency_key AND r.status = 'running'))
       ORDER BY s.run_at LIMIT 1`,
      [],
      "opqueue_next_run_at",
    );
    return toMs(rows[0]?.["next"]);
  }

  async cronTickInsert(params: {
    name: string;
    tickAt: number;
    job: JobInsertParams;
  }): Promise<JobInsertOutcome | { kind: "already_enqueued" }> {
    return this.transaction(async (client) => {
      const tick = await client.query(
        "INSERT INTO cron_ticks (name, tick_at) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING name",
        [params.name, new Date(params.tickAt)],
      );
      if (tick.rowCount === 0) return { kind: "already_enqueued" } as const;
      const answer = await client.query<PgRow>("SELECT opqueue_insert_job($1::json, $2) AS outcome", [
        JSON.stringify(insertArgument(params.job)),
        this.statementNow(),
      ]);
      const outcome = toInsertOutcome(answer.rows[0]?.["outcome"] as InsertAnswer, params.job);
      if (outcome.kind === "created" || outcome.kind === "deduplicated") {
        await client.query("UPDATE cron_ticks SET job_id = $3 WHERE name = $1 AND tick_at = $2", [
          params.name,
          new Date(params.tickAt),
          outcome.job.id,
        ]);
      }
      return outcome;
    });
  }

  async cronTickDeleteMany(params: { olderThanMs: number }): Promise<number> {
    const rows = await this.query(
      "DELETE FROM cron_ticks WHERE tick_at < $1::timestamptz - $2 * interval '1 millisecond' RETURNING 1",
      [this.statementNow(), params.olderThanMs],
    );
    return rows.length;
  }

  async attemptCountDeleteMany(params: { olderThanMs: number }): Promise<number> {
    const rows = await this.query(
      "DELETE FROM attempt_counts WHERE minute < $1::timestamptz - $2 * interval '1 millisecond' RETURNING 1",
      [this.statementNow(), params.olderThanMs],
    );
    return rows.length;
  }

  async jobDeleteFinishedMany(params: { olderThanMs: number; limit: number }): Promise<number> {
    return this.transaction(async (client) => {
      const deleted = await client.query<PgRow>(
        `WITH gone AS (
           DELETE FROM job_state WHERE seq IN (
             SELECT seq FROM job_state
             WHERE finished_at < $1::timestamptz - $3 * interval '1 millisecond'
               AND status IN ('succeeded', 'dead', 'cancelled')
             LIMIT $2)
           RETURNING seq)
         DELETE FROM job_specs j USING gone WHERE j.seq = gone.seq
         RETURNING j.id, j.original_request_id`,
        [this.statementNow(), Math.max(0, params.limit), params.olderThanMs],
      );
      await client.query("DELETE FROM job_attempts WHERE job_id = ANY($1::text[])", [
        deleted.rows.map((row) => row["id"] as string),
      ]);
      const rids = [...new Set(deleted.rows.map((row) => row["original_request_id"] as string))];
      if (rids.length > 0) {
        // A chain row goes with its last job, unless it remembers a cancellation.
        await client.query(
          `DELETE FROM chains c WHERE c.original_request_id = ANY($1::text[]) AND c.cancelled_at IS NULL
             AND NOT EXISTS (SELECT 1 FROM job_specs j WHERE j.original_request_id = c.original_request_id)`,
          [rids],
        );
      }
      return deleted.rowCount ?? 0;
    });
  }

  async jobStats(params: { byOperation?: boolean } = {}): Promise<JobStats> {
    const now = this.statementNow();
    const withOperations = params.byOperation ?? true;
    const [counts, due] = await Promise.all([
      withOperations
        ? this.query(
            "SELECT operation_id, status, count(*) AS count FROM jobs GROUP BY operation_id, status ORDER BY operation_id, status",
            [],
            "opqueue_stats_counts",
          )
        : this.query("SELECT status, count(*) AS count FROM job_state GROUP BY status", [], "opqueue_stats_status_counts"),
      this.query(`SELECT min(run_at) AS oldest FROM job_state WHERE ${CLAIMABLE} AND run_at <= $1`, [now], "opqueue_stats_due"),
    ]);
    const byStatus = Object.fromEntries(JOB_STATUSES.map((status) => [status, 0])) as Record<JobStatus, number>;
    for (const row of counts) byStatus[row["status"] as JobStatus] += Number(row["count"]);
    const byOperation = withOperations
      ? counts.map((row) => ({ operationId: row["operation_id"] as string, status: row["status"] as JobStatus, count: Number(row["count"]) }))
      : [];
    return { byStatus, byOperation, oldestDueRunAt: toMs(due[0]?.["oldest"]) };
  }

  async jobAttemptList(params: { id: string }): Promise<JobAttemptRow[]> {
    if (unstorable(params.id)) return this.assertOpen([]);
    const rows = await this.query(
      "SELECT attempt, started_at, finished_at, outcome, status_code, error_body FROM job_attempts WHERE job_id = $1 ORDER BY id",
      [params.id],
    );
    return rows.map((row) => ({
      attempt: Number(row["attempt"]),
      startedAt: toMs(row["started_at"]),
      finishedAt: requireMs(row["finished_at"]),
      outcome: row["outcome"] as JobStatus,
      statusCode: row["status_code"] === null ? null : Number(row["status_code"]),
      errorBody: (row["error_body"] as string | null) ?? null,
    }));
  }

  async attemptBuckets(params: { since: number; bucketMs: number }): Promise<AttemptBucket[]> {
    requireWholeMinutes(params);
    const rows = await this.query(
      `SELECT floor((extract(epoch FROM minute) * 1000 - $2) / $3) AS slot, outcome, sum(n) AS count
       FROM attempt_counts WHERE minute >= $1 GROUP BY slot, outcome`,
      [new Date(params.since), params.since, params.bucketMs],
    );
    return toBuckets({
      ...params,
      now: this.now(),
      rows: rows.map((row) => ({ slot: Number(row["slot"]), outcome: String(row["outcome"]), count: Number(row["count"]) })),
    });
  }

  async jobRetryDeadMany(params: { filter: DeadJobFilter; limit: number }): Promise<JobRow[]> {
    const { filter } = params;
    const retried = await this.transaction(async (client) => {
      const rows = await client.query<PgRow>(
        // Of several dead jobs with one dedupe key, only the newest goes back with it (the key's unique index
        // allows one claimable holder); the others stay dead, as the SQLite engine leaves them.
        `WITH candidates AS (
           SELECT s.seq, s.dedupe_key FROM job_state s JOIN job_specs j ON j.seq = s.seq
           WHERE s.status = 'dead'
             AND ($1::text IS NULL OR j.operation_id = $1)
             AND ($2::text IS NULL OR j.original_request_id = $2)
             AND ($3::text IS NULL OR j.user_id = $3)
             AND (s.dedupe_key IS NULL OR NOT EXISTS (
               SELECT 1 FROM job_state h WHERE h.dedupe_key = s.dedupe_key AND h.${CLAIMABLE}))
           ORDER BY s.seq DESC LIMIT $4
           FOR UPDATE OF s SKIP LOCKED
         ), picked AS (
           SELECT seq FROM (
             SELECT seq, dedupe_key, row_number() OVER (PARTITION BY dedupe_key ORDER BY seq DESC) AS key_rank
             FROM candidates) ranked
           WHERE dedupe_key IS NULL OR key_rank = 1
         )
         UPDATE job_state s SET status = 'pending', attempt = 0, result = NULL, started_at = NULL, finished_at = NULL,
           heartbeat_at = NULL, run_at = $5
         FROM picked, job_specs j WHERE s.seq = picked.seq AND j.seq = s.seq AND s.status = 'dead'
         RETURNING ${JOB_COLUMNS}`,
        [filter.operationId ?? null, filter.originalRequestId ?? null, filter.userId ?? null, Math.max(0, params.limit), this.statementNow()],
      );
      if (rows.rows.length > 0) await client.query("SELECT opqueue_notify($1)", [this.statementNow()]);
      return rows.rows.map(toJobRow);
    });
    return retried.sort((a, b) => b.seq - a.seq);
  }

  async jobAvailableListen(onAvailable: (runAt: number) => void): Promise<() => Promise<void>> {
    if (this.closed) throw new StoreUnavailableError("the store is closed");
    const listener = new NotificationListener({
      url: this.connection.url,
      applicationName: `${this.connection.applicationName}-listener`,
      connectionOptions: this.connection.options,
      channel: this.connection.channel,
      onNotify: (payload) => {
        const runAt = Number(payload);
        onAvailable(Number.isFinite(runAt) ? runAt : this.now());
      },
      onReconnect: () => onAvailable(this.now()),
      ...(this.connection.onError ? { onError: this.connection.onError } : {}),
    });
    try {
      await listener.start();
    } catch (error) {
      throw mapError(error);
    }
    this.listeners.add(listener);
    return async () => {
      this.listeners.delete(listener);
      await listener.stop();
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await Promise.all([...this.listeners].map((listener) => listener.stop()));
    this.listeners.clear();
    // Let queued inserts go out first: their callers are waiting for a commit.
    while (this.pendingInserts.length > 0 || this.insertFlights > 0) {
      if (this.insertFlights === 0) void this.flushInserts();
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    this.closed = true;
    await Promise.allSettled([...this.inFlight]);
    await this.pool.end();
  }
}

/**
 * How many candidate rows a claim of `limit` jobs locks: twice as many (at least 16) leaves room for candidates
 * that share a concurrency key (one per key is taken). Every row locked costs a WAL record, and a node's claims
 * in flight at once skip each other's locked rows, so locking four times as many made claims measurably slower
 * (6–8 ms → 9–12 ms per claim of ~34 jobs, three in flight, in the drain benchmark); a batch short of jobs only
 * costs another claim.
 */
/** A timestamptz column as whole milliseconds since the epoch (null stays null). */
function epochMs(column: string): string {
  return `floor(extract(epoch FROM ${column}) * 1000)::bigint`;
}

function claimCandidates(limit: number): number {
  return Math.max(16, limit * 2);
}

/**
 * The CTE that makes a statement's commit lazy: `set_config(..., true)` sets `synchronous_commit = off` until the end
 * of the statement's own transaction, so its commit does not wait for the WAL to reach the disk (the WAL writer
 * flushes it within a few hundred milliseconds). Used by the writes no client waits on: claims, outcomes and
 * heartbeats, as the SQLite engine writes them with `synchronous = NORMAL`. A crash of the server may undo the last
 * of them (a claim or an outcome lost: the job is delivered again, which at-least-once allows; a lost heartbeat at
 * worst lets a lease expire), never an acknowledged write: a durable commit flushes the WAL up to itself, lazy
 * commits before it included, so nothing durable can rest on a lost lazy write. Statements join it with the rows
 * they write, so it is evaluated whenever they write anything (and a statement that writes nothing has nothing
 * to flush).
 */
const LAZY_COMMIT = "lazy_commit AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))";

/**
 * The claim: `opqueue_claim` (migrations 0003 and 0004), which keeps one plan for the connection's life instead of
 * planning a statement on every call. Candidates in claim order (or, when fewer are due than wanted, every due
 * job), locked with SKIP LOCKED so concurrent claimers on other nodes take other rows instead of waiting; keys
 * already running are skipped; then one job per key, the first in claim order, and only keys whose
 * transaction-scoped advisory lock this claim gets (another node claiming the same key right now holds it).
 * Each claimed job comes back as one JSON text already shaped as a JobRow (times in ms), which one JSON.parse
 * turns into the row: node-postgres's parsing of 21 columns (five timestamps among them) cost more. Measured on
 * the drain, alternated: 80 → 74 µs of the main thread's CPU per job, no difference in the server's CPU.
 * $1 now, $2 limit, $3 how many candidates to look at.
 */
const CLAIM_SQL = `WITH ${LAZY_COMMIT} SELECT json_build_object(
    'seq', c.seq, 'id', c.id, 'operationId', c.operation_id, 'status', c.status, 'attempt', c.attempt,
    'maxAttempts', c.max_attempts, 'priority', c.priority, 'runAt', ${epochMs("c.run_at")},
    'createdAt', ${epochMs("c.created_at")}, 'startedAt', ${epochMs("c.started_at")},
    'finishedAt', ${epochMs("c.finished_at")}, 'heartbeatAt', ${epochMs("c.heartbeat_at")},
    'dedupeKey', c.dedupe_key, 'concurrencyKey', c.concurrency_key, 'enqueuedByOperationId', c.enqueued_by_operation_id,
    'parentJobId', c.parent_job_id, 'originalRequestId', c.original_request_id, 'userId', c.user_id,
    'authority', c.authority, 'request', c.request, 'result', c.result)::text AS job
  FROM lazy_commit, opqueue_claim($1, $2, $3) AS c`;

/**
 * Requeue of running attempts. $1 ids, $2 attempts, $3 delays (ms after now), $4 results (JSON text), $5 the refund
 * ('none': an attempt's outcome; 'if-last': give back an interrupted last attempt; 'always': give the attempt back),
 * $6 now, $7 the claims' start times (ms, or null). A job whose dedupe key a newer claimable job took while it ran
 * goes back without the key.
 */
const REQUEUE_SQL = `
WITH o AS (
  SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[], $4::text[], $7::bigint[])
    AS o(id, attempt, delay_ms, result, started_ms)
), w AS (
  SELECT o.*, j.seq, j.max_attempts, (c.cancelled_at IS NOT NULL) AS chain_cancelled,
    cur.dedupe_key AS held_key, (cur.status = 'running' AND cur.attempt = o.attempt
      AND (o.started_ms IS NULL OR ${epochMs("cur.started_at")} = o.started_ms)) AS current
  FROM o JOIN job_specs j ON j.id = o.id JOIN job_state cur ON cur.seq = j.seq
  LEFT JOIN chains c ON c.original_request_id = j.original_request_id
), x AS MATERIALIZED (
  -- Jobs of one dedupe key going back to the queue together (a cron's default key, a running job beside its newer
  -- namesake): the statement cannot see its own rows, so only the oldest keeps the key.
  SELECT w.*, row_number() OVER (
      PARTITION BY w.held_key ORDER BY (w.current AND NOT w.chain_cancelled) DESC, w.seq) AS key_rank
  FROM w
)
UPDATE job_state s SET
  status = CASE WHEN x.chain_cancelled THEN 'cancelled' ELSE 'retrying' END,
  run_at = CASE WHEN x.chain_cancelled THEN s.run_at ELSE $6::timestamptz + x.delay_ms * interval '1 millisecond' END,
  finished_at = CASE WHEN x.chain_cancelled THEN $6::timestamptz ELSE NULL END,
  result = CASE WHEN x.chain_cancelled
    THEN (x.result::jsonb || '{"terminal_reason":"cancelled-by-chain"}'::jsonb)::json ELSE x.result::json END,
  heartbeat_at = NULL,
  attempt = CASE
    WHEN x.chain_cancelled THEN s.attempt
    WHEN $5::text = 'always' THEN s.attempt - 1
    WHEN $5::text = 'if-last' AND s.attempt >= x.max_attempts THEN x.max_attempts - 1
    ELSE s.attempt END,
  dedupe_key = CASE WHEN NOT x.chain_cancelled AND (x.key_rank > 1 OR EXISTS (
      SELECT 1 FROM job_state other WHERE other.dedupe_key = s.dedupe_key AND other.${CLAIMABLE} AND other.seq <> s.seq))
    THEN NULL ELSE s.dedupe_key END
FROM x
WHERE s.seq = x.seq AND s.status = 'running' AND s.attempt = x.attempt
  AND (x.started_ms IS NULL OR ${epochMs("s.started_at")} = x.started_ms)
RETURNING x.id, x.attempt AS old_attempt, s.started_at, s.status, s.result`;

/** Records the attempts a CTE named `source` just wrote (id, attempt, started_at, status, result). */
function LOG_ATTEMPTS_SQL(source: string, now: string, attemptColumn = "attempt"): string {
  return `INSERT INTO job_attempts (job_id, attempt, started_at, finished_at, outcome, status_code, error_body)
    SELECT id, ${attemptColumn}, started_at, ${now}, status, (result->>'status_code')::integer, result->>'error_body'
    FROM ${source}`;
}

/**
 * Adds the attempts a CTE named `source` just wrote to the dashboard's counts per minute (migration 0006), in this
 * connection's shard, so concurrent writers never wait on each other's row.
 */
function COUNT_ATTEMPTS_SQL(source: string, now: string): string {
  return `INSERT INTO attempt_counts AS c (minute, outcome, shard, n)
    SELECT date_trunc('minute', ${now}::timestamptz), status, pg_backend_pid() % 16, count(*) FROM ${source} GROUP BY status
    ON CONFLICT (minute, outcome, shard) DO UPDATE SET n = c.n + excluded.n`;
}

/** Applies pending migrations under an advisory lock; returns the schema version. */
async function migrate(pool: pg.Pool): Promise<number> {
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

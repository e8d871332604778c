/**
 * The PostgreSQL engine's upkeep, run by the maintenance services: the running jobs whose lease expired (for the
 * rescuer), waiting jobs past their expiry, and retention: finished jobs, idempotency keys, cron ticks, attempt
 * counts and idle rate buckets.
 */
import type { JobRow, LeaseLimits } from "../../job/job.js";
import type { PgConnection } from "./connection.js";
import { toJobRow, type PgRow } from "./rows.js";
import { DELETE_BUCKETS } from "./sql/flow.js";
import {
  ATTEMPT_COUNT_DELETE,
  CRON_TICK_DELETE,
  DELETE_ACTIONS,
  DELETE_ATTEMPTS,
  DELETE_EMPTY_CHAINS,
  DELETE_FINISHED,
  EXPIRE_MANY,
  IDEMPOTENCY_KEY_DELETE,
} from "./sql/maintenance.js";
import { LIST_EXPIRED } from "./sql/outcomes.js";

type Now = Date | "now";

/** Running jobs whose lease (the operation's, else the default; an asynchronous attempt's own) has expired. */
export async function listExpired(
  db: PgConnection,
  params: { lease: LeaseLimits; limit: number; now: Now },
): Promise<JobRow[]> {
  const operations = Object.entries(params.lease.byOperation);
  const asyncOperations = Object.entries(params.lease.asyncByOperation ?? {});
  const rows = await db.query(LIST_EXPIRED, [
    params.now,
    params.lease.defaultMs,
    operations.map(([operationId]) => operationId),
    operations.map(([, leaseMs]) => leaseMs),
    Math.max(0, params.limit),
    asyncOperations.map(([operationId]) => operationId),
    asyncOperations.map(([, leaseMs]) => leaseMs),
  ]);
  return rows.map(toJobRow);
}

/** Waiting jobs past their expiry → `cancelled` (`expired`); answers them. */
export async function expireMany(db: PgConnection, params: { limit: number; now: Now }): Promise<JobRow[]> {
  const rows = await db.query(EXPIRE_MANY, [params.now, Math.max(0, params.limit)], "opqueue_expire_many");
  return rows.map(toJobRow);
}

/** Deletes finished jobs older than `olderThanMs` with their attempts and actions, then chains left empty. */
export async function deleteFinishedMany(
  db: PgConnection,
  params: { olderThanMs: number; limit: number; now: Now },
): Promise<number> {
  return db.transaction(async (client) => {
    const deleted = await client.query<PgRow>(DELETE_FINISHED, [
      params.now,
      Math.max(0, params.limit),
      params.olderThanMs,
    ]);
    const ids = deleted.rows.map((row) => row["id"] as string);
    await client.query(DELETE_ATTEMPTS, [ids]);
    await client.query(DELETE_ACTIONS, [ids]);
    const rids = [...new Set(deleted.rows.map((row) => row["original_request_id"] as string))];
    if (rids.length > 0) await client.query(DELETE_EMPTY_CHAINS, [rids]);
    return deleted.rowCount ?? 0;
  });
}

/** Deletes expired idempotency keys; answers how many. */
export async function idempotencyKeyDeleteMany(db: PgConnection, params: { limit: number; now: Now }): Promise<number> {
  return (await db.query(IDEMPOTENCY_KEY_DELETE, [params.now, Math.max(0, params.limit)])).length;
}

/** Deletes cron ticks older than `olderThanMs` (but each name's newest); answers how many. */
export async function cronTickDeleteMany(db: PgConnection, params: { olderThanMs: number; now: Now }): Promise<number> {
  return (await db.query(CRON_TICK_DELETE, [params.now, params.olderThanMs])).length;
}

/** Deletes attempt counts of minutes older than `olderThanMs`; answers how many. */
export async function attemptCountDeleteMany(
  db: PgConnection,
  params: { olderThanMs: number; now: Now },
): Promise<number> {
  return (await db.query(ATTEMPT_COUNT_DELETE, [params.now, params.olderThanMs])).length;
}

/** Deletes the rate buckets whose time has passed (sql/flow.ts, DELETE_BUCKETS); answers how many. */
export async function rateBucketDeleteMany(db: PgConnection, params: { now: Now }): Promise<number> {
  return (await db.query(`${DELETE_BUCKETS} RETURNING 1`, [params.now])).length;
}

/**
 * How far each job table may grow past the pages its statistics last counted before the tables are analyzed here: to
 * more than twice as many, and this many more (512 kB: a few thousand jobs).
 */
const GROWTH_SLACK_PAGES = 64;

// Each job table's pages as its statistics last counted them (`relpages`: 0 before the first analyze or vacuum) and as
// they are now (the file's size, exact at once; the live row counts of pg_stat_user_tables can lag for a minute).
const TABLE_PAGES = `SELECT c.relpages::float8 AS counted,
    (pg_relation_size(c.oid) / current_setting('block_size')::int)::float8 AS pages
  FROM pg_class c WHERE c.oid IN ('job_state'::regclass, 'job_specs'::regclass)`;

const grown = (row: { counted: number; pages: number }) => row.pages > 2 * row.counted + GROWTH_SLACK_PAGES;

/**
 * Analyzes `job_state` and `job_specs` when either has grown to more than twice the pages its statistics last counted
 * (and `GROWTH_SLACK_PAGES` more), so that plans made while the tables were small are made again (docs/postgres.md,
 * "Plans"): the claim keeps generic plans, the node's named statements settle on one, and a plan made for a few
 * thousand jobs reads every due job at each claim once there are a hundred thousand. Autovacuum would analyze them
 * too, but only at its next round (a minute by default), and not at all where it is off. One node analyzes at a time
 * (an advisory lock, tried: the others go on). `refusedAt` is the size (pages of both tables) at which the server last
 * skipped this node's analyze (a role that does not own the tables gets a warning, not an error), or 0: the node
 * tries again only once they doubled again. Answers, when it tried, the size it tried at and whether the tables were
 * analyzed.
 */
export async function statisticsRefresh(
  db: PgConnection,
  refusedAt: number,
): Promise<{ size: number; analyzed: boolean } | null> {
  const read = (rows: PgRow[]) => rows.map((row) => ({ counted: Number(row["counted"]), pages: Number(row["pages"]) }));
  const tables = read(await db.query(TABLE_PAGES));
  const size = tables.reduce((sum, table) => sum + table.pages, 0);
  if (!tables.some(grown) || size <= 2 * refusedAt) return null;
  return db.transaction(async (client) => {
    const locked = await client.query<{ locked: boolean }>(
      "SELECT pg_try_advisory_xact_lock(hashtext('opqueue.analyze:' || current_schema())) AS locked",
    );
    if (locked.rows[0]?.locked !== true) return null;
    // Read again under the lock: another node may have just analyzed them.
    if (!read((await client.query<PgRow>(TABLE_PAGES)).rows).some(grown)) return null;
    await client.query("ANALYZE job_state, job_specs");
    // A table the role does not own is skipped with a warning, its statistics as they were.
    return { size, analyzed: !read((await client.query<PgRow>(TABLE_PAGES)).rows).some(grown) };
  });
}

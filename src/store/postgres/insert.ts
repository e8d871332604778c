/**
 * Inserts of the PostgreSQL engine: a batch of jobs in one call of `opqueue_insert_batch` (the group commit's and a
 * producer's), and one job inside a transaction of the caller's (a chain's callback job, a cron tick's job).
 */
import type pg from "pg";
import type { Settled } from "../group-commit.js";
import { StoreUnavailableError, type JobInsertOutcome, type JobInsertParams } from "../store.js";
import type { PgConnection } from "./connection.js";
import { batchArgument, insertArgument, toInsertOutcome, type InsertAnswer, type PgRow } from "./rows.js";
import { INSERT_JOB, INSERT_JOBS } from "./sql/insert.js";
import { NOTIFY } from "./sql/jobs.js";

/** The statement's "now", asked for when each statement is sent. */
type StatementNow = () => Date | "now";

/** One batch of inserts; when it fails with the database up, one bad item must fail only itself: one by one. */
export async function sendInserts(
  db: PgConnection,
  params: { items: JobInsertParams[]; statementNow: StatementNow },
): Promise<Array<Settled<JobInsertOutcome>>> {
  const { items, statementNow } = params;
  try {
    return (await insertBatch(db, items, statementNow())).map((value) => ({ ok: true, value }));
  } catch (error) {
    if (items.length === 1 || error instanceof StoreUnavailableError) throw error;
    return Promise.all(
      items.map((item) =>
        insertBatch(db, [item], statementNow()).then(
          ([value]): Settled<JobInsertOutcome> => (value ? { ok: true, value } : { ok: false, error }),
          (itemError: unknown): Settled<JobInsertOutcome> => ({ ok: false, error: itemError }),
        ),
      ),
    );
  }
}

async function insertBatch(db: PgConnection, items: JobInsertParams[], now: Date | "now"): Promise<JobInsertOutcome[]> {
  const rows = await db.query(
    INSERT_JOBS,
    [JSON.stringify(items.map(batchArgument)), now, leadingPlain(items)],
    "opqueue_insert_batch",
  );
  return rows.map((row, index) => toInsertOutcome(row["outcome"] as InsertAnswer, items[index] as JobInsertParams));
}

/**
 * How many of the batch's items come before the first that is not plain: one with an idempotency key, a dedupe key or
 * a chain's on_settled. `opqueue_insert_batch` inserts those in one statement (migration 0020).
 */
export function leadingPlain(items: JobInsertParams[]): number {
  const first = items.findIndex(
    (item) => item.idempotency !== undefined || item.dedupeKey !== null || item.onSettled !== undefined,
  );
  return first === -1 ? items.length : first;
}

/** One insert inside a transaction of the caller's. */
export async function insertOne(
  client: pg.PoolClient,
  params: { insert: JobInsertParams; now: Date | "now" },
): Promise<JobInsertOutcome> {
  const answer = await client.query<PgRow>(INSERT_JOB, [JSON.stringify(insertArgument(params.insert)), params.now]);
  return toInsertOutcome(answer.rows[0]?.["outcome"] as InsertAnswer, params.insert);
}

/** One insert inside a transaction of the caller's, announced to the listening nodes when it makes a job claimable. */
export async function insertAndNotify(
  client: pg.PoolClient,
  params: { insert: JobInsertParams; now: Date | "now" },
): Promise<JobInsertOutcome> {
  const outcome = await insertOne(client, params);
  if ((outcome.kind === "created" || outcome.kind === "deduplicated") && outcome.job.status === "pending") {
    await client.query(NOTIFY, [new Date(outcome.job.runAt)]);
  }
  return outcome;
}

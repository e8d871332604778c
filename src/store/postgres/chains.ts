/**
 * Chains on the PostgreSQL engine (docs/chains.md): each job's on_complete/on_dead callback and each chain's
 * on_settled enqueued exactly once (cleared or fired in the transaction that inserts the job), the sweep of chains
 * that settled, and the reads of a chain.
 */
import type { JobRow } from "../../job/job.js";
import { chainJobCountsOf } from "../chain-counts.js";
import type { CallbackEnqueueOutcome, ChainJobCounts, ChainRow, JobInsertParams } from "../store.js";
import type { PgConnection } from "./connection.js";
import { unstorable } from "./errors.js";
import { insertAndNotify } from "./insert.js";
import { requireMs, toChainRow, toJobRow, toMs, type PgRow } from "./rows.js";
import {
  CALLBACKS_ANY,
  CALLBACKS_DUE,
  CHAIN_GET,
  CHAIN_JOB_COUNTS,
  CHAIN_SWEEP_LOCK,
  CLEAR_CALLBACK,
  CURSOR_GET,
  CURSOR_SET,
  FINISHED_SINCE_ANY,
  FIRE_ON_SETTLED,
  LOCK_CHAIN,
  ON_SETTLED_ANY,
  SETTLED_DUE,
  SETTLED_SINCE,
} from "./sql/maintenance.js";

/** How far behind now the chain sweeper reads finished jobs: outcomes still committing may carry earlier times. */
const SETTLE_READ_LAG_MS = 2000;

type Now = Date | "now";

/**
 * Whether a sweep's read has anything to read, asked first by each of them: every node sweeps twice a second, and an
 * idle pass costs the server one cheap statement per read (the reads' planning alone cost several times more).
 */
async function anything(db: PgConnection, probe: string, name: string, values: unknown[] = []): Promise<boolean> {
  return (await db.query(probe, values, name))[0]?.["due"] === true;
}

/** Finished jobs (`succeeded`, `dead`) whose callback is still to be enqueued, oldest first. */
export async function callbackDueList(db: PgConnection, params: { limit: number }): Promise<JobRow[]> {
  if (!(await anything(db, CALLBACKS_ANY, "opqueue_callbacks_any"))) return [];
  return (await db.query(CALLBACKS_DUE, [Math.max(0, params.limit)], "opqueue_callbacks_due")).map(toJobRow);
}

/** Clears a job's pending callback and enqueues its job (`insert`), unless that is no longer due: `skipped`. */
export async function callbackEnqueue(
  db: PgConnection,
  params: { jobId: string; status: "succeeded" | "dead"; insert: JobInsertParams | null; now: Now },
): Promise<CallbackEnqueueOutcome> {
  return db.transaction(async (client) => {
    if ((await client.query(CLEAR_CALLBACK, [params.jobId, params.status])).rowCount === 0)
      return { kind: "skipped" } as const;
    return params.insert === null
      ? ({ kind: "cleared" } as const)
      : insertAndNotify(client, { insert: params.insert, now: params.now });
  });
}

/** Chains whose on_settled job is due. */
export async function settledDueList(db: PgConnection, params: { limit: number }): Promise<ChainRow[]> {
  if (!(await anything(db, ON_SETTLED_ANY, "opqueue_on_settled_any"))) return [];
  return (await db.query(SETTLED_DUE, [Math.max(0, params.limit)])).map(toChainRow);
}

/** Records a chain's on_settled fired and enqueues its job (`insert`), unless that is no longer due: `skipped`. */
export async function onSettledEnqueue(
  db: PgConnection,
  params: { originalRequestId: string; insert: JobInsertParams | null; now: Now },
): Promise<CallbackEnqueueOutcome> {
  return db.transaction(async (client) => {
    await client.query(LOCK_CHAIN, [params.originalRequestId]);
    if ((await client.query(FIRE_ON_SETTLED, [params.originalRequestId, params.now])).rowCount === 0) {
      return { kind: "skipped" } as const;
    }
    if (params.insert === null) return { kind: "cleared" } as const;
    return insertAndNotify(client, { insert: params.insert, now: params.now });
  });
}

/**
 * The chains that settled since the sweep's cursor, read by one node at a time (the others answer nothing), and the
 * cursor moved past them. `nowMs` is asked for the probe that ends an idle pass, and again once the sweep holds its
 * lock: the read stops at the later bound, which holds whatever the probe saw.
 */
export async function settledSince(
  db: PgConnection,
  params: { cursor: string; limit: number; nowMs: () => number },
): Promise<Array<{ originalRequestId: string; startedAt: number; settledAt: number }>> {
  // Outcomes still committing may carry an earlier finished_at than a read: it stops a few seconds back.
  const readUpTo = (now: number) => new Date(now - SETTLE_READ_LAG_MS);
  const probeArgs = [params.cursor, readUpTo(params.nowMs())];
  if (!(await anything(db, FINISHED_SINCE_ANY, "opqueue_finished_since_any", probeArgs))) return [];
  return db.transaction(async (client) => {
    const locked = await client.query<{ locked: boolean }>(CHAIN_SWEEP_LOCK);
    if (!locked.rows[0]?.locked) return [];
    const now = params.nowMs();
    // The cursor's time stays text end to end: finished_at has microseconds, and a cursor cut to milliseconds would
    // read its own last job again, forever.
    const cursor = (await client.query<{ at: string; seq: string }>(CURSOR_GET, [params.cursor])).rows[0];
    const from = cursor ? { at: cursor.at, seq: Number(cursor.seq) } : { at: new Date(now).toISOString(), seq: 0 };
    const rows = await client.query<PgRow>(SETTLED_SINCE, [
      from.at,
      from.seq,
      readUpTo(now),
      Math.max(1, params.limit),
    ]);
    const settled: Array<{ originalRequestId: string; startedAt: number; settledAt: number }> = [];
    let next = from;
    for (const row of rows.rows) {
      if (row["kind"] === "cursor") next = { at: row["settled_at"] as string, seq: Number(row["seq"]) };
      else
        settled.push({
          originalRequestId: row["original_request_id"] as string,
          startedAt: Number(row["started_at"]),
          settledAt: Number(row["settled_at"]),
        });
    }
    // A pass that read nothing leaves the cursor where it was, and its transaction writes nothing: an idle node's
    // pass, twice a second on every node, is then read-only (no WAL, no flush at commit).
    if (!cursor || next !== from) await client.query(CURSOR_SET, [params.cursor, next.at, next.seq]);
    return settled;
  });
}

/** A chain, or undefined. */
export async function chainGet(db: PgConnection, params: { originalRequestId: string }): Promise<ChainRow | undefined> {
  if (unstorable(params.originalRequestId)) return db.answerIfOpen(undefined);
  const rows = await db.query(CHAIN_GET, [params.originalRequestId]);
  return rows[0] ? toChainRow(rows[0]) : undefined;
}

/** How many jobs of a chain are in each status, and when its first was created and its last finished. */
export async function chainJobCounts(db: PgConnection, params: { originalRequestId: string }): Promise<ChainJobCounts> {
  if (unstorable(params.originalRequestId)) return db.answerIfOpen(chainJobCountsOf([]));
  const rows = await db.query(CHAIN_JOB_COUNTS, [params.originalRequestId]);
  return chainJobCountsOf(
    rows.map((row) => ({
      status: String(row["status"]),
      jobs: Number(row["jobs"]),
      firstCreatedAt: requireMs(row["first_created_at"]),
      lastFinishedAt: toMs(row["last_finished_at"]),
    })),
  );
}

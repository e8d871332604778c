/**
 * What the node running jobs asks of the PostgreSQL engine besides outcomes (outcomes.ts) and the mark of an
 * asynchronous attempt (async.ts): the claim, heartbeats, requeues of jobs it could not deliver, and when a claim may
 * next find a job.
 */
import type { JobAttempt, JobRow } from "../../job/job.js";
import type { JobResult } from "../../job/schemas.js";
import type { AttemptRefund } from "../store.js";
import type { PgConnection } from "./connection.js";
import { requeueMany } from "./outcomes.js";
import { fromClaimFields, toMs } from "./rows.js";
import { CLAIM, claimCandidates, NEXT_RUN_AT } from "./sql/claim.js";
import { HEARTBEAT_MANY } from "./sql/outcomes.js";

type Now = Date | "now";

/** Where a claim stopped visiting lanes (`opqueue_claim_batch`), for the next claim to go on from. */
export interface LaneCursor {
  operationId: string;
  lane: string;
}

/** Claims up to `limit` jobs, in claim order; answers them with the cursor the claim left behind. */
export async function claimMany(
  db: PgConnection,
  params: { limit: number; cursor: LaneCursor; now: Now },
): Promise<{ jobs: JobRow[]; cursor: LaneCursor }> {
  let cursor = params.cursor;
  if (params.limit <= 0) return { jobs: [], cursor };
  const rows = await db.query(
    CLAIM,
    [params.now, params.limit, claimCandidates(params.limit), cursor.operationId, cursor.lane],
    "opqueue_claim_batch",
  );
  const jobs: JobRow[] = [];
  for (const row of rows) {
    const parsed = JSON.parse(row["job"] as string) as unknown[] | { cursor: [string, string] };
    if (Array.isArray(parsed)) jobs.push(fromClaimFields(parsed));
    else cursor = { operationId: parsed.cursor[0], lane: parsed.cursor[1] };
  }
  return { jobs: jobs.sort((a, b) => b.priority - a.priority || a.runAt - b.runAt || a.seq - b.seq), cursor };
}

/** Moves the leases of running attempts on. */
export async function heartbeatMany(db: PgConnection, params: { jobs: JobAttempt[]; now: Now }): Promise<void> {
  const { jobs } = params;
  if (jobs.length === 0) return;
  await db.query(
    HEARTBEAT_MANY,
    [jobs.map((job) => job.id), jobs.map((job) => job.attempt), params.now],
    "opqueue_heartbeat_many",
  );
}

/** Puts running attempts back to wait `delayMs`, with `errorBody` as their result; answers how many were. */
export async function requeueWithError(
  db: PgConnection,
  params: { jobs: JobAttempt[]; delayMs: number; errorBody: string; refund: AttemptRefund; now: Now },
): Promise<number> {
  if (params.jobs.length === 0) return 0;
  const result: JobResult = { error_body: params.errorBody, terminal_reason: null };
  const requeued = await requeueMany(db, {
    items: params.jobs.map((job) => ({ ...job, delayMs: params.delayMs, result })),
    refund: params.refund,
    now: params.now,
    lazy: false,
  });
  return requeued.length;
}

/** When a claim may next find a job (sql/claim.ts says which jobs count), or null. */
export async function nextRunAt(db: PgConnection, params: { now: Now }): Promise<number | null> {
  const rows = await db.query(NEXT_RUN_AT, [params.now], "opqueue_next_run_at");
  return toMs(rows[0]?.["next"]);
}

/**
 * The administrators' writes of the PostgreSQL engine: each conditional on the state it expects to leave, each change
 * recorded with who made it in the same transaction (admin_actions, migration 0009), and a NOTIFY for what becomes
 * claimable, so idle nodes wake.
 */
import type pg from "pg";
import type { JobRow } from "../../job/job.js";
import type { AdminAction } from "../../job/statuses.js";
import { ABORTED_ATTEMPT } from "../aborted.js";
import type {
  AdminActionRow,
  AdminActor,
  DeadJobFilter,
  JobCancelFilter,
  JobCancelOutcome,
  JobRetryOutcome,
  JobRunNowOutcome,
} from "../store.js";
import type { PgConnection } from "./connection.js";
import { isUniqueViolation, unstorable } from "./errors.js";
import { requireMs, toJobRow, type PgRow } from "./rows.js";
import {
  ACTIONS_OF,
  CHAIN_CANCEL_JOBS,
  CHAIN_MARK_CANCELLED,
  CANCEL_CANDIDATES,
  DEDUPE_HOLDER,
  JOB_GET,
  JOB_LOCK_FOR_RETRY,
  JOB_RETRY,
  JOB_RUN_NOW,
  jobCancelRunningSql,
  jobCancelSql,
  NOTIFY,
  RECORD_ACTION,
  RETRY_DEAD_MANY,
} from "./sql/jobs.js";

/** An administrator's write: who, with which role, and the statement's "now". */
type Acting = AdminActor & { now: Date | "now" };

type CancelAction = Extract<AdminAction, "cancel" | "cancel-many">;

/** The cancel statements, built once per action. */
const CANCEL_SQL = {
  cancel: { waiting: jobCancelSql("cancel"), running: jobCancelRunningSql("cancel") },
  "cancel-many": { waiting: jobCancelSql("cancel-many"), running: jobCancelRunningSql("cancel-many") },
} satisfies Record<CancelAction, { waiting: string; running: string }>;

/**
 * `pending`/`retrying` → `cancelled` (`cancelled-by-admin`); with `abortRunning`, `running` too, its attempt recorded
 * as aborted and its node told to abort the delivery.
 */
export async function cancelJob(
  db: PgConnection,
  params: { id: string; abortRunning?: boolean | undefined } & Acting,
  action: CancelAction = "cancel",
): Promise<JobCancelOutcome> {
  if (unstorable(params.id)) return db.answerIfOpen({ kind: "not_found" });
  const sql = CANCEL_SQL[action];
  const rows = await db.query(
    sql.waiting,
    [[params.id], params.now, params.actor, params.role],
    `opqueue_job_${action}`,
  );
  if (rows[0]) return { kind: "cancelled", job: toJobRow(rows[0]), wasRunning: false };
  if (params.abortRunning) {
    const aborted = await db.query(sql.running, [params.id, params.now, params.actor, ABORTED_ATTEMPT, params.role]);
    if (aborted[0]) return { kind: "cancelled", job: toJobRow(aborted[0]), wasRunning: true };
  }
  const row = (await db.query(JOB_GET, [params.id], "opqueue_job_get"))[0];
  if (!row) return { kind: "not_found" };
  const job = toJobRow(row);
  return job.status === "running" ? { kind: "running", job } : { kind: "not_cancellable", job };
}

/** Cancels up to `limit` jobs matching `filter`, newest first, each as `cancelJob` with `abortRunning` would. */
export async function cancelMany(
  db: PgConnection,
  params: { filter: JobCancelFilter; limit: number } & Acting,
): Promise<Array<{ job: JobRow; wasRunning: boolean }>> {
  const { filter } = params;
  if (unstorable(filter.operationId, filter.originalRequestId, filter.userId, filter.dedupeKey))
    return db.answerIfOpen([]);
  const candidates = await db.query(CANCEL_CANDIDATES, [
    filter.statuses,
    filter.operationId ?? null,
    filter.originalRequestId ?? null,
    filter.userId ?? null,
    filter.dedupeKey ?? null,
    filter.createdFrom === undefined ? null : new Date(filter.createdFrom),
    filter.createdBefore === undefined ? null : new Date(filter.createdBefore),
    Math.max(0, params.limit),
  ]);
  // The waiting ones in one statement; each running one in its own (each tells its node to abort).
  const waiting = candidates
    .filter((candidate) => candidate["status"] !== "running")
    .map((candidate) => candidate["id"] as string);
  const cancelled: Array<{ job: JobRow; wasRunning: boolean }> = [];
  if (waiting.length > 0) {
    for (const job of await cancelWaitingMany(db, { ids: waiting, ...params }))
      cancelled.push({ job, wasRunning: false });
  }
  for (const candidate of candidates) {
    if (candidate["status"] !== "running") continue;
    const outcome = await cancelJob(
      db,
      { ...params, id: candidate["id"] as string, abortRunning: true },
      "cancel-many",
    );
    if (outcome.kind === "cancelled") cancelled.push({ job: outcome.job, wasRunning: outcome.wasRunning });
  }
  return cancelled.sort((a, b) => b.job.seq - a.job.seq);
}

/** The jobs of `ids` still waiting → `cancelled`, in one statement, each recorded as a `cancel-many` by the actor. */
export async function cancelWaitingMany(db: PgConnection, params: { ids: string[] } & Acting): Promise<JobRow[]> {
  const rows = await db.query(CANCEL_SQL["cancel-many"].waiting, [params.ids, params.now, params.actor, params.role]);
  return rows.map(toJobRow);
}

/** `dead`/`cancelled` → `pending` with attempt 0 and run time now. */
export async function retryJob(db: PgConnection, params: { id: string } & Acting): Promise<JobRetryOutcome> {
  if (unstorable(params.id)) return db.answerIfOpen({ kind: "not_found" });
  const holderOf = async (client: pg.PoolClient, key: string) =>
    (await client.query<PgRow>(DEDUPE_HOLDER, [key])).rows[0];
  return db.transaction(async (client) => {
    const row = (await client.query<PgRow>(JOB_LOCK_FOR_RETRY, [params.id])).rows[0];
    if (!row) return { kind: "not_found" } as const;
    const job = toJobRow(row);
    if (job.status !== "dead" && job.status !== "cancelled") return { kind: "not_retryable", job } as const;
    if (job.dedupeKey !== null) {
      const holder = await holderOf(client, job.dedupeKey);
      if (holder) return { kind: "dedupe_conflict", holder: toJobRow(holder) } as const;
    }
    await client.query("SAVEPOINT retry");
    try {
      const updated = await client.query<PgRow>(JOB_RETRY, [job.seq, params.now]);
      await client.query(RECORD_ACTION, [params.now, params.actor, params.role, "retry" satisfies AdminAction, job.id]);
      await client.query(NOTIFY, [updated.rows[0]?.["run_at"]]);
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

/** Marks the chain cancelled and cancels its claimable jobs; returns them, newest first. */
export async function cancelChain(db: PgConnection, params: { originalRequestId: string } & Acting): Promise<JobRow[]> {
  // No job can join such a chain (enqueue refuses U+0000), so there is nothing to cancel or to remember.
  if (unstorable(params.originalRequestId)) return db.answerIfOpen([]);
  return db.transaction(async (client) => {
    await client.query(CHAIN_MARK_CANCELLED, [params.originalRequestId, params.now, params.actor]);
    const rows = await client.query<PgRow>(CHAIN_CANCEL_JOBS, [
      params.originalRequestId,
      params.now,
      params.actor,
      params.role,
    ]);
    return rows.rows.map(toJobRow).sort((a, b) => b.seq - a.seq);
  });
}

/** A waiting job due now. */
export async function runNow(db: PgConnection, params: { id: string } & Acting): Promise<JobRunNowOutcome> {
  if (unstorable(params.id)) return db.answerIfOpen({ kind: "not_found" });
  const moved = await db.transaction(async (client) => {
    const rows = await client.query<PgRow>(JOB_RUN_NOW, [params.id, params.now, params.actor, params.role]);
    if (rows.rows[0]) await client.query(NOTIFY, [rows.rows[0]["run_at"]]);
    return rows.rows[0];
  });
  if (moved) return { kind: "moved", job: toJobRow(moved) };
  const row = (await db.query(JOB_GET, [params.id], "opqueue_job_get"))[0];
  return row ? { kind: "not_waiting", job: toJobRow(row) } : { kind: "not_found" };
}

/** Re-queues up to `limit` dead jobs matching the filter, newest first, skipping those whose dedupe key is held. */
export async function retryDeadMany(
  db: PgConnection,
  params: { filter: DeadJobFilter; limit: number } & Acting,
): Promise<JobRow[]> {
  const { filter } = params;
  const retried = await db.transaction(async (client) => {
    const rows = await client.query<PgRow>(RETRY_DEAD_MANY, [
      filter.operationId ?? null,
      filter.originalRequestId ?? null,
      filter.userId ?? null,
      Math.max(0, params.limit),
      params.now,
      params.actor,
      params.role,
    ]);
    if (rows.rows.length > 0) await client.query(NOTIFY, [params.now]);
    return rows.rows.map(toJobRow);
  });
  return retried.sort((a, b) => b.seq - a.seq);
}

/** Who acted on a job, oldest first. */
export async function adminActionList(db: PgConnection, params: { jobId: string }): Promise<AdminActionRow[]> {
  if (unstorable(params.jobId)) return db.answerIfOpen([]);
  const rows = await db.query(ACTIONS_OF, [params.jobId]);
  return rows.map((row) => ({
    at: requireMs(row["at"]),
    actor: row["actor"] as string,
    role: (row["role"] as string | null) ?? null,
    action: row["action"] as AdminAction,
  }));
}

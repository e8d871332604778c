/**
 * Outcome writes of the PostgreSQL engine: terminal outcomes in one statement, requeues in one transaction (their
 * chains locked first), each conditional on the job still running that attempt of that claim.
 */
import type pg from "pg";
import type { JobAttempt, JobOutcome } from "../../job/job.js";
import type { JobResult } from "../../job/schemas.js";
import type { AttemptRefund } from "../store.js";
import type { PgConnection } from "./connection.js";
import type { PgRow } from "./rows.js";
import { FINISH_MANY, LOCK_CHAINS_OF_JOBS, REQUEUE_MANY } from "./sql/outcomes.js";

/** Writes attempt outcomes; returns, per outcome, whether it was written. */
export async function setStateIfRunningMany(
  db: PgConnection,
  params: { outcomes: JobOutcome[]; now: Date | "now" },
): Promise<boolean[]> {
  const { outcomes, now } = params;
  if (outcomes.length === 0) return [];
  const written = new Set<string>();
  const key = (outcome: JobAttempt) => `${outcome.id}:${outcome.attempt}`;
  const finished = outcomes.filter((outcome) => outcome.status !== "retrying");
  const retried = outcomes.filter(
    (outcome): outcome is Extract<JobOutcome, { status: "retrying" }> => outcome.status === "retrying",
  );
  if (finished.length > 0) {
    const rows = await db.query(
      FINISH_MANY,
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
    const requeued = await requeueMany(db, {
      items: retried.map((o) => ({
        id: o.id,
        attempt: o.attempt,
        startedAt: o.startedAt,
        delayMs: o.delayMs,
        result: o.result,
      })),
      refund: "none",
      now,
      lazy: true,
    });
    for (const id of requeued) written.add(id);
  }
  return outcomes.map((outcome) => written.has(key(outcome)));
}

/**
 * Sends running attempts back to the queue in one statement, or ends them `cancelled-by-chain` when their chain is
 * cancelled; the chains are locked first (see `LOCK_CHAINS_OF_JOBS`). Returns the attempts written, as "id:attempt".
 */
export async function requeueMany(
  db: PgConnection,
  params: {
    items: Array<JobAttempt & { delayMs: number; result: JobResult }>;
    refund: AttemptRefund | "none";
    now: Date | "now";
    /** An attempt's outcome commits lazily (see `LAZY_COMMIT`); a rescue or a shutdown's requeue is durable. */
    lazy: boolean;
  },
): Promise<string[]> {
  const { items } = params;
  return db.transaction(async (client) => {
    if (params.lazy) await client.query("SET LOCAL synchronous_commit = off");
    await client.query(LOCK_CHAINS_OF_JOBS, [items.map((item) => item.id)]);
    return requeueIn(client, params);
  });
}

/**
 * The requeue statement of `requeueMany`, in the caller's transaction, which has locked the jobs' chains
 * (`LOCK_CHAINS_OF_JOBS`) first. Returns the attempts written, as "id:attempt".
 */
export async function requeueIn(
  client: pg.PoolClient,
  params: {
    items: Array<JobAttempt & { delayMs: number; result: JobResult }>;
    refund: AttemptRefund | "none";
    now: Date | "now";
  },
): Promise<string[]> {
  const { items } = params;
  const rows = await client.query<PgRow>({
    name: "opqueue_requeue_many",
    text: REQUEUE_MANY,
    values: [
      items.map((item) => item.id),
      items.map((item) => item.attempt),
      items.map((item) => Math.round(item.delayMs)),
      items.map((item) => JSON.stringify(item.result)),
      params.refund,
      params.now,
      items.map((item) => item.startedAt ?? null),
    ],
  });
  return rows.rows.map((row) => `${String(row["id"])}:${Number(row["old_attempt"])}`);
}

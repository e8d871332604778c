/**
 * Attempts a target takes asynchronously, on the PostgreSQL engine (docs/delivery.md, "Long jobs"): the mark of the
 * 202, the target's heartbeats, completes and fails, and the read of a job's asynchronous side. A target's call locks
 * the job's state row, judges the call by the rule both engines share (`externalCallRefusal`), and writes in the same
 * transaction, so a cancel, a rescue or another call cannot slip between the judgement and the write.
 */
import type pg from "pg";
import type { AttemptToken, JobAsyncState, JobAttempt, JobOutcome } from "../../job/job.js";
import { externalCallRefusal, type ExternalCallTarget } from "../external-calls.js";
import type { ExternalHeartbeatOutcome, ExternalSetStateOutcome } from "../store.js";
import type { PgConnection } from "./connection.js";
import { unstorable } from "./errors.js";
import { requeueIn } from "./outcomes.js";
import { requireMs, toJobRow, toMs, type PgRow } from "./rows.js";
import { ASYNC_STATE, CALL_TARGET, HEARTBEAT_EXTERNAL, MARK_ASYNC } from "./sql/async.js";
import { JOB_GET } from "./sql/jobs.js";
import { FINISH_MANY_DURABLY, LOCK_CHAINS_OF_JOBS } from "./sql/outcomes.js";

/** Marks a running attempt as taken asynchronously; returns whether it was written. */
export async function markAsync(
  db: PgConnection,
  params: { job: JobAttempt; tokenHash: string; now: Date | "now" },
): Promise<boolean> {
  const { job } = params;
  const rows = await db.query(
    MARK_ASYNC,
    [job.id, job.attempt, job.startedAt ?? null, params.now, params.tokenHash],
    "opqueue_mark_async",
  );
  return rows.length > 0;
}

/** The job a target's call names, its state row locked until the transaction ends; undefined if there is none. */
async function lockCallTarget(client: pg.PoolClient, id: string): Promise<ExternalCallTarget | undefined> {
  const row = (await client.query<PgRow>(CALL_TARGET, [id])).rows[0];
  if (row === undefined) return undefined;
  return {
    job: toJobRow(row),
    async: row["is_async"] === true,
    asyncTokenHash: (row["async_token_hash"] as string | null) ?? null,
  };
}

/** A target's heartbeat: judged and written in one transaction, committed lazily like a node's heartbeat. */
export async function heartbeatExternal(
  db: PgConnection,
  params: { id: string; attempt: number; token: AttemptToken; progressJson?: string | undefined; now: Date | "now" },
): Promise<ExternalHeartbeatOutcome> {
  if (unstorable(params.id)) return db.answerIfOpen({ kind: "not_found" });
  return db.transaction(async (client): Promise<ExternalHeartbeatOutcome> => {
    await client.query("SET LOCAL synchronous_commit = off");
    const target = await lockCallTarget(client, params.id);
    const refusal = externalCallRefusal({ target, attempt: params.attempt, token: params.token });
    if (refusal !== undefined || target === undefined) return refusal ?? { kind: "not_found" };
    const renewed = await client.query<PgRow>(HEARTBEAT_EXTERNAL, [
      target.job.seq,
      params.attempt,
      params.now,
      params.progressJson !== undefined,
      params.progressJson ?? null,
    ]);
    const row = renewed.rows[0];
    // The row is locked and was judged running that attempt: the update cannot miss it.
    if (row === undefined) throw new Error(`job ${params.id} changed under its lock`);
    return { kind: "renewed", heartbeatAt: requireMs(row["heartbeat_at"]), async: target.async };
  });
}

/**
 * A target's complete or fail: judged and written in one transaction, committed durably (the target is told). A retry
 * locks the job's chain first, as every requeue does, so a chain cancel running at the same time is seen.
 */
export async function setStateExternal(
  db: PgConnection,
  params: { outcome: JobOutcome; token: AttemptToken; now: Date | "now" },
): Promise<ExternalSetStateOutcome> {
  const { outcome, token, now } = params;
  if (unstorable(outcome.id)) return db.answerIfOpen({ kind: "not_found" });
  return db.transaction(async (client): Promise<ExternalSetStateOutcome> => {
    if (outcome.status === "retrying") await client.query(LOCK_CHAINS_OF_JOBS, [[outcome.id]]);
    const target = await lockCallTarget(client, outcome.id);
    const refusal = externalCallRefusal({ target, attempt: outcome.attempt, startedAt: outcome.startedAt, token });
    if (refusal !== undefined) return refusal;
    let written: boolean;
    if (outcome.status === "retrying") {
      const item = {
        id: outcome.id,
        attempt: outcome.attempt,
        startedAt: outcome.startedAt,
        delayMs: outcome.delayMs,
        result: outcome.result,
      };
      written = (await requeueIn(client, { items: [item], refund: "none", now })).length > 0;
    } else {
      const finished = await client.query<PgRow>({
        name: "opqueue_finish_many_durably",
        text: FINISH_MANY_DURABLY,
        values: [
          [outcome.id],
          [outcome.attempt],
          [outcome.status],
          [JSON.stringify(outcome.result)],
          now,
          [outcome.startedAt ?? null],
        ],
      });
      written = finished.rows.length > 0;
    }
    if (!written) throw new Error(`job ${outcome.id} changed under its lock`);
    const row = (await client.query<PgRow>(JOB_GET, [outcome.id])).rows[0];
    if (row === undefined) throw new Error(`job ${outcome.id} vanished under its lock`);
    return { kind: "written", job: toJobRow(row) };
  });
}

/** The asynchronous side of job `id`; undefined if there is no such job. */
export async function asyncState(db: PgConnection, params: { id: string }): Promise<JobAsyncState | undefined> {
  if (unstorable(params.id)) return db.answerIfOpen(undefined);
  const row = (await db.query(ASYNC_STATE, [params.id], "opqueue_async_state"))[0];
  if (row === undefined) return undefined;
  const attempt = row["async_attempt"] as number | null;
  const startedAt = toMs(row["async_started_at"]);
  const at = toMs(row["async_at"]);
  const progressAttempt = row["progress_attempt"] as number | null;
  const progressAt = toMs(row["progress_at"]);
  // node-postgres parses json into its value; SQL NULL (never reported) stays null, a JSON null is a value.
  const hasProgress = progressAttempt !== null && progressAt !== null;
  return {
    accepted: attempt === null || startedAt === null || at === null ? null : { attempt, startedAt, at },
    progress: hasProgress ? { attempt: progressAttempt, value: row["progress"], at: progressAt } : null,
  };
}

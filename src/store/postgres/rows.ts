/** Rows as node-postgres returns them, turned into the engine-independent shapes of the Store, and back. */
import type { JobAttemptRow, JobRow } from "../../job/job.js";
import type { JobResult } from "../../job/schemas.js";
import type { JobStatus } from "../../job/statuses.js";
import { createdJobRow } from "../created-row.js";
import type { ChainRow, JobInsertOutcome, JobInsertParams } from "../store.js";

/** A timestamptz (or its ISO text) as ms since the epoch; null stays null. */
export function toMs(value: unknown): number | null {
  if (value === null || value === undefined) return null;
  if (value instanceof Date) return value.getTime();
  return Date.parse(String(value));
}

/** `toMs` of a value that must be a time. */
export function requireMs(value: unknown): number {
  const ms = toMs(value);
  if (ms === null || Number.isNaN(ms)) throw new Error(`bad timestamp from the database: ${String(value)}`);
  return ms;
}

/** A row as node-postgres returns it (Dates, bigint as string) or as `row_to_json` gives it (ISO strings). */
export type PgRow = Record<string, unknown>;

/**
 * The fields of a claimed job in the order `opqueue_claim_batch` answers them, one JSON array per job (migration 0018):
 * the names are written here once, not in every job the database builds.
 */
export const CLAIM_FIELDS = [
  "seq",
  "id",
  "operationId",
  "status",
  "attempt",
  "maxAttempts",
  "priority",
  "runAt",
  "createdAt",
  "startedAt",
  "finishedAt",
  "heartbeatAt",
  "dedupeKey",
  "concurrencyKey",
  "rateKey",
  "enqueuedByOperationId",
  "parentJobId",
  "originalRequestId",
  "userId",
  "authority",
  "request",
  "result",
  "traceparent",
  "expiresAt",
  "callbacks",
  "claimCount",
] as const satisfies ReadonlyArray<keyof JobRow>;

/** True only while `CLAIM_FIELDS` names every field of JobRow: a field added to JobRow alone fails to compile here. */
export const CLAIM_FIELDS_COMPLETE: [Exclude<keyof JobRow, (typeof CLAIM_FIELDS)[number]>] extends [never]
  ? true
  : never = true;

/** A claimed job as `opqueue_claim_batch` answers it (an array in `CLAIM_FIELDS` order), as a JobRow. */
export function fromClaimFields(values: unknown[]): JobRow {
  const row: Record<string, unknown> = {};
  CLAIM_FIELDS.forEach((name, index) => (row[name] = values[index] ?? null));
  return row as unknown as JobRow;
}

/** A row of the view `jobs` (or a RETURNING of its columns) as a JobRow. */
export function toJobRow(row: PgRow): JobRow {
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
    rateKey: (row["rate_key"] as string | null) ?? null,
    enqueuedByOperationId: row["enqueued_by_operation_id"] as string,
    parentJobId: (row["parent_job_id"] as string | null) ?? null,
    originalRequestId: row["original_request_id"] as string,
    userId: row["user_id"] as string,
    authority: row["authority"] as JobRow["authority"],
    request: row["request"] as JobRow["request"],
    result: (row["result"] as JobResult | null) ?? null,
    traceparent: (row["traceparent"] as string | null | undefined) ?? null,
    expiresAt: toMs(row["expires_at"] ?? null),
    callbacks: (row["callbacks"] as JobRow["callbacks"] | undefined) ?? null,
    claimCount: Number(row["claim_count"]),
  };
}

/** A row of `chains` as a ChainRow. */
export function toChainRow(row: PgRow): ChainRow {
  return {
    originalRequestId: row["original_request_id"] as string,
    jobsCreated: Number(row["jobs_created"]),
    createdAt: toMs(row["created_at"] ?? null),
    settledAt: toMs(row["settled_at"] ?? null),
    cancelledAt: toMs(row["cancelled_at"] ?? null),
    cancelledBy: (row["cancelled_by"] as string | null | undefined) ?? null,
    onSettled: (row["on_settled"] as ChainRow["onSettled"] | undefined) ?? null,
    onSettledFiredAt: toMs(row["on_settled_fired_at"] ?? null),
  };
}

/** The argument of `opqueue_insert_job`. */
export function insertArgument(params: JobInsertParams): object {
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
    rate_key: params.rateKey,
    enqueued_by_operation_id: params.enqueuedByOperationId,
    parent_job_id: params.parentJobId,
    original_request_id: params.originalRequestId,
    user_id: params.userId,
    authority: params.authority,
    request: params.request,
    spawn_cap: params.spawnCap,
    traceparent: params.traceparent,
    ...(params.callbacks === null ? {} : { callbacks: params.callbacks }),
    ...(params.onSettled === undefined ? {} : { on_settled: { ...params.onSettled, job_id: params.id } }),
    ...(params.expiry === null
      ? {}
      : "at" in params.expiry
        ? { expires_at: new Date(params.expiry.at).toISOString() }
        : { expires_in_ms: params.expiry.delayMs }),
    ...(params.idempotency
      ? {
          idempotency: {
            scope: params.idempotency.scope,
            key: params.idempotency.key,
            fingerprint: params.idempotency.fingerprint,
            window_ms: params.idempotency.windowMs,
          },
        }
      : {}),
  };
}

/**
 * An item of `opqueue_insert_batch`'s batch: `insertArgument`'s, with the authority, the request and the callbacks as
 * strings of their JSON, which the database stores as they are written here, parsing the batch once.
 */
export function batchArgument(params: JobInsertParams): object {
  return {
    ...insertArgument(params),
    authority: JSON.stringify(params.authority),
    request: JSON.stringify(params.request),
    ...(params.callbacks === null ? {} : { callbacks: JSON.stringify(params.callbacks) }),
    // Left out of the batch's notification (migration 0024).
    ...(params.announce === false ? { quiet: true } : {}),
  };
}

/**
 * What `opqueue_insert_job` answers: a created job as what the caller cannot know (its seq, its times in ms, whether
 * its chain was cancelled), others whole.
 */
export interface InsertAnswer {
  kind: string;
  seq?: number;
  created_at?: number;
  run_at?: number;
  expires_at?: number | null;
  chain_cancelled?: boolean;
  job?: PgRow;
}

/** What `opqueue_insert_job` answered, as the Store says it. */
export function toInsertOutcome(answer: InsertAnswer, params: JobInsertParams): JobInsertOutcome {
  switch (answer.kind) {
    case "created":
      return {
        kind: "created",
        job: createdJobRow(params, {
          seq: Number(answer.seq),
          createdAt: Number(answer.created_at),
          runAt: Number(answer.run_at),
          expiresAt: answer.expires_at === null || answer.expires_at === undefined ? null : Number(answer.expires_at),
          chainCancelled: answer.chain_cancelled === true,
        }),
      };
    case "deduplicated":
      return { kind: "deduplicated", job: toJobRow(answer.job ?? {}) };
    case "dedupe_conflict":
      return { kind: "dedupe_conflict", holder: toJobRow(answer.job ?? {}) };
    case "spawn_cap_exceeded":
      return { kind: "spawn_cap_exceeded" };
    case "idempotent_replay":
      return { kind: "idempotent_replay", job: toJobRow(answer.job ?? {}) };
    case "idempotency_conflict":
      return { kind: "idempotency_conflict", job: toJobRow(answer.job ?? {}) };
    case "chain_exists":
      return { kind: "chain_exists" };
    default:
      throw new Error(`opqueue_insert_job answered an unknown kind "${answer.kind}"`);
  }
}

/** A row of `job_attempts`. */
export function toAttemptRow(row: PgRow): JobAttemptRow {
  return {
    attempt: Number(row["attempt"]),
    startedAt: toMs(row["started_at"]),
    finishedAt: requireMs(row["finished_at"]),
    outcome: row["outcome"] as JobStatus,
    statusCode: row["status_code"] === null ? null : Number(row["status_code"]),
    errorBody: (row["error_body"] as string | null) ?? null,
  };
}

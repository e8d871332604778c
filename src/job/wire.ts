/** The wire form of a stored job (the job on the wire (docs/api.md)), without the evidence kept in its authority. */
import type { JobRow } from "./job.js";
import type { Authority, Job } from "./schemas.js";
import type { RequestRedaction } from "./redaction.js";

/** An RFC 3339 UTC date with milliseconds. */
export function formatTime(ms: number): string {
  return new Date(ms).toISOString();
}

/** The authority as clients and targets see it: the stored grant without its evidence. */
export function wireAuthority(stored: JobRow["authority"]): Authority {
  switch (stored.kind) {
    case "request":
      return { kind: "request", request_id: stored.request_id, user_id: stored.user_id };
    case "resource":
      return {
        kind: "resource",
        resource_id: stored.resource_id,
        resource_kind: stored.resource_kind,
        user_id: stored.user_id,
      };
    case "cron":
      return { kind: "cron", cron_job_name: stored.cron_job_name, user_id: stored.user_id };
  }
}

/**
 * The job as clients see it: exactly the fields of docs/api.md, "The job on the wire", its request as `redaction`
 * shows it.
 */
export function toWireJob(row: JobRow, redaction: RequestRedaction): Job {
  return {
    id: row.id,
    operation_id: row.operationId,
    status: row.status,
    attempt: row.attempt,
    max_attempts: row.maxAttempts,
    priority: row.priority,
    run_at: formatTime(row.runAt),
    created_at: formatTime(row.createdAt),
    started_at: row.startedAt === null ? null : formatTime(row.startedAt),
    finished_at: row.finishedAt === null ? null : formatTime(row.finishedAt),
    dedupe_key: row.dedupeKey,
    concurrency_key: row.concurrencyKey,
    enqueued_by_operation_id: row.enqueuedByOperationId,
    parent_job_id: row.parentJobId,
    original_request_id: row.originalRequestId,
    user_id: row.userId,
    authority: wireAuthority(row.authority),
    request: redaction.shown(row.operationId, row.request),
    result: row.result,
  };
}

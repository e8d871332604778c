/** The row an insert creates, shared by both engines. */
import type { JobRow } from "../job/job.js";
import type { JobInsertParams } from "./store.js";

/**
 * The row an insert creates, from what was written: `pending`, or `cancelled` (`cancelled-by-chain`) when its chain
 * was cancelled. The SQLite engine builds it rather than reading it back, and its store rebuilds it from the seq
 * the thread answers, so a created job's parameters never travel back across the thread boundary.
 */
export function createdJobRow(
  params: JobInsertParams,
  written: { seq: number; createdAt: number; runAt: number; expiresAt: number | null; chainCancelled: boolean },
): JobRow {
  const { seq, createdAt, runAt, expiresAt, chainCancelled } = written;
  return {
    seq,
    id: params.id,
    operationId: params.operationId,
    status: chainCancelled ? "cancelled" : "pending",
    attempt: 0,
    maxAttempts: params.maxAttempts,
    priority: params.priority,
    runAt,
    createdAt,
    startedAt: null,
    finishedAt: chainCancelled ? createdAt : null,
    heartbeatAt: null,
    dedupeKey: params.dedupeKey,
    concurrencyKey: params.concurrencyKey,
    rateKey: params.rateKey,
    enqueuedByOperationId: params.enqueuedByOperationId,
    parentJobId: params.parentJobId,
    originalRequestId: params.originalRequestId,
    userId: params.userId,
    authority: params.authority,
    request: params.request,
    result: chainCancelled ? { error_body: null, terminal_reason: "cancelled-by-chain" } : null,
    traceparent: params.traceparent,
    expiresAt,
    callbacks: params.callbacks,
    claimCount: 0,
  };
}

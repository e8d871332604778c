/**
 * Outcome writes of the SQLite engine, inside the caller's transaction: each conditional on the job still running that
 * attempt of that claim, and each written attempt logged and counted in its minute (statements in sql/outcomes.ts).
 */
import type { JobOutcome } from "../../job/job.js";
import type { JobResult } from "../../job/schemas.js";
import { ATTEMPT_COUNT_MS } from "../attempt-buckets.js";
import type { AttemptRefund } from "../store.js";
import type { Statements } from "./statements.js";

/** Writes each attempt's outcome if its job still runs that attempt; answers, for each, whether it did. */
export function setStateIfRunningMany(s: Statements, params: { outcomes: JobOutcome[]; now: number }): boolean[] {
  return params.outcomes.map((outcome) => setStateIfRunning(s, { outcome, now: params.now }));
}

/** Writes one attempt's outcome if the job still runs that attempt; returns whether it did. */
export function setStateIfRunning(s: Statements, params: { outcome: JobOutcome; now: number }): boolean {
  const { outcome, now } = params;
  if (outcome.status === "retrying") {
    return requeueOne(s, { ...outcome, runAt: now + outcome.delayMs, now, refund: "none" });
  }
  const { id, attempt } = outcome;
  const startedAt = outcome.startedAt ?? null;
  if (outcome.status === "dead" && chainCancelled(s, id)) {
    return endByChain(s, { id, attempt, startedAt, result: outcome.result, now });
  }
  return finishOne(s, { id, attempt, startedAt, status: outcome.status, result: outcome.result, now });
}

/** Whether the chain of job `id` was cancelled: a failed attempt of it then ends the job `cancelled-by-chain`. */
function chainCancelled(s: Statements, id: string): boolean {
  return s.chainCancelledFor.get(id) != null;
}

/** Ends a failed attempt of a job whose chain was cancelled: `cancelled`, keeping what the attempt answered. */
function endByChain(
  s: Statements,
  options: {
    id: string;
    attempt: number;
    startedAt: number | null;
    result: JobResult;
    now: number;
  },
): boolean {
  const result: JobResult = { ...options.result, terminal_reason: "cancelled-by-chain" };
  return finishOne(s, { ...options, status: "cancelled", result });
}

/** Ends a running attempt with a terminal status, and records the attempt. */
function finishOne(
  s: Statements,
  options: {
    id: string;
    attempt: number;
    startedAt: number | null;
    status: string;
    result: JobResult;
    now: number;
  },
): boolean {
  const { id, attempt, now } = options;
  const written =
    s.finish.run({
      id,
      attempt,
      started_at: options.startedAt,
      status: options.status,
      result: JSON.stringify(options.result),
      now,
    }).changes > 0;
  if (written) recordAttempt(s, { id, attempt, now });
  return written;
}

/** Logs the attempt a job row just ended, and counts it in its minute. */
function recordAttempt(s: Statements, options: { id: string; attempt: number; now: number }): void {
  s.recordAttempt.run(options);
  s.countAttempt.run({ id: options.id, minute: options.now - (options.now % ATTEMPT_COUNT_MS) });
}

/** Sends a running attempt back to the queue at `runAt`, or ends it `cancelled-by-chain` if its chain was cancelled. */
export function requeueOne(
  s: Statements,
  options: {
    id: string;
    attempt: number;
    startedAt?: number | null;
    runAt: number;
    result: JobResult;
    now: number;
    refund: AttemptRefund | "none";
  },
): boolean {
  const { id, attempt, now } = options;
  const startedAt = options.startedAt ?? null;
  if (chainCancelled(s, id)) return endByChain(s, { id, attempt, startedAt, result: options.result, now });
  const written =
    s.requeue.run({
      id,
      attempt,
      started_at: startedAt,
      run_at: options.runAt,
      result: JSON.stringify(options.result),
      refund: options.refund,
    }).changes > 0;
  if (written) recordAttempt(s, { id, attempt, now });
  return written;
}

/**
 * Outcome writes of the SQLite engine, inside the caller's transaction: each conditional on the job still running that
 * attempt of that claim, and each written attempt logged and counted in its minute.
 */
import type { JobOutcome } from "../../job/job.js";
import type { JobResult } from "../../job/schemas.js";
import { ATTEMPT_COUNT_MS } from "../attempt-buckets.js";
import type { AttemptRefund } from "../store.js";
import type { Statements } from "./statements.js";

/** The engine's outcome writes, over its prepared statements. */
export class OutcomeWrites {
  constructor(private readonly s: Statements) {}

  /** Writes one attempt's outcome if the job still runs that attempt; returns whether it did. */
  setStateIfRunning(outcome: JobOutcome, now: number): boolean {
    if (outcome.status === "retrying") {
      return this.requeueOne({ ...outcome, runAt: now + outcome.delayMs, now, refund: "none" });
    }
    const { id, attempt } = outcome;
    const startedAt = outcome.startedAt ?? null;
    if (outcome.status === "dead" && this.chainCancelled(id)) {
      return this.endByChain({ id, attempt, startedAt, result: outcome.result, now });
    }
    return this.finishOne({ id, attempt, startedAt, status: outcome.status, result: outcome.result, now });
  }

  /** Whether the chain of job `id` was cancelled: a failed attempt of it then ends the job `cancelled-by-chain`. */
  private chainCancelled(id: string): boolean {
    return this.s.chainCancelledFor.get(id) != null;
  }

  /** Ends a failed attempt of a job whose chain was cancelled: `cancelled`, keeping what the attempt answered. */
  private endByChain(options: {
    id: string;
    attempt: number;
    startedAt: number | null;
    result: JobResult;
    now: number;
  }): boolean {
    const result: JobResult = { ...options.result, terminal_reason: "cancelled-by-chain" };
    return this.finishOne({ ...options, status: "cancelled", result });
  }

  /** Ends a running attempt with a terminal status, and records the attempt. */
  private finishOne(options: {
    id: string;
    attempt: number;
    startedAt: number | null;
    status: string;
    result: JobResult;
    now: number;
  }): boolean {
    const { id, attempt, now } = options;
    const written =
      this.s.finish.run({
        id,
        attempt,
        started_at: options.startedAt,
        status: options.status,
        result: JSON.stringify(options.result),
        now,
      }).changes > 0;
    if (written) this.recordAttempt({ id, attempt, now });
    return written;
  }

  /** Logs the attempt a job row just ended, and counts it in its minute. */
  private recordAttempt(options: { id: string; attempt: number; now: number }): void {
    this.s.recordAttempt.run(options);
    this.s.countAttempt.run({ id: options.id, minute: options.now - (options.now % ATTEMPT_COUNT_MS) });
  }

  /** Sends a running attempt back to the queue at `runAt`, or ends it `cancelled-by-chain` if its chain was cancelled. */
  requeueOne(options: {
    id: string;
    attempt: number;
    startedAt?: number | null;
    runAt: number;
    result: JobResult;
    now: number;
    refund: AttemptRefund | "none";
  }): boolean {
    const { id, attempt, now } = options;
    const startedAt = options.startedAt ?? null;
    if (this.chainCancelled(id)) return this.endByChain({ id, attempt, startedAt, result: options.result, now });
    const written =
      this.s.requeue.run({
        id,
        attempt,
        started_at: startedAt,
        run_at: options.runAt,
        result: JSON.stringify(options.result),
        refund: options.refund,
      }).changes > 0;
    if (written) this.recordAttempt({ id, attempt, now });
    return written;
  }
}

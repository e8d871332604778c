/**
 * The SQLite engine's upkeep, run by the maintenance services: the running jobs whose lease expired (for the
 * rescuer), waiting jobs past their expiry, and retention: finished jobs, idempotency keys, cron ticks, attempt
 * counts and idle rate buckets (statements in sql/maintenance.ts, sql/outcomes.ts and sql/flow.ts).
 */
import type { JobRow, LeaseLimits } from "../../job/job.js";
import { toJobRow } from "./rows.js";
import type { Statements } from "./statements.js";

/** Running jobs whose lease expired, each held to its own operation's lease. */
export function listExpired(s: Statements, params: { lease: LeaseLimits; limit: number; now: number }): JobRow[] {
  const { lease } = params;
  return s.expired
    .all({
      now: params.now,
      leases: JSON.stringify(lease.byOperation),
      async_leases: JSON.stringify(lease.asyncByOperation ?? {}),
      default_ms: lease.defaultMs,
      limit: params.limit,
    })
    .map(toJobRow);
}

/** Cancels up to `limit` waiting jobs past their expiry (`expired`); answers them. */
export function expireMany(s: Statements, params: { limit: number; now: number }): JobRow[] {
  return s.expire.all({ now: params.now, limit: params.limit }).map(toJobRow);
}

/** Deletes up to `limit` finished jobs older than `olderThanMs`, with their attempts, actions and emptied chains. */
export function deleteFinishedMany(s: Statements, params: { olderThanMs: number; limit: number; now: number }): number {
  const before = params.now - params.olderThanMs;
  const deleted = s.deleteFinished.all({ before, now: params.now, limit: params.limit });
  for (const row of deleted) {
    s.deleteAttempts.run(row.id);
    s.deleteActions.run(row.id);
  }
  for (const rid of new Set(deleted.map((row) => row.original_request_id))) {
    s.deleteEmptyChain.run(rid);
  }
  return deleted.length;
}

/** Forgets up to `limit` expired idempotency keys. */
export function idempotencyKeyDeleteMany(s: Statements, params: { limit: number; now: number }): number {
  return s.deleteIdempotencyKeys.run({ now: params.now, limit: params.limit }).changes;
}

/** Forgets cron ticks older than `olderThanMs`, but the newest of each name. */
export function cronTickDeleteMany(s: Statements, params: { olderThanMs: number; now: number }): number {
  return s.deleteTicks.run({ before: params.now - params.olderThanMs }).changes;
}

/** Forgets the attempt counts of minutes older than `olderThanMs`. */
export function attemptCountDeleteMany(s: Statements, params: { olderThanMs: number; now: number }): number {
  return s.deleteAttemptCounts.run({ before: params.now - params.olderThanMs }).changes;
}

/** Forgets rate buckets that are full again (their theoretical arrival time is past). */
export function rateBucketDeleteMany(s: Statements, params: { now: number }): number {
  return s.deleteBuckets.run(params.now).changes;
}

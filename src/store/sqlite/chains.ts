/**
 * Chains on the SQLite engine (docs/chains.md): each job's on_complete/on_failed callback and each chain's on_settled
 * enqueued exactly once (cleared or fired in the transaction that inserts the job), the sweep of chains that settled,
 * and the reads of a chain (statements in sql/maintenance.ts, as PostgreSQL's are).
 */
import type { JobRow } from "../../job/job.js";
import { chainJobCountsOf } from "../chain-counts.js";
import type { ChainJobCounts, ChainRow, JobInsertOutcome, JobInsertParams } from "../store.js";
import { insertOne } from "./insert.js";
import { toChainRow, toJobRow } from "./rows.js";
import type { Statements } from "./statements.js";

/** Jobs whose callback is still to be enqueued, oldest first. */
export function callbackDueList(s: Statements, params: { limit: number }): JobRow[] {
  return s.callbacksDue.all(Math.max(0, params.limit)).map(toJobRow);
}

/**
 * Clears a job's pending callback and inserts its callback job (none when `insert` is null), inside the caller's
 * transaction; `skipped` when another sweep cleared it first.
 */
export function callbackEnqueue(
  s: Statements,
  params: { jobId: string; status: "succeeded" | "dead"; insert: JobInsertParams | null; now: number },
): JobInsertOutcome | { kind: "skipped" } | { kind: "cleared" } {
  if (s.clearCallback.run({ id: params.jobId, status: params.status }).changes === 0) return { kind: "skipped" };
  return params.insert === null ? { kind: "cleared" } : insertOne(s, { insert: params.insert, now: params.now });
}

/** Chains that settled with an on_settled not yet fired. */
export function settledDueList(s: Statements, params: { limit: number }): ChainRow[] {
  return s.settledDue.all(Math.max(0, params.limit)).map(toChainRow);
}

/**
 * Fires a settled chain's on_settled and inserts its job (none when `insert` is null), inside the caller's
 * transaction; `skipped` when it was fired already or the chain is no longer settled.
 */
export function onSettledEnqueue(
  s: Statements,
  params: { originalRequestId: string; insert: JobInsertParams | null; now: number },
): JobInsertOutcome | { kind: "skipped" } | { kind: "cleared" } {
  const { now } = params;
  if (s.fireOnSettled.run({ rid: params.originalRequestId, now }).changes === 0) return { kind: "skipped" };
  return params.insert === null ? { kind: "cleared" } : insertOne(s, { insert: params.insert, now });
}

/**
 * The chains that settled among the jobs finished since the named cursor, which moves past them: each chain once
 * per settling.
 */
export function settledSince(
  s: Statements,
  params: { cursor: string; limit: number; now: number },
): Array<{ originalRequestId: string; startedAt: number; settledAt: number }> {
  const cursor = s.cursor.get(params.cursor);
  const from = cursor ?? { at: params.now, seq: 0 };
  const finished = s.finishedSince.all({ at: from.at, seq: from.seq, limit: Math.max(1, params.limit) });
  const last = finished.at(-1);
  // A pass that read nothing leaves a cursor where it was, writing nothing.
  if (!cursor || last)
    s.setCursor.run({ name: params.cursor, at: last?.finished_at ?? from.at, seq: last?.seq ?? from.seq });
  // The chains of the jobs read, each with its latest finish among them: if it settled, that was its last job.
  const lastFinished = new Map<string, number>();
  for (const row of finished) {
    lastFinished.set(
      row.original_request_id,
      Math.max(lastFinished.get(row.original_request_id) ?? 0, row.finished_at),
    );
  }
  const settled: Array<{ originalRequestId: string; startedAt: number; settledAt: number }> = [];
  for (const [rid, settledAt] of lastFinished) {
    if (s.chainActive.get(rid) !== undefined) continue;
    const chain = s.chain.get(rid);
    if (!chain) continue;
    // A chain of one job settles with it; a longer one is reported once per settling (its settled_at, cleared
    // by the next job it gains, says whether it was).
    if (chain.jobs_created > 1 && s.markSettled.run({ rid, at: settledAt }).changes === 0) continue;
    const startedAt = chain.created_at ?? s.chainFirstCreated.get(rid) ?? settledAt;
    settled.push({ originalRequestId: rid, startedAt, settledAt });
  }
  return settled;
}

/** A chain's row. */
export function chainGet(s: Statements, params: { originalRequestId: string }): ChainRow | undefined {
  const row = s.chain.get(params.originalRequestId);
  return row ? toChainRow(row) : undefined;
}

/** How a chain's jobs stand, by status. */
export function chainJobCounts(s: Statements, params: { originalRequestId: string }): ChainJobCounts {
  const groups = s.chainJobCounts.all(params.originalRequestId);
  return chainJobCountsOf(
    groups.map((group) => ({
      status: group.status,
      jobs: group.jobs,
      firstCreatedAt: group.first_created_at,
      lastFinishedAt: group.last_finished_at,
    })),
  );
}

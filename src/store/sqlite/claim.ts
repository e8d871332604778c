/**
 * The SQLite claim. No `SKIP LOCKED`: SQLite has one writer, so a claim inside `BEGIN IMMEDIATE` (the caller's
 * transaction) cannot race another claim. At most one job per concurrency key, none whose key is already running.
 */
import type { Statements } from "./statements.js";

/**
 * Claims up to `limit` due jobs in claim order; answers the JSON text of their rows and whether a backlog lasts (the
 * claim found a full page due: the next one goes straight to the claim order).
 */
export function claimMany(
  s: Statements,
  options: { limit: number; now: number; backlogged: boolean },
): { json: string; backlogged: boolean } {
  const { limit, now } = options;
  let backlogged = options.backlogged;
  const heldKeys = new Set(s.runningKeys.all());
  const chosen: number[] = [];
  // Candidates come in claim order; skipping a held key keeps looking further down, in bounded pages, so a long run
  // of jobs for one busy key cannot starve the others.
  const pageSize = Math.max(16, limit * 2);
  const take = (candidates: Array<{ seq: number; concurrency_key: string | null }>) => {
    for (const candidate of candidates) {
      if (chosen.length === limit) return;
      if (candidate.concurrency_key !== null) {
        if (heldKeys.has(candidate.concurrency_key)) continue;
        heldKeys.add(candidate.concurrency_key);
      }
      chosen.push(candidate.seq);
    }
  };
  // Fewer due jobs than a page: that is all of them, so put them in claim order here. While a backlog lasts (the last
  // claim found a full page due), that look is skipped: it would find a full page again.
  const due = backlogged ? undefined : s.dueCandidates.all({ now, limit: pageSize });
  if (due !== undefined && due.length < pageSize) {
    take(due.sort((a, b) => b.priority - a.priority || a.run_at - b.run_at || a.seq - b.seq));
  } else {
    backlogged = true;
    for (let page = 0; page < 16 && chosen.length < limit; page++) {
      const candidates = s.claimCandidates.all({ now, limit: pageSize, offset: page * pageSize });
      take(candidates);
      if (candidates.length < pageSize) {
        if (page === 0) backlogged = false;
        break;
      }
    }
  }
  const claimed: string[] = [];
  for (const seq of chosen) {
    if (s.claimOne.run({ seq, now }).changes === 0) continue;
    const row = s.claimedJson.get(seq);
    if (row !== undefined) claimed.push(row);
  }
  return { json: `[${claimed.join(",")}]`, backlogged };
}

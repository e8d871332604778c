/** The claim, and the next run time it leaves behind. */
import { LAZY_COMMIT } from "./common.js";

/**
 * How many candidate rows a claim of `limit` jobs locks: twice as many (at least 16) leaves room for candidates
 * that share a concurrency key (one per key is taken). Every row locked costs a WAL record, and a node's claims
 * in flight at once skip each other's locked rows, so locking four times as many made claims measurably slower
 * (6–8 ms → 9–12 ms per claim of ~34 jobs, three in flight, in the drain benchmark); a batch short of jobs only
 * costs another claim.
 */
export function claimCandidates(limit: number): number {
  return Math.max(16, limit * 2);
}

/**
 * The claim: `opqueue_claim_batch` (migrations/postgres/current/functions/opqueue_claim_batch.sql, where
 * docs/flow-control.md's rules are written out), a function so that it keeps one plan for the connection's life instead
 * of planning a statement on every call. Each claimed job comes back as one JSON text, an array of the JobRow's fields in
 * `CLAIM_FIELDS` order (times in ms), which one JSON.parse and a walk of the names turn into the row: node-postgres's
 * parsing of 21 columns (five timestamps among them) cost the node more, and the names written out in every job cost the
 * database more (migration 0018). A last row `{"cursor": [operation, lane]}` says where the claim stopped visiting
 * lanes, for the next claim to go on from. $1 now, $2 limit, $3 how many candidates to look at, $4 and $5 the cursor.
 */
export const CLAIM = `WITH ${LAZY_COMMIT} SELECT c::text AS job FROM lazy_commit, opqueue_claim_batch($1, $2, $3, $4, $5) AS c`;

/**
 * When a claim may next find a job (`opqueue_next_run_at`, migrations/postgres/current/functions/): jobs behind a
 * running key, a closed gate, are not counted; counted, they would make every idle node's timer fire at once, again
 * and again, until the key is free. The node finishing the key's job wakes itself and claims the next. $1 now.
 */
export const NEXT_RUN_AT = "SELECT opqueue_next_run_at($1) AS next";

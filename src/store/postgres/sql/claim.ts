/** The claim, and the next run time it leaves behind. */
import { CLAIMABLE, epochMs, LAZY_COMMIT } from "./common.js";

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
 * The claim: `opqueue_claim` (functions/opqueue_claim.sql), a function so that it keeps one plan for the connection's
 * life instead of planning a statement on every call. Candidates in claim order (or, when fewer are due than wanted, every due
 * job), locked with SKIP LOCKED so concurrent claimers on other nodes take other rows instead of waiting; keys
 * already running are skipped; then one job per key, the first in claim order, and only keys whose
 * transaction-scoped advisory lock this claim gets (another node claiming the same key right now holds it).
 * Each claimed job comes back as one JSON text already shaped as a JobRow (times in ms), which one JSON.parse
 * turns into the row: node-postgres's parsing of 21 columns (five timestamps among them) cost more. Measured on
 * the drain, alternated: 80 → 74 µs of the main thread's CPU per job, no difference in the server's CPU.
 * $1 now, $2 limit, $3 how many candidates to look at.
 */
export const CLAIM = `WITH ${LAZY_COMMIT} SELECT json_build_object(
    'seq', c.seq, 'id', c.id, 'operationId', c.operation_id, 'status', c.status, 'attempt', c.attempt,
    'maxAttempts', c.max_attempts, 'priority', c.priority, 'runAt', ${epochMs("c.run_at")},
    'createdAt', ${epochMs("c.created_at")}, 'startedAt', ${epochMs("c.started_at")},
    'finishedAt', ${epochMs("c.finished_at")}, 'heartbeatAt', ${epochMs("c.heartbeat_at")},
    'dedupeKey', c.dedupe_key, 'concurrencyKey', c.concurrency_key, 'enqueuedByOperationId', c.enqueued_by_operation_id,
    'parentJobId', c.parent_job_id, 'originalRequestId', c.original_request_id, 'userId', c.user_id,
    'authority', c.authority, 'request', c.request, 'result', c.result)::text AS job
  FROM lazy_commit, opqueue_claim($1, $2, $3) AS c`;

/**
 * The earliest run time of a claimable job. Jobs behind a running key are not claimable: counted, they would make every
 * idle node's timer fire at once, again and again, until the key is free. The node finishing the key's job wakes
 * itself and claims the next.
 */
export const NEXT_RUN_AT = `SELECT s.run_at AS next FROM job_state s WHERE s.${CLAIMABLE}
    AND (s.concurrency_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM job_state r WHERE r.concurrency_key = s.concurrency_key AND r.status = 'running'))
  ORDER BY s.run_at LIMIT 1`;

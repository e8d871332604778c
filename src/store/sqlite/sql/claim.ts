/**
 * The claim (claims.ts): the candidates it reads, in claim order or lane by lane, the lanes a rate holds (migration
 * 0009), the write that takes a job and the JSON it answers; and the next run time a claim leaves behind.
 */
import type Database from "better-sqlite3";
import { prepare, preparePluck } from "../prepared.js";
import { CLAIMABLE, RUNNING_KEYS } from "./common.js";

/** A claim candidate: what the pick needs of a claimable job. */
export interface Candidate {
  seq: number;
  operation_id: string;
  lane: string;
  concurrency_key: string | null;
  priority: number;
  run_at: number;
}

const CANDIDATE_COLUMNS = "seq, operation_id, lane, concurrency_key, priority, run_at";

/** A lane found by `nextLane`, with its first entry in claim order. */
export interface NextLane {
  operation_id: string;
  lane: string;
  /** The lane's highest priority, and the earliest run time of its jobs at it. */
  priority: number;
  run_at: number;
}

/** Prepares the claim's statements on `db`. */
export function prepareClaimStatements(db: Database.Database) {
  return {
    // Run, then read back by rowid (claimedJson): cheaper than RETURNING *.
    claimOne: prepare<{ seq: number; now: number }>(
      db,
      `UPDATE jobs SET status = 'running', attempt = attempt + 1, started_at = :now, heartbeat_at = :now, held = 0,
         claim_count = claim_count + 1
       WHERE seq = :seq AND ${CLAIMABLE}`,
    ),
    // A claimed row as the JSON of its JobRow, built by SQLite: one string per row rather than an object of 21
    // properties, and a string crosses to the calling thread as a copy, where an object graph is cloned.
    claimedJson: preparePluck<[number], string>(
      db,
      `SELECT json_object('seq', seq, 'id', id, 'operationId', operation_id, 'status', status, 'attempt', attempt,
           'maxAttempts', max_attempts, 'priority', priority, 'runAt', run_at, 'createdAt', created_at,
           'startedAt', started_at, 'finishedAt', finished_at, 'heartbeatAt', heartbeat_at, 'dedupeKey', dedupe_key,
           'concurrencyKey', concurrency_key, 'rateKey', rate_key, 'enqueuedByOperationId', enqueued_by_operation_id,
           'parentJobId', parent_job_id, 'originalRequestId', original_request_id, 'userId', user_id,
           'authority', json(authority), 'request', json(request), 'result', json(result),
           'traceparent', traceparent, 'expiresAt', expires_at, 'callbacks', json(callbacks),
           'claimCount', claim_count)
         FROM jobs WHERE seq = ?`,
    ),
    // Jobs whose key is running are not claimable (docs/delivery.md, "Dispatch"), so they do not count: were they
    // counted, a due job behind a busy key would make the dispatcher's timer fire at once, again and again, until the
    // key is free. The delivery that frees the key wakes the dispatcher instead.
    nextRunAt: preparePluck<{ now: number }, number | null>(
      db,
      // ORDER BY ... LIMIT 1 walks the jobs_run_at index and stops at the first unblocked job.
      `SELECT run_at FROM jobs INDEXED BY jobs_run_at WHERE ${CLAIMABLE}
           AND (expires_at IS NULL OR expires_at > :now)
           AND (concurrency_key IS NULL OR concurrency_key NOT IN (
             ${RUNNING_KEYS}))
         ORDER BY run_at LIMIT 1`,
    ),
    // Lanes in (operation, lane) order, each found by probes of jobs_lane: the next lane after a given one (in its
    // operation, else the first lane of the operations after it). (operation, lane) > (a, b) as two probes in one
    // statement: SQLite seeks a row value's first column only, and would walk every job of the last lane to find nothing
    // after it (a drain of one user's jobs went at half speed). With the lane comes its first entry in claim order (its
    // highest priority and that priority's earliest run time), so a lane with nothing due at that priority is read no
    // further there.
    nextLane: prepare<{ operation_id: string; lane: string }, NextLane>(
      db,
      `SELECT n.operation_id, n.lane, n.priority, n.run_at FROM (
         SELECT * FROM (SELECT operation_id, lane, priority, run_at FROM jobs INDEXED BY jobs_lane
                        WHERE status IN ('pending', 'retrying') AND held = 0 AND operation_id = :operation_id
                          AND lane > :lane
                        ORDER BY operation_id, lane, priority DESC, run_at LIMIT 1)
         UNION ALL
         SELECT * FROM (SELECT operation_id, lane, priority, run_at FROM jobs INDEXED BY jobs_lane
                        WHERE status IN ('pending', 'retrying') AND held = 0 AND operation_id > :operation_id
                        ORDER BY operation_id, lane, priority DESC, run_at LIMIT 1)
         ORDER BY operation_id, lane LIMIT 1) AS n`,
    ),
    // A lane's head is read one priority at a time: with the priority fixed, run_at <= :now bounds the index range, so
    // a lane of jobs not yet due costs a probe, not a walk of all of them (a drain beside a backlog of jobs due in an
    // hour went at a tenth of its speed). The next priority down comes with its earliest run time, by one probe.
    lanePriorityBelow: prepare<
      { operation_id: string; lane: string; below: number },
      { priority: number; run_at: number }
    >(
      db,
      `SELECT priority, run_at FROM jobs INDEXED BY jobs_lane
       WHERE status IN ('pending', 'retrying') AND held = 0 AND operation_id = :operation_id AND lane = :lane AND priority < :below
       ORDER BY priority DESC, run_at LIMIT 1`,
    ),
    laneHeadAt: prepare<
      { operation_id: string; lane: string; priority: number; now: number; closed: string; limit: number },
      Candidate
    >(
      db,
      `SELECT ${CANDIDATE_COLUMNS} FROM jobs INDEXED BY jobs_lane
       WHERE status IN ('pending', 'retrying') AND held = 0 AND operation_id = :operation_id AND lane = :lane
         AND priority = :priority AND run_at <= :now
         AND (expires_at IS NULL OR expires_at > :now)
         AND (concurrency_key IS NULL OR concurrency_key NOT IN (SELECT value FROM json_each(:closed)))
       ORDER BY run_at, seq LIMIT :limit`,
    ),
    // The head of the queue: in claim order, and by run time when few are due (see claims.ts).
    claimCandidates: prepare<{ now: number; closed: string; limit: number; offset: number }, Candidate>(
      db,
      `SELECT ${CANDIDATE_COLUMNS} FROM jobs INDEXED BY jobs_claim
       WHERE status IN ('pending', 'retrying') AND run_at <= :now
         AND (expires_at IS NULL OR expires_at > :now)
         AND (concurrency_key IS NULL OR concurrency_key NOT IN (SELECT value FROM json_each(:closed)))
       ORDER BY priority DESC, run_at, seq LIMIT :limit OFFSET :offset`,
    ),
    dueCandidates: prepare<{ now: number; closed: string; limit: number }, Candidate>(
      db,
      `SELECT ${CANDIDATE_COLUMNS} FROM jobs INDEXED BY jobs_run_at
       WHERE status IN ('pending', 'retrying') AND run_at <= :now
         AND (expires_at IS NULL OR expires_at > :now)
         AND (concurrency_key IS NULL OR concurrency_key NOT IN (SELECT value FROM json_each(:closed)))
       ORDER BY run_at LIMIT :limit`,
    ),
    // Lanes held by their rate (migration 0009, docs/flow-control.md "Blocked lanes are held"): a lane that used its
    // rate_per_key has its waiting jobs taken out of jobs_lane until the instant its rate lets one start again.
    holdLane: prepare<{ operation_id: string; lane: string }>(
      db,
      `UPDATE jobs SET held = 1
       WHERE status IN ('pending', 'retrying') AND held = 0 AND operation_id = :operation_id AND lane = :lane`,
    ),
    recordHold: prepare<{ operation_id: string; lane: string; open_at: number }>(
      db,
      `INSERT INTO rate_holds (operation_id, lane, open_at) VALUES (:operation_id, :lane, :open_at)
       ON CONFLICT (operation_id, lane) DO UPDATE SET open_at = excluded.open_at`,
    ),
    dueHolds: prepare<{ now: number; limit: number }, { operation_id: string; lane: string }>(
      db,
      "SELECT operation_id, lane FROM rate_holds WHERE open_at <= :now ORDER BY open_at LIMIT :limit",
    ),
    firstHoldOpen: preparePluck<[], number | null>(db, "SELECT min(open_at) FROM rate_holds"),
    deleteHold: prepare<{ operation_id: string; lane: string }>(
      db,
      "DELETE FROM rate_holds WHERE operation_id = :operation_id AND lane = :lane",
    ),
    releaseLane: prepare<{ operation_id: string; lane: string }>(
      db,
      `UPDATE jobs INDEXED BY jobs_held SET held = 0
       WHERE status IN ('pending', 'retrying') AND held = 1 AND operation_id = :operation_id AND lane = :lane`,
    ),
    // The first claimable jobs by run time, for when the next claim may find something (bounded; see Gates).
    firstClaimable: prepare<{ now: number; limit: number }, Candidate & { rate_key: string | null; held: number }>(
      db,
      `SELECT ${CANDIDATE_COLUMNS}, rate_key, held FROM jobs INDEXED BY jobs_run_at
       WHERE status IN ('pending', 'retrying') AND (expires_at IS NULL OR expires_at > :now) ORDER BY run_at LIMIT :limit`,
    ),
  };
}

/** The claim's statements, prepared. */
export type ClaimStatements = ReturnType<typeof prepareClaimStatements>;

/**
 * What the node running jobs asks of the SQLite engine besides outcomes (outcomes.ts) and the mark of an asynchronous
 * attempt (async.ts): the claim, heartbeats, requeues of jobs it could not deliver, and when a claim may next find a
 * job (statements in sql/claim.ts; the gates it reads in gates.ts).
 *
 * The claim (docs/flow-control.md, "What gates a claim" and "Fairness"). No `SKIP LOCKED`: SQLite has one
 * writer, so a claim inside `BEGIN IMMEDIATE` (the caller's transaction) cannot race another claim, and its gates cannot
 * change under it.
 *
 * Candidates are the head of the queue in claim order and, while a backlog lasts, the first job of each of the lanes
 * after the cursor (as many as the head lacks to give each job of the claim a lane, at least an eighth of the claim),
 * so a lane with a long backlog cannot hold every slot. While an operation can take no job or a per-key
 * rate is set, the head of the queue could be a long run of jobs nobody may take: candidates then come lane by lane,
 * the blocked operations' lanes skipped, and a lane out of its rate_per_key held (its jobs taken out of the walk's
 * index until its rate opens), so blocked lanes cost nothing after their first visit. The pick orders them by
 * priority, then turn in their lane, then run time and creation, and takes each that the gates let through.
 */
import type { JobAttempt } from "../../job/job.js";
import type { JobResult } from "../../job/schemas.js";
import type { AttemptRefund } from "../store.js";
import { Gates } from "./gates.js";
import { requeueOne } from "./outcomes.js";
import type { Candidate, NextLane } from "./sql/claim.js";
import type { Statements } from "./statements.js";

/** Where the last claim stopped visiting lanes: the next one starts after it. */
export interface LaneCursor {
  operationId: string;
  lane: string;
}

/** Larger than any lane, so that a probe after (operation, this) reaches the next operation's first lane. */
const PAST_EVERY_LANE = "\u{10FFFF}";

/** Claims up to `limit` due jobs; answers the JSON text of their rows and the lane cursor. */
export function claimMany(
  s: Statements,
  options: { limit: number; now: number; cursor: LaneCursor },
): { json: string; cursor: LaneCursor } {
  const { limit, now } = options;
  // A backlog lasts: at least a page of jobs is due.
  let backlogged = false;
  let cursor = options.cursor;
  const gates = new Gates(s, now);
  // Holds exist only while an operation has a per-key rate: an ungated claim (the hot path) does not look for them.
  if (gates.gated) releaseDueHolds(s, now);
  const closed = gates.closedKeys();
  const byLane = gates.gated && gates.byLane;
  const pageSize = Math.max(16, limit * 2);
  const candidates = new Map<number, Candidate>();
  const add = (rows: Candidate[]) => {
    for (const row of rows) if (!candidates.has(row.seq)) candidates.set(row.seq, row);
  };

  // Lanes of the candidates so far (operation and lane): the head of the queue's, while a backlog lasts.
  const lanesSeen = new Set<string>();
  if (!byLane) {
    // Fewer due jobs than a page: that is all of them, read by run time, which stops at now. Otherwise a backlog
    // lasts, and the head of the queue is read in claim order: that walk stops once it has a page, and the full page
    // of due jobs found first says it will find one (past any jobs not yet due of a higher priority). Without that
    // look first, a claim that found less than a page walked every job not yet due (600 ms beside 5,000,000 of them,
    // at the end of each run of due jobs).
    const due = s.dueCandidates.all({ now, closed, limit: pageSize });
    if (due.length < pageSize) {
      add(due);
    } else {
      backlogged = true;
      const head = s.claimCandidates.all({ now, closed, limit: pageSize, offset: 0 });
      add(head);
      for (const job of head) lanesSeen.add(laneId(job));
    }
  }
  if (byLane) {
    cursor = visitLanes(s, {
      gates,
      closed,
      now,
      cursor,
      lanes: pageSize,
      perLane: limit,
      pastKeys: true,
      maxCandidates: pageSize,
      add,
      skip: new Set(),
    });
  } else if (backlogged) {
    // As many lanes as the head lacks to fill the claim with a lane each, and at least an eighth of the claim, so lanes
    // behind a head of many lanes still get their turn. A lane the head already has is represented by its first job.
    const lanes = Math.max(limit - lanesSeen.size, Math.ceil(limit / 8));
    cursor = visitLanes(s, {
      gates,
      closed,
      now,
      cursor,
      lanes,
      perLane: 1,
      pastKeys: false,
      maxCandidates: pageSize,
      add,
      skip: lanesSeen,
    });
  }

  const chosen: number[] = [];
  for (const job of inClaimOrder([...candidates.values()])) {
    if (chosen.length === limit) break;
    if (gates.take(job)) chosen.push(job.seq);
  }
  const claimed: string[] = [];
  for (const seq of chosen) {
    if (s.claimOne.run({ seq, now }).changes === 0) continue;
    const row = s.claimedJson.get(seq);
    if (row !== undefined) claimed.push(row);
  }
  gates.advanceBuckets();
  return { json: `[${claimed.join(",")}]`, cursor };
}

/** Moves the leases of running attempts on. */
export function heartbeatMany(s: Statements, params: { jobs: JobAttempt[]; now: number }): void {
  for (const job of params.jobs) s.heartbeat.run({ id: job.id, attempt: job.attempt, now: params.now });
}

/** Sends running attempts that could not be delivered back to the queue, `delayMs` on; answers how many went. */
export function requeueWithError(
  s: Statements,
  params: { jobs: JobAttempt[]; delayMs: number; errorBody: string; refund: AttemptRefund; now: number },
): number {
  const { now } = params;
  const result: JobResult = { error_body: params.errorBody, terminal_reason: null };
  const runAt = now + params.delayMs;
  return params.jobs.filter((job) => requeueOne(s, { ...job, runAt, result, now, refund: params.refund })).length;
}

/** When a claim may next find a job (see `Store.jobNextRunAt`): the gates' answer when any are set. */
export function nextRunAt(s: Statements, params: { now: number }): number | null {
  const gates = new Gates(s, params.now);
  return gates.gated ? gates.nextOpenAt() : (s.nextRunAt.get({ now: params.now }) ?? null);
}

/** A job's lane with its operation: the unit that takes turns. */
function laneId(job: Candidate): string {
  return `${job.operation_id}\u0000${job.lane}`;
}

/**
 * Candidates in the order the pick takes them: priority, then turn within their lane (each lane's first job, then each
 * lane's second, ...), then run time and creation. With one lane among them, that is the claim order.
 */
function inClaimOrder(candidates: Candidate[]): Candidate[] {
  candidates.sort((a, b) => b.priority - a.priority || a.run_at - b.run_at || a.seq - b.seq);
  const first = candidates[0];
  if (
    first === undefined ||
    candidates.every((job) => job.lane === first.lane && job.operation_id === first.operation_id)
  ) {
    return candidates;
  }
  const turns = new Map<string, number>();
  return candidates
    .map((job) => {
      const lane = laneId(job);
      const turn = (turns.get(lane) ?? 0) + 1;
      turns.set(lane, turn);
      return { job, turn };
    })
    .sort(
      (a, b) =>
        b.job.priority - a.job.priority || a.turn - b.turn || a.job.run_at - b.job.run_at || a.job.seq - b.job.seq,
    )
    .map(({ job }) => job);
}

/**
 * Visits up to `lanes` lanes after the cursor in (operation, lane) order, wrapping round once, blocked operations
 * skipped whole; from each takes up to `perLane` due jobs in claim order as candidates (no more than a rate key's
 * rate lets start), until `maxCandidates` are found. Returns the new cursor.
 */
function visitLanes(
  s: Statements,
  options: {
    gates: Gates;
    closed: string;
    now: number;
    cursor: LaneCursor;
    lanes: number;
    perLane: number;
    /**
     * Whether a lane is read past its jobs with a concurrency key (`laneOffer`): by lane (gated), where a lane's offer
     * is what the pick can take of it; not for the first jobs of the lanes behind an ungated backlog's head.
     */
    pastKeys: boolean;
    maxCandidates: number;
    add: (rows: Candidate[]) => void;
    /** Lanes (`laneId`) whose first job is a candidate already: visited, not read. */
    skip: ReadonlySet<string>;
  },
): LaneCursor {
  const start = options.cursor;
  let at: LaneCursor = start;
  let wrapped = false;
  let visited = 0;
  let found = 0;
  let held = 0;
  while (visited < options.lanes && found < options.maxCandidates) {
    const next = s.nextLane.get({ operation_id: at.operationId, lane: at.lane });
    if (!next) {
      if (wrapped) break;
      wrapped = true;
      at = { operationId: "", lane: "" };
      continue;
    }
    const lane = { operationId: next.operation_id, lane: next.lane };
    if (wrapped && compareLanes(lane, start) > 0) break;
    if (options.gates.blocked(lane.operationId)) {
      at = { operationId: lane.operationId, lane: PAST_EVERY_LANE };
      continue;
    }
    at = lane;
    const room = options.gates.roomInLane(lane.operationId, lane.lane);
    if (room <= 0 && held < MAX_HOLDS_PER_CLAIM) {
      // Out of its rate: held until the rate lets a job start, and not counted as a visit, so that however many lanes
      // are blocked, the walk reaches the open ones (each blocked lane costs one hold, then nothing until it opens).
      holdLane(s, lane, options.gates.laneOpensAt(lane.operationId, lane.lane));
      held += 1;
      continue;
    }
    visited += 1;
    if (options.skip.has(`${lane.operationId}\u0000${lane.lane}`)) continue;
    const perLane = Math.min(options.perLane, room);
    if (perLane <= 0) continue;
    const most = options.pastKeys ? perLane + options.perLane : perLane;
    const head = laneOffer(s, next, { now: options.now, closed: options.closed, offer: perLane, most });
    options.add(head);
    found += Math.min(head.length, perLane);
  }
  return at;
}

/**
 * The lane's first jobs in claim order, enough of them to offer `offer` jobs the pick cannot refuse one by one: a job
 * with a concurrency key may be refused for a key the same claim takes (keys closed before the claim are never read),
 * so the read goes on past each keyed job, up to `most` jobs in all. Without keyed jobs (the usual case) it is one read
 * of `offer` jobs, as deep as the lane's rate lets jobs start.
 */
function laneOffer(
  s: Statements,
  lane: NextLane,
  options: { now: number; closed: string; offer: number; most: number },
): Candidate[] {
  let limit = options.offer;
  for (;;) {
    const head = laneHead(s, lane, { now: options.now, closed: options.closed, limit });
    const keyed = head.filter((job) => job.concurrency_key !== null).length;
    const wanted = Math.min(options.offer + keyed, options.most);
    if (head.length < limit || wanted <= limit) return head;
    limit = wanted;
  }
}

/**
 * The most lanes one claim holds: past them a blocked lane counts as a visit, as any lane does, so a claim's work stays
 * bounded while a burst of newly blocked lanes is held over the next claims.
 */
const MAX_HOLDS_PER_CLAIM = 1000;

/** The most holds one claim lets go; the rest are due at once, so the next claim comes at once (`Gates.nextOpenAt`). */
const MAX_RELEASES_PER_CLAIM = 1000;

/** Takes `lane`'s waiting jobs out of the walk until `openAt`, when its rate lets one of them start. */
function holdLane(s: Statements, lane: LaneCursor, openAt: number): void {
  const where = { operation_id: lane.operationId, lane: lane.lane };
  s.holdLane.run(where);
  s.recordHold.run({ ...where, open_at: openAt });
}

/** Lets the lanes whose hold has come due go back to the walk. */
function releaseDueHolds(s: Statements, now: number): void {
  for (const hold of s.dueHolds.all({ now, limit: MAX_RELEASES_PER_CLAIM })) {
    s.releaseLane.run(hold);
    s.deleteHold.run(hold);
  }
}

/**
 * A lane's first `limit` due jobs in claim order, read a priority at a time from the highest down, each priority's
 * earliest run time known before its jobs are read: each read is an index range bounded by the run time, and each
 * priority probed holds at least one of the lane's jobs, so this never reads more index entries than one walk of the
 * lane in claim order would, and a lane with nothing due at one priority costs one probe beyond `nextLane`.
 */
function laneHead(s: Statements, lane: NextLane, options: { now: number; closed: string; limit: number }): Candidate[] {
  const where = { operation_id: lane.operation_id, lane: lane.lane };
  const head: Candidate[] = [];
  let level: { priority: number; run_at: number } | undefined = lane;
  while (level !== undefined) {
    if (level.run_at <= options.now) {
      head.push(
        ...s.laneHeadAt.all({
          ...where,
          priority: level.priority,
          now: options.now,
          closed: options.closed,
          limit: options.limit - head.length,
        }),
      );
      if (head.length >= options.limit) break;
    }
    level = s.lanePriorityBelow.get({ ...where, below: level.priority });
  }
  return head;
}

/** (operation, lane) order as SQLite's BINARY collation has it: by UTF-8 bytes, which is code point order. */
function compareLanes(a: LaneCursor, b: LaneCursor): number {
  return compareText(a.operationId, b.operationId) || compareText(a.lane, b.lane);
}

function compareText(a: string, b: string): number {
  const x = Buffer.from(a, "utf8");
  const y = Buffer.from(b, "utf8");
  return Buffer.compare(x, y);
}

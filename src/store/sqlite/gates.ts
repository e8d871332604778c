/**
 * The gates a claim reads (docs/flow-control.md, "What gates a claim"), and when a claim may next find a job: pauses,
 * an operation's room under its max_concurrency and rate, a key's room under its concurrency_limit and a rate key's
 * under its rate_per_key (statements in sql/flow.ts and sql/claim.ts). They are read inside the claim's transaction
 * on the engine's one connection: one writer, so they cannot change under it.
 */
import { toOperationControl } from "../control-rows.js";
import { NO_LIMITS, rateAdvance, rateAllowance, rateOpensAt, type OperationControl } from "../../flow/limits.js";
import type { Candidate } from "./sql/claim.js";
import type { Statements } from "./statements.js";

/** How many claimable jobs, by run time, `Gates.nextOpenAt` looks at: past them, a node finds the rest at its poll. */
const NEXT_RUN_LOOKAHEAD = 1000;

/**
 * The gates a claim reads, as they stand inside its transaction: which operations and keys are paused, how many more
 * jobs each operation may start (its room), how many each key and rate key may. Rooms are worked out the first time
 * they are asked for and then counted down as the claim takes jobs, so one claim never reads a count twice.
 */
export class Gates {
  private readonly controls = new Map<string, OperationControl>();
  private readonly operationRoom = new Map<string, number | null>();
  private readonly laneRoom = new Map<string, number>();
  private readonly running = new Map<string, number>();
  private readonly pausedKeys: Set<string>;
  /** Jobs taken per operation and per rate-limited lane, for the buckets. */
  private readonly startedByOperation = new Map<string, number>();
  private readonly startedByLane = new Map<string, { operationId: string; rateKey: string; count: number }>();

  constructor(
    private readonly s: Statements,
    private readonly now: number,
  ) {
    for (const row of s.gatingControls.all()) this.controls.set(row.operation_id, toOperationControl(row));
    this.pausedKeys = new Set(s.pausedKeys.all().map((row) => row.concurrency_key));
    for (const { key, running } of s.runningByKey.all()) this.running.set(key, running);
  }

  /** Whether any operation or key is gated beyond the contract's one running job per key. */
  get gated(): boolean {
    return this.controls.size > 0 || this.pausedKeys.size > 0;
  }

  /** Whether some operation can take no job now, or a per-key rate is set: the claim then goes lane by lane. */
  get byLane(): boolean {
    for (const control of this.controls.values()) {
      if (control.limits.ratePerKey !== null || this.roomOf(control.operationId) === 0) return true;
    }
    return false;
  }

  /** Operations that can take no job now. */
  blocked(operationId: string): boolean {
    return this.roomOf(operationId) === 0;
  }

  /**
   * Keys no job may take now whatever its operation: paused ones, and those running as many jobs as the largest
   * concurrency_limit allows. The scans step over them (the rest is checked job by job).
   */
  closedKeys(): string {
    let widest = 1;
    for (const control of this.controls.values()) widest = Math.max(widest, control.limits.concurrencyLimit);
    const closed = [...this.pausedKeys];
    for (const [key, running] of this.running) if (running >= widest) closed.push(key);
    return JSON.stringify(closed);
  }

  /** How many more jobs of `operationId` may start: 0 when paused; null when nothing limits it. */
  private roomOf(operationId: string): number | null {
    if (this.operationRoom.has(operationId)) return this.operationRoom.get(operationId) ?? null;
    const control = this.controls.get(operationId);
    let room: number | null = null;
    if (control) {
      const { limits } = control;
      if (control.paused) room = 0;
      else {
        if (limits.maxConcurrency !== null)
          room = Math.max(0, limits.maxConcurrency - this.s.runningOfOperation.get(operationId)!);
        if (limits.rate !== null) {
          const allowed = rateAllowance(limits.rate, this.s.bucket.get(operationId, "") ?? null, this.now);
          room = room === null ? allowed : Math.min(room, allowed);
        }
      }
    }
    this.operationRoom.set(operationId, room);
    return room;
  }

  /** How many more jobs of `operationId` in lane `lane` its rate_per_key lets start (Infinity: not limited). */
  roomInLane(operationId: string, lane: string): number {
    return this.laneRoomOf(operationId, lane);
  }

  private laneRoomOf(operationId: string, lane: string): number {
    const ratePerKey = this.controls.get(operationId)?.limits.ratePerKey ?? null;
    if (ratePerKey === null || !lane.startsWith("r:")) return Number.POSITIVE_INFINITY;
    const id = `${operationId}\u0000${lane}`;
    let room = this.laneRoom.get(id);
    if (room === undefined) {
      room = rateAllowance(ratePerKey, this.s.bucket.get(operationId, lane.slice(2)) ?? null, this.now);
      this.laneRoom.set(id, room);
    }
    return room;
  }

  /** When the rate_per_key of `operationId` lets a job of rate-key lane `lane` start (ms since the epoch). */
  laneOpensAt(operationId: string, lane: string): number {
    const ratePerKey = this.controls.get(operationId)?.limits.ratePerKey ?? null;
    if (ratePerKey === null || !lane.startsWith("r:")) return this.now;
    return rateOpensAt(ratePerKey, this.s.bucket.get(operationId, lane.slice(2)) ?? null, this.now);
  }

  /** Takes `job` if every gate lets it through, counting it against them. */
  take(job: Candidate): boolean {
    const { operation_id: operationId, lane, concurrency_key: key } = job;
    const room = this.roomOf(operationId);
    if (room !== null && room <= 0) return false;
    if (this.laneRoomOf(operationId, lane) <= 0) return false;
    if (key !== null) {
      if (this.pausedKeys.has(key)) return false;
      const limit = this.controls.get(operationId)?.limits.concurrencyLimit ?? 1;
      if ((this.running.get(key) ?? 0) >= limit) return false;
      this.running.set(key, (this.running.get(key) ?? 0) + 1);
    }
    if (room !== null) this.operationRoom.set(operationId, room - 1);
    this.startedByOperation.set(operationId, (this.startedByOperation.get(operationId) ?? 0) + 1);
    if (this.laneRoom.has(`${operationId}\u0000${lane}`)) {
      const id = `${operationId}\u0000${lane}`;
      this.laneRoom.set(id, (this.laneRoom.get(id) ?? 0) - 1);
      const started = this.startedByLane.get(id) ?? { operationId, rateKey: lane.slice(2), count: 0 };
      started.count += 1;
      this.startedByLane.set(id, started);
    }
    return true;
  }

  /** Moves the rate buckets on by what the claim took. */
  advanceBuckets(): void {
    for (const [operationId, count] of this.startedByOperation) {
      const rate = this.controls.get(operationId)?.limits.rate ?? null;
      if (rate === null) continue;
      const tat = this.s.bucket.get(operationId, "") ?? null;
      this.s.setBucket.run({ operation_id: operationId, rate_key: "", tat: rateAdvance(rate, tat, this.now, count) });
    }
    for (const { operationId, rateKey, count } of this.startedByLane.values()) {
      const rate = this.controls.get(operationId)?.limits.ratePerKey ?? null;
      if (rate === null) continue;
      const tat = this.s.bucket.get(operationId, rateKey) ?? null;
      this.s.setBucket.run({
        operation_id: operationId,
        rate_key: rateKey,
        tat: rateAdvance(rate, tat, this.now, count),
      });
    }
  }

  /**
   * When a claim may next find a job (see `Store.jobNextRunAt`): among the first claimable jobs by run time, the
   * earliest that its gates will let start, at the later of its run time and its rate limits' next opening.
   */
  nextOpenAt(): number | null {
    // A held lane's jobs are let go at its hold's instant: the first of those stands for all of them.
    let next: number | null = this.s.firstHoldOpen.get() ?? null;
    for (const job of this.s.firstClaimable.all({ now: this.now, limit: NEXT_RUN_LOOKAHEAD })) {
      if (job.held === 1) continue;
      const control = this.controls.get(job.operation_id);
      if (control?.paused) continue;
      const limits = control?.limits ?? NO_LIMITS;
      if (limits.maxConcurrency !== null && this.s.runningOfOperation.get(job.operation_id)! >= limits.maxConcurrency)
        continue;
      if (job.concurrency_key !== null) {
        if (this.pausedKeys.has(job.concurrency_key)) continue;
        if ((this.running.get(job.concurrency_key) ?? 0) >= limits.concurrencyLimit) continue;
      }
      let at = job.run_at;
      if (limits.rate !== null)
        at = Math.max(at, rateOpensAt(limits.rate, this.s.bucket.get(job.operation_id, "") ?? null, this.now));
      if (limits.ratePerKey !== null && job.rate_key !== null) {
        at = Math.max(
          at,
          rateOpensAt(limits.ratePerKey, this.s.bucket.get(job.operation_id, job.rate_key) ?? null, this.now),
        );
      }
      if (next === null || at < next) next = at;
    }
    return next;
  }
}

/**
 * The SQLite engine's flow control (docs/flow-control.md): the statements of operation_controls, paused_keys and
 * rate_buckets (migration 0004), the administrators' writes to them, and the gates a claim reads. Everything runs on
 * the engine's one connection, inside the caller's transaction: one writer, so a claim's gates cannot change under it.
 */
import type Database from "better-sqlite3";
import { prepare, preparePluck } from "./prepared.js";
import { limitColumns, toOperationControl, type ControlRow } from "../control-rows.js";
import {
  NO_LIMITS,
  rateAdvance,
  rateAllowance,
  rateOpensAt,
  type LimitsSource,
  type OperationControl,
  type OperationLimits,
  type PausedKey,
} from "../../flow/limits.js";

/** The columns a limit-setting statement writes. */
const SET_LIMITS = `rate_limit = excluded.rate_limit, rate_period_ms = excluded.rate_period_ms,
  rate_burst = excluded.rate_burst, key_rate_limit = excluded.key_rate_limit,
  key_rate_period_ms = excluded.key_rate_period_ms, key_rate_burst = excluded.key_rate_burst,
  max_concurrency = excluded.max_concurrency, concurrency_limit = excluded.concurrency_limit`;

const LIMIT_VALUES = `:rate_limit, :rate_period_ms, :rate_burst, :key_rate_limit, :key_rate_period_ms, :key_rate_burst,
  :max_concurrency, :concurrency_limit`;

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

/** Prepares the flow control statements on `db`. */
export function prepareFlowStatements(db: Database.Database) {
  return {
    controlList: prepare<[], ControlRow>(db, "SELECT * FROM operation_controls ORDER BY operation_id"),
    control: prepare<[string], ControlRow>(db, "SELECT * FROM operation_controls WHERE operation_id = ?"),
    // Only the rows that gate anything: a claim reads them every time, and usually there are none.
    gatingControls: prepare<[], ControlRow>(
      db,
      `SELECT * FROM operation_controls WHERE paused_at IS NOT NULL OR rate_limit IS NOT NULL
         OR key_rate_limit IS NOT NULL OR max_concurrency IS NOT NULL OR concurrency_limit > 1`,
    ),
    pause: prepare<{ operation_id: string; at: number; by: string }>(
      db,
      `INSERT INTO operation_controls (operation_id, paused_at, paused_by) VALUES (:operation_id, :at, :by)
       ON CONFLICT (operation_id) DO UPDATE SET paused_at = excluded.paused_at, paused_by = excluded.paused_by
         WHERE operation_controls.paused_at IS NULL`,
    ),
    resume: prepare<[string]>(
      db,
      "UPDATE operation_controls SET paused_at = NULL, paused_by = NULL WHERE operation_id = ?",
    ),
    setLimits: prepare<Record<string, unknown>>(
      db,
      `INSERT INTO operation_controls (operation_id, rate_limit, rate_period_ms, rate_burst, key_rate_limit,
         key_rate_period_ms, key_rate_burst, max_concurrency, concurrency_limit, limits_source, limits_set_at,
         limits_set_by)
       VALUES (:operation_id, ${LIMIT_VALUES}, :source, :set_at, :set_by)
       ON CONFLICT (operation_id) DO UPDATE SET ${SET_LIMITS}, limits_source = excluded.limits_source,
         limits_set_at = excluded.limits_set_at, limits_set_by = excluded.limits_set_by`,
    ),
    // The configuration's limits, unless an administrator's are in force.
    configureLimits: prepare<Record<string, unknown>>(
      db,
      `INSERT INTO operation_controls (operation_id, rate_limit, rate_period_ms, rate_burst, key_rate_limit,
         key_rate_period_ms, key_rate_burst, max_concurrency, concurrency_limit)
       VALUES (:operation_id, ${LIMIT_VALUES})
       ON CONFLICT (operation_id) DO UPDATE SET ${SET_LIMITS} WHERE operation_controls.limits_source = 'config'`,
    ),
    // Operations the configuration no longer limits lose the limits it gave them; then rows that say nothing go.
    unconfigureLimits: prepare<[string]>(
      db,
      `UPDATE operation_controls SET rate_limit = NULL, rate_period_ms = NULL, rate_burst = NULL,
         key_rate_limit = NULL, key_rate_period_ms = NULL, key_rate_burst = NULL, max_concurrency = NULL,
         concurrency_limit = 1
       WHERE limits_source = 'config' AND operation_id NOT IN (SELECT value FROM json_each(?))`,
    ),
    deleteIdleControls: prepare(
      db,
      `DELETE FROM operation_controls WHERE paused_at IS NULL AND limits_source = 'config' AND rate_limit IS NULL
         AND key_rate_limit IS NULL AND max_concurrency IS NULL AND concurrency_limit = 1`,
    ),
    pauseKey: prepare<{ key: string; at: number; by: string }>(
      db,
      `INSERT INTO paused_keys (concurrency_key, paused_at, paused_by) VALUES (:key, :at, :by)
       ON CONFLICT (concurrency_key) DO NOTHING`,
    ),
    pausedKey: prepare<[string], { concurrency_key: string; paused_at: number; paused_by: string }>(
      db,
      "SELECT * FROM paused_keys WHERE concurrency_key = ?",
    ),
    resumeKey: prepare<[string]>(db, "DELETE FROM paused_keys WHERE concurrency_key = ?"),
    pausedKeys: prepare<[], { concurrency_key: string; paused_at: number; paused_by: string }>(
      db,
      "SELECT * FROM paused_keys ORDER BY concurrency_key",
    ),
    runningByKey: prepare<[], { key: string; running: number }>(
      db,
      `SELECT concurrency_key AS key, count(*) AS running FROM jobs INDEXED BY jobs_running_concurrency_key
       WHERE concurrency_key IS NOT NULL AND status = 'running' GROUP BY concurrency_key`,
    ),
    runningOfOperation: preparePluck<[string], number>(
      db,
      "SELECT count(*) FROM jobs INDEXED BY jobs_running_heartbeat WHERE status = 'running' AND operation_id = ?",
    ),
    bucket: preparePluck<[string, string], number>(
      db,
      "SELECT tat FROM rate_buckets WHERE operation_id = ? AND rate_key = ?",
    ),
    setBucket: prepare<{ operation_id: string; rate_key: string; tat: number }>(
      db,
      `INSERT INTO rate_buckets (operation_id, rate_key, tat) VALUES (:operation_id, :rate_key, :tat)
       ON CONFLICT (operation_id, rate_key) DO UPDATE SET tat = excluded.tat`,
    ),
    deleteBuckets: prepare<[number]>(db, "DELETE FROM rate_buckets WHERE tat < ?"),
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
    // The head of the queue: in claim order, and by run time when few are due (see claim.ts).
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
    // Every hold of an operation goes when its limits change: a hold's instant was worked out under the old ones.
    releaseOperation: prepare<[string]>(
      db,
      `UPDATE jobs INDEXED BY jobs_held SET held = 0
       WHERE status IN ('pending', 'retrying') AND held = 1 AND operation_id = ?`,
    ),
    deleteOperationHolds: prepare<[string]>(db, "DELETE FROM rate_holds WHERE operation_id = ?"),
    allHeldOperations: preparePluck<[], string>(db, "SELECT DISTINCT operation_id FROM rate_holds"),
    // The first claimable jobs by run time, for when the next claim may find something (bounded; see Gates).
    firstClaimable: prepare<{ now: number; limit: number }, Candidate & { rate_key: string | null; held: number }>(
      db,
      `SELECT ${CANDIDATE_COLUMNS}, rate_key, held FROM jobs INDEXED BY jobs_run_at
       WHERE status IN ('pending', 'retrying') AND (expires_at IS NULL OR expires_at > :now) ORDER BY run_at LIMIT :limit`,
    ),
  };
}

/** The flow control statements. */
export type FlowStatements = ReturnType<typeof prepareFlowStatements>;

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
    private readonly s: FlowStatements,
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

/** The administrators' and the configuration's writes to flow control, inside the caller's transaction. */
export class FlowWrites {
  constructor(private readonly s: FlowStatements) {}

  private control(operationId: string): OperationControl {
    const row = this.s.control.get(operationId);
    return row
      ? toOperationControl(row)
      : { operationId, paused: null, limits: { ...NO_LIMITS }, limitsSource: "config", limitsSet: null };
  }

  configure(limits: Array<{ operationId: string; limits: OperationLimits }>): void {
    for (const entry of limits)
      this.s.configureLimits.run({ operation_id: entry.operationId, ...limitColumns(entry.limits) });
    this.s.unconfigureLimits.run(JSON.stringify(limits.map((entry) => entry.operationId)));
    this.s.deleteIdleControls.run();
    // The configuration's limits may differ from those the holds were worked out under: every lane goes back to the
    // walk, and the claims hold again those still out of rate.
    for (const operationId of new Set(this.s.allHeldOperations.all())) this.releaseHolds(operationId);
  }

  /** Lets every held lane of `operationId` go (its limits changed). */
  private releaseHolds(operationId: string): void {
    this.s.releaseOperation.run(operationId);
    this.s.deleteOperationHolds.run(operationId);
  }

  list(): OperationControl[] {
    return this.s.controlList.all().map(toOperationControl);
  }

  pause(params: { operationId: string; actor: string; now: number }): OperationControl {
    this.s.pause.run({ operation_id: params.operationId, at: params.now, by: params.actor });
    return this.control(params.operationId);
  }

  resume(params: { operationId: string }): OperationControl {
    this.s.resume.run(params.operationId);
    const control = this.control(params.operationId);
    this.s.deleteIdleControls.run();
    return control;
  }

  setLimits(params: {
    operationId: string;
    limits: OperationLimits;
    source: LimitsSource;
    actor: string;
    now: number;
  }): OperationControl {
    const admin = params.source === "admin";
    this.s.setLimits.run({
      operation_id: params.operationId,
      ...limitColumns(params.limits),
      source: params.source,
      set_at: admin ? params.now : null,
      set_by: admin ? params.actor : null,
    });
    this.releaseHolds(params.operationId);
    const control = this.control(params.operationId);
    this.s.deleteIdleControls.run();
    return control;
  }

  pauseKey(params: { key: string; actor: string; now: number }): PausedKey {
    this.s.pauseKey.run({ key: params.key, at: params.now, by: params.actor });
    const row = this.s.pausedKey.get(params.key);
    if (!row) throw new Error(`paused key ${params.key} vanished inside its transaction`);
    return { concurrencyKey: row.concurrency_key, paused: { at: row.paused_at, by: row.paused_by } };
  }

  resumeKey(params: { key: string }): boolean {
    return this.s.resumeKey.run(params.key).changes > 0;
  }

  pausedKeys(): PausedKey[] {
    return this.s.pausedKeys
      .all()
      .map((row) => ({ concurrencyKey: row.concurrency_key, paused: { at: row.paused_at, by: row.paused_by } }));
  }
}

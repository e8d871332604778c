/**
 * The SQLite engine's schedules (docs/schedules.md; migration 0007): the administrators' writes and the reads of
 * schedules and of their ticks (statements in sql/schedules.ts). Everything runs on the engine's one connection inside
 * the caller's transaction: one writer, so a tick's check of the schedule's revision cannot race a change of it.
 */
import type { CronTick, ScheduleFields, ScheduleRow } from "../../schedules/schedule.js";
import { scheduleColumns, toScheduleRow, type ScheduleDbRow } from "../schedule-rows.js";
import type { ScheduleCreateOutcome, ScheduleUpdateOutcome, ScheduleWriteOutcome } from "../store.js";
import type { ScheduleStatements, SqliteScheduleRow } from "./sql/schedules.js";

function toRow(row: SqliteScheduleRow): ScheduleRow {
  return toScheduleRow({ ...row, request: JSON.parse(row.request) as ScheduleDbRow["request"] });
}

/** The schedules' writes and reads, on the statements of sql/schedules.ts; the caller holds the transaction. */
export class ScheduleWrites {
  constructor(private readonly s: ScheduleStatements) {}

  /** Creates a schedule unless one has its name or `maxSchedules` exist (one writer: nothing can come between). */
  create(params: {
    schedule: ScheduleFields;
    revision: string;
    actor: string;
    maxSchedules: number;
    now: number;
  }): ScheduleCreateOutcome {
    const existing = this.get(params.schedule.name);
    if (existing) return { kind: "exists", schedule: existing };
    if ((this.s.scheduleCount.get() ?? 0) >= params.maxSchedules)
      return { kind: "limit_reached", maxSchedules: params.maxSchedules };
    const inserted = this.s.scheduleInsert.run({
      ...scheduleColumns(params.schedule),
      revision: params.revision,
      now: params.now,
      actor: params.actor,
    });
    const kind = inserted.changes === 1 ? "created" : "exists";
    return { kind, schedule: this.mustGet(params.schedule.name) };
  }

  get(name: string): ScheduleRow | undefined {
    const row = this.s.scheduleGet.get(name);
    return row ? toRow(row) : undefined;
  }

  list(): ScheduleRow[] {
    return this.s.scheduleList.all().map(toRow);
  }

  update(params: {
    schedule: ScheduleFields;
    ifRevision: string;
    revision: string;
    actor: string;
    now: number;
  }): ScheduleUpdateOutcome {
    const changed = this.s.scheduleUpdate.run({
      ...scheduleColumns(params.schedule),
      revision: params.revision,
      if_revision: params.ifRevision,
      now: params.now,
      actor: params.actor,
    });
    const current = this.get(params.schedule.name);
    if (!current) return { kind: "not_found" };
    return changed.changes === 1
      ? { kind: "updated", schedule: current }
      : { kind: "revision_changed", schedule: current };
  }

  pause(params: { name: string; actor: string; now: number }): ScheduleWriteOutcome<"paused"> {
    this.s.schedulePause.run(params);
    const current = this.get(params.name);
    return current ? { kind: "paused", schedule: current } : { kind: "not_found" };
  }

  resume(params: { name: string }): ScheduleWriteOutcome<"resumed"> {
    this.s.scheduleResume.run(params.name);
    const current = this.get(params.name);
    return current ? { kind: "resumed", schedule: current } : { kind: "not_found" };
  }

  delete(params: { name: string }): ScheduleWriteOutcome<"deleted"> {
    const deleted = this.s.scheduleDelete.get(params.name);
    if (!deleted) return { kind: "not_found" };
    this.s.scheduleTicksDelete.run(params.name);
    return { kind: "deleted", schedule: toRow(deleted) };
  }

  /** Whether a tick fired for `revision` of schedule `name` may be recorded. */
  inForce(params: { name: string; revision: string }): boolean {
    return this.s.scheduleInForce.get(params) !== undefined;
  }

  latestTicks(names: string[]): CronTick[] {
    return this.s.latestTicks
      .all(JSON.stringify(names))
      .map((row) => ({ name: row.name, tickAt: row.tick_at, jobId: row.job_id }));
  }

  private mustGet(name: string): ScheduleRow {
    const row = this.get(name);
    if (!row) throw new Error(`schedule ${name} vanished inside its transaction`);
    return row;
  }
}

/**
 * The SQLite engine's schedules (docs/schedules.md; migration 0007): the statements of `schedules` and of the ticks
 * they are asked about, and the administrators' writes. Everything runs on the engine's one connection inside the
 * caller's transaction: one writer, so a tick's check of the schedule's revision cannot race a change of it.
 */
import type Database from "better-sqlite3";
import type { CronTick, ScheduleFields, ScheduleRow } from "../../schedules/schedule.js";
import { scheduleColumns, toScheduleRow, type ScheduleDbRow } from "../schedule-rows.js";
import type { ScheduleCreateOutcome, ScheduleUpdateOutcome, ScheduleWriteOutcome } from "../store.js";
import { prepare, preparePluck } from "./prepared.js";

/** A `schedules` row as better-sqlite3 returns it: the request is JSON text. */
type SqliteScheduleRow = Omit<ScheduleDbRow, "request"> & { request: string };

const FIELD_VALUES =
  ":schedule, :timezone, :operation_id, :user_id, :request, :priority, :dedupe_key, :concurrency_key";

/** Prepares the schedules' statements on `db`. */
export function prepareScheduleStatements(db: Database.Database) {
  return {
    scheduleInsert: prepare<Record<string, unknown>>(
      db,
      `INSERT INTO schedules (name, schedule, timezone, operation_id, user_id, request, priority, dedupe_key,
         concurrency_key, revision, created_at, created_by, updated_at, updated_by)
       VALUES (:name, ${FIELD_VALUES}, :revision, :now, :actor, :now, :actor)
       ON CONFLICT (name) DO NOTHING`,
    ),
    scheduleGet: prepare<[string], SqliteScheduleRow>(db, "SELECT * FROM schedules WHERE name = ?"),
    scheduleCount: preparePluck<[], number>(db, "SELECT count(*) FROM schedules"),
    scheduleList: prepare<[], SqliteScheduleRow>(db, "SELECT * FROM schedules ORDER BY name"),
    // Only from the revision the change was made from: a change racing another is refused, not merged.
    scheduleUpdate: prepare<Record<string, unknown>>(
      db,
      `UPDATE schedules SET schedule = :schedule, timezone = :timezone, operation_id = :operation_id,
         user_id = :user_id, request = :request, priority = :priority, dedupe_key = :dedupe_key,
         concurrency_key = :concurrency_key, revision = :revision, updated_at = :now, updated_by = :actor
       WHERE name = :name AND revision = :if_revision`,
    ),
    // A second pause keeps the first's stamp.
    schedulePause: prepare<{ name: string; now: number; actor: string }>(
      db,
      "UPDATE schedules SET paused_at = :now, paused_by = :actor WHERE name = :name AND paused_at IS NULL",
    ),
    scheduleResume: prepare<[string]>(db, "UPDATE schedules SET paused_at = NULL, paused_by = NULL WHERE name = ?"),
    scheduleDelete: prepare<[string], SqliteScheduleRow>(db, "DELETE FROM schedules WHERE name = ? RETURNING *"),
    scheduleTicksDelete: prepare<[string]>(db, "DELETE FROM cron_ticks WHERE name = ?"),
    // The tick's condition (cronTickInsert): the revision it was fired for is in force, and the schedule runs.
    scheduleInForce: preparePluck<{ name: string; revision: string }, number>(
      db,
      "SELECT 1 FROM schedules WHERE name = :name AND revision = :revision AND paused_at IS NULL",
    ),
    // Each name's newest tick, one probe of cron_ticks' primary key (name, tick_at) per name.
    latestTicks: prepare<[string], { name: string; tick_at: number; job_id: string | null }>(
      db,
      `SELECT t.name, t.tick_at, t.job_id FROM (SELECT DISTINCT value AS name FROM json_each(?)) n
       JOIN cron_ticks t ON t.name = n.name
         AND t.tick_at = (SELECT m.tick_at FROM cron_ticks m WHERE m.name = n.name ORDER BY m.tick_at DESC LIMIT 1)`,
    ),
  };
}

function toRow(row: SqliteScheduleRow): ScheduleRow {
  return toScheduleRow({ ...row, request: JSON.parse(row.request) as ScheduleDbRow["request"] });
}

/** The schedules' writes and reads, on the statements of `prepareScheduleStatements`; the caller holds the transaction. */
export class ScheduleWrites {
  constructor(private readonly s: ReturnType<typeof prepareScheduleStatements>) {}

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

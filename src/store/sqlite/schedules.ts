/**
 * The SQLite engine's schedules (docs/schedules.md; migration 0007): the administrators' writes, the reads of
 * schedules and of their ticks, and a tick's insert with its job (statements in sql/schedules.ts and sql/insert.ts).
 * Everything runs on the engine's one connection inside the caller's transaction: one writer, so a tick's check of the
 * schedule's revision cannot race a change of it.
 */
import { scheduleColumns, toScheduleRow, type ScheduleDbRow } from "../schedule-rows.js";
import type {
  CronTick,
  CronTickOutcome,
  JobInsertParams,
  ScheduleCreateOutcome,
  ScheduleFields,
  ScheduleRow,
  ScheduleUpdateOutcome,
  ScheduleWriteOutcome,
} from "../store.js";
import { insertOne } from "./insert.js";
import type { SqliteScheduleRow } from "./sql/schedules.js";
import type { Statements } from "./statements.js";

function toRow(row: SqliteScheduleRow): ScheduleRow {
  return toScheduleRow({ ...row, request: JSON.parse(row.request) as ScheduleDbRow["request"] });
}

/** Creates a schedule unless one has its name or `maxSchedules` exist (one writer: nothing can come between). */
export function createSchedule(
  s: Statements,
  params: {
    schedule: ScheduleFields;
    revision: string;
    actor: string;
    maxSchedules: number;
    now: number;
  },
): ScheduleCreateOutcome {
  const existing = getSchedule(s, params.schedule.name);
  if (existing) return { kind: "exists", schedule: existing };
  if ((s.scheduleCount.get() ?? 0) >= params.maxSchedules)
    return { kind: "limit_reached", maxSchedules: params.maxSchedules };
  const inserted = s.scheduleInsert.run({
    ...scheduleColumns(params.schedule),
    revision: params.revision,
    now: params.now,
    actor: params.actor,
  });
  const kind = inserted.changes === 1 ? "created" : "exists";
  return { kind, schedule: mustGet(s, params.schedule.name) };
}

/** One schedule by name. */
export function getSchedule(s: Statements, name: string): ScheduleRow | undefined {
  const row = s.scheduleGet.get(name);
  return row ? toRow(row) : undefined;
}

/** Every schedule, by name. */
export function listSchedules(s: Statements): ScheduleRow[] {
  return s.scheduleList.all().map(toRow);
}

/** Changes a schedule, only from the revision the change was made from. */
export function updateSchedule(
  s: Statements,
  params: {
    schedule: ScheduleFields;
    ifRevision: string;
    revision: string;
    actor: string;
    now: number;
  },
): ScheduleUpdateOutcome {
  const changed = s.scheduleUpdate.run({
    ...scheduleColumns(params.schedule),
    revision: params.revision,
    if_revision: params.ifRevision,
    now: params.now,
    actor: params.actor,
  });
  const current = getSchedule(s, params.schedule.name);
  if (!current) return { kind: "not_found" };
  return changed.changes === 1
    ? { kind: "updated", schedule: current }
    : { kind: "revision_changed", schedule: current };
}

/** Pauses a schedule (a second pause keeps the first's stamp). */
export function pauseSchedule(
  s: Statements,
  params: { name: string; actor: string; now: number },
): ScheduleWriteOutcome<"paused"> {
  s.schedulePause.run(params);
  const current = getSchedule(s, params.name);
  return current ? { kind: "paused", schedule: current } : { kind: "not_found" };
}

/** Resumes a schedule. */
export function resumeSchedule(s: Statements, params: { name: string }): ScheduleWriteOutcome<"resumed"> {
  s.scheduleResume.run(params.name);
  const current = getSchedule(s, params.name);
  return current ? { kind: "resumed", schedule: current } : { kind: "not_found" };
}

/** Deletes a schedule and its recorded ticks. */
export function deleteSchedule(s: Statements, params: { name: string }): ScheduleWriteOutcome<"deleted"> {
  const deleted = s.scheduleDelete.get(params.name);
  if (!deleted) return { kind: "not_found" };
  s.scheduleTicksDelete.run(params.name);
  return { kind: "deleted", schedule: toRow(deleted) };
}

/**
 * Records a cron tick and inserts its job, inside the caller's transaction: once across restarts (the tick's row is
 * the claim to it), and for a schedule's tick only while the schedule is in force at `scheduleRevision`.
 */
export function insertTick(
  s: Statements,
  params: { name: string; tickAt: number; job: JobInsertParams; scheduleRevision?: string | undefined; now: number },
): CronTickOutcome {
  const revision = params.scheduleRevision;
  if (revision !== undefined && s.scheduleInForce.get({ name: params.name, revision }) === undefined)
    return { kind: "schedule_changed" };
  if (s.recordTick.run({ name: params.name, tick_at: params.tickAt }).changes === 0) {
    return { kind: "already_enqueued" };
  }
  const outcome = insertOne(s, { insert: params.job, now: params.now });
  if (outcome.kind === "created" || outcome.kind === "deduplicated") {
    s.tickJob.run({ name: params.name, tick_at: params.tickAt, job_id: outcome.job.id });
  }
  return outcome;
}

/** The newest recorded tick of each of `names` that has one. */
export function latestTicks(s: Statements, names: string[]): CronTick[] {
  return s.latestTicks
    .all(JSON.stringify(names))
    .map((row) => ({ name: row.name, tickAt: row.tick_at, jobId: row.job_id }));
}

function mustGet(s: Statements, name: string): ScheduleRow {
  const row = getSchedule(s, name);
  if (!row) throw new Error(`schedule ${name} vanished inside its transaction`);
  return row;
}

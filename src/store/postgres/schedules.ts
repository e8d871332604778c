/**
 * The PostgreSQL engine's schedules (docs/schedules.md): the administrators' writes, each announced on the schedules'
 * channel in its own transaction (a NOTIFY is sent when it commits, and only then), a tick recorded with its job, and
 * the reads of schedules and of their last ticks.
 */
import type pg from "pg";
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
import type { PgConnection } from "./connection.js";
import { unstorable } from "./errors.js";
import { insertOne } from "./insert.js";
import type { PgRow } from "./rows.js";
import {
  CRON_TICK_LATEST,
  SCHEDULE_COUNT,
  SCHEDULE_CREATE_LOCK,
  SCHEDULE_DELETE,
  SCHEDULE_GET,
  SCHEDULE_IN_FORCE,
  SCHEDULE_INSERT,
  SCHEDULE_LIST,
  SCHEDULE_NOTIFY,
  SCHEDULE_PAUSE,
  SCHEDULE_RESUME,
  SCHEDULE_TICKS_DELETE,
  SCHEDULE_UPDATE,
} from "./sql/schedules.js";
import { CRON_TICK_RECORD, CRON_TICK_SET_JOB } from "./sql/insert.js";

type Now = Date | "now";

function toRow(row: PgRow): ScheduleRow {
  return toScheduleRow(row as unknown as ScheduleDbRow);
}

/** The values of $1–$9 of SCHEDULE_INSERT and SCHEDULE_UPDATE. */
function fieldValues(fields: ScheduleFields): unknown[] {
  const c = scheduleColumns(fields);
  return [
    c.name,
    c.schedule,
    c.timezone,
    c.operation_id,
    c.user_id,
    c.request,
    c.priority,
    c.dedupe_key,
    c.concurrency_key,
  ];
}

/** A schedule as `client`'s transaction sees it. */
async function getIn(client: pg.PoolClient, name: string): Promise<ScheduleRow | undefined> {
  const row = (await client.query<PgRow>(SCHEDULE_GET, [name])).rows[0];
  return row ? toRow(row) : undefined;
}

/** Runs a write and announces it, in one transaction. */
function announced<T>(db: PgConnection, write: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  return db.transaction(async (client) => {
    const answer = await write(client);
    await client.query(SCHEDULE_NOTIFY);
    return answer;
  });
}

/**
 * Creates a schedule unless one has its name or `maxSchedules` exist; announced. The count and the insert are made
 * under the creates' advisory lock, so creates racing on several nodes never pass the limit together.
 */
export function createSchedule(
  db: PgConnection,
  params: { schedule: ScheduleFields; revision: string; actor: string; maxSchedules: number; now: Now },
): Promise<ScheduleCreateOutcome> {
  return announced(db, async (client) => {
    await client.query(SCHEDULE_CREATE_LOCK);
    const existing = await getIn(client, params.schedule.name);
    if (existing) return { kind: "exists", schedule: existing };
    const count = (await client.query<{ count: number }>(SCHEDULE_COUNT)).rows[0]?.count ?? 0;
    if (count >= params.maxSchedules) return { kind: "limit_reached", maxSchedules: params.maxSchedules };
    const inserted = await client.query(SCHEDULE_INSERT, [
      ...fieldValues(params.schedule),
      params.revision,
      params.now,
      params.actor,
    ]);
    const schedule = await getIn(client, params.schedule.name);
    if (!schedule) throw new Error(`schedule ${params.schedule.name} vanished inside its transaction`);
    return { kind: inserted.rowCount === 1 ? "created" : "exists", schedule };
  });
}

/** One schedule by name. */
export async function getSchedule(db: PgConnection, name: string): Promise<ScheduleRow | undefined> {
  if (unstorable(name)) return db.answerIfOpen(undefined);
  const row = (await db.query(SCHEDULE_GET, [name]))[0];
  return row ? toRow(row) : undefined;
}

/** Every schedule, by name. */
export async function listSchedules(db: PgConnection): Promise<ScheduleRow[]> {
  return (await db.query(SCHEDULE_LIST)).map(toRow);
}

/** Replaces a schedule's fields if it still has `ifRevision`; announced. */
export async function updateSchedule(
  db: PgConnection,
  params: { schedule: ScheduleFields; ifRevision: string; revision: string; actor: string; now: Now },
): Promise<ScheduleUpdateOutcome> {
  if (unstorable(params.schedule.name)) return db.answerIfOpen({ kind: "not_found" });
  return announced(db, async (client) => {
    const changed = await client.query(SCHEDULE_UPDATE, [
      ...fieldValues(params.schedule),
      params.revision,
      params.now,
      params.actor,
      params.ifRevision,
    ]);
    const schedule = await getIn(client, params.schedule.name);
    if (!schedule) return { kind: "not_found" };
    return changed.rowCount === 1 ? { kind: "updated", schedule } : { kind: "revision_changed", schedule };
  });
}

/** Pauses a schedule, kept as it was if already paused; announced. */
export async function pauseSchedule(
  db: PgConnection,
  params: { name: string; actor: string; now: Now },
): Promise<ScheduleWriteOutcome<"paused">> {
  if (unstorable(params.name)) return db.answerIfOpen({ kind: "not_found" });
  return announced(db, async (client) => {
    await client.query(SCHEDULE_PAUSE, [params.name, params.now, params.actor]);
    const schedule = await getIn(client, params.name);
    return schedule ? { kind: "paused", schedule } : { kind: "not_found" };
  });
}

/** Resumes a schedule; announced. */
export async function resumeSchedule(
  db: PgConnection,
  params: { name: string },
): Promise<ScheduleWriteOutcome<"resumed">> {
  if (unstorable(params.name)) return db.answerIfOpen({ kind: "not_found" });
  return announced(db, async (client) => {
    await client.query(SCHEDULE_RESUME, [params.name]);
    const schedule = await getIn(client, params.name);
    return schedule ? { kind: "resumed", schedule } : { kind: "not_found" };
  });
}

/** Deletes a schedule and its recorded ticks; announced. */
export async function deleteSchedule(
  db: PgConnection,
  params: { name: string },
): Promise<ScheduleWriteOutcome<"deleted">> {
  if (unstorable(params.name)) return db.answerIfOpen({ kind: "not_found" });
  return announced(db, async (client) => {
    const deleted = (await client.query<PgRow>(SCHEDULE_DELETE, [params.name])).rows[0];
    if (!deleted) return { kind: "not_found" };
    await client.query(SCHEDULE_TICKS_DELETE, [params.name]);
    return { kind: "deleted", schedule: toRow(deleted) };
  });
}

/**
 * Records a cron tick and inserts its job in one transaction: once across nodes and restarts (the tick's row is the
 * claim to it), and for a schedule's tick only while the schedule is in force at `scheduleRevision`.
 */
export async function insertTick(
  db: PgConnection,
  params: { name: string; tickAt: number; job: JobInsertParams; scheduleRevision?: string | undefined; now: Now },
): Promise<CronTickOutcome> {
  return db.transaction(async (client) => {
    const revision = params.scheduleRevision;
    if (revision !== undefined && (await client.query(SCHEDULE_IN_FORCE, [params.name, revision])).rowCount === 0) {
      return { kind: "schedule_changed" } as const;
    }
    const tick = await client.query(CRON_TICK_RECORD, [params.name, new Date(params.tickAt)]);
    if (tick.rowCount === 0) return { kind: "already_enqueued" } as const;
    const outcome = await insertOne(client, { insert: params.job, now: params.now });
    if (outcome.kind === "created" || outcome.kind === "deduplicated") {
      await client.query(CRON_TICK_SET_JOB, [params.name, new Date(params.tickAt), outcome.job.id]);
    }
    return outcome;
  });
}

/** The newest recorded tick of each of `names` that has one. */
export async function latestTicks(db: PgConnection, params: { names: string[] }): Promise<CronTick[]> {
  const names = params.names.filter((name) => !unstorable(name));
  if (names.length === 0) return db.answerIfOpen([]);
  const rows = await db.query(CRON_TICK_LATEST, [names]);
  return rows.map((row) => ({
    name: row["name"] as string,
    tickAt: Number(row["tick_at"]),
    jobId: (row["job_id"] as string | null) ?? null,
  }));
}

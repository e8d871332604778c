/**
 * Schedules' statements (docs/schedules.md; migration 0007): the administrators' writes of `schedules`, the check a
 * schedule's tick makes, and the newest tick of each name.
 */
import type Database from "better-sqlite3";
import type { ScheduleDbRow } from "../../schedule-rows.js";
import { prepare, preparePluck } from "../prepared.js";

/** A `schedules` row as better-sqlite3 returns it: the request is JSON text. */
export type SqliteScheduleRow = Omit<ScheduleDbRow, "request"> & { request: string };

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

/** The schedules' statements, prepared. */
export type ScheduleStatements = ReturnType<typeof prepareScheduleStatements>;

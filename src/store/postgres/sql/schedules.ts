/**
 * Schedules' statements (docs/schedules.md; migration 0013): the administrators' writes of `schedules`, the check a
 * schedule's tick makes, the newest tick of each name, and the channel every change is announced on.
 */
import { epochMs } from "./common.js";

/** A `schedules` row, its times in ms. */
const SCHEDULE_COLUMNS = `name, schedule, timezone, operation_id, user_id, request, priority, dedupe_key, concurrency_key,
  revision, ${epochMs("created_at")} AS created_at, created_by, ${epochMs("updated_at")} AS updated_at, updated_by,
  ${epochMs("paused_at")} AS paused_at, paused_by`;

/**
 * Creates a schedule unless one has its name. $1 name, $2 schedule, $3 timezone, $4 operation id, $5 user id,
 * $6 request (JSON), $7 priority, $8 dedupe key, $9 concurrency key, $10 revision, $11 now, $12 actor.
 */
export const SCHEDULE_INSERT = `INSERT INTO schedules (name, schedule, timezone, operation_id, user_id, request, priority,
    dedupe_key, concurrency_key, revision, created_at, created_by, updated_at, updated_by)
  VALUES ($1, $2, $3, $4, $5, $6::json, $7, $8, $9, $10, $11, $12, $11, $12)
  ON CONFLICT (name) DO NOTHING RETURNING name`;

/**
 * Serialises the creates of schedules, for the rest of the transaction: each counts the schedules and inserts under it,
 * so two creates on any nodes cannot both see room for the last one (under READ COMMITTED, a count does not see an
 * insert not yet committed).
 */
export const SCHEDULE_CREATE_LOCK =
  "SELECT pg_advisory_xact_lock(hashtext('opqueue.schedule-create:' || current_schema()))";

/** How many schedules there are. */
export const SCHEDULE_COUNT = "SELECT count(*)::int AS count FROM schedules";

/** $1 name. */
export const SCHEDULE_GET = `SELECT ${SCHEDULE_COLUMNS} FROM schedules WHERE name = $1`;

/** Every schedule, by name in byte order, as SQLite orders text. */
export const SCHEDULE_LIST = `SELECT ${SCHEDULE_COLUMNS} FROM schedules ORDER BY name COLLATE "C"`;

/**
 * Replaces the fields of schedule $1 if it still has revision $13 (a change racing another is refused, not merged).
 * $2–$9 as SCHEDULE_INSERT, $10 the new revision, $11 now, $12 actor.
 */
export const SCHEDULE_UPDATE = `UPDATE schedules SET schedule = $2, timezone = $3, operation_id = $4, user_id = $5,
    request = $6::json, priority = $7, dedupe_key = $8, concurrency_key = $9, revision = $10, updated_at = $11,
    updated_by = $12
  WHERE name = $1 AND revision = $13 RETURNING name`;

/** Pauses schedule $1, kept as it was if already paused. $2 now, $3 actor. */
export const SCHEDULE_PAUSE =
  "UPDATE schedules SET paused_at = $2, paused_by = $3 WHERE name = $1 AND paused_at IS NULL";

/** $1 name. */
export const SCHEDULE_RESUME = "UPDATE schedules SET paused_at = NULL, paused_by = NULL WHERE name = $1";

/** $1 name. */
export const SCHEDULE_DELETE = `DELETE FROM schedules WHERE name = $1 RETURNING ${SCHEDULE_COLUMNS}`;

/** The recorded ticks of a deleted schedule. $1 name. */
export const SCHEDULE_TICKS_DELETE = "DELETE FROM cron_ticks WHERE name = $1";

/**
 * A schedule's tick may be recorded: revision $2 of schedule $1 is in force and not paused. FOR SHARE holds the row
 * until the tick's transaction commits, so a change, a pause or a delete (which update or delete the row) waits for the
 * tick in flight: once one of them answers, no tick of what it replaced can still be committed.
 */
export const SCHEDULE_IN_FORCE =
  "SELECT 1 FROM schedules WHERE name = $1 AND revision = $2 AND paused_at IS NULL FOR SHARE";

/**
 * Tells every node listening on the schedules' channel that the schedules changed (sent when the transaction commits).
 * No payload: a node reads the schedules again, whatever changed.
 */
export const SCHEDULE_NOTIFY = "SELECT pg_notify('opqueue_schedules:' || current_schema(), '')";

/** The newest tick of each of the names $1: one probe of cron_ticks' primary key (name, tick_at) per name. */
export const CRON_TICK_LATEST = `SELECT n.name, ${epochMs("t.tick_at")} AS tick_at, t.job_id
  FROM (SELECT DISTINCT unnest($1::text[]) AS name) n
  CROSS JOIN LATERAL (
    SELECT c.tick_at, c.job_id FROM cron_ticks c WHERE c.name = n.name ORDER BY c.tick_at DESC LIMIT 1) t`;

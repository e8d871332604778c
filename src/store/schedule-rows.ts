/**
 * The rows of `schedules` as both engines read them (times in ms since the epoch, the request already parsed), and the
 * columns of a schedule's fields as both write them.
 */
import type { RequestPayload } from "../job/schemas.js";
import type { ScheduleFields, ScheduleRow } from "./store.js";

/** A `schedules` row, its times in ms and its request parsed. */
export interface ScheduleDbRow {
  name: string;
  schedule: string;
  timezone: string;
  operation_id: string;
  user_id: string;
  request: RequestPayload;
  priority: number;
  dedupe_key: string | null;
  concurrency_key: string | null;
  revision: string;
  created_at: number;
  created_by: string;
  updated_at: number;
  updated_by: string;
  paused_at: number | null;
  paused_by: string | null;
}

/** A row as the Store answers it. */
export function toScheduleRow(row: ScheduleDbRow): ScheduleRow {
  return {
    name: row.name,
    schedule: row.schedule,
    timezone: row.timezone,
    operationId: row.operation_id,
    userId: row.user_id,
    request: row.request,
    priority: Number(row.priority),
    dedupeKey: row.dedupe_key,
    concurrencyKey: row.concurrency_key,
    revision: row.revision,
    created: { at: Number(row.created_at), by: row.created_by },
    updated: { at: Number(row.updated_at), by: row.updated_by },
    paused: row.paused_at === null ? null : { at: Number(row.paused_at), by: row.paused_by ?? "" },
  };
}

/** The columns a create or an update writes, by name; `request` as JSON text. */
export function scheduleColumns(fields: ScheduleFields): {
  name: string;
  schedule: string;
  timezone: string;
  operation_id: string;
  user_id: string;
  request: string;
  priority: number;
  dedupe_key: string | null;
  concurrency_key: string | null;
} {
  return {
    name: fields.name,
    schedule: fields.schedule,
    timezone: fields.timezone,
    operation_id: fields.operationId,
    user_id: fields.userId,
    request: JSON.stringify(fields.request),
    priority: fields.priority,
    dedupe_key: fields.dedupeKey,
    concurrency_key: fields.concurrencyKey,
  };
}

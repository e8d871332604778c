/**
 * src/schedules/ is cron's one home: the config file's entries and the schedules created through the API, run alike by
 * one scheduler (scheduler.ts). Beside it: the names their jobs call as (callers.ts), when they tick (expression.ts),
 * the job a tick or a run now enqueues (schedule-jobs.ts), the start-up checks of the config's entries
 * (config-entries.ts) and the checks of a schedule's definition (checks.ts), the administrators' use cases
 * (schedules.ts) and their wire forms (schemas.ts). Only the config file's `cron` section (src/config/cron.ts) and the
 * stored ticks and schedules (the store's `ScheduleStore`) live elsewhere.
 *
 * This file: a schedule (docs/schedules.md), a cron entry created through the API and kept in the database, beside the
 * config file's entries: the small pure functions between its forms. Its types are the store's, which keeps them.
 */
import { randomBytes } from "node:crypto";
import type { CronConfig } from "../config.js";
import type { ScheduleFields } from "../store/store.js";
import { cronCaller } from "./callers.js";

/** A schedule's fields, its row and a recorded tick are the store's (src/store/roles/schedules.ts), which keeps them. */
export type { CronTick, ScheduleFields, ScheduleRow } from "../store/store.js";

/** A fresh revision: 72 random bits, so that no schedule ever gets back a revision it or a namesake had. */
export function newRevision(): string {
  return randomBytes(9).toString("base64url");
}

/** The dedupe key of a schedule's jobs when none is given: its calling operation, as for config entries. */
export function defaultDedupeKey(name: string): string {
  return cronCaller(name);
}

/** A schedule as the cron scheduler runs it: in the shape of a config entry, its dedupe key spelled out. */
export function cronEntryOf(fields: ScheduleFields): CronConfig {
  return {
    name: fields.name,
    schedule: fields.schedule,
    timezone: fields.timezone,
    operation_id: fields.operationId,
    user_id: fields.userId,
    request: fields.request,
    priority: fields.priority,
    dedupe_key: fields.dedupeKey,
    concurrency_key: fields.concurrencyKey,
  };
}

/** A config entry's definition in a schedule's fields, its defaults filled in (docs/delivery.md, "Cron"). */
export function fieldsOfCronEntry(entry: CronConfig): ScheduleFields {
  return {
    name: entry.name,
    schedule: entry.schedule,
    timezone: entry.timezone,
    operationId: entry.operation_id,
    userId: entry.user_id,
    request: entry.request,
    priority: entry.priority ?? 0,
    dedupeKey: entry.dedupe_key === undefined ? defaultDedupeKey(entry.name) : entry.dedupe_key,
    concurrencyKey: entry.concurrency_key ?? null,
  };
}

/**
 * src/schedules/ is cron's one home: the config file's entries and the schedules created through the API, run alike by
 * one scheduler (scheduler.ts). Beside it: the names their jobs call as (callers.ts), when they tick (expression.ts),
 * the job a tick or a run now enqueues (schedule-jobs.ts), the start-up checks of the config's entries
 * (config-entries.ts) and the checks of a schedule's definition (checks.ts), the administrators' use cases
 * (schedules.ts) and their wire forms (schemas.ts). Only the config file's `cron` section (src/config/cron.ts) and the
 * stored ticks and schedules (the store's `ScheduleStore`) live elsewhere.
 *
 * This file: a schedule (docs/schedules.md), a cron entry created through the API and kept in the database, beside the
 * config file's entries: its types, and the small pure functions between its forms. The store's engines import only
 * its types.
 */
import { randomBytes } from "node:crypto";
import type { CronConfig } from "../config.js";
import type { Stamp } from "../flow/limits.js";
import type { RequestPayload } from "../job/schemas.js";
import { cronCaller } from "./callers.js";

/** What defines a schedule: its name, when it ticks, and the job each tick enqueues. */
export interface ScheduleFields {
  /** Unique among schedules and config entries; `cron:{name}` is its jobs' calling operation. */
  name: string;
  /** The cron expression: 5 fields, or 6 with seconds first. */
  schedule: string;
  /** The IANA time zone the expression is read in. */
  timezone: string;
  operationId: string;
  userId: string;
  request: RequestPayload;
  priority: number;
  /** The jobs' dedupe key (`cron:{name}` unless given); null: none. */
  dedupeKey: string | null;
  concurrencyKey: string | null;
}

/** A schedule as the store keeps it. */
export interface ScheduleRow extends ScheduleFields {
  /**
   * Changes with every change of the fields, never to a value it had: a tick fired for another revision (by a node
   * that has not yet read the change) is refused by `cronTickInsert`.
   */
  revision: string;
  created: Stamp;
  /** The last change of the fields (the creation until one); pauses and resumes are not changes of the fields. */
  updated: Stamp;
  /** Set while the schedule is paused: its ticks enqueue nothing. */
  paused: Stamp | null;
}

/** A recorded tick of a schedule or config entry: when, and the job it enqueued (null: none, a refusal). */
export interface CronTick {
  name: string;
  tickAt: number;
  jobId: string | null;
}

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

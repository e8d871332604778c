/** The store's `ScheduleStore` role; src/store/store.ts composes the roles into `Store`. */
import type { Stamp } from "../../flow/limits.js";
import type { RequestPayload } from "../../job/schemas.js";
import type { JobInsertOutcome, JobInsertParams } from "./enqueue.js";

/** What defines a schedule (docs/schedules.md): its name, when it ticks, and the job each tick enqueues. */
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

/** The result of `scheduleCreate`. */
export type ScheduleCreateOutcome =
  | { kind: "created"; schedule: ScheduleRow }
  /** A schedule has that name: nothing changed. */
  | { kind: "exists"; schedule: ScheduleRow }
  /** `maxSchedules` schedules exist already: nothing changed. */
  | { kind: "limit_reached"; maxSchedules: number };

/** The result of `scheduleUpdate`. */
export type ScheduleUpdateOutcome =
  | { kind: "updated"; schedule: ScheduleRow }
  | { kind: "not_found" }
  /** Someone changed the schedule since it was read (its revision is another): nothing changed. */
  | { kind: "revision_changed"; schedule: ScheduleRow };

/** The result of `schedulePause`, `scheduleResume` and `scheduleDelete`: the schedule as the write left it. */
export type ScheduleWriteOutcome<K extends "paused" | "resumed" | "deleted"> =
  { kind: K; schedule: ScheduleRow } | { kind: "not_found" };

/** The result of `cronTickInsert`. */
export type CronTickOutcome =
  | JobInsertOutcome
  /** Some node recorded the tick already (before a restart, or another node): nothing written. */
  | { kind: "already_enqueued" }
  /** A schedule's tick for a revision that is no longer in force, or while it is paused or gone: nothing written. */
  | { kind: "schedule_changed" };

/**
 * Runtime schedules (docs/schedules.md) and the cron ticks of schedules and config entries, each tick
 * enqueued exactly once across nodes and restarts.
 */
export interface ScheduleStore {
  /**
   * Creates a schedule (docs/schedules.md), not paused, `actor` its creator and last changer; `exists` when a
   * schedule has that name, else `limit_reached` when `maxSchedules` exist already. The count and the insert are one
   * transaction, serialised with every other create (on PostgreSQL, under an advisory lock), so creates racing on any
   * number of nodes never pass the limit together.
   */
  scheduleCreate(params: {
    schedule: ScheduleFields;
    revision: string;
    actor: string;
    maxSchedules: number;
  }): Promise<ScheduleCreateOutcome>;
  /** One schedule by name. */
  scheduleGet(params: { name: string }): Promise<ScheduleRow | undefined>;
  /** Every schedule, by name. */
  scheduleList(): Promise<ScheduleRow[]>;
  /**
   * Replaces a schedule's fields (its name aside) and gives it `revision`, if it still has `ifRevision`: a change
   * made from what another change replaced is refused (`revision_changed`), never merged blindly.
   */
  scheduleUpdate(params: {
    schedule: ScheduleFields;
    ifRevision: string;
    revision: string;
    actor: string;
  }): Promise<ScheduleUpdateOutcome>;
  /** Pauses a schedule (kept as it was if already paused): its ticks enqueue nothing until it is resumed. */
  schedulePause(params: { name: string; actor: string }): Promise<ScheduleWriteOutcome<"paused">>;
  /** Resumes a paused schedule (a running one is answered as it is); it ticks again from its next tick. */
  scheduleResume(params: { name: string }): Promise<ScheduleWriteOutcome<"resumed">>;
  /** Deletes a schedule and its recorded ticks; answers it as it was. */
  scheduleDelete(params: { name: string }): Promise<ScheduleWriteOutcome<"deleted">>;
  /**
   * Records a cron tick and inserts its job in one transaction; a tick already recorded (by another node, or
   * before a restart) inserts nothing and answers `already_enqueued`.
   */
  cronTickInsert(params: {
    name: string;
    tickAt: number;
    job: JobInsertParams;
    /**
     * For a schedule's tick (docs/schedules.md): the revision it was fired for. The tick is recorded only while the
     * schedule `name` has this revision and is not paused, checked in the same transaction (which, on PostgreSQL,
     * holds the schedule's row until it commits): otherwise `schedule_changed`. Left out for a config entry's tick.
     */
    scheduleRevision?: string | undefined;
  }): Promise<CronTickOutcome>;
  /** The newest recorded tick of each name that has one (a schedule's or a config entry's last run), in no order. */
  cronTickLatestMany(params: { names: string[] }): Promise<CronTick[]>;
}

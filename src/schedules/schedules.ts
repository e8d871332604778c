/**
 * The administrators' schedules (docs/schedules.md), the use cases behind `/schedules`: list and get (the config file's
 * entries, read-only, beside the schedules created through the API), create, update, pause, resume, delete, and run
 * now. Every refusal is an `ApiError`:
 *
 *   404 schedule_not_found   no schedule or config entry has the name
 *   409 schedule_exists      a create under a name a schedule or a config entry has
 *   409 schedule_read_only   a change, pause, resume or delete of a config entry (change the config file instead)
 *   409 schedule_limit_reached  a create while `limits.max_schedules` schedules exist (config entries do not count)
 *
 * and the checks of a definition (checks.ts). Writes go to the store, which tells every node's scheduler; nothing here
 * arms a timer.
 */
import type { Clock } from "../clock.js";
import type { Config, CronConfig } from "../config.js";
import { enqueuePrepared, type EnqueueDeps, type EnqueueResult } from "../enqueue/enqueue.js";
import { ApiError } from "../errors.js";
import type { OperationRegistry } from "../operations/registry.js";
import type { RequestSchemas } from "../operations/request-schemas.js";
import type { ScheduleSource } from "./callers.js";
import { checkScheduleFields, scheduleTargetError } from "./checks.js";
import { nextTickAfter } from "./expression.js";
import { cronRunNowJob } from "./schedule-jobs.js";
import {
  cronEntryOf,
  fieldsOfCronEntry,
  newRevision,
  type CronTick,
  type ScheduleFields,
  type ScheduleRow,
} from "./schedule.js";
import type { EnqueueStore, ScheduleStore } from "../store/store.js";

/** What the schedules' use cases need from the running service. */
export interface ScheduleDeps extends EnqueueDeps {
  store: EnqueueStore & Omit<ScheduleStore, "cronTickInsert">;
  config: EnqueueDeps["config"] & Pick<Config, "cron">;
  registry: OperationRegistry;
  requestSchemas: RequestSchemas;
  /** The database's clock as this node knows it: next runs and run-now times are read on it. */
  clock: Clock;
}

/** A schedule as the API shows it: its definition, where it comes from, and its next and last runs. */
export interface ScheduleView {
  source: ScheduleSource;
  fields: ScheduleFields;
  /** The stored schedule; null for a config entry (which has no stamps, and no pause). */
  row: ScheduleRow | null;
  /** Its next tick after now; null while paused, or when the expression never fires again. */
  nextRunAt: number | null;
  /** Its newest recorded tick, with the job the tick enqueued. */
  lastTick: CronTick | null;
}

/** A schedule found by name: a config entry or a stored one. */
type Found = { source: "config"; entry: CronConfig } | { source: "api"; row: ScheduleRow };

/** How often an update is tried again when another change lands between its read and its write. */
const UPDATE_TRIES = 3;

/** The use cases of `/schedules`. */
export class Schedules {
  constructor(private readonly deps: ScheduleDeps) {}

  /** Every schedule: the config file's entries and the stored ones, by name. */
  async list(): Promise<ScheduleView[]> {
    const rows = await this.deps.store.scheduleList();
    const found: Found[] = [
      ...this.deps.config.cron.map((entry): Found => ({ source: "config", entry })),
      ...rows.map((row): Found => ({ source: "api", row })),
    ];
    found.sort((a, b) => compareNames(nameOf(a), nameOf(b)));
    return this.views(found);
  }

  /** One schedule; 404 when neither a config entry nor a stored schedule has the name. */
  async get(name: string): Promise<ScheduleView> {
    return (await this.views([await this.find(name)]))[0] as ScheduleView;
  }

  /**
   * Creates a schedule from checked fields; 409 `schedule_exists` when the name is taken, 409 `schedule_limit_reached`
   * when `limits.max_schedules` schedules exist already.
   */
  async create(fields: ScheduleFields, actor: string): Promise<ScheduleView> {
    if (this.configEntry(fields.name)) throw exists(fields.name, "a config entry");
    checkScheduleFields({
      fields,
      config: this.deps.config,
      registry: this.deps.registry,
      requestSchemas: this.deps.requestSchemas,
    });
    const maxSchedules = this.deps.config.limits.max_schedules;
    const outcome = await this.deps.store.scheduleCreate({
      schedule: fields,
      revision: newRevision(),
      actor,
      maxSchedules,
    });
    if (outcome.kind === "exists") throw exists(fields.name, "a schedule");
    if (outcome.kind === "limit_reached") {
      throw new ApiError(
        409,
        "schedule_limit_reached",
        `${outcome.maxSchedules} schedules exist already, the most this service keeps (limits.max_schedules): delete one ` +
          "first, or raise the limit",
      );
    }
    return this.viewOf({ source: "api", row: outcome.schedule });
  }

  /**
   * Changes a stored schedule's fields to what `change` makes of the current ones, checked as a create's. A change
   * landing between the read and the write makes it start again from that change (never overwrite it unseen).
   */
  async update(
    name: string,
    change: (current: ScheduleFields) => ScheduleFields,
    actor: string,
  ): Promise<ScheduleView> {
    for (let tries = 1; ; tries++) {
      const row = await this.findStored(name, "changed");
      const fields = { ...change(row), name: row.name };
      checkScheduleFields({
        fields,
        config: this.deps.config,
        registry: this.deps.registry,
        requestSchemas: this.deps.requestSchemas,
      });
      const outcome = await this.deps.store.scheduleUpdate({
        schedule: fields,
        ifRevision: row.revision,
        revision: newRevision(),
        actor,
      });
      if (outcome.kind === "updated") return this.viewOf({ source: "api", row: outcome.schedule });
      if (outcome.kind === "not_found") throw notFound(name);
      if (tries >= UPDATE_TRIES) {
        throw new ApiError(
          503,
          "unavailable",
          `schedule "${name}" kept changing while this change was made; try again`,
          { "retry-after": "1" },
        );
      }
    }
  }

  /** Pauses a stored schedule (a paused one stays as it was). */
  async pause(name: string, actor: string): Promise<ScheduleView> {
    this.refuseConfigEntry(name, "paused");
    const outcome = await this.deps.store.schedulePause({ name, actor });
    if (outcome.kind === "not_found") throw notFound(name);
    return this.viewOf({ source: "api", row: outcome.schedule });
  }

  /** Resumes a stored schedule: it ticks again from its next tick, none of those it missed. */
  async resume(name: string): Promise<ScheduleView> {
    this.refuseConfigEntry(name, "resumed");
    const outcome = await this.deps.store.scheduleResume({ name });
    if (outcome.kind === "not_found") throw notFound(name);
    return this.viewOf({ source: "api", row: outcome.schedule });
  }

  /** Deletes a stored schedule; answers it as it was, with no next run. */
  async delete(name: string): Promise<ScheduleView> {
    this.refuseConfigEntry(name, "deleted");
    const outcome = await this.deps.store.scheduleDelete({ name });
    if (outcome.kind === "not_found") throw notFound(name);
    return { source: "api", fields: outcome.schedule, row: outcome.schedule, nextRunAt: null, lastTick: null };
  }

  /**
   * Enqueues one job of the schedule now, paused or not, config entry or not: not a tick (no tick is recorded, and the
   * next tick comes as it would have), in a chain of its own. Its target is checked again, as a tick's would be.
   */
  async runNow(name: string): Promise<EnqueueResult> {
    const found = await this.find(name);
    const fields = fieldsOf(found);
    const refusal = scheduleTargetError({
      config: this.deps.config,
      registry: this.deps.registry,
      source: found.source,
      name,
      operationId: fields.operationId,
    });
    if (refusal) throw refusal;
    const entry = found.source === "config" ? found.entry : cronEntryOf(fields);
    return enqueuePrepared(this.deps, cronRunNowJob({ ...this.deps, entry, at: this.deps.clock.now() }));
  }

  private configEntry(name: string): CronConfig | undefined {
    return this.deps.config.cron.find((entry) => entry.name === name);
  }

  private async find(name: string): Promise<Found> {
    const entry = this.configEntry(name);
    if (entry) return { source: "config", entry };
    const row = await this.deps.store.scheduleGet({ name });
    if (!row) throw notFound(name);
    return { source: "api", row };
  }

  /** A stored schedule to change; 409 for a config entry's name, 404 for an unknown one. */
  private async findStored(name: string, what: string): Promise<ScheduleRow> {
    this.refuseConfigEntry(name, what);
    const row = await this.deps.store.scheduleGet({ name });
    if (!row) throw notFound(name);
    return row;
  }

  private refuseConfigEntry(name: string, what: string): void {
    if (!this.configEntry(name)) return;
    throw new ApiError(
      409,
      "schedule_read_only",
      `schedule "${name}" comes from the config file's cron entries and cannot be ${what} through the API: change the ` +
        "config file (and restart), or pause its target operation",
    );
  }

  private async viewOf(found: Found): Promise<ScheduleView> {
    return (await this.views([found]))[0] as ScheduleView;
  }

  /** The views of `found`, in its order, their last ticks read in one call. */
  private async views(found: Found[]): Promise<ScheduleView[]> {
    const names = found.map(nameOf);
    const ticks = new Map((await this.deps.store.cronTickLatestMany({ names })).map((tick) => [tick.name, tick]));
    const now = this.deps.clock.now();
    return found.map((item) => {
      const fields = fieldsOf(item);
      const row = item.source === "api" ? item.row : null;
      return {
        source: item.source,
        fields,
        row,
        nextRunAt: row?.paused ? null : nextRun(fields, now),
        lastTick: ticks.get(fields.name) ?? null,
      };
    });
  }
}

function nameOf(found: Found): string {
  return found.source === "config" ? found.entry.name : found.row.name;
}

function fieldsOf(found: Found): ScheduleFields {
  return found.source === "config" ? fieldsOfCronEntry(found.entry) : found.row;
}

/** Names in byte order (the store's order), not the locale's. */
function compareNames(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * The next tick after `now`, or null. A stored expression this node cannot read (a time zone its ICU lacks, a stored
 * schedule from a newer opqueue) has no next run here rather than failing the whole list.
 */
function nextRun(fields: ScheduleFields, now: number): number | null {
  try {
    return nextTickAfter({ schedule: fields.schedule, timezone: fields.timezone, after: now });
  } catch {
    return null;
  }
}

function notFound(name: string): ApiError {
  return new ApiError(404, "schedule_not_found", `no schedule is named "${name.slice(0, 200)}"`);
}

function exists(name: string, holder: string): ApiError {
  return new ApiError(
    409,
    "schedule_exists",
    `${holder} is already named "${name}": schedule names are unique, config entries included`,
  );
}

/**
 * The scheduler, cron at run time (docs/delivery.md, "Cron"; docs/schedules.md): each entry of the config file, and
 * each schedule created through the API, enqueues exactly one job per tick across all nodes. Every node runs every
 * schedule; the tick is recorded in the database in the same transaction as its job, so only the first node to reach
 * a tick enqueues it (and a restart cannot enqueue it again). Missed ticks are not backfilled: after a restart or a
 * resume, a schedule goes on from its next tick. A tick that comes due while the node is still firing the one before
 * is fired next, at most `CRON_CATCH_UP_MS` late. croner only computes tick times; the timers are ours.
 *
 * What is armed: the config file's entries, from the start, unchanged for the process's life; and the stored schedules
 * that are not paused, read at the start, again whenever the store announces a change (`scheduleChangeListen`: a
 * NOTIFY on PostgreSQL, this process's own writes on SQLite), and every `SCHEDULE_SYNC_MS` in case an announcement was
 * missed. Each read arms what is new, re-arms what changed (its revision: from now on, by its new definition) and
 * disarms what was paused or deleted. A schedule's tick names the revision it was armed with, and the store records it
 * only while that revision is in force and the schedule runs (`cronTickInsert`): a node that has not yet heard of a
 * change, a pause or a delete enqueues nothing it should not, and is at worst late to start a new schedule.
 */
import type { Logger } from "pino";
import type { Clock } from "../clock.js";
import type { Config, CronConfig } from "../config.js";
import type { WorkNotifier } from "../work-notifier.js";
import { enqueueOutcome } from "../enqueue/enqueue.js";
import { Periodic } from "../maintenance/periodic.js";
import type { OperationRegistry } from "../operations/registry.js";
import type { PerOperationSettings } from "../operations/settings.js";
import { StoreUnavailableError, type EnqueueStore, type ListenStore, type ScheduleStore } from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";
import { scheduleTargetError } from "./checks.js";
import { nextTickAfter } from "./expression.js";
import { cronTickJob } from "./schedule-jobs.js";
import { cronEntryOf, type ScheduleRow } from "./schedule.js";

/** Longest delay a Node timer takes; longer waits are done in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** First and longest wait before a tick is tried again while the database does not answer. */
const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 30_000;

/**
 * How late a tick may still be enqueued when it came due while this node was busy with the tick before (a slow commit,
 * a wait on another node's commit of the same tick) or while its timer was held up (a stalled event loop). Later ones
 * are dropped, as ticks missed while no node runs are: a process suspended for an hour does not enqueue an hour of
 * every-second ticks when it wakes.
 */
export const CRON_CATCH_UP_MS = 60_000;

/**
 * How often the stored schedules are read again without being told of a change: the bound on how late a node starts a
 * schedule created, changed or resumed while it was not listening (a lost connection, a NOTIFY sent as it reconnected).
 */
export const SCHEDULE_SYNC_MS = 5000;

/** An entry whose timer runs: a config entry (no revision), or a stored schedule at one revision. */
interface Armed {
  entry: CronConfig;
  /** The stored schedule's revision; null for a config entry. */
  revision: string | null;
  timer: NodeJS.Timeout | undefined;
  /** The tick its timer waits for; null when the expression never fires again. */
  nextTickAt: number | null;
}

/** Runs every cron entry of the config and every stored schedule. */
export class CronScheduler {
  private readonly armed = new Map<string, Armed>();
  private readonly firing = new Set<Promise<void>>();
  /** Waits between tries of a tick, each with its way to end early when the scheduler stops. */
  private readonly retryWaits = new Map<NodeJS.Timeout, () => void>();
  private stopped = true;
  /** The read of the schedules under way, and whether another was asked for meanwhile (it may miss a change). */
  private syncing: Promise<void> | undefined;
  private syncAgain = false;
  private readonly poll: Periodic;
  private listening: Promise<void> | undefined;
  private stopListening: (() => Promise<void>) | undefined;
  /** Stored schedules found under a config entry's name, warned of once each. */
  private readonly shadowed = new Set<string>();

  constructor(
    private readonly options: {
      config: Pick<Config, "cron" | "limits" | "triggers">;
      registry: OperationRegistry;
      settings: PerOperationSettings;
      store: EnqueueStore &
        Pick<ScheduleStore, "cronTickInsert" | "scheduleList"> &
        Pick<ListenStore, "scheduleChangeListen">;
      /** The database's clock as this node knows it: ticks are due by it. */
      clock: Clock;
      notifier: WorkNotifier;
      telemetry: Telemetry;
      logger: Logger;
      /** How often the stored schedules are read whatever the announcements said; `SCHEDULE_SYNC_MS` by default. */
      syncMs?: number;
    },
  ) {
    this.poll = new Periodic({
      name: "schedule sync",
      intervalMs: options.syncMs ?? SCHEDULE_SYNC_MS,
      logger: options.logger,
      run: async () => {
        this.listen();
        await this.sync();
      },
    });
  }

  /** Starts every config entry from now, then every stored schedule as soon as they are read. */
  start(): void {
    this.stopped = false;
    const now = this.options.clock.now();
    for (const entry of this.options.config.cron) this.arm({ entry, revision: null }, now);
    this.listen();
    void this.sync();
    this.poll.start();
  }

  /** The first tick strictly after `after`, or null if the expression never fires again. */
  nextTick(entry: CronConfig, after: number): number | null {
    return nextTickAfter({ schedule: entry.schedule, timezone: entry.timezone, after });
  }

  /** The tick each armed entry's timer waits for, by name (null: it never fires again); for tests and diagnostics. */
  nextTicks(): Map<string, number | null> {
    return new Map([...this.armed].map(([name, armed]) => [name, armed.nextTickAt]));
  }

  /**
   * Reads the stored schedules and arms, re-arms and disarms to match. Calls while a read is under way are answered
   * by one more read after it, which sees every change committed before they were made.
   */
  sync(): Promise<void> {
    if (this.syncing) {
      this.syncAgain = true;
      return this.syncing;
    }
    this.syncing = (async () => {
      do {
        this.syncAgain = false;
        await this.syncOnce();
      } while (this.syncAgain && !this.stopped);
    })().finally(() => {
      this.syncing = undefined;
    });
    return this.syncing;
  }

  private async syncOnce(): Promise<void> {
    const { store, config, logger } = this.options;
    let rows: ScheduleRow[];
    try {
      rows = await store.scheduleList();
    } catch (error) {
      // The armed schedules go on ticking as they were read last; a tick of a stale one is refused by the store.
      logger.warn({ err: error }, "cannot read the schedules; keeping the ones read before");
      return;
    }
    if (this.stopped) return;
    const configNames = new Set(config.cron.map((entry) => entry.name));
    const wanted = new Map<string, ScheduleRow>();
    for (const row of rows) {
      if (configNames.has(row.name)) {
        // Start-up refuses this (docs/schedules.md); another node may have created it since. The config entry wins here.
        if (!this.shadowed.has(row.name)) {
          this.shadowed.add(row.name);
          logger.error(
            { cron: row.name },
            "a schedule created through the API has a config entry's name; it is not run on this node",
          );
        }
        continue;
      }
      if (row.paused === null) wanted.set(row.name, row);
    }
    for (const [name, armed] of this.armed) {
      if (armed.revision === null) continue;
      if (wanted.get(name)?.revision !== armed.revision) this.disarm(name);
    }
    const now = this.options.clock.now();
    for (const [name, row] of wanted) {
      if (!this.armed.has(name)) this.arm({ entry: cronEntryOf(row), revision: row.revision }, now);
    }
  }

  /** Listens for the store's announcements of changed schedules, unless already listening; the poll tries again. */
  private listen(): void {
    if (this.stopped || this.listening || this.stopListening) return;
    this.listening = this.options.store
      .scheduleChangeListen(() => void this.sync())
      .then(
        (stop) => {
          this.listening = undefined;
          if (this.stopped) return stop();
          this.stopListening = stop;
          // A change committed before the LISTEN took effect was announced to nobody here.
          void this.sync();
          return undefined;
        },
        (error: unknown) => {
          this.listening = undefined;
          this.options.logger.warn(
            { err: error },
            "cannot listen for changes of the schedules yet; reading them every few seconds meanwhile",
          );
        },
      );
  }

  private arm(spec: { entry: CronConfig; revision: string | null }, after: number): void {
    const armed: Armed = { ...spec, timer: undefined, nextTickAt: null };
    this.armed.set(spec.entry.name, armed);
    this.scheduleNext(armed, after);
  }

  private disarm(name: string): void {
    clearTimeout(this.armed.get(name)?.timer);
    this.armed.delete(name);
  }

  /** Whether `armed` is still what runs under its name: a timer or a retry of a replaced one does nothing more. */
  private isCurrent(armed: Armed): boolean {
    return !this.stopped && this.armed.get(armed.entry.name) === armed;
  }

  /** `nextTick`, or null when it cannot be computed (`scheduleNext` then logs why). */
  private nextTickOrNull(entry: CronConfig, after: number): number | null {
    try {
      return this.nextTick(entry, after);
    } catch {
      return null;
    }
  }

  private scheduleNext(armed: Armed, after: number): void {
    if (!this.isCurrent(armed)) return;
    let tickAt: number | null;
    try {
      tickAt = this.nextTick(armed.entry, after);
    } catch (error) {
      // A stored expression this node cannot read (a time zone its ICU lacks): the schedule does not run here.
      this.options.logger.error(
        { err: error, cron: armed.entry.name },
        "cannot compute the schedule's next tick; it does not run on this node",
      );
      tickAt = null;
    }
    armed.nextTickAt = tickAt;
    if (tickAt !== null) this.armFor(armed, tickAt);
  }

  private armFor(armed: Armed, tickAt: number): void {
    const delay = tickAt - this.options.clock.now();
    armed.timer = setTimeout(
      () => {
        if (!this.isCurrent(armed)) return;
        const now = this.options.clock.now();
        if (tickAt > now) {
          this.armFor(armed, tickAt);
          return;
        }
        if (now - tickAt > CRON_CATCH_UP_MS) {
          // The timer itself was held up (a suspended process).
          this.skipLate(armed, tickAt, now);
          return;
        }
        const run = this.fireUntilDone(armed, tickAt).then(
          (changed) => {
            this.firing.delete(run);
            const after = this.options.clock.now();
            // A tick the store refused (the schedule was changed, paused or deleted) ends any catching up: the next is
            // the first after now. Otherwise the next is the one after this tick, so one that came due meanwhile is
            // fired at once, unless it is more than CRON_CATCH_UP_MS late.
            if (changed) return this.scheduleNext(armed, after);
            const next = this.nextTickOrNull(armed.entry, tickAt);
            if (next !== null && after - next > CRON_CATCH_UP_MS) this.skipLate(armed, next, after);
            else this.scheduleNext(armed, tickAt);
          },
          (error: unknown) => {
            this.firing.delete(run);
            this.options.logger.error({ err: error, cron: armed.entry.name }, "cron tick failed");
            this.scheduleNext(armed, this.options.clock.now());
          },
        );
        this.firing.add(run);
      },
      Math.max(0, Math.min(delay, MAX_TIMER_MS)),
    );
  }

  /**
   * Goes on from the ticks of the last `CRON_CATCH_UP_MS` before `now`: `firstLate` and the ticks after it that are
   * older than that are not fired by this node, and the log says so.
   */
  private skipLate(armed: Armed, firstLate: number, now: number): void {
    const from = now - CRON_CATCH_UP_MS;
    this.options.logger.warn(
      { cron: armed.entry.name, from: new Date(firstLate).toISOString(), until: new Date(from).toISOString() },
      "cron ticks more than a minute late not fired: this node was held up",
    );
    this.scheduleNext(armed, from);
  }

  /**
   * Fires a tick, trying again while the database does not answer (a restart, a failover), with growing waits, until
   * the next tick is due (docs/delivery.md, "Cron"). Another node may enqueue the tick meanwhile; the tick's row in the
   * database makes sure it is enqueued once. True when the store refused the tick because the schedule was changed,
   * paused or deleted.
   */
  private async fireUntilDone(armed: Armed, tickAt: number): Promise<boolean> {
    const { entry } = armed;
    const nextTick = this.nextTick(entry, tickAt);
    const revision = armed.revision === null ? {} : { revision: armed.revision };
    for (let wait = RETRY_FIRST_MS; ; wait = Math.min(wait * 2, RETRY_MAX_MS)) {
      const outcome = await this.fireOnce(entry, tickAt, revision);
      if (outcome !== "retry") return outcome === "changed";
      if (nextTick !== null && this.options.clock.now() + wait >= nextTick) {
        this.options.logger.error(
          { cron: entry.name, tick: new Date(tickAt).toISOString() },
          "cron tick not enqueued: the database did not answer before the next tick",
        );
        return false;
      }
      await this.retryWait(wait);
      if (!this.isCurrent(armed)) return false;
    }
  }

  private retryWait(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.retryWaits.delete(timer);
        resolve();
      }, ms);
      this.retryWaits.set(timer, resolve);
    });
  }

  /**
   * Enqueues the job of one tick, unless some node already did. `revision` makes it a stored schedule's tick: its
   * target is checked against this node's trigger map and OpenAPI document first, and the store records it only for
   * that revision, not paused. False when the database did not answer (worth trying again); true when the tick is
   * settled, whatever its outcome.
   */
  async fire(entry: CronConfig, tickAt: number, options: { revision?: string } = {}): Promise<boolean> {
    return (await this.fireOnce(entry, tickAt, options)) !== "retry";
  }

  /** `fire`, telling a tick the store refused for a changed, paused or deleted schedule ("changed") from the others. */
  private async fireOnce(
    entry: CronConfig,
    tickAt: number,
    options: { revision?: string },
  ): Promise<"settled" | "changed" | "retry"> {
    const { store, telemetry, logger, config, settings, notifier, registry } = this.options;
    const { revision } = options;
    if (revision !== undefined) {
      const refusal = scheduleTargetError({
        config,
        registry,
        source: "api",
        name: entry.name,
        operationId: entry.operation_id,
      });
      if (refusal) {
        telemetry.emit("cron:tick", { name: entry.name, tickAt, outcome: refusal.code });
        logger.error(
          { cron: entry.name, tick: new Date(tickAt).toISOString(), code: refusal.code },
          `schedule tick not enqueued: ${refusal.message}`,
        );
        return "settled";
      }
    }
    try {
      const job = cronTickJob({ config, settings, entry, tickAt });
      const outcome = await store.cronTickInsert({ name: entry.name, tickAt, job, scheduleRevision: revision });
      telemetry.emit("cron:tick", { name: entry.name, tickAt, outcome: outcome.kind });
      if (outcome.kind === "created" || outcome.kind === "deduplicated") {
        if (outcome.job.status === "pending" || outcome.job.status === "retrying") notifier.notify(outcome.job.runAt);
        telemetry.emit("job:enqueued", {
          operationId: outcome.job.operationId,
          outcome: enqueueOutcome({ kind: outcome.kind, job: outcome.job }),
          runAt: outcome.job.runAt,
        });
        logger.info(
          { cron: entry.name, tick: new Date(tickAt).toISOString(), jobId: outcome.job.id, outcome: outcome.kind },
          "cron tick enqueued",
        );
      } else if (outcome.kind === "schedule_changed") {
        // This node missed the change (or it raced the tick): read the schedules again rather than wait for the poll.
        logger.info(
          { cron: entry.name, tick: new Date(tickAt).toISOString() },
          "schedule tick not enqueued: the schedule changed, was paused or was deleted",
        );
        void this.sync();
        return "changed";
      } else if (outcome.kind !== "already_enqueued") {
        logger.warn({ cron: entry.name, outcome: outcome.kind }, "cron tick could not enqueue its job");
      }
    } catch (error) {
      const retry = error instanceof StoreUnavailableError;
      logger.warn({ err: error, cron: entry.name }, retry ? "cron tick failed; trying again" : "cron tick failed");
      return retry ? "retry" : "settled";
    }
    return "settled";
  }

  /** Stops every schedule, stops listening, and waits for ticks being enqueued. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const armed of this.armed.values()) clearTimeout(armed.timer);
    this.armed.clear();
    for (const [timer, resolve] of this.retryWaits) {
      clearTimeout(timer);
      resolve();
    }
    this.retryWaits.clear();
    await this.poll.stop();
    await this.listening;
    await this.stopListening?.();
    this.stopListening = undefined;
    await Promise.all([...this.firing, this.syncing]);
  }
}

/**
 * Cron (docs/delivery.md, "Cron"): each entry enqueues exactly one job per tick across all nodes. Every node runs the
 * schedule; the tick is recorded in the database in the same transaction as its job, so only the first node to
 * reach a tick enqueues it (and a restart cannot enqueue it again). Missed ticks are not backfilled: after a
 * restart, the schedule resumes from the next tick. croner only computes tick times; the timers are ours.
 */
import { Cron } from "croner";
import type { Logger } from "pino";
import type { Clock } from "../clock.js";
import { cronCaller, type Config, type CronConfig } from "../config.js";
import type { WorkNotifier } from "../dispatcher/notifier.js";
import { enqueueOutcome } from "../enqueue/enqueue.js";
import { newJobId } from "../job/job-id.js";
import type { PerOperationSettings } from "../operations/settings.js";
import { StoreUnavailableError, type JobInsertParams, type Store } from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";

/** Longest delay a Node timer takes; longer waits are done in steps. */
const MAX_TIMER_MS = 2 **31 - 1;

/** First and longest wait before a tick is tried again while the database does not answer. */
const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 30_000;

/** The job a tick enqueues. */
export function cronTickJob(options: {
  config: Pick<Config, "limits">;
  settings: PerOperationSettings;
  entry: CronConfig;
  tickAt: number;
}): JobInsertParams {
  const { config, settings, entry, tickAt } = options;
  const caller = cronCaller(entry.name);
  return {
    id: newJobId(),
    operationId: entry.operation_id,
    priority: entry.priority ?? 0,
    runTime: { at: tickAt },
    maxAttempts: settings.of(entry.operation_id).maxAttempts,
    dedupeKey: entry.dedupe_key === undefined ? caller : entry.dedupe_key,
    concurrencyKey: entry.concurrency_key ?? null,
    rateKey: null,
    enqueuedByOperationId: caller,
    parentJobId: null,
    originalRequestId: `${caller}:${new Date(tickAt).toISOString()}`,
    userId: entry.user_id,
    authority: { kind: "cron", cron_job_name: entry.name, user_id: entry.user_id },
    request: entry.request,
    spawnCap: config.limits.spawn_cap,
    traceparent: null,
    expiry: null,
    callbacks: null,
  };
}

/** Runs every cron entry of the config. */
export class CronScheduler {
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly firing = new Set<Promise<void>>();
  /** Waits between tries of a tick, each with its way to end early when the scheduler stops. */
  private readonly retryWaits = new Map<NodeJS.Timeout, () => void>();
  private stopped = true;

  constructor(
    private readonly options: {
      config: Pick<Config, "cron" | "limits">;
      settings: PerOperationSettings;
      store: Store;
      /** The database's clock as this node knows it: ticks are due by it. */
      clock: Clock;
      notifier: WorkNotifier;
      telemetry: Telemetry;
      logger: Logger;
    },
  ) {}

  /** Starts every schedule from now. */
  start(): void {
    this.stopped = false;
    for (const entry of this.options.config.cron) this.scheduleNext(entry, this.options.clock.now());
  }

  /** The first tick strictly after `after`, or null if the expression never fires again. */
  nextTick(entry: CronConfig, after: number): number | null {
    const next = new Cron(entry.schedule, { timezone: entry.timezone, paused: true }).nextRun(new Date(after));
    return next ? next.getTime() : null;
  }

  private scheduleNext(entry: CronConfig, after: number): void {
    if (this.stopped) return;
    const tickAt = this.nextTick(entry, after);
    if (tickAt === null) return;
    this.armFor(entry, tickAt);
  }

  private armFor(entry: CronConfig, tickAt: number): void {
    const delay = tickAt - this.options.clock.now();
    const timer = setTimeout(
      () => {
        if (this.stopped) return;
        if (tickAt > this.options.clock.now()) {
          this.armFor(entry, tickAt);
          return;
        }
        const run = this.fireUntilDone(entry, tickAt).finally(() => {
          this.firing.delete(run);
          this.scheduleNext(entry, Math.max(tickAt, this.options.clock.now()));
        });
        this.firing.add(run);
      },
      Math.max(0, Math.min(delay, MAX_TIMER_MS)),
    );
    this.timers.set(entry.name, timer);
  }

  /**
   * Fires a tick, trying again while the database does not answer (a restart, a failover), with growing waits, until
   * the next tick is due: only ticks missed while no node runs go unfired (docs/delivery.md, "Cron"). Another node may
   * enqueue the tick meanwhile; the tick's row in the database makes sure it is enqueued once.
   */
  private async fireUntilDone(entry: CronConfig, tickAt: number): Promise<void> {
    const nextTick = this.nextTick(entry, tickAt);
    for (let wait = RETRY_FIRST_MS; ; wait = Math.min(wait * 2, RETRY_MAX_MS)) {
      if (await this.fire(entry, tickAt)) return;
      if (nextTick !== null && this.options.clock.now() + wait >= nextTick) {
        this.options.logger.error(
          { cron: entry.name, tick: new Date(tickAt).toISOString() },
          "cron tick not enqueued: the database did not answer before the next tick",
        );
        return;
      }
      await this.retryWait(wait);
      if (this.stopped) return;
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
   * Enqueues the job of one tick, unless some node already did. False when the database did not answer (worth
   * trying again); true when the tick is settled, whatever its outcome.
   */
  async fire(entry: CronConfig, tickAt: number): Promise<boolean> {
    const { store, telemetry, logger, config, settings, notifier } = this.options;
    try {
      const job = cronTickJob({ config, settings, entry, tickAt });
      const outcome = await store.cronTickInsert({ name: entry.name, tickAt, job });
      telemetry.emit("cron:tick", { name: entry.name, tickAt, outcome: outcome.kind });
      if (outcome.kind === "created" || outcome.kind === "deduplicated") {
        if (outcome.job.status === "pending" || outcome.job.status === "retrying") notifier.notify(outcome.job.runAt);
        telemetry.emit("job:enqueued", {
          operationId: outcome.job.operationId,
          outcome: enqueueOutcome({ kind: outcome.kind, job: outcome.job }),
          runAt: outcome.job.runAt,
        });
        logger.info({ cron: entry.name, tick: new Date(tickAt).toISOString(), jobId: outcome.job.id, outcome: outcome.kind }, "cron tick enqueued");
      } else if (outcome.kind !== "already_enqueued") {
        logger.warn({ cron: entry.name, outcome: outcome.kind }, "cron tick could not enqueue its job");
      }
    } catch (error) {
      const retry = error instanceof StoreUnavailableError;
      logger.warn({ err: error, cron: entry.name }, retry ? "cron tick failed; trying again" : "cron tick failed");
      return !retry;
    }
    return true;
  }

  /** Stops every schedule and waits for ticks being enqueued. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    for (const [timer, resolve] of this.retryWaits) {
      clearTimeout(timer);
      resolve();
    }
    this.retryWaits.clear();
    await Promise.all(this.firing);
  }
}

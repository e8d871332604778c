/**
 * Cron (CONTRACT §8): each entry enqueues exactly one job per tick across all nodes. Every node runs the
 * schedule; the tick is recorded in the database in the same transaction as its job, so only the first node to
 * reach a tick enqueues it (and a restart cannot enqueue it again). Missed ticks are not backfilled: after a
 * restart, the schedule resumes from the next tick. croner only computes tick times; the timers are ours.
 */
import { Cron } from "croner";
import type { Logger } from "pino";
import type { Clock } from "../clock.js";
import type { Config, CronConfig } from "../config.js";
import { enqueueOutcome } from "../job/enqueue.js";
import { newJobId } from "../job/job-id.js";
import type { JobInsertParams, Store } from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";

/** Longest delay a Node timer takes; longer waits are done in steps. */
const MAX_TIMER_MS = 2 **31 - 1;

/** The calling operation of a cron entry. */
export function cronOperation(name: string): string {
  return `cron:${name}`;
}

/** The job a tick enqueues. */
export function cronTickJob(options: { config: Config; entry: CronConfig; tickAt: number }): JobInsertParams {
  const { config, entry, tickAt } = options;
  const caller = cronOperation(entry.name);
  return {
    id: newJobId(),
    operationId: entry.operation_id,
    priority: entry.priority ?? 0,
    runAt: tickAt,
    maxAttempts: config.operations[entry.operation_id]?.max_attempts ?? config.defaults.max_attempts,
    dedupeKey: entry.dedupe_key === undefined ? caller : entry.dedupe_key,
    concurrencyKey: entry.concurrency_key ?? null,
    enqueuedByOperationId: caller,
    parentJobId: null,
    originalRequestId: `${caller}:${new Date(tickAt).toISOString()}`,
    userId: entry.user_id,
    authority: { kind: "cron", cron_job_name: entry.name, user_id: entry.user_id },
    request: entry.request,
    spawnCap: config.limits.spawn_cap,
  };
}

/** Runs every cron entry of the config. */
export class CronScheduler {
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly firing = new Set<Promise<void>>();
  private stopped = true;

  constructor(
    private readonly options: { config: Config; store: Store; clock: Clock; telemetry: Telemetry; logger: Logger },
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
        const run = this.fire(entry, tickAt).finally(() => {
          this.firing.delete(run);
          this.scheduleNext(entry, Math.max(tickAt, this.options.clock.now()));
        });
        this.firing.add(run);
      },
      Math.max(0, Math.min(delay, MAX_TIMER_MS)),
    );
    this.timers.set(entry.name, timer);
  }

  /** Enqueues the job of one tick, unless some node already did. */
  async fire(entry: CronConfig, tickAt: number): Promise<void> {
    const { store, telemetry, logger, config } = this.options;
    try {
      const outcome = await store.cronTickInsert({ name: entry.name, tickAt, job: cronTickJob({ config, entry, tickAt }) });
      telemetry.emit("cron:tick", { name: entry.name, tickAt, outcome: outcome.kind });
      if (outcome.kind === "created" || outcome.kind === "deduplicated") {
        telemetry.emit("job:enqueued", {
          operationId: outcome.job.operationId,
          outcome: enqueueOutcome(outcome.kind === "created" ? 201 : 200, outcome.job),
          runAt: outcome.job.runAt,
        });
        logger.info({ cron: entry.name, tick: new Date(tickAt).toISOString(), jobId: outcome.job.id, outcome: outcome.kind }, "cron tick enqueued");
      } else if (outcome.kind !== "already_enqueued") {
        logger.warn({ cron: entry.name, outcome: outcome.kind }, "cron tick could not enqueue its job");
      }
    } catch (error) {
      logger.warn({ err: error, cron: entry.name }, "cron tick failed");
    }
  }

  /** Stops every schedule and waits for ticks being enqueued. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    await Promise.all(this.firing);
  }
}

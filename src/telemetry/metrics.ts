/**
 * Prometheus metrics, fed by telemetry events (counters, histograms) and read from the store at scrape time
 * (gauges). Each service instance gets its own registry, so tests that build many apps never share counters.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { JOB_STATUSES } from "../job/schemas.js";
import type { Clock } from "../clock.js";
import type { JobStatus } from "../job/statuses.js";
import type { Telemetry } from "./events.js";
import type { OperationControl } from "../flow/limits.js";
import { COUNTS_READ, sharedRead, type SharedReadOptions } from "./shared-read.js";

/** The metrics of one service instance. */
export interface Metrics {
  registry: Registry;
}

/**
 * What the job gauges read at scrape time: counts by status, the run time of the oldest due job no pause holds, and
 * the due jobs a pause holds, by operation (the store's `JobStats`).
 */
export interface JobCounts {
  byStatus: Record<JobStatus, number>;
  oldestDueRunAt: number | null;
  pausedDue: Array<{ operationId: string; count: number }>;
}

/** Creates the registry and subscribes its metrics to `telemetry`. */
export function createMetrics(options: {
  telemetry: Telemetry;
  /** Reads the job counts (from the store, by status only: the cheaper kind). */
  countJobs: () => Promise<JobCounts>;
  /** The database's clock as this node knows it, for the queue's lag. */
  clock: Clock;
  processMetrics?: boolean;
  /**
   * Reads the operations' flow control, and, when any operation has some, how many jobs of each wait (pending or
   * retrying); absent, the flow control gauges stay empty.
   */
  readFlow?: () => Promise<{ controls: OperationControl[]; waiting: Map<string, number> }>;
  /** How the counts are shared between scrapes (shared-read.ts); `COUNTS_READ` by default. */
  countsRead?: SharedReadOptions;
}): Metrics {
  const { telemetry, clock } = options;
  const registry = new Registry();
  if (options.processMetrics ?? false) collectDefaultMetrics({ register: registry, prefix: "opqueue_" });
  const registers = [registry];

  const enqueued = new Counter({
    name: "opqueue_jobs_enqueued_total",
    help: "Accepted enqueues (API and cron), by target operation and outcome (created, deduplicated, cancelled-by-chain).",
    labelNames: ["operation_id", "outcome"] as const,
    registers,
  });
  const refused = new Counter({
    name: "opqueue_enqueue_refused_total",
    help: "Refused enqueue requests, by error code.",
    labelNames: ["code"] as const,
    registers,
  });
  const deliveries = new Counter({
    name: "opqueue_deliveries_total",
    help:
      "Finished delivery exchanges, by target operation and outcome (succeeded, retrying, dead; async: the target took " +
      "the attempt asynchronously).",
    labelNames: ["operation_id", "outcome"] as const,
    registers,
  });
  const duration = new Histogram({
    name: "opqueue_delivery_duration_seconds",
    help: "Duration of delivery attempts (request sent to response read), by target operation.",
    labelNames: ["operation_id"] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers,
  });
  const rescued = new Counter({
    name: "opqueue_leases_rescued_total",
    help: "Running jobs recovered after their lease expired, by outcome (retrying, dead).",
    labelNames: ["outcome"] as const,
    registers,
  });
  // The job gauges come from one store read per scrape (counts by status only, the cheaper kind), shared with
  // scrapes close behind it when it is slow (see shared-read.ts); while the database is unavailable they keep their
  // last values rather than failing the scrape.
  const countsRead = options.countsRead ?? COUNTS_READ;
  const countByStatus = sharedRead(options.countJobs, countsRead);
  const stats = (): Promise<JobCounts | undefined> => countByStatus().catch(() => undefined);
  new Gauge({
    name: "opqueue_jobs",
    help: "Jobs in the database, by status.",
    labelNames: ["status"] as const,
    registers,
    async collect() {
      const current = await stats();
      if (current) for (const status of JOB_STATUSES) this.set({ status }, current.byStatus[status]);
    },
  });
  new Gauge({
    name: "opqueue_queue_lag_seconds",
    help:
      "Age of the oldest due claimable job (0 when none is waiting); jobs of a paused operation or concurrency key are " +
      "not claimable and do not count (see opqueue_paused_jobs).",
    registers,
    async collect() {
      const current = await stats();
      if (current) this.set(queueLagSeconds(current.oldestDueRunAt, clock.now()));
    },
  });
  new Gauge({
    name: "opqueue_paused_jobs",
    help:
      "Jobs due now (pending or retrying) that a pause of their operation or concurrency key holds back, by operation; " +
      "an operation with none has no series.",
    labelNames: ["operation_id"] as const,
    registers,
    async collect() {
      const current = await stats();
      if (!current) return;
      this.reset();
      for (const { operationId, count } of current.pausedDue) this.set({ operation_id: operationId }, count);
    },
  });

  const readFlow = options.readFlow;
  if (readFlow) {
    const flow = sharedRead(readFlow, countsRead);
    const flowNow = () => flow().catch(() => undefined);
    new Gauge({
      name: "opqueue_operation_paused",
      help: "1 while the operation is paused (docs/flow-control.md).",
      labelNames: ["operation_id"] as const,
      registers,
      async collect() {
        const current = await flowNow();
        if (!current) return;
        this.reset();
        for (const control of current.controls) this.set({ operation_id: control.operationId }, control.paused ? 1 : 0);
      },
    });
    new Gauge({
      name: "opqueue_operation_throttled",
      help: "1 while the operation has jobs waiting and a pause, a max_concurrency or a rate that may hold them.",
      labelNames: ["operation_id"] as const,
      registers,
      async collect() {
        const current = await flowNow();
        if (!current) return;
        this.reset();
        for (const { operationId, paused, limits } of current.controls) {
          const gated =
            paused !== null || limits.rate !== null || limits.ratePerKey !== null || limits.maxConcurrency !== null;
          this.set({ operation_id: operationId }, gated && (current.waiting.get(operationId) ?? 0) > 0 ? 1 : 0);
        }
      },
    });
  }
  const wait = new Histogram({
    name: "opqueue_job_wait_seconds",
    help: "How long claimed jobs waited past their run time, by target operation (flow control's gates show here).",
    labelNames: ["operation_id"] as const,
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600],
    registers,
  });
  telemetry.on("job:claimed", ({ operationId, waitMs }) =>
    wait.observe({ operation_id: operationId }, Math.max(0, waitMs) / 1000),
  );

  const clockOffset = new Gauge({
    name: "opqueue_clock_offset_seconds",
    help: "How far the database's clock is ahead of this node's (negative: behind), as last measured.",
    registers,
  });
  telemetry.on("clock:measured", ({ offsetMs }) => clockOffset.set(offsetMs / 1000));

  telemetry.on("job:enqueued", ({ operationId, outcome }) => enqueued.inc({ operation_id: operationId, outcome }));
  telemetry.on("job:enqueue-refused", ({ code }) => refused.inc({ code }));
  telemetry.on("delivery:finished", ({ operationId, outcome, durationMs }) => {
    deliveries.inc({ operation_id: operationId, outcome });
    duration.observe({ operation_id: operationId }, durationMs / 1000);
  });
  telemetry.on("delivery:async", ({ operationId, durationMs }) => {
    deliveries.inc({ operation_id: operationId, outcome: "async" });
    duration.observe({ operation_id: operationId }, durationMs / 1000);
  });
  const asyncEnded = new Counter({
    name: "opqueue_async_attempts_finished_total",
    help:
      "Attempts taken asynchronously that the target ended (complete or fail), by target operation and outcome " +
      "(succeeded, retrying, dead, cancelled); those whose lease expired are in opqueue_leases_rescued_total.",
    labelNames: ["operation_id", "outcome"] as const,
    registers,
  });
  telemetry.on("async:finished", ({ operationId, outcome }) => asyncEnded.inc({ operation_id: operationId, outcome }));
  telemetry.on("lease:rescued", ({ outcome }) => rescued.inc({ outcome }));
  const expired = new Counter({
    name: "opqueue_jobs_expired_total",
    help: "Waiting jobs that passed their expiry unstarted and ended cancelled/expired, by target operation.",
    labelNames: ["operation_id"] as const,
    registers,
  });
  telemetry.on("job:expired", ({ operationId }) => expired.inc({ operation_id: operationId }));
  const callbacks = new Counter({
    name: "opqueue_callbacks_total",
    help: "Callbacks due (docs/chains.md): enqueued (created, or cancelled-by-chain) or refused (spawn cap), by kind.",
    labelNames: ["kind", "outcome"] as const,
    registers,
  });
  telemetry.on("callback:enqueued", ({ kind, outcome }) => callbacks.inc({ kind, outcome }));
  telemetry.on("callback:refused", ({ kind, reason }) => callbacks.inc({ kind, outcome: reason }));
  const settle = new Histogram({
    name: "opqueue_chain_settle_seconds",
    help: "From a chain's first enqueue to its settling (no job pending, running or retrying), as the chain sweeper sees it.",
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400],
    registers,
  });
  telemetry.on("chain:settled", ({ seconds }) => settle.observe(Math.max(0, seconds)));
  return { registry };
}

/** The queue's lag in seconds at `now`: how long the oldest due claimable job has waited, 0 when none waits. */
export function queueLagSeconds(oldestDueRunAt: number | null, now: number): number {
  return oldestDueRunAt === null ? 0 : Math.max(0, now - oldestDueRunAt) / 1000;
}

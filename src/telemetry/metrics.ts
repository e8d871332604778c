/**
 * Prometheus metrics, fed by telemetry events. Each service instance gets its own registry, so tests that build
 * many apps in one process never share counters.
 */
import { Counter, Registry, collectDefaultMetrics } from "prom-client";
import type { Telemetry } from "./events.js";

/** The metrics of one service instance. */
export interface Metrics {
  registry: Registry;
}

/** Creates the registry and subscribes its metrics to `telemetry`. */
export function createMetrics(options: { telemetry: Telemetry; processMetrics?: boolean }): Metrics {
  const registry = new Registry();
  if (options.processMetrics ?? false) collectDefaultMetrics({ register: registry, prefix: "opqueue_" });

  const enqueued = new Counter({
    name: "opqueue_jobs_enqueued_total",
    help: "Accepted enqueue requests, by target operation and outcome (created, deduplicated, cancelled-by-chain).",
    labelNames: ["operation_id", "outcome"] as const,
    registers: [registry],
  });
  const refused = new Counter({
    name: "opqueue_enqueue_refused_total",
    help: "Refused enqueue requests, by error code.",
    labelNames: ["code"] as const,
    registers: [registry],
  });

  options.telemetry.on("job:enqueued", ({ operationId, outcome }) => {
    enqueued.inc({ operation_id: operationId, outcome });
  });
  options.telemetry.on("job:enqueue-refused", ({ code }) => {
    refused.inc({ code });
  });
  return { registry };
}

/**
 * Tracing's front door. `startTracing` loads the OpenTelemetry SDK (src/telemetry/otlp.ts) by a dynamic import, and only
 * when `telemetry.otlp` is configured: a node without it loads no module of the SDK, subscribes nothing to the events
 * the tracer reads, and gives the dispatcher no tracer (docs/tracing.md, "Cost when off").
 */
import type { Logger } from "pino";
import type { Config } from "../config.js";
import type { DeliveryTracer } from "./delivery-trace.js";
import type { Telemetry } from "./events.js";

/** A running OTLP tracer. */
export interface Tracing {
  /** Wraps delivery attempts in spans: the dispatcher's hook. */
  delivery: DeliveryTracer;
  /** Exports every span ended so far; resolves once the collector answered, or the export gave up. */
  flush(): Promise<void>;
  /** Exports what is left, then stops; the service's close calls it last. */
  shutdown(): Promise<void>;
}

/** Starts tracing when `config.telemetry.otlp` asks for it; undefined, with nothing loaded, when it does not. */
export async function startTracing(options: {
  config: Pick<Config, "telemetry">;
  telemetry: Telemetry;
  logger: Logger;
}): Promise<Tracing | undefined> {
  const otlp = options.config.telemetry.otlp;
  if (otlp === undefined) return undefined;
  const { startOtlpTracing } = await import("./otlp.js");
  return startOtlpTracing({ otlp, telemetry: options.telemetry, logger: options.logger });
}

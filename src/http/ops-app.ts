/**
 * The ops listener: /healthz, /readyz and /metrics alone, on a port of its own. A worker-only node (`serve --no-api`)
 * serves it on `listen.port`, so every node can be probed and scraped; an API node may serve it on `listen.ops_port`,
 * to keep probes and scrapes off the port its clients use.
 */
import type { FastifyBaseLogger, FastifyInstance } from "fastify";
import type { Config } from "../config.js";
import type { PerOperationSettings } from "../operations/settings.js";
import type { Store } from "../store/store.js";
import type { Metrics } from "../telemetry/metrics.js";
import { opsRoutes } from "./routes/ops.js";
import { createServer } from "./server.js";

/** Builds the ops listener (not listening). */
export async function buildOpsApp(options: {
  config: Config;
  settings: PerOperationSettings;
  store: Store;
  metrics: Metrics;
  logger?: FastifyBaseLogger | undefined;
}): Promise<FastifyInstance> {
  const app = createServer(options);
  await app.register(opsRoutes, { store: options.store, metrics: options.metrics, logger: options.logger });
  return app;
}

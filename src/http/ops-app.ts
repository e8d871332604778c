/**
 * The ops listener: /healthz, /readyz and /metrics alone, on a port of its own. A worker-only node (`serve --no-api`)
 * serves it on `listen.port`, so every node can be probed and scraped; an API node may serve it on `listen.ops_port`,
 * to keep probes and scrapes off the port its clients use.
 */
import type { FastifyBaseLogger, FastifyInstance } from "fastify";
import type { Config } from "../config.js";
import { ApiError } from "../errors.js";
import type { PerOperationSettings } from "../operations/settings.js";
import type { StoreLifecycle } from "../store/store.js";
import type { Metrics } from "../telemetry/metrics.js";
import { opsRoutes } from "./routes/ops.js";
import { createServer } from "./server.js";

/**
 * Answers every route but the probes' with 404 `api_disabled` (docs/api.md, "Errors"): on a worker-only node an API
 * route (POST /jobs, /ui, ...) is not a mistyped path, and the answer says where the API is.
 */
export function refuseApiRoutes(app: FastifyInstance): void {
  // Hidden from the document, so no query string schema is added to it: `/jobs?status=dead` is refused the same way.
  app.all("/*", { schema: { hide: true } }, async (request) => {
    const path = request.url.split("?")[0] ?? "";
    throw new ApiError(
      404,
      "api_disabled",
      `${request.method} ${path}: this node runs with --no-api (a worker only), so it serves no API; send API ` +
        "requests to a node started without --no-api (this one answers /healthz, /readyz and /metrics)",
    );
  });
}

/** Builds the ops listener (not listening). */
export async function buildOpsApp(options: {
  config: Config;
  settings: PerOperationSettings;
  store: Pick<StoreLifecycle, "ping">;
  metrics: Metrics;
  logger?: FastifyBaseLogger | undefined;
  /** Whether this node runs without the API (`serve --no-api`): every other route answers 404 `api_disabled`. */
  apiDisabled?: boolean;
}): Promise<FastifyInstance> {
  const app = createServer(options);
  await app.register(opsRoutes, { store: options.store, metrics: options.metrics, logger: options.logger });
  if (options.apiDisabled) refuseApiRoutes(app);
  return app;
}

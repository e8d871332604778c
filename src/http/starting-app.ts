/**
 * The listener of a node that is starting (docs/deploying.md, "Start-up"). `serve` listens with it before the service
 * is built, so that a node waiting for its database is already alive to a liveness probe: /healthz answers 200,
 * /readyz 503 naming what the node waits for, every other route 503 `unavailable` (or, on a worker-only node, 404
 * `api_disabled` as it will later). Once the service is built, `handOver` passes every later request on the same
 * sockets to the service's own app: the port is never closed, so no probe finds it shut between the two.
 */
import { Type } from "@sinclair/typebox";
import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Config } from "../config.js";
import { ApiError } from "../errors.js";
import type { PerOperationSettings } from "../operations/settings.js";
import { refuseApiRoutes } from "./ops-app.js";
import { probeLogLevel } from "./routes/ops.js";
import { sendError } from "./error-handler.js";
import { createServer } from "./server.js";

/** Builds the starting listener (not listening); `waitingFor` says what the node waits for, asked at each request. */
export async function buildStartingApp(options: {
  config: Config;
  settings: PerOperationSettings;
  logger?: FastifyBaseLogger | undefined;
  waitingFor: () => string;
  /** A worker-only node's listener: the API routes answer 404 `api_disabled` already. */
  apiDisabled: boolean;
}): Promise<FastifyInstance> {
  const app = createServer(options);
  // Answered, not thrown: the error handler would log every probe's 503, and the wait already logs each attempt.
  const notReady = (_request: FastifyRequest, reply: FastifyReply) =>
    sendError(reply, new ApiError(503, "unavailable", `not ready: ${options.waitingFor()}`, { "retry-after": "1" }));
  const logLevel = probeLogLevel(options.logger);
  app.get(
    "/healthz",
    { logLevel, schema: { response: { 200: Type.Object({ status: Type.String() }) } } },
    async () => ({ status: "ok" }),
  );
  app.get("/readyz", { logLevel }, notReady);
  app.get("/metrics", { logLevel }, notReady);
  if (options.apiDisabled) {
    refuseApiRoutes(app);
  } else {
    app.all("/*", { schema: { hide: true } }, (_request, reply) =>
      sendError(
        reply,
        new ApiError(503, "unavailable", `the service is starting: ${options.waitingFor()}`, { "retry-after": "1" }),
      ),
    );
  }
  await app.ready();
  return app;
}

/**
 * Passes every request `listening` receives from now on, on its open connections too, to `service`, which must be
 * ready (`await service.ready()`) and not listening. The listener's own connection bounds stay: both apps are built by
 * `createServer` from one config.
 */
export function handOver(listening: FastifyInstance, service: FastifyInstance): void {
  listening.server.removeAllListeners("request");
  listening.server.on("request", service.routing);
}

/**
 * What operators and orchestrators probe: liveness, readiness and metrics. Served by the API, and by the ops listener
 * of a worker-only node (or `listen.ops_port`), which serves nothing else. Their access log lines are off unless the
 * log level is `debug`: a probe every few seconds would drown every other line.
 */
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import type { FastifyBaseLogger } from "fastify";
import { ApiError } from "../../errors.js";
import { ErrorBody } from "../../job/schemas.js";
import { StoreUnavailableError, type StoreLifecycle } from "../../store/store.js";
import type { Metrics } from "../../telemetry/metrics.js";

/** What the probe routes need. */
export interface OpsRoutesOptions {
  store: Pick<StoreLifecycle, "ping">;
  metrics: Metrics;
  /** The service's logger: its level decides whether probes are logged. */
  logger?: FastifyBaseLogger | undefined;
}

/** The log level of the probes' access lines: theirs only at `debug` or `trace`, else none (`warn` and above). */
export function probeLogLevel(logger: FastifyBaseLogger | undefined): "debug" | "trace" | "warn" {
  const level = logger?.level;
  if (level === "debug") return "debug";
  return level === "trace" ? "trace" : "warn";
}

/** Registers /healthz, /readyz and /metrics. */
export const opsRoutes: FastifyPluginAsyncTypebox<OpsRoutesOptions> = async (app, options) => {
  const Status = Type.Object({ status: Type.String() });
  const logLevel = probeLogLevel(options.logger);

  app.get(
    "/healthz",
    {
      logLevel,
      schema: { operationId: "liveness", summary: "The process is up", tags: ["system"], response: { 200: Status } },
    },
    async () => ({ status: "ok" }),
  );

  app.get(
    "/readyz",
    {
      logLevel,
      schema: {
        operationId: "readiness",
        summary: "The database answers and is migrated",
        tags: ["system"],
        response: { 200: Status, 503: ErrorBody },
      },
    },
    async () => {
      try {
        await options.store.ping();
      } catch (error) {
        const reason = error instanceof StoreUnavailableError ? error.message : "the database does not answer";
        throw new ApiError(503, "unavailable", `not ready: ${reason}`, { "retry-after": "1" });
      }
      return { status: "ready" };
    },
  );

  app.get(
    "/metrics",
    {
      logLevel,
      schema: {
        operationId: "metrics",
        summary: "Prometheus metrics",
        tags: ["system"],
        response: { 200: Type.String() },
      },
    },
    async (_request, reply) => {
      const text = await options.metrics.registry.metrics();
      return reply.type(options.metrics.registry.contentType).send(text);
    },
  );
};

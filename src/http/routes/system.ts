/** Liveness, readiness, metrics, the service's OpenAPI document and the delivery key set. */
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { ApiError } from "../../errors.js";
import type { Store } from "../../store/store.js";
import type { Metrics } from "../../telemetry/metrics.js";
import { ErrorBody } from "../../job/schemas.js";
import { StoreUnavailableError } from "../../store/store.js";

/** What the system routes need. */
export interface SystemRoutesOptions {
  store: Store;
  metrics: Metrics;
  openApiDocument: () => object;
  /** The public delivery keys, when the delivery key is asymmetric. */
  jwks: { keys: object[] } | null;
}

/** Registers the system routes. */
export const systemRoutes: FastifyPluginAsyncTypebox<SystemRoutesOptions> = async (app, options) => {
  const Status = Type.Object({ status: Type.String() });

  app.get(
    "/healthz",
    { schema: { operationId: "liveness", summary: "The process is up", tags: ["system"], response: { 200: Status } } },
    async () => ({ status: "ok" }),
  );

  app.get(
    "/readyz",
    {
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
    { schema: { operationId: "metrics", summary: "Prometheus metrics", tags: ["system"], response: { 200: Type.String() } } },
    async (_request, reply) => {
      const text = await options.metrics.registry.metrics();
      return reply.type(options.metrics.registry.contentType).send(text);
    },
  );

  app.get("/openapi.json", { schema: { hide: true } }, async () => options.openApiDocument());

  app.get("/.well-known/jwks.json", { schema: { hide: true } }, async () => {
    if (!options.jwks) throw new ApiError(404, "not_found", "the delivery key is symmetric (HS256); there is no public key set");
    return options.jwks;
  });
};

/** Liveness, readiness, metrics, the service's OpenAPI document and the delivery key set. */
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { ApiError } from "../../errors.js";
import type { Store } from "../../store/store.js";
import type { Metrics } from "../../telemetry/metrics.js";
import { ErrorBody, Stats } from "../../job/schemas.js";
import { formatTime } from "../../job/wire.js";
import type { Clock } from "../../clock.js";
import type { onRequestAsyncHookHandler } from "fastify";
import { StoreUnavailableError } from "../../store/store.js";
import { COUNTS_READ, sharedRead } from "../../telemetry/shared-read.js";

/** What the system routes need. */
export interface SystemRoutesOptions {
  store: Store;
  clock: Clock;
  /** The admin guard (site admin required). */
  adminOnly: onRequestAsyncHookHandler;
  metrics: Metrics;
  openApiDocument: () => object;
  /** The public delivery keys, when the delivery key is asymmetric. */
  jwks: { keys: object[] } | null;
}

/** Registers the system routes. */
export const systemRoutes: FastifyPluginAsyncTypebox<SystemRoutesOptions> = async (app, options) => {
  // Every open dashboard asks for the counts every 5 s: one count serves them all (see shared-read.ts).
  const countJobs = sharedRead(() => options.store.jobStats(), COUNTS_READ);
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

  app.get(
    "/stats",
    {
      onRequest: options.adminOnly,
      schema: {
        operationId: "getStats",
        summary: "Jobs by status and operation, queue lag, and attempts per minute over the last hour",
        tags: ["system"],
        security: [{ adminToken: [] }],
        response: { 200: Stats, 401: ErrorBody, 403: ErrorBody, 503: ErrorBody },
      },
    },
    async () => {
      const now = options.clock.now();
      const since = Math.floor((now - 3_600_000) / 60_000) * 60_000 + 60_000;
      const [stats, buckets] = await Promise.all([
        countJobs(),
        options.store.attemptBuckets({ since, bucketMs: 60_000 }),
      ]);
      return {
        by_status: stats.byStatus,
        by_operation: stats.byOperation.map((row) => ({ operation_id: row.operationId, status: row.status, count: row.count })),
        queue_lag_seconds: stats.oldestDueRunAt === null ? 0 : Math.max(0, now - stats.oldestDueRunAt) / 1000,
        throughput: buckets.map((bucket) => ({ ...bucket, start: formatTime(bucket.start) })),
      };
    },
  );

  app.get("/openapi.json", { schema: { hide: true } }, async () => options.openApiDocument());

  app.get("/.well-known/jwks.json", { schema: { hide: true } }, async () => {
    if (!options.jwks) throw new ApiError(404, "not_found", "the delivery key is symmetric (HS256); there is no public key set");
    return options.jwks;
  });
};

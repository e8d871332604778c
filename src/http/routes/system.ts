/** The overview the dashboard reads, the service's OpenAPI document and the delivery key set. */
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { ApiError } from "../../errors.js";
import type { JobReadStore } from "../../store/store.js";
import { queueLagSeconds, type Metrics } from "../../telemetry/metrics.js";
import { ErrorBody, Stats } from "../../job/schemas.js";
import { formatTime } from "../../job/wire.js";
import type { Clock } from "../../clock.js";
import type { AdminHook } from "../auth.js";
import { COUNTS_READ, sharedRead, type SharedReadOptions } from "../../telemetry/shared-read.js";

/** What the system routes need. */
export interface SystemRoutesOptions {
  store: Pick<JobReadStore, "jobStats" | "attemptBuckets">;
  clock: Clock;
  /** The guard of `/stats` (viewer or above). */
  viewer: AdminHook;
  metrics: Metrics;
  openApiDocument: () => object;
  /** The public halves of the asymmetric delivery keys (every one listed, during a rotation too); null when all are HS256. */
  jwks: { keys: object[] } | null;
  /** How the counts are shared between requests (shared-read.ts); `COUNTS_READ` by default. */
  countsRead?: SharedReadOptions;
}

/** Registers the system routes. */
export const systemRoutes: FastifyPluginAsyncTypebox<SystemRoutesOptions> = async (app, options) => {
  // Every open dashboard asks for the counts every 5 s: one count serves them all (see shared-read.ts).
  const countJobs = sharedRead(() => options.store.jobStats(), options.countsRead ?? COUNTS_READ);

  app.get(
    "/stats",
    {
      onRequest: options.viewer,
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
        by_operation: stats.byOperation.map((row) => ({
          operation_id: row.operationId,
          status: row.status,
          count: row.count,
        })),
        queue_lag_seconds: queueLagSeconds(stats.oldestDueRunAt, now),
        paused_jobs: stats.pausedDue.map((row) => ({ operation_id: row.operationId, count: row.count })),
        throughput: buckets.map((bucket) => ({ ...bucket, start: formatTime(bucket.start) })),
      };
    },
  );

  app.get("/openapi.json", { schema: { hide: true } }, async () => options.openApiDocument());

  app.get("/.well-known/jwks.json", { schema: { hide: true } }, async () => {
    if (!options.jwks) {
      throw new ApiError(404, "not_found", "every delivery key is symmetric (HS256); there is no public key set");
    }
    return options.jwks;
  });
};

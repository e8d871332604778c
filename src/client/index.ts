/**
 * `opqueue/client`: what product code uses to talk to opqueue.
 * - Calling operations: `createJobsClient({ baseUrl, sign })` and its `enqueue`.
 * - Target operations: `createDeliveryVerifier` / `verifyDelivery`, the Fastify plugin `opqueueDelivery`, the
 *   Express middleware `opqueueDeliveryMiddleware`, and `neverRetry`, `alwaysRetry`, `authUnresolvable`.
 * - Administrators: `get`, `list`, `pages`, `cancel`, `retry`, `cancelChain` of the same client (with `adminToken`).
 */
export * from "./errors.js";
export * from "./delivery.js";
export { createJobsClient } from "./jobs-client.js";
export type { AssertionClaims, AssertionSigner, EnqueueOptions, JobPage, JobsClient, JobsClientOptions, ListOptions } from "./jobs-client.js";
export { opqueueDelivery } from "./fastify.js";
export { opqueueDeliveryMiddleware } from "./express.js";
export type { Authority, Job, JobResult, JobStatus, RequestPayload, TerminalReason } from "../job/schemas.js";

/**
 * `@opqueue/client` (also served by the `opqueue` package as `opqueue/client`): what product code uses to talk to
 * opqueue. It needs nothing of the service: its own wire types, and jose.
 * - Calling operations: `createJobsClient({ baseUrl, sign })` and its `enqueue` (a root call's `caller.requestId`
 *   is 1..255 characters of visible ASCII, neither `.` nor `..`; `idempotencyKey`, `ttlMs`/`expiresAt` and
 *   `traceparent` as docs/api.md says) and `enqueueBatch` (up to 1,000 jobs in one request, each answered on its own).
 * - Target operations: `createDeliveryVerifier(options).verifyDelivery(headers, { operationId })` /
 *   `verifyDelivery(headers, { ...options, operationId })`, the Fastify plugin `opqueueDelivery` (each route declares
 *   `schema: { operationId }` or `config: { operationId }`), the Express middleware `opqueueDeliveryMiddleware`
 *   (given `operationId` or `operationIdFor(req)`), and `neverRetry`, `alwaysRetry`, `authUnresolvable`. A delivery
 *   token is accepted only on the route of its operation, with the `x-job-id`, `idempotency-key` and
 *   `x-job-attempt` headers it was sent with. Keys: `secret`, `secrets` (several HS256 keys by kid, while they rotate)
 *   or `jwksUrl` (`DeliveryKeyOptions`); with several, the token's kid picks the one that checks it.
 *   Behind the plugin or the middleware, `delivery.signal` aborts when opqueue aborts the delivery (the connection
 *   closes before the answer is sent: the attempt's timeout, an administrator's cancel with abort, a shutdown); with
 *   the bare verifier, `deliveryAbortSignal(res)` makes the same signal. A long job answers with `continueAsync(reply)`
 *   (202 and `x-job-async: 1`) and calls back later with the delivery's `{ jobId, attempt, token }`: `heartbeat`,
 *   `complete` and `fail` of the client.
 * - Administrators: `get`, `list`, `pages`, `cancel` (`{ abort: true }` for a running job), `cancelJobs`, `retry`,
 *   `cancelChain`, `runNow`, `attempts`, `history` of the same client (with `adminToken`), and flow control:
 *   `listOperations`, `pauseOperation`, `resumeOperation`, `setOperationLimits`, `resetOperationLimits`,
 *   `listPausedKeys`, `pauseConcurrencyKey`, `resumeConcurrencyKey`; and schedules (docs/schedules.md):
 *   `listSchedules`, `getSchedule`, `createSchedule`, `updateSchedule`, `pauseSchedule`, `resumeSchedule`,
 *   `deleteSchedule`, `runScheduleNow`.
 */
export * from "./errors.js";
export * from "./delivery.js";
export { createJobsClient, PER_PROCESS_REQUEST_ID_WARNING } from "./jobs-client.js";
export type {
  AssertionClaims,
  AssertionSigner,
  BatchItem,
  BatchItemResult,
  Callback,
  CancelJobsFilter,
  CancelOptions,
  CompleteOptions,
  EnqueueOptions,
  FailOptions,
  HeartbeatOptions,
  JobPage,
  JobsClient,
  JobsClientOptions,
  ListOptions,
} from "./jobs-client.js";
export { opqueueDelivery } from "./fastify.js";
export { opqueueDeliveryMiddleware } from "./express.js";
export type { DeliveryMiddlewareOptions } from "./express.js";
export { ERROR_CODES, JOB_STATUSES, TERMINAL_REASONS } from "./wire.js";
export type {
  AdminAction,
  AdminStamp,
  Authority,
  Chain,
  ChainNode,
  ErrorCode,
  HeartbeatAnswer,
  Job,
  JobAttempt,
  JobExtensions,
  JobHistoryEvent,
  JobResult,
  JobStatus,
  LimitsPatch,
  OperationControl,
  OperationLimits,
  OperationSummary,
  PausedKey,
  RateLimit,
  RateLimitInput,
  RequestPayload,
  Schedule,
  ScheduleDefinition,
  SchedulePatch,
  TerminalReason,
} from "./wire.js";

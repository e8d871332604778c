/**
 * The administrators' job routes (docs/api.md, "Admin operations"): get, cancel, retry, run now, the attempt history
 * and the whole history, bulk retry of dead jobs, cancel a chain. Each change is recorded with the admin token's `sub`
 * (the job's history shows it) and logged. Each route parses, authorises, calls one of src/admin/admin-jobs.ts's use
 * cases and answers.
 */
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import type { FastifyRequest } from "fastify";
import type { AdminJobs } from "../../admin/admin-jobs.js";
import { ApiError } from "../../errors.js";
import { JobAttempts, JobEnvelope, JobExtensions, JobHistory, JobsEnvelope, RetryDeadBody } from "../../job/schemas.js";
import { formatTime, toWireJob } from "../../job/wire.js";
import type { AdminAction } from "../../job/statuses.js";
import { actingAs, actorFields, requireOperationInScope, requireUnlimited, type AdminAccess } from "../auth.js";
import type { Config } from "../../config.js";
import type { JobRow } from "../../job/job.js";
import { errorResponses } from "./error-responses.js";
import type { RequestRedaction } from "../../job/redaction.js";

/** What the admin routes need. */
export interface AdminRoutesOptions {
  adminJobs: AdminJobs;
  access: AdminAccess;
  config: Pick<Config, "listen">;
  /** How jobs' requests are shown. */
  redaction: RequestRedaction;
}

/** Longest `wait_ms` of `GET /jobs/{id}`; a request also never waits past `listen.request_timeout_ms` less a second. */
export const MAX_WAIT_MS = 30_000;

const JobIdParams = Type.Object({ id: Type.String({ description: "Short id of the job." }) });

/** One log line per administrator's action, naming who and what. */
function logAction(request: FastifyRequest, action: AdminAction, jobIds: string[], extra: object = {}): void {
  request.log.info({ ...actorFields(request), action, jobIds, ...extra }, "admin action");
}

function jobNotFound(id: string): ApiError {
  return new ApiError(404, "job_not_found", `no job has id "${id.slice(0, 64)}"`);
}

/** Registers the admin job routes. */
export const adminRoutes: FastifyPluginAsyncTypebox<AdminRoutesOptions> = async (app, options) => {
  const { adminJobs, access } = options;
  const viewer = access.needs("viewer");
  const operator = access.needs("operator");

  /** An operator limited to some operations acts only on their jobs: such a token is checked against the job's. */
  const requireJobInScope = async (request: FastifyRequest, id: string): Promise<void> => {
    if (request.admin?.operations == null) return;
    const row = await adminJobs.get({ id, waitMs: 0, visible: () => true });
    if (!row) throw jobNotFound(id);
    requireOperationInScope(request, row.operationId);
  };
  const adminSecurity = [{ adminToken: [] }];

  app.get(
    "/jobs/:id",
    {
      onRequest: access.jobReader(),
      schema: {
        operationId: "getJob",
        summary: "Get one job; with wait_ms, once it is terminal (or the wait is over)",
        description:
          "An administrator (viewer or above) reads any job; a producer, with an enqueue assertion, the jobs its calling operation " +
          'enqueued for its user (docs/chains.md, "Waiting for a job"). wait_ms (at most 30,000) holds the answer until the ' +
          "job is succeeded, dead or cancelled, or the time has passed; the job is answered as it then is.",
        tags: ["jobs"],
        security: [...adminSecurity, { enqueueAssertion: [] }],
        params: JobIdParams,
        querystring: Type.Object(
          { wait_ms: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_WAIT_MS })) },
          { additionalProperties: false },
        ),
        response: { 200: JobEnvelope, ...errorResponses(400, 401, 403, 404, 503) },
      },
    },
    async (request) => {
      const { id } = request.params;
      const producer = request.producer;
      // A producer reads only the jobs its calling operation enqueued for its user.
      const visible = (row: JobRow): boolean =>
        producer === null || (row.enqueuedByOperationId === producer.op && row.userId === producer.sub);
      const waitMs = Math.min(request.query.wait_ms ?? 0, options.config.listen.request_timeout_ms - 1000);
      const row = await adminJobs.get({ id, waitMs, visible });
      if (!row) throw jobNotFound(id);
      return { job: toWireJob(row, options.redaction) };
    },
  );

  app.post(
    "/jobs/:id/cancel",
    {
      onRequest: operator,
      schema: {
        operationId: "cancelJob",
        summary: "Cancel a pending or retrying job; with abort=true, a running one too, aborting its delivery",
        tags: ["jobs"],
        security: adminSecurity,
        params: JobIdParams,
        querystring: Type.Object(
          {
            abort: Type.Optional(
              Type.Boolean({
                default: false,
                description:
                  "Also cancel a running job: its delivery is aborted on whichever node runs it, and it ends cancelled " +
                  "whatever the target answers. Without it, a running job is refused with 409 job_running.",
              }),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: JobEnvelope, ...errorResponses(401, 403, 404, 409, 503) },
      },
    },
    async (request) => {
      const abortRunning = request.query.abort === true;
      await requireJobInScope(request, request.params.id);
      const outcome = await adminJobs.cancel({ id: request.params.id, ...actingAs(request), abortRunning });
      switch (outcome.kind) {
        case "cancelled":
          logAction(request, "cancel", [outcome.job.id], outcome.wasRunning ? { aborted: true } : {});
          return { job: toWireJob(outcome.job, options.redaction) };
        case "not_found":
          throw jobNotFound(request.params.id);
        case "running":
          throw new ApiError(
            409,
            "job_running",
            "the job is being delivered; cancel with ?abort=true to abort the delivery",
          );
        case "not_cancellable":
          throw new ApiError(
            409,
            "job_not_cancellable",
            `the job is ${outcome.job.status}; only pending or retrying jobs can be cancelled`,
          );
      }
    },
  );

  app.post(
    "/jobs/:id/retry",
    {
      onRequest: operator,
      schema: {
        operationId: "retryJob",
        summary: "Re-queue a dead or cancelled job",
        tags: ["jobs"],
        security: adminSecurity,
        params: JobIdParams,
        response: { 200: JobEnvelope, ...errorResponses(401, 403, 404, 409, 503) },
      },
    },
    async (request) => {
      await requireJobInScope(request, request.params.id);
      const outcome = await adminJobs.retry({ id: request.params.id, ...actingAs(request) });
      switch (outcome.kind) {
        case "retried":
          logAction(request, "retry", [outcome.job.id]);
          return { job: toWireJob(outcome.job, options.redaction) };
        case "not_found":
          throw jobNotFound(request.params.id);
        case "not_retryable":
          throw new ApiError(
            409,
            "job_not_retryable",
            `the job is ${outcome.job.status}; only dead or cancelled jobs can be retried`,
          );
        case "dedupe_conflict":
          throw new ApiError(409, "dedupe_conflict", `job ${outcome.holder.id} already holds this job's dedupe key`);
      }
    },
  );

  app.get(
    "/jobs/:id/attempts",
    {
      onRequest: viewer,
      schema: {
        operationId: "listJobAttempts",
        summary: "A job's delivery attempts, oldest first",
        tags: ["jobs"],
        security: adminSecurity,
        params: JobIdParams,
        response: { 200: JobAttempts, ...errorResponses(401, 403, 404, 503) },
      },
    },
    async (request) => {
      const attempts = await adminJobs.attempts(request.params.id);
      if (!attempts) throw jobNotFound(request.params.id);
      return {
        attempts: attempts.map((attempt) => ({
          attempt: attempt.attempt,
          started_at: attempt.startedAt === null ? null : formatTime(attempt.startedAt),
          finished_at: formatTime(attempt.finishedAt),
          outcome: attempt.outcome,
          status_code: attempt.statusCode,
          error_body: attempt.errorBody,
        })),
      };
    },
  );

  app.post(
    "/jobs/retry-dead",
    {
      onRequest: operator,
      // No body means no filter.
      preValidation: async (request) => {
        request.body ??= {};
      },
      schema: {
        operationId: "retryDeadJobs",
        summary: "Re-queue the dead jobs matching a filter (newest first, at most `limit`, 1..1000, default 100)",
        tags: ["jobs"],
        security: adminSecurity,
        body: RetryDeadBody,
        response: { 200: JobsEnvelope, ...errorResponses(400, 401, 403, 415, 503) },
      },
    },
    async (request) => {
      const body = request.body;
      if (body.operation_id === undefined) requireUnlimited(request, "a bulk retry without operation_id");
      else requireOperationInScope(request, body.operation_id);
      const jobs = await adminJobs.retryDead({
        filter: { operationId: body.operation_id, originalRequestId: body.original_request_id, userId: body.user_id },
        limit: body.limit ?? 100,
        ...actingAs(request),
      });
      logAction(
        request,
        "retry-dead",
        jobs.map((job) => job.id),
      );
      return { jobs: jobs.map((row) => toWireJob(row, options.redaction)) };
    },
  );

  app.post(
    "/chains/:original_request_id/cancel",
    {
      onRequest: operator,
      schema: {
        operationId: "cancelChain",
        summary: "Cancel a chain: its claimable jobs now, and every job enqueued into it later",
        tags: ["jobs"],
        security: adminSecurity,
        params: Type.Object({ original_request_id: Type.String({ minLength: 1 }) }),
        response: { 200: JobsEnvelope, ...errorResponses(400, 401, 403, 503) },
      },
    },
    async (request) => {
      requireUnlimited(request, "a chain");
      const jobs = await adminJobs.cancelChain({
        originalRequestId: request.params.original_request_id,
        ...actingAs(request),
      });
      logAction(
        request,
        "cancel-chain",
        jobs.map((job) => job.id),
        { originalRequestId: request.params.original_request_id },
      );
      return { jobs: jobs.map((row) => toWireJob(row, options.redaction)) };
    },
  );
  app.post(
    "/jobs/:id/run-now",
    {
      onRequest: operator,
      schema: {
        operationId: "runJobNow",
        summary: "Make a pending or retrying job due now (a delayed job, or one waiting for its retry)",
        tags: ["jobs"],
        security: adminSecurity,
        params: JobIdParams,
        response: { 200: JobEnvelope, ...errorResponses(401, 403, 404, 409, 503) },
      },
    },
    async (request) => {
      await requireJobInScope(request, request.params.id);
      const outcome = await adminJobs.runNow({ id: request.params.id, ...actingAs(request) });
      switch (outcome.kind) {
        case "moved":
          logAction(request, "run-now", [outcome.job.id]);
          return { job: toWireJob(outcome.job, options.redaction) };
        case "not_found":
          throw jobNotFound(request.params.id);
        case "not_waiting":
          throw new ApiError(
            409,
            "job_not_waiting",
            `the job is ${outcome.job.status}; only pending or retrying jobs wait to run`,
          );
      }
    },
  );

  app.get(
    "/jobs/:id/history",
    {
      onRequest: viewer,
      schema: {
        operationId: "getJobHistory",
        summary:
          "A job's history, oldest first: its creation, every finished attempt, and every administrator's action",
        tags: ["jobs"],
        security: adminSecurity,
        params: JobIdParams,
        response: { 200: JobHistory, ...errorResponses(401, 403, 404, 503) },
      },
    },
    async (request) => {
      const events = await adminJobs.history(request.params.id);
      if (!events) throw jobNotFound(request.params.id);
      return { events };
    },
  );

  app.get(
    "/jobs/:id/extensions",
    {
      onRequest: viewer,
      schema: {
        operationId: "getJobExtensions",
        summary:
          "What opqueue keeps of a job beyond the contract's wire form: its rate key, expiry, trace context, and its " +
          "latest asynchronous attempt and progress",
        tags: ["jobs"],
        security: adminSecurity,
        params: JobIdParams,
        response: { 200: JobExtensions, ...errorResponses(401, 403, 404, 503) },
      },
    },
    async (request) => {
      const found = await adminJobs.extensions(request.params.id);
      if (!found) throw jobNotFound(request.params.id);
      const { job: row, asyncState } = found;
      const accepted = asyncState?.accepted ?? null;
      const progress = asyncState?.progress ?? null;
      return {
        extensions: {
          rate_key: row.rateKey,
          expires_at: row.expiresAt === null ? null : formatTime(row.expiresAt),
          traceparent: row.traceparent,
          async: accepted === null ? null : { attempt: accepted.attempt, accepted_at: formatTime(accepted.at) },
          progress:
            progress === null
              ? null
              : { attempt: progress.attempt, value: progress.value, reported_at: formatTime(progress.at) },
        },
      };
    },
  );
};

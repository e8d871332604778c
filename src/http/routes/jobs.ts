/** The job API of docs/api.md: enqueue, get, list, cancel, retry, cancel chain. */
import { Type, type Static } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { ApiError } from "../../errors.js";
import { retryDeadJobs, retryJob } from "../../admin/retry.js";
import { checkEnqueueBody } from "../../enqueue/body-checks.js";
import { enqueueJob, type EnqueueDeps } from "../../enqueue/enqueue.js";
import type { OperationRegistry } from "../../operations/registry.js";
import {
  EnqueueBody,
  ErrorBody,
  JOB_STATUSES,
  JobAttempts,
  JobEnvelope,
  JobPage,
  JobsEnvelope,
  RetryDeadBody,
} from "../../job/schemas.js";
import { formatTime, toWireJob } from "../../job/wire.js";
import type { TokenVerifier } from "../../auth/tokens.js";
import { adminAuthHook, enqueueAuthHook } from "../auth.js";
import { toApiError } from "../error-handler.js";

/** What the job routes need. */
export interface JobRoutesOptions extends EnqueueDeps {
  registry: OperationRegistry;
  verifier: TokenVerifier;
}

const errors = (...statuses: number[]) =>
  Object.fromEntries(statuses.map((status) => [status, ErrorBody])) as Record<number, typeof ErrorBody>;

const JobIdParams = Type.Object({ id: Type.String({ description: "Short id of the job." }) });

const ListQuery = Type.Object(
  {
    status: Type.Optional(
      Type.Array(Type.Union(JOB_STATUSES.map((status) => Type.Literal(status))), {
        description: "Repeat to match any of several statuses.",
      }),
    ),
    operation_id: Type.Optional(Type.String()),
    original_request_id: Type.Optional(Type.String()),
    user_id: Type.Optional(Type.String()),
    parent_job_id: Type.Optional(Type.String()),
    dedupe_key: Type.Optional(Type.String({ description: "Jobs whose dedupe_key is exactly this." })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, default: 50 })),
    cursor: Type.Optional(Type.String({ description: "next_cursor of the previous page." })),
  },
  { additionalProperties: false },
);
type ListQuery = Static<typeof ListQuery>;

/** The list cursor is the creation sequence of the last job shown, opaque to clients. */
function encodeCursor(seq: number): string {
  return Buffer.from(`s${seq}`).toString("base64url");
}

function decodeCursor(cursor: string): number {
  const match = /^s(\d{1,15})$/.exec(Buffer.from(cursor, "base64url").toString("utf8"));
  if (!match) throw new ApiError(400, "invalid_request", "cursor is not a next_cursor this service returned");
  return Number(match[1]);
}

/** Registers the job routes. */
export const jobRoutes: FastifyPluginAsyncTypebox<JobRoutesOptions> = async (app, options) => {
  const { store, verifier } = options;
  const adminOnly = adminAuthHook({ verifier });
  const adminSecurity = [{ adminToken: [] }];

  app.post(
    "/jobs",
    {
      onRequest: enqueueAuthHook({ verifier, store }),
      // Every refusal counts: the auth hook's 401 and the framework's 400/413/415 as much as enqueueJob's own.
      onError: async (_request, _reply, error) => {
        options.telemetry.emit("job:enqueue-refused", { code: toApiError(error)?.code ?? "internal" });
      },
      // The schema's problem is handed to step 2 (checkEnqueueBody), which answers it in the contract's order.
      attachValidation: true,
      schema: {
        operationId: "enqueueJob",
        summary: "Enqueue a job for a background operation",
        tags: ["jobs"],
        security: [{ enqueueAssertion: [] }],
        body: EnqueueBody,
        response: { 200: JobEnvelope, 201: JobEnvelope, ...errors(400, 401, 403, 409, 413, 415, 422, 429, 503) },
      },
    },
    async (request, reply) => {
      const caller = request.enqueueCaller;
      if (!caller) throw new Error("enqueue route reached without its auth hook");
      const problem = request.validationError?.validation[0];
      const checked = checkEnqueueBody({
        body: request.body,
        schemaProblem: request.validationError
          ? { message: request.validationError.message, pointer: problem?.instancePath ?? "" }
          : undefined,
        registry: options.registry,
      });
      const result = await enqueueJob(options, caller, checked);
      return reply.code(result.kind === "created" ? 201 : 200).send({ job: toWireJob(result.job) });
    },
  );

  app.get(
    "/jobs",
    {
      onRequest: adminOnly,
      schema: {
        operationId: "listJobs",
        summary: "List jobs, newest first",
        tags: ["jobs"],
        security: adminSecurity,
        querystring: ListQuery,
        response: { 200: JobPage, ...errors(400, 401, 403, 503) },
      },
    },
    async (request) => {
      const query: ListQuery = request.query;
      const limit = query.limit ?? 50;
      const rows = await store.jobList({
        statuses: query.status,
        operationId: query.operation_id,
        originalRequestId: query.original_request_id,
        userId: query.user_id,
        parentJobId: query.parent_job_id,
        dedupeKey: query.dedupe_key,
        beforeSeq: query.cursor === undefined ? undefined : decodeCursor(query.cursor),
        limit: limit + 1,
      });
      const page = rows.slice(0, limit);
      const last = page.at(-1);
      return {
        jobs: page.map(toWireJob),
        next_cursor: rows.length > limit && last ? encodeCursor(last.seq) : null,
      };
    },
  );

  app.get(
    "/jobs/:id",
    {
      onRequest: adminOnly,
      schema: {
        operationId: "getJob",
        summary: "Get one job",
        tags: ["jobs"],
        security: adminSecurity,
        params: JobIdParams,
        response: { 200: JobEnvelope, ...errors(401, 403, 404, 503) },
      },
    },
    async (request) => {
      const row = await store.jobGet({ id: request.params.id });
      if (!row) throw jobNotFound(request.params.id);
      return { job: toWireJob(row) };
    },
  );

  app.post(
    "/jobs/:id/cancel",
    {
      onRequest: adminOnly,
      schema: {
        operationId: "cancelJob",
        summary: "Cancel a pending or retrying job",
        tags: ["jobs"],
        security: adminSecurity,
        params: JobIdParams,
        response: { 200: JobEnvelope, ...errors(401, 403, 404, 409, 503) },
      },
    },
    async (request) => {
      const outcome = await store.jobCancel({ id: request.params.id });
      switch (outcome.kind) {
        case "cancelled":
          return { job: toWireJob(outcome.job) };
        case "not_found":
          throw jobNotFound(request.params.id);
        case "running":
          throw new ApiError(409, "job_running", "the job is being delivered; a running delivery is not interrupted");
        case "not_cancellable":
          throw new ApiError(409, "job_not_cancellable", `the job is ${outcome.job.status}; only pending or retrying jobs can be cancelled`);
      }
    },
  );

  app.post(
    "/jobs/:id/retry",
    {
      onRequest: adminOnly,
      schema: {
        operationId: "retryJob",
        summary: "Re-queue a dead or cancelled job",
        tags: ["jobs"],
        security: adminSecurity,
        params: JobIdParams,
        response: { 200: JobEnvelope, ...errors(401, 403, 404, 409, 503) },
      },
    },
    async (request) => {
      const outcome = await retryJob(options, request.params.id);
      switch (outcome.kind) {
        case "retried":
          return { job: toWireJob(outcome.job) };
        case "not_found":
          throw jobNotFound(request.params.id);
        case "not_retryable":
          throw new ApiError(409, "job_not_retryable", `the job is ${outcome.job.status}; only dead or cancelled jobs can be retried`);
        case "dedupe_conflict":
          throw new ApiError(409, "dedupe_conflict", `job ${outcome.holder.id} already holds this job's dedupe key`);
      }
    },
  );

  app.get(
    "/jobs/:id/attempts",
    {
      onRequest: adminOnly,
      schema: {
        operationId: "listJobAttempts",
        summary: "A job's delivery attempts, oldest first",
        tags: ["jobs"],
        security: adminSecurity,
        params: JobIdParams,
        response: { 200: JobAttempts, ...errors(401, 403, 404, 503) },
      },
    },
    async (request) => {
      const row = await store.jobGet({ id: request.params.id });
      if (!row) throw jobNotFound(request.params.id);
      const attempts = await store.jobAttemptList({ id: row.id });
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
      onRequest: adminOnly,
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
        response: { 200: JobsEnvelope, ...errors(400, 401, 403, 415, 503) },
      },
    },
    async (request) => {
      const body = request.body;
      const jobs = await retryDeadJobs(options, {
        filter: { operationId: body.operation_id, originalRequestId: body.original_request_id, userId: body.user_id },
        limit: body.limit ?? 100,
      });
      return { jobs: jobs.map(toWireJob) };
    },
  );

  app.post(
    "/chains/:original_request_id/cancel",
    {
      onRequest: adminOnly,
      schema: {
        operationId: "cancelChain",
        summary: "Cancel a chain: its claimable jobs now, and every job enqueued into it later",
        tags: ["jobs"],
        security: adminSecurity,
        params: Type.Object({ original_request_id: Type.String({ minLength: 1 }) }),
        response: { 200: JobsEnvelope, ...errors(400, 401, 403, 503) },
      },
    },
    async (request) => {
      const jobs = await store.chainCancel({ originalRequestId: request.params.original_request_id });
      return { jobs: jobs.map(toWireJob) };
    },
  );
};

function jobNotFound(id: string): ApiError {
  return new ApiError(404, "job_not_found", `no job has id "${id.slice(0, 64)}"`);
}

/**
 * The administrators' job routes (docs/api.md, "Admin operations"): get, cancel, retry, run now, the attempt history
 * and the whole history, bulk retry of dead jobs, cancel a chain. Each change is recorded with the admin token's `sub`
 * (the job's history shows it) and logged.
 */
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import type { FastifyRequest } from "fastify";
import { retryDeadJobs, retryJob, type RetryDeps } from "../../admin/retry.js";
import type { TokenVerifier } from "../../auth/tokens.js";
import { jobHistory } from "../../admin/history.js";
import { ApiError } from "../../errors.js";
import { JobAttempts, JobEnvelope, JobExtensions, JobHistory, JobsEnvelope, RetryDeadBody } from "../../job/schemas.js";
import { formatTime, toWireJob } from "../../job/wire.js";
import type { AdminAction } from "../../job/statuses.js";
import { adminAuthHook, jobReaderAuthHook } from "../auth.js";
import type { Config } from "../../config.js";
import type { JobRow } from "../../job/job.js";
import type { Telemetry } from "../../telemetry/events.js";
import { errorResponses } from "./error-responses.js";
import type { AdminStore, AsyncAttemptStore, JobReadStore } from "../../store/store.js";

/** What the admin routes need. */
export interface AdminRoutesOptions extends RetryDeps {
  store: RetryDeps["store"] &
    Pick<AdminStore, "jobCancel" | "chainCancel" | "jobRunNow"> &
    Pick<JobReadStore, "jobGet" | "jobAttemptList" | "adminActionList"> &
    Pick<AsyncAttemptStore, "jobAsyncStateGet">;
  verifier: TokenVerifier;
  telemetry: Telemetry;
  config: Pick<Config, "listen">;
}

/** Longest `wait_ms` of `GET /jobs/{id}`; a request also never waits past `listen.request_timeout_ms` less a second. */
export const MAX_WAIT_MS = 30_000;
const TERMINAL = new Set(["succeeded", "dead", "cancelled"]);

/**
 * Resolves when job `id` may have changed: one of this node's deliveries of it ended, or `ms` passed (a job delivered
 * by another node is seen at the next look).
 */
function changed(telemetry: Telemetry, id: string, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      off();
      resolve();
    };
    const timer = setTimeout(done, ms);
    const off = telemetry.on("delivery:finished", (event) => {
      if (event.jobId === id) done();
    });
  });
}

const JobIdParams = Type.Object({ id: Type.String({ description: "Short id of the job." }) });

/** The administrator a request is authenticated as (the admin hook ran before). */
function actorOf(request: FastifyRequest): string {
  if (!request.admin) throw new Error("admin route reached without its auth hook");
  return request.admin.sub;
}

/** One log line per administrator's action, naming who and what. */
function logAction(request: FastifyRequest, action: AdminAction, jobIds: string[], extra: object = {}): void {
  request.log.info({ actor: actorOf(request), action, jobIds, ...extra }, "admin action");
}

function jobNotFound(id: string): ApiError {
  return new ApiError(404, "job_not_found", `no job has id "${id.slice(0, 64)}"`);
}

/** Registers the admin job routes. */
export const adminRoutes: FastifyPluginAsyncTypebox<AdminRoutesOptions> = async (app, options) => {
  const { store, verifier } = options;
  const adminOnly = adminAuthHook({ verifier });
  const adminSecurity = [{ adminToken: [] }];

  app.get(
    "/jobs/:id",
    {
      onRequest: jobReaderAuthHook({ verifier }),
      schema: {
        operationId: "getJob",
        summary: "Get one job; with wait_ms, once it is terminal (or the wait is over)",
        description:
          "A site administrator reads any job; a producer, with an enqueue assertion, the jobs its calling operation " +
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
      const visible = (row: JobRow | undefined): row is JobRow =>
        row !== undefined &&
        (producer === null || (row.enqueuedByOperationId === producer.op && row.userId === producer.sub));
      let row = await store.jobGet({ id });
      if (!visible(row)) throw jobNotFound(id);
      const waitMs = Math.min(request.query.wait_ms ?? 0, options.config.listen.request_timeout_ms - 1000);
      const deadline = Date.now() + waitMs;
      // Looks again at growing intervals (a job delivered on another node is seen by looking), at once when this
      // node ends one of its deliveries.
      for (
        let interval = 25;
        !TERMINAL.has(row.status) && Date.now() < deadline;
        interval = Math.min(interval * 2, 250)
      ) {
        await changed(options.telemetry, id, Math.min(interval, deadline - Date.now()));
        const fresh = await store.jobGet({ id });
        if (!visible(fresh)) break;
        row = fresh;
      }
      return { job: toWireJob(row) };
    },
  );

  app.post(
    "/jobs/:id/cancel",
    {
      onRequest: adminOnly,
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
      const outcome = await store.jobCancel({ id: request.params.id, actor: actorOf(request), abortRunning });
      switch (outcome.kind) {
        case "cancelled":
          if (outcome.wasRunning) options.notifier.abort(outcome.job.id);
          logAction(request, "cancel", [outcome.job.id], outcome.wasRunning ? { aborted: true } : {});
          return { job: toWireJob(outcome.job) };
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
      onRequest: adminOnly,
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
      const outcome = await retryJob(options, { id: request.params.id, actor: actorOf(request) });
      switch (outcome.kind) {
        case "retried":
          logAction(request, "retry", [outcome.job.id]);
          return { job: toWireJob(outcome.job) };
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
      onRequest: adminOnly,
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
        response: { 200: JobsEnvelope, ...errorResponses(400, 401, 403, 415, 503) },
      },
    },
    async (request) => {
      const body = request.body;
      const jobs = await retryDeadJobs(options, {
        filter: { operationId: body.operation_id, originalRequestId: body.original_request_id, userId: body.user_id },
        limit: body.limit ?? 100,
        actor: actorOf(request),
      });
      logAction(
        request,
        "retry-dead",
        jobs.map((job) => job.id),
      );
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
        response: { 200: JobsEnvelope, ...errorResponses(400, 401, 403, 503) },
      },
    },
    async (request) => {
      const jobs = await store.chainCancel({
        originalRequestId: request.params.original_request_id,
        actor: actorOf(request),
      });
      logAction(
        request,
        "cancel-chain",
        jobs.map((job) => job.id),
        { originalRequestId: request.params.original_request_id },
      );
      return { jobs: jobs.map(toWireJob) };
    },
  );
  app.post(
    "/jobs/:id/run-now",
    {
      onRequest: adminOnly,
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
      const outcome = await store.jobRunNow({ id: request.params.id, actor: actorOf(request) });
      switch (outcome.kind) {
        case "moved":
          options.notifier.notify(outcome.job.runAt);
          logAction(request, "run-now", [outcome.job.id]);
          return { job: toWireJob(outcome.job) };
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
      onRequest: adminOnly,
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
      const row = await store.jobGet({ id: request.params.id });
      if (!row) throw jobNotFound(request.params.id);
      const [attempts, actions] = await Promise.all([
        store.jobAttemptList({ id: row.id }),
        store.adminActionList({ jobId: row.id }),
      ]);
      return { events: jobHistory({ job: row, attempts, actions }) };
    },
  );

  app.get(
    "/jobs/:id/extensions",
    {
      onRequest: adminOnly,
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
      const [row, asyncState] = await Promise.all([
        store.jobGet({ id: request.params.id }),
        store.jobAsyncStateGet({ id: request.params.id }),
      ]);
      if (!row) throw jobNotFound(request.params.id);
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

/**
 * The job API of docs/api.md: enqueue (one job, or a batch), and the administrators' list (their other routes are in
 * admin.ts).
 */
import { Type, type Static } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import type { FastifyReply, FastifyRequest } from "fastify";
import { ApiError } from "../../errors.js";
import { checkEnqueueBody, type CheckedEnqueueBody } from "../../enqueue/body-checks.js";
import {
  enqueueJob,
  enqueueJobs,
  enqueueOutcome,
  type EnqueueDeps,
  type EnqueueResult,
} from "../../enqueue/enqueue.js";
import { wallClockMs, type OpqueueEvents } from "../../telemetry/events.js";
import { parseTraceparent, formatTraceparent } from "../../telemetry/trace-context.js";
import type { OperationRegistry } from "../../operations/registry.js";
import type { RequestSchemas } from "../../operations/request-schemas.js";
import {
  BatchEnqueueAnswer,
  BatchEnqueueBody,
  BatchEnqueueEnvelope,
  EnqueueBody,
  JOB_STATUSES,
  JobEnvelope,
  JobPage,
} from "../../job/schemas.js";
import { toWireJob } from "../../job/wire.js";
import type { TokenVerifier } from "../../auth/tokens.js";
import { enqueueAuthHook, type AdminAccess } from "../auth.js";
import { batchBudget } from "../batch-budget.js";
import { toApiError } from "../error-handler.js";
import { compileBodyValidator, createValidatorCompiler } from "../validation.js";
import type { Clock } from "../../clock.js";
import type { Config } from "../../config.js";
import { errorResponses } from "./error-responses.js";
import type { EnqueueStore, JobReadStore } from "../../store/store.js";

/** What the job routes need. */
export interface JobRoutesOptions extends EnqueueDeps {
  store: EnqueueStore & Pick<JobReadStore, "jobGet" | "jobList">;
  config: EnqueueDeps["config"] & Pick<Config, "limits">;
  registry: OperationRegistry;
  requestSchemas: RequestSchemas;
  verifier: TokenVerifier;
  access: AdminAccess;
  clock: Clock;
}

/** An Idempotency-Key header: the body field's form, 1 to 255 visible ASCII characters. */
const IDEMPOTENCY_KEY = /^[\x21-\x7E]{1,255}$/;

/** The Idempotency-Key header, if any; a malformed one is refused (step 2). */
function idempotencyHeader(value: string | string[] | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string" || !IDEMPOTENCY_KEY.test(value)) {
    throw new ApiError(
      400,
      "invalid_request",
      "Idempotency-Key must be one header of 1 to 255 visible ASCII characters",
    );
  }
  return value;
}

/** The caller's trace context, kept only if it parses (docs/tracing.md). */
function traceparentOf(header: string | string[] | undefined): string | undefined {
  const context = parseTraceparent(header);
  return context === undefined ? undefined : formatTraceparent(context);
}

/**
 * An answered enqueue request as `enqueue:answered` reports it (the OTLP tracer's enqueue span). Built only behind
 * `telemetry.observes`: a node without the tracer spends nothing on it.
 */
function answeredEvent(options: {
  route: "/jobs" | "/jobs/batch";
  request: FastifyRequest;
  reply: FastifyReply;
  statusCode: number;
  code?: string;
  results: ReadonlyArray<EnqueueResult | ApiError>;
}): OpqueueEvents["enqueue:answered"] {
  const endTime = wallClockMs();
  const jobs: OpqueueEvents["enqueue:answered"]["jobs"] = [];
  let refused = 0;
  for (const result of options.results) {
    if (result instanceof ApiError) refused += 1;
    else jobs.push({ jobId: result.job.id, operationId: result.job.operationId, outcome: enqueueOutcome(result) });
  }
  return {
    route: options.route,
    traceparent: options.request.headers.traceparent,
    // Fastify times the request from its arrival.
    startTime: endTime - options.reply.elapsedTime,
    endTime,
    statusCode: options.statusCode,
    code: options.code,
    jobs,
    refused,
  };
}

/** A batch item's answer on the wire. */
function batchResult(result: EnqueueResult | ApiError): Record<string, unknown> {
  if (result instanceof ApiError) return { status: result.statusCode, code: result.code, message: result.message };
  return {
    status: result.kind === "created" ? 201 : 200,
    id: result.job.id,
    ...(result.kind === "replayed" ? { replayed: true } : {}),
  };
}

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
  const { store, verifier, telemetry } = options;
  /** Reports a request refused whole (the auth hook's, the framework's, or enqueue's own). */
  const refusedWhole = (route: "/jobs" | "/jobs/batch", request: FastifyRequest, reply: FastifyReply, error: Error) => {
    const apiError = toApiError(error);
    const code = apiError?.code ?? "internal";
    telemetry.emit("job:enqueue-refused", { code });
    if (telemetry.observes("enqueue:answered")) {
      const statusCode = apiError?.statusCode ?? 500;
      telemetry.emit("enqueue:answered", answeredEvent({ route, request, reply, statusCode, code, results: [] }));
    }
  };
  const validateItem = compileBodyValidator(EnqueueBody);
  const envelopeValidator = compileBodyValidator(BatchEnqueueEnvelope);
  const compileOtherPart = createValidatorCompiler();
  const viewer = options.access.needs("viewer");
  const adminSecurity = [{ adminToken: [] }];
  // The batch bodies this node reads and enqueues at once (batch-budget.ts).
  const batches = batchBudget({
    limitBytes: options.config.limits.batch_bytes_in_flight,
    bodyLimit: options.config.limits.batch_body_bytes,
  });

  app.post(
    "/jobs",
    {
      onRequest: enqueueAuthHook({ verifier, store }),
      // Every refusal counts: the auth hook's 401 and the framework's 400/413/415 as much as enqueueJob's own.
      onError: async (request, reply, error) => refusedWhole("/jobs", request, reply, error),
      // The schema's problem is handed to step 2 (checkEnqueueBody), which answers it in the contract's order.
      attachValidation: true,
      schema: {
        operationId: "enqueueJob",
        summary: "Enqueue a job for a background operation",
        tags: ["jobs"],
        security: [{ enqueueAssertion: [] }],
        body: EnqueueBody,
        response: {
          200: JobEnvelope,
          201: JobEnvelope,
          ...errorResponses(400, 401, 403, 409, 413, 415, 422, 429, 503),
        },
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
        now: options.clock.now(),
        idempotencyHeader: idempotencyHeader(request.headers["idempotency-key"]),
        requestSchemas: options.requestSchemas,
      });
      const result = await enqueueJob(
        options,
        { ...caller, traceparent: traceparentOf(request.headers.traceparent) },
        checked,
      );
      if (result.kind === "replayed") void reply.header("idempotent-replayed", "true");
      const statusCode = result.kind === "created" ? 201 : 200;
      if (telemetry.observes("enqueue:answered")) {
        telemetry.emit(
          "enqueue:answered",
          answeredEvent({ route: "/jobs", request, reply, statusCode, results: [result] }),
        );
      }
      return reply.code(statusCode).send({ job: toWireJob(result.job, options.settings) });
    },
  );

  app.post(
    "/jobs/batch",
    {
      onRequest: enqueueAuthHook({ verifier, store }),
      // Once the assertion checked out, before the body is read: 503 when this node has no room for it.
      preParsing: (request, reply, payload) => batches.preParsing(request, reply, payload),
      onError: async (request, reply, error) => {
        batches.done(request);
        refusedWhole("/jobs/batch", request, reply, error);
      },
      bodyLimit: options.config.limits.batch_body_bytes,
      // The envelope is validated here; each item against EnqueueBody on its own, so one bad item is answered alone.
      // The query string as on every route (no parameter at all: see strictQueryStrings).
      validatorCompiler: (route) => (route.httpPart === "body" ? envelopeValidator : compileOtherPart(route)),
      schema: {
        operationId: "enqueueJobs",
        summary: "Enqueue up to 1,000 jobs at once, each answered on its own",
        description:
          "Each item is an enqueueJob body, checked and enqueued as POST /jobs would one by one, under the one assertion; " +
          "every insert is committed together. The answer has one result per item, in order: 201 or 200 with the job, " +
          "or the status and code POST /jobs would have refused it with. Items do not wait on each other's fate: a " +
          "refused item takes nothing back from the others.",
        tags: ["jobs"],
        security: [{ enqueueAssertion: [] }],
        body: BatchEnqueueBody,
        response: { 200: BatchEnqueueAnswer, ...errorResponses(400, 401, 413, 415, 503) },
      },
    },
    async (request, reply) => {
      batches.processing(request);
      try {
        return await enqueueBatch(request, reply);
      } finally {
        batches.done(request);
      }
    },
  );

  /** The batch route's handler: every item checked and enqueued, answered in order. */
  async function enqueueBatch(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    const caller = request.enqueueCaller;
    if (!caller) throw new Error("enqueue route reached without its auth hook");
    const now = options.clock.now();
    const items = (request.body as { jobs: unknown[] }).jobs.map((item, index): CheckedEnqueueBody | ApiError => {
      try {
        const valid = validateItem(item);
        const problem = valid ? undefined : validateItem.errors?.[0];
        return checkEnqueueBody({
          body: item,
          schemaProblem: problem
            ? {
                message: `jobs/${index}${problem.instancePath} ${problem.message ?? "is invalid"}`,
                pointer: problem.instancePath,
              }
            : undefined,
          registry: options.registry,
          requestSchemas: options.requestSchemas,
          now,
        });
      } catch (error) {
        if (error instanceof ApiError) return error;
        throw error;
      }
    });
    const results = await enqueueJobs(
      options,
      { ...caller, traceparent: traceparentOf(request.headers.traceparent) },
      items,
    );
    for (const result of results) {
      if (!(result instanceof ApiError)) continue;
      telemetry.emit("job:enqueue-refused", { code: result.code });
      if (result.statusCode === 503) request.log.warn({ err: result }, "database unavailable for a batch item");
      if (result.statusCode === 500)
        request.log.error({ err: result.cause ?? result }, "unexpected error in a batch item");
    }
    if (telemetry.observes("enqueue:answered")) {
      telemetry.emit(
        "enqueue:answered",
        answeredEvent({ route: "/jobs/batch", request, reply, statusCode: 200, results }),
      );
    }
    // Serialized here, the schema's shape built by batchResult: a thousand results through the response schema's union
    // (tried branch by branch) would cost more than building them. Fastify sends a string as it is.
    const text = JSON.stringify({ results: results.map(batchResult) });
    return reply
      .code(200)
      .type("application/json; charset=utf-8")
      .send(text as unknown as Static<typeof BatchEnqueueAnswer>);
  }

  app.get(
    "/jobs",
    {
      onRequest: viewer,
      schema: {
        operationId: "listJobs",
        summary: "List jobs, newest first",
        tags: ["jobs"],
        security: adminSecurity,
        querystring: ListQuery,
        response: { 200: JobPage, ...errorResponses(400, 401, 403, 503) },
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
        jobs: page.map((row) => toWireJob(row, options.settings)),
        next_cursor: rows.length > limit && last ? encodeCursor(last.seq) : null,
      };
    },
  );
};

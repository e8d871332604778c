/** The job API of docs/api.md: enqueue, and the administrators' list (their other routes are in admin.ts). */
import { Type, type Static } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { ApiError } from "../../errors.js";
import { checkEnqueueBody } from "../../enqueue/body-checks.js";
import { enqueueJob, type EnqueueDeps } from "../../enqueue/enqueue.js";
import type { OperationRegistry } from "../../operations/registry.js";
import type { RequestSchemas } from "../../operations/request-schemas.js";
import {
  EnqueueBody,
  ErrorBody,
  JOB_STATUSES,
  JobEnvelope,
  JobPage,
} from "../../job/schemas.js";
import { toWireJob } from "../../job/wire.js";
import type { TokenVerifier } from "../../auth/tokens.js";
import { adminAuthHook, enqueueAuthHook } from "../auth.js";
import { toApiError } from "../error-handler.js";

/** What the job routes need. */
export interface JobRoutesOptions extends EnqueueDeps {
  registry: OperationRegistry;
  requestSchemas: RequestSchemas;
  verifier: TokenVerifier;
}

const errors = (...statuses: number[]) =>
  Object.fromEntries(statuses.map((status) => [status, ErrorBody])) as Record<number, typeof ErrorBody>;

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
        requestSchemas: options.requestSchemas,
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
};

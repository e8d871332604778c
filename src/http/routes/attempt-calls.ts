/**
 * A target's calls on an attempt it took asynchronously (docs/api.md, "Asynchronous attempts"): heartbeat, complete and
 * fail, each authenticated by the delivery token that attempt was sent with. The use cases are in
 * src/async-jobs/attempt-calls.ts.
 */
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import type { FastifyRequest } from "fastify";
import {
  completeAttempt,
  failAttempt,
  heartbeatAttempt,
  type AttemptCallDeps,
} from "../../async-jobs/attempt-calls.js";
import {
  CompleteBody,
  FailBody,
  HeartbeatAnswer,
  HeartbeatBody,
  MAX_PROGRESS_BYTES,
  MAX_RESULT_BYTES,
} from "../../async-jobs/schemas.js";
import type { DeliveryCaller, DeliveryTokenVerifier } from "../../auth/delivery-tokens.js";
import { ApiError } from "../../errors.js";
import { jsonValueProblem } from "../../job/payload-rules.js";
import { JobEnvelope } from "../../job/schemas.js";
import { formatTime, toWireJob } from "../../job/wire.js";
import { attemptCallAuthHook } from "../auth.js";
import { errorResponses } from "./error-responses.js";

/** What the routes of the attempt calls need. */
export interface AttemptCallRoutesOptions extends AttemptCallDeps {
  deliveryVerifier: DeliveryTokenVerifier;
}

const JobIdParams = Type.Object({
  id: Type.String({ description: "The job's id, as the delivery token's job claim names it." }),
});

/** The caller the hook verified. */
function callerOf(request: FastifyRequest): DeliveryCaller {
  if (!request.deliveryCaller) throw new Error("attempt-call route reached without its auth hook");
  return request.deliveryCaller;
}

/** Refuses a JSON value that cannot be kept as it is (too deep, unstorable text, too large). */
function checkValue(value: unknown, name: string, maxBytes: number): void {
  const problem = jsonValueProblem({ value, name, maxBytes });
  if (problem) throw new ApiError(400, problem.code, problem.message);
}

/** Registers the routes of a target's calls on its attempt: heartbeat, complete, fail. */
export const attemptCallRoutes: FastifyPluginAsyncTypebox<AttemptCallRoutesOptions> = async (app, options) => {
  const onRequest = attemptCallAuthHook({ verifier: options.deliveryVerifier });
  const security = [{ deliveryToken: [] }];
  // Every field of these bodies is optional: no body is an empty one.
  const preValidation = async (request: FastifyRequest) => {
    request.body ??= {};
  };

  app.post(
    "/jobs/:id/heartbeat",
    {
      onRequest,
      preValidation,
      schema: {
        operationId: "heartbeatJob",
        summary: "Renew the lease of an attempt the target took asynchronously, and report its progress",
        tags: ["attempts"],
        security,
        params: JobIdParams,
        body: HeartbeatBody,
        response: { 200: HeartbeatAnswer, ...errorResponses(400, 401, 404, 409, 413, 415, 503) },
      },
    },
    async (request) => {
      const { body } = request;
      if ("progress" in body) checkValue(body.progress, "progress", MAX_PROGRESS_BYTES);
      const { leaseExpiresAt } = await heartbeatAttempt(options, {
        caller: callerOf(request),
        ...("progress" in body ? { progress: { value: body.progress } } : {}),
      });
      return { lease_expires_at: formatTime(leaseExpiresAt) };
    },
  );

  app.post(
    "/jobs/:id/complete",
    {
      onRequest,
      preValidation,
      schema: {
        operationId: "completeJob",
        summary: "End an attempt the target took asynchronously as succeeded",
        tags: ["attempts"],
        security,
        params: JobIdParams,
        body: CompleteBody,
        response: { 200: JobEnvelope, ...errorResponses(400, 401, 404, 409, 413, 415, 503) },
      },
    },
    async (request) => {
      if ("result" in request.body) checkValue(request.body.result, "result", MAX_RESULT_BYTES);
      const job = await completeAttempt(options, { caller: callerOf(request), body: request.body });
      return { job: toWireJob(job, options.settings) };
    },
  );

  app.post(
    "/jobs/:id/fail",
    {
      onRequest,
      preValidation,
      schema: {
        operationId: "failJob",
        summary: "End an attempt the target took asynchronously as failed: retried or dead, by the rules of an answer",
        tags: ["attempts"],
        security,
        params: JobIdParams,
        body: FailBody,
        response: { 200: JobEnvelope, ...errorResponses(400, 401, 404, 409, 413, 415, 503) },
      },
    },
    async (request) => {
      const job = await failAttempt(options, { caller: callerOf(request), body: request.body });
      return { job: toWireJob(job, options.settings) };
    },
  );
};

/**
 * Every error response is `{code, message}` with a code of docs/api.md, "Errors". Client mistakes caught by Fastify
 * itself (bad JSON, wrong media type, oversize body, schema violations, bad URLs) are mapped here; anything
 * unexpected is logged and answered 500 `internal`, which no client input should ever reach.
 */
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import { ApiError } from "../errors.js";
import { StoreUnavailableError } from "../store/store.js";

/** Seconds a client should wait before retrying when the database is unavailable. */
export const UNAVAILABLE_RETRY_AFTER_S = 1;

/** Sends one error body with its status. */
export function sendError(reply: FastifyReply, error: ApiError): FastifyReply {
  for (const [name, value] of Object.entries(error.headers)) reply.header(name, value);
  return reply.code(error.statusCode).send({ code: error.code, message: error.message });
}

/**
 * Turns any thrown error into the contract's error body. (The enqueue route answers its own schema problems, in the
 * contract's order: see `checkEnqueueBody`.)
 */
export function toApiError(error: FastifyError | Error): ApiError | undefined {
  if (error instanceof ApiError) return error;
  if (error instanceof StoreUnavailableError) {
    return new ApiError(503, "unavailable", "the database is unavailable; try again shortly", {
      "retry-after": String(UNAVAILABLE_RETRY_AFTER_S),
    });
  }
  const fastifyError = error as FastifyError;
  if (fastifyError.validation) {
    return new ApiError(400, "invalid_request", validationMessage(fastifyError));
  }
  switch (fastifyError.code) {
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return new ApiError(413, "body_too_large", "the request body is larger than 1 MiB");
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return new ApiError(415, "unsupported_media_type", "send the body as application/json");
  }
  if (error instanceof SyntaxError || fastifyError.code?.startsWith("FST_ERR_CTP_")) {
    return new ApiError(400, "invalid_request", `the body is not valid JSON: ${error.message}`);
  }
  const status = fastifyError.statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    if (status === 404) return new ApiError(404, "not_found", error.message);
    if (status === 413) return new ApiError(413, "body_too_large", error.message);
    if (status === 415) return new ApiError(415, "unsupported_media_type", error.message);
    return new ApiError(400, "invalid_request", error.message);
  }
  return undefined;
}

/** The message of a schema violation: Fastify's, but naming the query parameter a route does not take. */
function validationMessage(error: FastifyError): string {
  const first = error.validation?.[0];
  if (error.validationContext === "querystring" && first?.keyword === "additionalProperties") {
    const name = String((first.params as { additionalProperty?: unknown }).additionalProperty).slice(0, 128);
    return `unknown query parameter ${JSON.stringify(name)}: this route does not take it (its parameters are in /openapi.json)`;
  }
  return error.message;
}

/** Fastify's error handler for this service. */
export function errorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const apiError = toApiError(error);
  if (apiError) {
    // A 503 of opqueue's own (shutting down, no room for a batch) says why; any other is the database's.
    if (apiError.statusCode === 503)
      request.log.warn({ err: error }, error instanceof ApiError ? apiError.message : "database unavailable");
    return sendError(reply, apiError);
  }
  request.log.error({ err: error }, "unexpected error");
  return reply.code(500).send({ code: "internal", message: "internal error; the service log has the details" });
}

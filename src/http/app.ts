/**
 * buildApp: the HTTP API as a Fastify instance that is not listening. `serve` listens; tests call `inject`.
 */
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from "fastify";
import type { TypeBoxTypeProvider } from "@fastify/type-provider-typebox";
import type { TokenVerifier } from "../auth/tokens.js";
import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import { ApiError } from "../errors.js";
import type { OperationRegistry } from "../operations/registry.js";
import type { Store } from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";
import type { Metrics } from "../telemetry/metrics.js";
import { errorHandler, sendError } from "./error-handler.js";
import { collectOpenApi } from "./openapi.js";
import { jobRoutes } from "./routes/jobs.js";
import { systemRoutes } from "./routes/system.js";
import { createValidatorCompiler } from "./validation.js";

/** Largest request body: refused with 413 before parsing. */
export const BODY_LIMIT_BYTES = 1024 * 1024;

/** Everything the API needs, built once per service (or per test). */
export interface AppOptions {
  config: Config;
  registry: OperationRegistry;
  store: Store;
  clock: Clock;
  verifier: TokenVerifier;
  telemetry: Telemetry;
  metrics: Metrics;
  /** The public delivery key set, for `/.well-known/jwks.json`; null when the delivery key is HS256. */
  jwks?: { keys: object[] } | null;
  /** A pino logger; none (silent) by default. */
  logger?: FastifyBaseLogger;
}

/** Builds the API. Call `ready()` or `inject()`; `listen()` is the caller's business. */
export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    ...(options.logger ? { loggerInstance: options.logger } : { logger: false }),
    bodyLimit: BODY_LIMIT_BYTES,
    requestIdHeader: "x-request-id",
    return503OnClosing: true,
    // Malformed URLs never reach a route; answer them in the contract's shape.
    frameworkErrors: (error, _request, reply) => {
      void sendError(reply, new ApiError(400, "invalid_request", error.message));
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  app.setValidatorCompiler(createValidatorCompiler());
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((request, reply) =>
    sendError(reply, new ApiError(404, "not_found", `no route ${request.method} ${request.url.split("?")[0]}`)),
  );

  // Only JSON is accepted. An empty JSON body reads as no body, so `curl -X POST -H 'content-type:
  // application/json'` on the body-less admin actions works; POST /jobs then fails its schema with 400.
  app.removeAllContentTypeParsers();
  const parseJson = app.getDefaultJsonParser("error", "error");
  app.addContentTypeParser("application/json", { parseAs: "string" }, (request, body, done) => {
    const text = typeof body === "string" ? body : body.toString("utf8");
    if (text.trim() === "") {
      done(null, undefined);
      return;
    }
    parseJson(request, text, done);
  });

  app.decorateRequest("enqueueCaller", null);
  app.decorateRequest("admin", null);

  const openApiDocument = collectOpenApi(app);
  await app.register(jobRoutes, options);
  await app.register(systemRoutes, {
    store: options.store,
    metrics: options.metrics,
    openApiDocument,
    jwks: options.jwks ?? null,
  });
  return app;
}

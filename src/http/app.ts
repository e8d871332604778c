/**
 * buildApp: the HTTP API as a Fastify instance that is not listening. `serve` listens; tests call `inject`.
 */
import type { TypeBoxTypeProvider } from "@fastify/type-provider-typebox";
import type { FastifyBaseLogger, FastifyInstance } from "fastify";
import type { DeliveryTokenVerifier } from "../auth/delivery-tokens.js";
import type { TokenVerifier } from "../auth/tokens.js";
import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { WorkNotifier } from "../work-notifier.js";
import { ApiError } from "../errors.js";
import type { OperationRegistry } from "../operations/registry.js";
import type { RequestSchemas } from "../operations/request-schemas.js";
import type { PerOperationSettings } from "../operations/settings.js";
import type { Store } from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";
import type { Metrics } from "../telemetry/metrics.js";
import { AdminAccess } from "./auth.js";
import { accessRoutes } from "./routes/access.js";
import { erasureRoutes } from "./routes/erasure.js";
import { encryptionRoutes } from "./routes/encryption.js";
import type { PayloadCipher } from "../store/payload-cipher.js";
import { collectOpenApi } from "./openapi.js";
import { AdminJobs } from "../admin/admin-jobs.js";
import { adminRoutes } from "./routes/admin.js";
import { ChainView } from "../chains/chain-view.js";
import { chainRoutes } from "./routes/chains.js";
import { adminBackupRoutes } from "./routes/admin-backup.js";
import { attemptCallRoutes } from "./routes/attempt-calls.js";
import { jobRoutes } from "./routes/jobs.js";
import { operationRoutes } from "./routes/operations.js";
import { flowRoutes } from "./routes/flow.js";
import { FlowControl } from "../admin/flow-control.js";
import { scheduleRoutes } from "./routes/schedules.js";
import { Schedules } from "../schedules/schedules.js";
import { limitsFromConfig } from "../flow/limits.js";
import { opsRoutes } from "./routes/ops.js";
import { systemRoutes } from "./routes/system.js";
import { uiRoutes } from "./routes/ui.js";
import { createServer } from "./server.js";
import type { SharedReadOptions } from "../telemetry/shared-read.js";

/** Everything the API needs, built once per service (or per test). */
export interface AppOptions {
  config: Config;
  registry: OperationRegistry;
  /** The target operations' own request schemas, checked at enqueue (docs/api.md, step 4a). */
  requestSchemas: RequestSchemas;
  settings: PerOperationSettings;
  notifier: WorkNotifier;
  store: Store;
  clock: Clock;
  verifier: TokenVerifier;
  /** Checks the delivery tokens targets call back with (heartbeat, complete, fail). */
  deliveryVerifier: DeliveryTokenVerifier;
  telemetry: Telemetry;
  metrics: Metrics;
  /** The public delivery key set, for `/.well-known/jwks.json`; null when the delivery key is HS256. */
  jwks?: { keys: object[] } | null;
  /** A pino logger; none (silent) by default. */
  logger?: FastifyBaseLogger;
  /** Jitter of the backoff a target's fail asks for; `Math.random` by default. */
  random?: () => number;
  /** The payload cipher (docs/encryption.md); none when `encryption` is not configured. */
  cipher?: PayloadCipher | null;
  /** How `/stats` shares its counts between requests (shared-read.ts); `COUNTS_READ` by default. */
  countsRead?: SharedReadOptions;
}

/** Builds the API. Call `ready()` or `inject()`; `listen()` is the caller's business. */
export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const app = createServer(options).withTypeProvider<TypeBoxTypeProvider>();

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
    parseJson(request, text, (error, body) => {
      if (!error) return done(null, body);
      // Fastify's parser says only that the body is not valid JSON; say what is wrong with it (this path only).
      try {
        JSON.parse(text);
      } catch (syntax) {
        return done(new ApiError(400, "invalid_request", `the body is not valid JSON: ${(syntax as Error).message}`));
      }
      done(
        new ApiError(400, "invalid_request", "the body has a __proto__ or constructor.prototype key, which is refused"),
      );
    });
  });

  app.decorateRequest("enqueueCaller", null);
  app.decorateRequest("admin", null);
  app.decorateRequest("producer", null);
  app.decorateRequest("deliveryCaller", null);

  const openApiDocument = collectOpenApi(app);
  const access = new AdminAccess({ verifier: options.verifier, revocations: options.store });
  await app.register(jobRoutes, { ...options, access });
  await app.register(adminRoutes, {
    adminJobs: new AdminJobs({ store: options.store, notifier: options.notifier, telemetry: options.telemetry }),
    access,
    config: options.config,
    redaction: options.settings,
  });
  await app.register(chainRoutes, {
    chainView: new ChainView({ store: options.store, config: options.config, redaction: options.settings }),
    access,
  });
  await app.register(attemptCallRoutes, options);
  await app.register(operationRoutes, {
    registry: options.registry,
    settings: options.settings,
    access,
    store: options.store,
  });
  await app.register(flowRoutes, {
    flowControl: new FlowControl({
      store: options.store,
      registry: options.registry,
      notifier: options.notifier,
      configuredLimits: (operationId) => limitsFromConfig(options.config.operations[operationId]),
    }),
    access,
    redaction: options.settings,
  });
  await app.register(scheduleRoutes, {
    schedules: new Schedules({
      config: options.config,
      registry: options.registry,
      requestSchemas: options.requestSchemas,
      settings: options.settings,
      store: options.store,
      telemetry: options.telemetry,
      notifier: options.notifier,
      clock: options.clock,
    }),
    access,
    redaction: options.settings,
  });
  await app.register(opsRoutes, { store: options.store, metrics: options.metrics, logger: options.logger });
  await app.register(systemRoutes, {
    store: options.store,
    clock: options.clock,
    viewer: access.needs("viewer"),
    metrics: options.metrics,
    openApiDocument,
    jwks: options.jwks ?? null,
    ...(options.countsRead ? { countsRead: options.countsRead } : {}),
  });
  await app.register(adminBackupRoutes, {
    store: options.store,
    adminOnly: access.needs("admin"),
  });
  await app.register(accessRoutes, { store: options.store, access, clock: options.clock });
  await app.register(erasureRoutes, { store: options.store, access });
  await app.register(encryptionRoutes, { store: options.store, access, cipher: options.cipher ?? null });
  // The operators' dashboard (static files; it calls the admin API above with the token the operator signs in with).
  await app.register(uiRoutes);
  return app;
}

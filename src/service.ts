/**
 * Assembles a service from a validated config: registry, store, tokens, telemetry and the HTTP app. Used by
 * `opqueue serve` and by tests (which pass their own clock).
 */
import type { FastifyBaseLogger, FastifyInstance } from "fastify";
import { DeliverySigner, TokenVerifier } from "./auth/tokens.js";
import { systemClock, type Clock } from "./clock.js";
import type { Config } from "./config.js";
import { buildApp } from "./http/app.js";
import { checkConfigAgainstRegistry, OperationRegistry } from "./operations/registry.js";
import { openStore } from "./store/open-store.js";
import type { Store } from "./store/store.js";
import { Telemetry } from "./telemetry/events.js";
import { createMetrics, type Metrics } from "./telemetry/metrics.js";

/** A running service's parts. */
export interface Service {
  config: Config;
  registry: OperationRegistry;
  store: Store;
  clock: Clock;
  verifier: TokenVerifier;
  signer: DeliverySigner;
  telemetry: Telemetry;
  metrics: Metrics;
  app: FastifyInstance;
  /** Config problems worth a warning but not a refusal to start. */
  warnings: string[];
  /** Closes the HTTP app, then the store. */
  close(): Promise<void>;
}

/** Builds every part of the service; throws `ConfigError` for a config the OpenAPI document contradicts. */
export async function createService(options: {
  config: Config;
  clock?: Clock;
  logger?: FastifyBaseLogger;
  processMetrics?: boolean;
}): Promise<Service> {
  const { config } = options;
  const clock = options.clock ?? systemClock;
  const registry = OperationRegistry.fromFile(config.openapi);
  const { warnings } = checkConfigAgainstRegistry({ config, registry });
  const verifier = await TokenVerifier.create({ auth: config.auth, clock });
  const signer = await DeliverySigner.create({
    deliveryKey: config.auth.delivery_key,
    audience: config.target.audience,
    clock,
  });
  const telemetry = new Telemetry();
  const metrics = createMetrics({ telemetry, processMetrics: options.processMetrics ?? false });
  const store = await openStore({ url: config.database, clock });
  try {
    const app = await buildApp({
      config,
      registry,
      store,
      clock,
      verifier,
      telemetry,
      metrics,
      jwks: signer.jwks(),
      ...(options.logger ? { logger: options.logger } : {}),
    });
    return {
      config,
      registry,
      store,
      clock,
      verifier,
      signer,
      telemetry,
      metrics,
      app,
      warnings,
      async close() {
        await app.close();
        await store.close();
      },
    };
  } catch (error) {
    await store.close();
    throw error;
  }
}

/**
 * `opqueue serve` (src/cli.ts is the entry point): builds the service from a config, waits for its database, listens,
 * and shuts down gracefully on SIGTERM/SIGINT.
 */
import type { FastifyInstance } from "fastify";
import { pino, type Logger } from "pino";
import type { Config } from "./config.js";
import { redactDatabaseUrl } from "./database-url.js";
import type { ConnectionLimit } from "./http/connection-limits.js";
import { createService, type Service } from "./service.js";
import { logJobEvents } from "./telemetry/logs.js";
import { StoreUnavailableError } from "./store/store.js";
import { VERSION } from "./version.js";

/** A service that is listening (or, with `api: false`, just running). */
export interface RunningService {
  service: Service;
  /** The base URL the API listens on; null without the API. */
  url: string | null;
  /** The base URL of the ops listener (/healthz, /readyz, /metrics alone); null when there is none. */
  opsUrl: string | null;
  /** Stops accepting, closes the store. Safe to call twice. */
  stop(): Promise<void>;
}

/** Creates the logger of a serving process: JSON lines with ISO times; `OPQUEUE_LOG_LEVEL` sets its level (default info). */
export function createLogger(): Logger {
  return pino({
    level: process.env["OPQUEUE_LOG_LEVEL"] ?? "info",
    base: { service: "opqueue" },
    timestamp: pino.stdTimeFunctions.isoTime,
  });
}

/** The base URL a Fastify instance listens on. */
function listeningUrl(app: FastifyInstance, host: string): string {
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return `http://${host.includes(":") ? `[${host}]` : host}:${port}`;
}

/** Starts the service: API on `config.listen` unless `api` is false. */
export async function serve(options: {
  config: Config;
  api: boolean;
  worker: boolean;
  logger: Logger;
}): Promise<RunningService> {
  const { config, logger } = options;
  const service = await createServiceWhenDatabaseAnswers({ config, logger, worker: options.worker });
  for (const warning of service.warnings) logger.warn(warning);
  logJobEvents({ telemetry: service.telemetry, logger, clock: service.clock });
  const { host, port, ops_port: opsPort } = config.listen;
  let url: string | null = null;
  let opsUrl: string | null = null;
  if (options.api) {
    await service.app.listen({ host, port });
    url = listeningUrl(service.app, host);
    logConnectionLimit(logger, service.app.connectionLimit);
  }
  // A worker-only node has no API: its probes and metrics are on `listen.port` then, unless ops_port says otherwise.
  if (opsPort !== undefined || !options.api) {
    await service.ops.listen({ host, port: opsPort ?? port });
    opsUrl = listeningUrl(service.ops, host);
  }
  service.start();
  logger.info(
    { version: VERSION, url, opsUrl, worker: options.worker, database: redactDatabaseUrl(config.database) },
    "opqueue started",
  );
  let stopping: Promise<void> | undefined;
  return {
    service,
    url,
    opsUrl,
    stop() {
      stopping ??= service.close().then(() => logger.info("opqueue stopped"));
      return stopping;
    },
  };
}

/** Says what caps the listener's connections, and warns when the file-descriptor limit lowered the configured cap. */
function logConnectionLimit(logger: Logger, limit: ConnectionLimit): void {
  const { maxConnections, configured, fdLimit, reserved } = limit;
  if (fdLimit === null) {
    logger.info(
      { maxConnections },
      "HTTP connections capped at listen.max_connections (the process's open-files limit could not be read)",
    );
    return;
  }
  const kept = reserved.database + reserved.deliveries + reserved.margin;
  const why = { maxConnections, configured, fdLimit, reserved };
  if (limit.lowered) {
    logger.warn(
      why,
      `listen.max_connections lowered from ${configured} to ${maxConnections}: the process may open ${fdLimit} files ` +
        `(ulimit -n) and keeps ${kept} for the database pool, delivery connections and its own files; ` +
        "raise the open-files limit to allow more connections",
    );
  } else {
    logger.info(
      why,
      `HTTP connections capped at listen.max_connections (${maxConnections}); the open-files limit (${fdLimit}) ` +
        `holds them beside the ${kept} kept for the database pool, delivery connections and files`,
    );
  }
}

/** Longest wait between attempts to reach the database at start-up. */
const START_RETRY_MAX_MS = 10_000;

/**
 * Builds the service, waiting for the database while it is unreachable (a node started before its database, or
 * during an outage, comes up by itself when the database does). A signal meanwhile exits at once: nothing is
 * open yet.
 */
async function createServiceWhenDatabaseAnswers(options: {
  config: Config;
  logger: Logger;
  worker: boolean;
}): Promise<Service> {
  const { config, logger } = options;
  const exitNow = () => process.exit(0);
  process.once("SIGTERM", exitNow);
  process.once("SIGINT", exitNow);
  try {
    for (let delayMs = 500; ; delayMs = Math.min(START_RETRY_MAX_MS, delayMs * 2)) {
      try {
        return await createService({ config, logger, processMetrics: true, worker: options.worker });
      } catch (error) {
        if (!(error instanceof StoreUnavailableError)) throw error;
        logger.warn(
          { err: error, database: redactDatabaseUrl(config.database), retryInMs: delayMs },
          "database unavailable at start-up; waiting for it",
        );
        await new Promise((resolve) => setTimeout(resolve, delayMs));
      }
    }
  } finally {
    process.off("SIGTERM", exitNow);
    process.off("SIGINT", exitNow);
  }
}

/**
 * Stops `running` (after `alsoStop`, if given) on the first SIGTERM or SIGINT and exits 0; a second signal exits
 * at once.
 */
export function stopOnSignals(running: RunningService, logger: Logger, alsoStop?: () => Promise<void>): void {
  let received = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (received) {
      logger.warn({ signal }, "second signal: exiting now");
      process.exit(1);
    }
    received = true;
    logger.info({ signal }, "shutting down");
    Promise.resolve(alsoStop?.())
      .then(() => running.stop())
      .then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
}

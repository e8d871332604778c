/**
 * `opqueue serve` (src/cli.ts is the entry point): listens at once, builds the service from a config while waiting for
 * its database, hands the listeners to it, and shuts down gracefully on SIGTERM/SIGINT.
 */
import type { FastifyInstance } from "fastify";
import { pino, type Logger } from "pino";
import type { Config } from "./config.js";
import { redactDatabaseUrl } from "./database-url.js";
import type { ConnectionLimit } from "./http/connection-limits.js";
import { buildStartingApp, handOver } from "./http/starting-app.js";
import type { PerOperationSettings } from "./operations/settings.js";
import { checkService, createService, type CheckedService, type Service } from "./service.js";
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
  const database = redactDatabaseUrl(config.database);
  // Until the service runs, a signal ends the process at once (exit 0): nothing is started that needs stopping, and a
  // node waiting for its database must not wait for its next attempt to stop.
  const exitNow = (signal: NodeJS.Signals) => {
    logger.info({ signal }, "stopped while starting");
    process.exit(0);
  };
  process.once("SIGTERM", exitNow);
  process.once("SIGINT", exitNow);
  try {
    // A config the OpenAPI document contradicts is refused before anything listens.
    const checked = await checkService({ config });
    let waitingFor = `opening the database ${database}`;
    const listeners = await listenWhileStarting({
      ...options,
      settings: checked.settings,
      waitingFor: () => waitingFor,
    });
    const service = await createServiceWhenDatabaseAnswers({
      config,
      checked,
      logger,
      worker: options.worker,
      api: options.api,
      onWaiting: (reason) => (waitingFor = reason),
    });
    for (const warning of service.warnings) logger.warn(warning);
    logJobEvents({ telemetry: service.telemetry, logger, clock: service.clock });
    await Promise.all([service.app.ready(), service.ops.ready()]);
    // From here on nothing waits: the worker runs before the first request reaches the service's own apps.
    service.start();
    if (listeners.api) handOver(listeners.api, service.app);
    if (listeners.ops) handOver(listeners.ops, service.ops);
    const url = listeners.api ? listeningUrl(listeners.api, config.listen.host) : null;
    const opsUrl = listeners.ops ? listeningUrl(listeners.ops, config.listen.host) : null;
    logger.info({ version: VERSION, url, opsUrl, worker: options.worker, database }, "opqueue started");
    let stopping: Promise<void> | undefined;
    return {
      service,
      url,
      opsUrl,
      stop() {
        // The listeners stop accepting while the service stops (its apps answer 503 to requests still arriving).
        stopping ??= Promise.all([service.close(), listeners.api?.close(), listeners.ops?.close()]).then(() =>
          logger.info("opqueue stopped"),
        );
        return stopping;
      },
    };
  } finally {
    // The caller's own handlers (`stopOnSignals`) take over: it adds them before any signal can be handled.
    process.off("SIGTERM", exitNow);
    process.off("SIGINT", exitNow);
  }
}

/**
 * Listens at once, before the service is built (docs/deploying.md, "Start-up"): the API on `listen.port` unless `api` is
 * false, the ops listener on `listen.ops_port` if set (or on `listen.port` for a worker-only node). Each answers
 * /healthz, and 503 naming `waitingFor` elsewhere, until `handOver` gives it to the service.
 */
async function listenWhileStarting(options: {
  config: Config;
  settings: PerOperationSettings;
  api: boolean;
  logger: Logger;
  waitingFor: () => string;
}): Promise<{ api: FastifyInstance | null; ops: FastifyInstance | null }> {
  const { config, settings, logger } = options;
  const { host, port, ops_port: opsPort } = config.listen;
  const build = (apiDisabled: boolean) =>
    buildStartingApp({ config, settings, logger, waitingFor: options.waitingFor, apiDisabled });
  let api: FastifyInstance | null = null;
  let ops: FastifyInstance | null = null;
  if (options.api) {
    api = await build(false);
    await api.listen({ host, port });
    logConnectionLimit(logger, api.connectionLimit);
  }
  // A worker-only node has no API: its probes and metrics are on `listen.port` then, unless ops_port says otherwise.
  if (opsPort !== undefined || !options.api) {
    ops = await build(!options.api);
    await ops.listen({ host, port: opsPort ?? port });
  }
  return { api, ops };
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

/** The first wait before trying the database again at start-up; each next wait doubles, up to the longest. */
const START_RETRY_FIRST_MS = 1000;
/** The longest wait between attempts to reach the database at start-up. */
const START_RETRY_MAX_MS = 30_000;

/**
 * Builds the service, waiting for the database while it cannot serve yet (refused, unreachable, starting up): a node
 * started before its database, or during an outage, comes up by itself when the database does. Each failed attempt is
 * one log line (no stack) and is told to `onWaiting`, which /readyz shows; the waits double from 1 s to 30 s. A mistake
 * no wait mends (an unknown database or role, a wrong password) throws at once.
 */
async function createServiceWhenDatabaseAnswers(options: {
  config: Config;
  checked: CheckedService;
  logger: Logger;
  worker: boolean;
  api: boolean;
  onWaiting: (reason: string) => void;
}): Promise<Service> {
  const { config, logger } = options;
  const database = redactDatabaseUrl(config.database);
  for (
    let attempt = 1, delayMs = START_RETRY_FIRST_MS;
    ;
    attempt++, delayMs = Math.min(START_RETRY_MAX_MS, delayMs * 2)
  ) {
    try {
      const { checked, worker, api } = options;
      return await createService({ config, checked, logger, processMetrics: true, worker, api });
    } catch (error) {
      if (!(error instanceof StoreUnavailableError)) throw error;
      const reason = `waiting for the database ${database}: ${error.message}`;
      options.onWaiting(`${reason} (attempt ${attempt} failed; the next in ${delayMs / 1000} s)`);
      logger.warn(
        { database, attempt, retryInMs: delayMs, reason: error.message },
        `${reason}; trying again in ${delayMs / 1000} s`,
      );
      await new Promise((resolve) => setTimeout(resolve, delayMs));
    }
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

/**
 * Assembles a service from a validated config: registry, store, tokens, telemetry, the HTTP app and (unless
 * told otherwise) the worker: dispatcher, lease rescuer, retention cleaner and cron. Used by `opqueue serve`
 * and by tests (which pass their own clock).
 */
import type { FastifyBaseLogger, FastifyInstance } from "fastify";
import { pino, type Logger } from "pino";
import { DeliveryTokenVerifier } from "./auth/delivery-tokens.js";
import { DeliverySigner, TokenVerifier } from "./auth/tokens.js";
import { systemClock, type Clock } from "./clock.js";
import type { Config } from "./config.js";
import { Deliverer } from "./dispatcher/deliverer.js";
import { limitsFromConfig, limitsSomething, type OperationLimits } from "./flow/limits.js";
import { Dispatcher } from "./dispatcher/dispatcher.js";
import { WorkNotifier } from "./work-notifier.js";
import { buildApp } from "./http/app.js";
import { buildOpsApp } from "./http/ops-app.js";
import { CLEAN_INTERVAL_MS, cleanFinishedJobs } from "./maintenance/cleaner.js";
import { CLOCK_CHECK_INTERVAL_MS, checkClock } from "./maintenance/clock-check.js";
import { CronScheduler } from "./schedules/scheduler.js";
import { Periodic } from "./maintenance/periodic.js";
import { rescueExpiredLeases } from "./maintenance/rescuer.js";
import { expireJobs } from "./maintenance/expirer.js";
import { refreshStatistics, STATISTICS_CHECK_MS } from "./maintenance/statistics.js";
import { sweepChains } from "./chains/sweeper.js";
import { OperationRegistry } from "./operations/registry.js";
import { RequestSchemas } from "./operations/request-schemas.js";
import {
  checkConfigAgainstRegistry,
  checkCronEntriesAgainstSchedules,
  cronRequestWarnings,
} from "./schedules/config-entries.js";
import { PerOperationSettings } from "./operations/settings.js";
import { openStore } from "./store/open-store.js";
import type { ListenStore, Store, StoreLifecycle } from "./store/store.js";
import { Telemetry } from "./telemetry/events.js";
import { COUNTS_READ, type SharedReadOptions } from "./telemetry/shared-read.js";
import { createMetrics, type Metrics } from "./telemetry/metrics.js";
import { startTracing, type Tracing } from "./telemetry/tracing.js";
import type { ConfigEnv } from "./config/env.js";
import { encryptingStore } from "./store/encrypting-store.js";
import { PayloadCipher } from "./store/payload-cipher.js";

/** The worker side of a service: everything that runs without a request. */
export interface Worker {
  dispatcher: Dispatcher;
  deliverer: Deliverer;
  cron: CronScheduler;
  rescuer: Periodic;
  cleaner: Periodic;
  expirer: Periodic;
  chainSweeper: Periodic;
  statistics: Periodic;
}

/** A service's parts. */
export interface Service {
  config: Config;
  registry: OperationRegistry;
  settings: PerOperationSettings;
  /** "Work may be available": what wakes the dispatcher. */
  notifier: WorkNotifier;
  store: Store;
  clock: Clock;
  verifier: TokenVerifier;
  signer: DeliverySigner;
  telemetry: Telemetry;
  metrics: Metrics;
  /** The OTLP tracer (docs/tracing.md); null unless `telemetry.otlp` is configured. */
  tracing: Tracing | null;
  app: FastifyInstance;
  /** The ops listener: /healthz, /readyz and /metrics alone (for `--no-api` nodes and `listen.ops_port`). */
  ops: FastifyInstance;
  /** Null when built with `worker: false`. */
  worker: Worker | null;
  /** Config problems worth a warning but not a refusal to start. */
  warnings: string[];
  /** Starts the worker (claims, cron, maintenance). The API needs no start: `inject` it or `listen`. */
  start(): void;
  /**
   * Graceful stop: the API stops accepting, the dispatcher stops claiming and gives in-flight deliveries up to
   * `shutdown.grace_ms` (or `graceMs`), then the store closes and the last spans are exported.
   */
  close(options?: { graceMs?: number }): Promise<void>;
}

function createWorker(options: {
  config: Config;
  settings: PerOperationSettings;
  registry: OperationRegistry;
  store: Store;
  clock: Clock;
  notifier: WorkNotifier;
  signer: DeliverySigner;
  telemetry: Telemetry;
  tracing: Tracing | null;
  logger: Logger;
  random?: () => number;
  stopwatch?: () => number;
}): Worker {
  const { config, settings, store, clock, notifier, telemetry, logger } = options;
  const random = options.random ? { random: options.random } : {};
  const stopwatch = options.stopwatch ? { stopwatch: options.stopwatch } : {};
  const deliverer = new Deliverer({ settings, registry: options.registry, signer: options.signer });
  const tracer = options.tracing?.delivery;
  const dispatcher = new Dispatcher({
    config,
    settings,
    store,
    deliverer,
    clock,
    telemetry,
    logger,
    tracer,
    ...random,
    ...stopwatch,
  });
  const rescuer = new Periodic({
    name: "lease rescuer",
    intervalMs: config.lease.check_ms,
    logger,
    run: async () => {
      const rescued = await rescueExpiredLeases({ settings, store, clock, telemetry, ...random });
      if (rescued > 0) {
        logger.warn({ rescued }, "recovered running jobs whose lease expired");
        // Rescued jobs are due after their backoff: a claim pass re-arms the timer to the next due job, so they
        // do not wait for the `worker.poll_ms` fallback.
        notifier.notify(clock.now());
      }
    },
  });
  const cleaner = new Periodic({
    name: "retention cleaner",
    intervalMs: CLEAN_INTERVAL_MS,
    firstRunMs: 60_000,
    logger,
    run: async () => {
      const deleted = await cleanFinishedJobs({ config, store });
      if (deleted > 0) logger.info({ deleted }, "deleted terminal jobs past retention");
    },
  });
  const expirer = new Periodic({
    name: "expirer",
    intervalMs: config.expiry.check_ms,
    logger,
    run: async () => {
      await expireJobs({ store, telemetry });
    },
  });
  const chainSweeper = new Periodic({
    name: "chain sweeper",
    intervalMs: config.chains.check_ms,
    logger,
    run: () => sweepChains({ config, settings, store, telemetry, notifier }),
  });
  const statistics = new Periodic({
    name: "statistics keeper",
    intervalMs: STATISTICS_CHECK_MS,
    logger,
    run: () => refreshStatistics({ store, logger }),
  });
  const cron = new CronScheduler({
    config,
    registry: options.registry,
    settings,
    store,
    clock,
    notifier,
    telemetry,
    logger,
  });
  return { dispatcher, deliverer, cron, rescuer, cleaner, expirer, chainSweeper, statistics };
}

/** The limits the configuration gives each operation it limits. */
export function configuredLimits(config: Config): Array<{ operationId: string; limits: OperationLimits }> {
  return Object.entries(config.operations)
    .map(([operationId, entry]) => ({ operationId, limits: limitsFromConfig(entry) }))
    .filter((entry) => limitsSomething(entry.limits));
}

/** Wait before trying again to listen for other nodes' notifications. */
const LISTEN_RETRY_MS = 5000;

/**
 * Passes other nodes' enqueues and retries (the store's notifications) to the notifier, trying again every few
 * seconds while the listening connection cannot be opened (polling covers the gap). Returns the function that stops
 * it.
 */
function listenForOtherNodes(options: {
  store: Pick<ListenStore, "jobAvailableListen"> & Pick<StoreLifecycle, "now">;
  notifier: WorkNotifier;
  logger: Logger;
}): () => Promise<void> {
  const { store, notifier, logger } = options;
  let stopped = false;
  let retry: NodeJS.Timeout | undefined;
  let stop: (() => Promise<void>) | undefined;
  const attempt = () => {
    store
      .jobAvailableListen(
        (runAt) => notifier.notify(runAt, "elsewhere"),
        (jobId) => notifier.abort(jobId),
      )
      .then(
        async (stopFn) => {
          if (stopped) return stopFn();
          stop = stopFn;
          // A job another node committed before the LISTEN took effect notified nobody here: claim once more.
          notifier.notify(store.now(), "elsewhere");
        },
        (error: unknown) => {
          if (stopped) return;
          logger.warn({ err: error }, "cannot listen for other nodes' enqueues yet; polling meanwhile, trying again");
          retry = setTimeout(attempt, LISTEN_RETRY_MS);
        },
      );
  };
  attempt();
  return async () => {
    stopped = true;
    clearTimeout(retry);
    await stop?.();
  };
}

/** What a service is built from that needs no database: the config checked against the OpenAPI document, the keys. */
export interface CheckedService {
  settings: PerOperationSettings;
  registry: OperationRegistry;
  requestSchemas: RequestSchemas;
  /** Config problems worth a warning but not a refusal to start. */
  warnings: string[];
  verifier: TokenVerifier;
  signer: DeliverySigner;
  deliveryVerifier: DeliveryTokenVerifier;
}

/**
 * The part of building a service that needs no database: reads the OpenAPI document, checks the config against it and
 * imports the keys. Throws `ConfigError` for a config the document contradicts or a key that cannot be imported, so
 * `serve` can refuse a bad config before it listens, and waits for the database with nothing left to check.
 */
export async function checkService(options: { config: Config; clock?: Clock }): Promise<CheckedService> {
  const { config } = options;
  const clock = options.clock ?? systemClock;
  const settings = new PerOperationSettings(config);
  const registry = OperationRegistry.fromFile(config.openapi);
  const configWarnings = checkConfigAgainstRegistry({ config, registry }).warnings;
  const requestSchemas = RequestSchemas.compile({ registry, settings });
  const warnings = [...configWarnings, ...requestSchemas.warnings, ...cronRequestWarnings({ config, requestSchemas })];
  // Tokens are signed and checked on this node's clock, as their issuers' and verifiers' are.
  const verifier = await TokenVerifier.create({ auth: config.auth, clock });
  const signer = await DeliverySigner.create({
    deliveryKey: config.auth.delivery_key,
    audience: config.target.audience,
    clock,
  });
  const deliveryVerifier = await DeliveryTokenVerifier.create({
    deliveryKey: config.auth.delivery_key,
    audience: config.target.audience,
    clock,
  });
  return { settings, registry, requestSchemas, warnings, verifier, signer, deliveryVerifier };
}

/** Builds every part of the service; throws `ConfigError` for a config the OpenAPI document contradicts. */
export async function createService(options: {
  /** What `checkService` made of the config (on this node's clock): made here when not given. */
  checked?: CheckedService;
  config: Config;
  clock?: Clock;
  logger?: Logger;
  processMetrics?: boolean;
  /** Build the worker side (default true); `--no-worker` API nodes pass false. */
  worker?: boolean;
  /**
   * Whether the node serves the API (default true). `--no-api` nodes pass false: their ops listener then answers API
   * routes with 404 `api_disabled`.
   */
  api?: boolean;
  /** Jitter source for backoff; `Math.random` by default. */
  random?: () => number;
  /** Monotonic milliseconds that time deliveries; `performance.now` by default (tests give their own). */
  stopwatch?: () => number;
  /** PostgreSQL pool size; `database_pool_size` of the config by default. */
  poolSize?: number;
  /**
   * PostgreSQL: whether the database's clock decides what is due and expired (true, unless a test passes its own
   * `clock` to move time by hand; a test of clock skew passes both).
   */
  databaseTime?: boolean;
  /** Where `encryption.keys` are read from (docs/encryption.md); `process.env` by default. */
  env?: ConfigEnv;
}): Promise<Service> {
  const { config } = options;
  const nodeClock = options.clock ?? systemClock;
  const { settings, registry, requestSchemas, warnings, verifier, signer, deliveryVerifier } =
    options.checked ?? (await checkService({ config, clock: nodeClock }));
  const notifier = new WorkNotifier();
  const logger = options.logger ?? pino({ level: "silent" });
  const telemetry = new Telemetry({
    onListenerError: (event, error) =>
      logger.error({ err: error, event }, "a telemetry subscriber failed; what it was told of stands"),
  });
  // Before anything emits: the tracer subscribes to the events its spans are made of. Off, nothing is loaded.
  const tracing = (await startTracing({ config, telemetry, logger })) ?? null;
  // Read before the store opens: a key missing from the environment stops the node before it touches the database.
  const cipher = PayloadCipher.fromConfig(config, options.env ?? (process.env as ConfigEnv));
  const engineStore = await openStore({
    url: config.database,
    clock: nodeClock,
    databaseTime: options.databaseTime ?? options.clock === undefined,
    poolSize: options.poolSize ?? config.database_pool_size,
    onPoolError: (error) => logger.warn({ err: error }, "database connection error"),
    onWarning: (message) => logger.warn(message),
  }).catch(async (error: unknown) => {
    await tracing?.shutdown();
    throw error;
  });
  const store = cipher === null ? engineStore : encryptingStore(engineStore, cipher);
  // Timers (when the next job is due, the next cron tick) and figures (queue lag) read the database's clock as this
  // node knows it, so a node whose clock is off neither wakes at the wrong time nor reports the wrong lag.
  const clock: Clock = { now: () => store.now() };
  // The counts behind /stats and /metrics are shared between requests for a multiple of what reading them cost
  // (shared-read.ts). A test moving time by hand gets them counted afresh every time: a read that a busy machine made
  // slow must not serve it the counts of before its last step.
  const countsRead: SharedReadOptions =
    options.clock === undefined ? COUNTS_READ : { ...COUNTS_READ, minCostMs: Infinity };
  const metrics = createMetrics({
    countsRead,
    telemetry,
    countJobs: () => store.jobStats({ byOperation: false }),
    clock,
    processMetrics: options.processMetrics ?? false,
    readFlow: async () => {
      const controls = await store.operationControlList();
      const waiting = new Map<string, number>();
      // Counting by operation reads every job: only when some operation has flow control to report.
      if (controls.length > 0) {
        for (const { operationId, status, count } of (await store.jobStats({ byOperation: true })).byOperation) {
          if (status === "pending" || status === "retrying")
            waiting.set(operationId, (waiting.get(operationId) ?? 0) + count);
        }
      }
      return { controls, waiting };
    },
  });
  try {
    await checkCronEntriesAgainstSchedules({ config, store });
    // Every node writes the configuration's limits when it starts; an administrator's stay (docs/flow-control.md).
    await store.operationLimitsConfigure({ limits: configuredLimits(config) });
    const app = await buildApp({
      config,
      registry,
      requestSchemas,
      settings,
      notifier,
      store,
      clock,
      verifier,
      deliveryVerifier,
      telemetry,
      metrics,
      jwks: signer.jwks(),
      countsRead,
      cipher,
      ...(options.random ? { random: options.random } : {}),
      ...(options.logger ? { logger: options.logger as FastifyBaseLogger } : {}),
    });
    const ops = await buildOpsApp({
      config,
      settings,
      store,
      metrics,
      apiDisabled: options.api === false,
      ...(options.logger ? { logger: options.logger as FastifyBaseLogger } : {}),
    });
    const worker =
      options.worker === false
        ? null
        : createWorker({
            config,
            settings,
            registry,
            store,
            clock,
            notifier,
            signer,
            telemetry,
            tracing,
            logger,
            ...(options.random ? { random: options.random } : {}),
            ...(options.stopwatch ? { stopwatch: options.stopwatch } : {}),
          });
    await checkClock({ store, telemetry, logger });
    const clockCheck = new Periodic({
      name: "clock check",
      intervalMs: CLOCK_CHECK_INTERVAL_MS,
      logger,
      run: async () => {
        await checkClock({ store, telemetry, logger });
      },
    });
    let closing: Promise<void> | undefined;
    let stopListening: (() => Promise<void>) | undefined;
    return {
      config,
      registry,
      settings,
      notifier,
      store,
      clock,
      verifier,
      signer,
      telemetry,
      metrics,
      tracing,
      app,
      ops,
      worker,
      warnings,
      start() {
        clockCheck.start();
        if (!worker) return;
        notifier.subscribe(
          (runAt, from) => worker.dispatcher.notify(runAt, from),
          () => worker.dispatcher.takesOne(),
        );
        notifier.subscribeAborts((jobId) => worker.deliverer.abort(jobId));
        worker.dispatcher.start();
        // Other nodes' enqueues and retries (PostgreSQL NOTIFY) wake this node's dispatcher too.
        stopListening = listenForOtherNodes({ store, notifier, logger });
        worker.cron.start();
        worker.rescuer.start();
        worker.cleaner.start();
        worker.expirer.start();
        worker.chainSweeper.start();
        worker.statistics.start();
      },
      close(closeOptions = {}) {
        closing ??= (async () => {
          const graceMs = closeOptions.graceMs ?? config.shutdown.grace_ms;
          await Promise.all([
            stopListening?.(),
            clockCheck.stop(),
            app.close(),
            ops.close(),
            worker
              ? Promise.all([
                  worker.cron.stop(),
                  worker.rescuer.stop(),
                  worker.cleaner.stop(),
                  worker.expirer.stop(),
                  worker.chainSweeper.stop(),
                  worker.statistics.stop(),
                  worker.dispatcher.stop({ graceMs }),
                ])
              : undefined,
          ]);
          // The dispatcher has ended its deliveries' spans and the API answered its last enqueue: export what is left.
          await Promise.all([store.close(), tracing?.shutdown()]);
        })();
        return closing;
      },
    };
  } catch (error) {
    await Promise.all([store.close(), tracing?.shutdown()]);
    throw error;
  }
}

/**
 * The configuration file: one TypeBox schema, the type derived from it, the defaults in the schema itself.
 *
 * Loading is: read YAML or JSON → apply environment overrides → validate (filling defaults) → resolve
 * relative paths against the config file's folder → cross-check against the OpenAPI document (done by the
 * caller, see `src/operations/registry.ts`). Every problem becomes one `ConfigError` naming the key.
 */
import { readFileSync } from "node:fs";
import { dirname, isAbsolute, resolve } from "node:path";
import { Type, type Static, type TSchema } from "@sinclair/typebox";
import { Ajv, type ErrorObject } from "ajv";
import { parse as parseYaml } from "yaml";
import { parseDatabaseUrl, redactDatabaseUrl } from "./database-url.js";
import { didYouMean } from "./did-you-mean.js";
import { RateLimit } from "./flow/schemas.js";

/** The calling operation of cron entry `name`: its key in the trigger map, and its jobs' `enqueued_by_operation_id`. */
export function cronCaller(name: string): string {
  return `cron:${name}`;
}

/**
 * The trigger-map key whose targets schedules created through the API may enqueue (docs/schedules.md, "Who may
 * schedule what"): every such schedule calls as `cron:{name}`, and this one key speaks for all of them.
 */
export const SCHEDULE_TRIGGER_KEY = "cron:*";

/** A problem with the configuration; the CLI prints its message and exits with code 2. */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
}

const Secret = Type.Object(
  {
    kid: Type.String({ minLength: 1 }),
    alg: Type.Literal("HS256"),
    secret: Type.Optional(Type.String()),
    secret_env: Type.Optional(Type.String({ minLength: 1 })),
  },
  { additionalProperties: false },
);

const PublicKey = Type.Object(
  {
    kid: Type.String({ minLength: 1 }),
    alg: Type.Union([Type.Literal("EdDSA"), Type.Literal("ES256")]),
    /** PEM (SPKI) public key. */
    public_key: Type.Optional(Type.String()),
    public_key_env: Type.Optional(Type.String({ minLength: 1 })),
  },
  { additionalProperties: false },
);

const PrivateKey = Type.Object(
  {
    kid: Type.String({ minLength: 1 }),
    alg: Type.Union([Type.Literal("EdDSA"), Type.Literal("ES256")]),
    /** PEM (PKCS#8) private key; its public half is served at /.well-known/jwks.json. */
    private_key: Type.Optional(Type.String()),
    private_key_env: Type.Optional(Type.String({ minLength: 1 })),
  },
  { additionalProperties: false },
);

/** One key that signs delivery tokens: an HS256 secret or an EdDSA/ES256 private key. */
const DeliveryKey = Type.Union([Secret, PrivateKey]);

const RetrySettings = Type.Object(
  {
    base_ms: Type.Integer({ minimum: 1, default: 5000 }),
    factor: Type.Number({ minimum: 1, default: 4 }),
    max_ms: Type.Integer({ minimum: 1, default: 3_600_000 }),
    retry_after_max_ms: Type.Integer({ minimum: 0, default: 86_400_000 }),
  },
  { additionalProperties: false, default: {} },
);

/**
 * `operations.*.retry`: the fields of `retry`, each optional and without a default, so that a field the override
 * leaves out falls back to the global `retry` (a `Type.Partial(RetrySettings)` would carry its defaults along).
 */
const RetryOverride = Type.Object(
  {
    base_ms: Type.Optional(Type.Integer({ minimum: 1 })),
    factor: Type.Optional(Type.Number({ minimum: 1 })),
    max_ms: Type.Optional(Type.Integer({ minimum: 1 })),
    retry_after_max_ms: Type.Optional(Type.Integer({ minimum: 0 })),
  },
  { additionalProperties: false },
);

/**
 * The largest `max_async_ms`: a year. No timer is armed with it (the callbacks compare it with the attempt's start), so
 * it may pass Node's 2^31 - 1 ms; a longer bound is no bound.
 */
const MAX_ASYNC_MS = 366 * 24 * 3600 * 1000;

const OperationOverride = Type.Object(
  {
    max_attempts: Type.Optional(Type.Integer({ minimum: 1 })),
    timeout_ms: Type.Optional(Type.Integer({ minimum: 1 })),
    /**
     * How long an attempt the target took asynchronously (202 with x-job-async: 1) may go without a heartbeat from it
     * before it is rescued; `timeout_ms` plus `lease.grace_ms` when not set (docs/delivery.md, "Long jobs").
     */
    async_lease_ms: Type.Optional(Type.Integer({ minimum: 1, maximum: 2_147_483_647 })),
    /** The longest an attempt may run, from its claim, once its target took it asynchronously: `defaults.max_async_ms`. */
    max_async_ms: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_ASYNC_MS })),
    base_url: Type.Optional(Type.String({ format: "uri" })),
    retry: Type.Optional(RetryOverride),
    rate: Type.Optional(RateLimit),
    rate_per_key: Type.Optional(RateLimit),
    max_concurrency: Type.Optional(Type.Integer({ minimum: 1, maximum: 2_147_483_647 })),
    concurrency_limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 2_147_483_647 })),
    /** Keep the target's 2xx body (up to 8 KiB) in the job's result (docs/chains.md, "Stored results"). */
    store_result: Type.Optional(Type.Boolean()),
    /** Check enqueued requests against the operation's own schemas (docs/api.md, step 4a); `defaults.validate_request`. */
    validate_request: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

const CronEntry = Type.Object(
  {
    name: Type.String({ minLength: 1, pattern: "^[A-Za-z0-9_.-]+$" }),
    schedule: Type.String({ minLength: 1 }),
    timezone: Type.String({ minLength: 1, default: "UTC" }),
    operation_id: Type.String({ minLength: 1 }),
    user_id: Type.String({ minLength: 1 }),
    request: Type.Object(
      {
        body: Type.Optional(Type.Unknown()),
        path_params: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
        query: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
      },
      { additionalProperties: false, default: {} },
    ),
    dedupe_key: Type.Optional(Type.Union([Type.String({ minLength: 1, maxLength: 255 }), Type.Null()])),
    concurrency_key: Type.Optional(Type.Union([Type.String({ minLength: 1, maxLength: 255 }), Type.Null()])),
    priority: Type.Optional(Type.Integer({ minimum: -2147483648, maximum: 2147483647 })),
  },
  { additionalProperties: false },
);

/**
 * `telemetry.otlp`: where spans are exported (docs/tracing.md). Absent, opqueue makes no spans and never loads the
 * OpenTelemetry SDK.
 */
const OtlpExport = Type.Object(
  {
    /** The collector's OTLP/HTTP traces URL, whole (`http://collector:4318/v1/traces`): nothing is appended to it. */
    endpoint: Type.String({ format: "uri", pattern: "^https?://" }),
    /**
     * Headers sent with every export (a vendor's API key, say). A secret is better given by the standard
     * OTEL_EXPORTER_OTLP_TRACES_HEADERS variable, which the exporter reads too; a header given here wins over it.
     */
    headers: Type.Record(Type.String(), Type.String({ pattern: "^[^\\r\\n\\u0000]*$" }), {
      // A header's name is an HTTP token (RFC 9110); its value holds no line break.
      propertyNames: { pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$" },
      default: {},
    }),
    /** The `service.name` of every span's resource. */
    service_name: Type.String({ minLength: 1, default: "opqueue" }),
    /** The longest one export request may take (and how long shutdown waits for the last one). */
    timeout_ms: Type.Integer({ minimum: 1, maximum: 600_000, default: 10_000 }),
  },
  { additionalProperties: false },
);

/**
 * The longest `listen.*_timeout_ms`: one day, far above any useful value and far below the 2^31 - 1 ms past which
 * Node's timers fire after 1 ms instead.
 */
const MAX_LISTEN_TIMEOUT_MS = 86_400_000;

/**
 * What a batch counts against `limits.batch_bytes_in_flight` beside its body: its up to 1,000 items' own objects (the
 * parsed item, the insert, the row, the answer) take about 1 KiB each whatever their size, which a batch of small items
 * holds beyond the few times its body that a batch holds (docs/api.md, "Batch enqueue").
 */
export const BATCH_ITEMS_BYTES = 256 * 1024;

/** The schema of the configuration file (snake_case keys, as docs/configuration.md shows). */
export const ConfigSchema = Type.Object(
  {
    listen: Type.Object(
      {
        host: Type.String({ minLength: 1, default: "127.0.0.1" }),
        port: Type.Integer({ minimum: 0, maximum: 65535, default: 8080 }),
        // The bounds of every connection (docs/api.md, "Connection bounds"). Zero would mean "no limit" to Node: 1 is
        // the least.
        /** The whole request, headers and body, must arrive within this; nor may a connection stall any longer. */
        request_timeout_ms: Type.Integer({ minimum: 1, maximum: MAX_LISTEN_TIMEOUT_MS, default: 30_000 }),
        /**
         * The headers must arrive within this: "a few seconds". They are a few hundred bytes that any client sends
         * at once; 5 s is ample even for a slow mobile link, and keeps a socket that never finishes its headers from
         * holding a descriptor for the whole request timeout. Left out, it is also cut to `request_timeout_ms`.
         */
        headers_timeout_ms: Type.Integer({ minimum: 1, maximum: MAX_LISTEN_TIMEOUT_MS, default: 5000 }),
        /**
         * An idle keep-alive connection is closed after this. Node's own default: long enough for a client's next
         * request to reuse the connection, short enough that idle ones do not pile up. Behind a proxy that pools
         * connections, set it above the proxy's idle timeout.
         */
        keep_alive_timeout_ms: Type.Integer({ minimum: 1, maximum: MAX_LISTEN_TIMEOUT_MS, default: 5000 }),
        /** Most connections open at once; lowered at start-up to fit the process's file-descriptor limit. */
        max_connections: Type.Integer({ minimum: 1, default: 10_000 }),
        /**
         * A port for /healthz, /readyz and /metrics alone (the ops listener), on `host`. Worker-only nodes
         * (`serve --no-api`) serve them on `port` when this is not set.
         */
        ops_port: Type.Optional(Type.Integer({ minimum: 0, maximum: 65535 })),
      },
      { additionalProperties: false, default: {} },
    ),
    database: Type.String({ minLength: 1, default: "sqlite:./data/opqueue.db" }),
    /** PostgreSQL connections per node (the LISTEN connection comes on top). */
    database_pool_size: Type.Integer({ minimum: 1, maximum: 1000, default: 10 }),
    openapi: Type.String({ minLength: 1 }),
    target: Type.Object(
      {
        base_url: Type.String({ format: "uri" }),
        audience: Type.String({ minLength: 1 }),
      },
      { additionalProperties: false },
    ),
    auth: Type.Object(
      {
        audience: Type.String({ minLength: 1, default: "opqueue" }),
        keys: Type.Array(Type.Union([Secret, PublicKey]), { minItems: 1 }),
        /**
         * One key, or a list of keys during a rotation (docs/tokens.md, "Rotating keys"): the first signs, and every
         * asymmetric one is published in the JWKS, so a key can be verified before it signs and after it stops.
         */
        delivery_key: Type.Union([DeliveryKey, Type.Array(DeliveryKey, { minItems: 1 })]),
      },
      { additionalProperties: false },
    ),
    triggers: Type.Record(Type.String(), Type.Array(Type.String({ minLength: 1 })), { default: {} }),
    on_behalf_of: Type.Array(Type.String({ minLength: 1 }), { default: [] }),
    defaults: Type.Object(
      {
        max_attempts: Type.Integer({ minimum: 1, default: 5 }),
        timeout_ms: Type.Integer({ minimum: 1, default: 30_000 }),
        validate_request: Type.Boolean({ default: true }),
        /**
         * The longest an attempt may run, from its claim, once its target took it asynchronously (docs/delivery.md,
         * "Long jobs"): heartbeats keep a lease alive, and this bounds the whole. A day.
         */
        max_async_ms: Type.Integer({ minimum: 1, maximum: MAX_ASYNC_MS, default: 24 * 3600 * 1000 }),
      },
      { additionalProperties: false, default: {} },
    ),
    operations: Type.Record(Type.String(), OperationOverride, { default: {} }),
    limits: Type.Object(
      {
        spawn_cap: Type.Integer({ minimum: 1, default: 1000 }),
        /**
         * Largest body of a `POST /jobs/batch` (1,000 jobs whose payloads are each up to 16 KiB would fill 16 MiB);
         * read only once the assertion checked out. Every other route keeps the 1 MiB limit.
         */
        batch_body_bytes: Type.Integer({ minimum: 1024, maximum: 1024 ** 3, default: 16 * 1024 * 1024 }),
        /**
         * The most bytes of `POST /jobs/batch` one node reads and enqueues at once (docs/api.md, "Batch enqueue"): each
         * batch counts its body and BATCH_ITEMS_BYTES; a batch that would pass it is refused with 503 before its body is
         * read. Left out: room for two batches of `batch_body_bytes`; given, room for one at least.
         */
        batch_bytes_in_flight: Type.Integer({
          minimum: 1024,
          maximum: 4 * 1024 ** 3,
          default: 2 * (16 * 1024 * 1024 + BATCH_ITEMS_BYTES),
        }),
        /**
         * Most schedules created through the API (docs/schedules.md): every worker node runs each of them, and the
         * list is answered unpaged. Config entries do not count.
         */
        max_schedules: Type.Integer({ minimum: 1, maximum: 1_000_000, default: 10_000 }),
      },
      { additionalProperties: false, default: {} },
    ),
    /** How long an idempotency key is remembered after its first use (docs/api.md, "Idempotency"). */
    idempotency: Type.Object(
      { window_ms: Type.Integer({ minimum: 1, maximum: 366 * 24 * 3600 * 1000, default: 24 * 3600 * 1000 }) },
      { additionalProperties: false, default: {} },
    ),
    /** How often each worker node enqueues the callbacks that are due and looks for chains that settled (docs/chains.md). */
    chains: Type.Object(
      { check_ms: Type.Integer({ minimum: 1, default: 500 }) },
      { additionalProperties: false, default: {} },
    ),
    /** How often waiting jobs past their expiry are ended (docs/api.md, "Expiry"); none is ever started late. */
    expiry: Type.Object(
      { check_ms: Type.Integer({ minimum: 1, default: 1000 }) },
      { additionalProperties: false, default: {} },
    ),
    retry: RetrySettings,
    worker: Type.Object(
      {
        concurrency: Type.Integer({ minimum: 1, default: 32 }),
        poll_ms: Type.Integer({ minimum: 1, default: 1000 }),
      },
      { additionalProperties: false, default: {} },
    ),
    lease: Type.Object(
      {
        heartbeat_ms: Type.Integer({ minimum: 1, default: 5000 }),
        grace_ms: Type.Integer({ minimum: 0, default: 30_000 }),
        check_ms: Type.Integer({ minimum: 1, default: 10_000 }),
      },
      { additionalProperties: false, default: {} },
    ),
    shutdown: Type.Object(
      { grace_ms: Type.Integer({ minimum: 0, default: 30_000 }) },
      { additionalProperties: false, default: {} },
    ),
    retention: Type.Object(
      { terminal_days: Type.Union([Type.Number({ exclusiveMinimum: 0 }), Type.Null()], { default: 30 }) },
      { additionalProperties: false, default: {} },
    ),
    cron: Type.Array(CronEntry, { default: [] }),
    /** What opqueue tells about itself beyond logs and /metrics: spans over OTLP (docs/tracing.md). */
    telemetry: Type.Object({ otlp: Type.Optional(OtlpExport) }, { additionalProperties: false, default: {} }),
  },
  { additionalProperties: false },
);

/** A validated configuration with every default filled in and every path absolute. */
export type Config = Static<typeof ConfigSchema>;
/** One verifying key of `auth.keys`. */
export type VerifyKeyConfig = Config["auth"]["keys"][number];
/** One key of `auth.delivery_key`. */
export type DeliveryKeyConfig = Static<typeof DeliveryKey>;
/** `auth.delivery_key` as written: one key, or a list whose first key signs. */
export type DeliveryKeysConfig = Config["auth"]["delivery_key"];
/** One entry of `cron`. */
export type CronConfig = Config["cron"][number];
/** `telemetry.otlp`: where spans are exported. */
export type OtlpConfig = Static<typeof OtlpExport>;

/**
 * The keys of `auth.delivery_key` in order (the first signs), each with the name messages give it: `auth.delivery_key`
 * for the single-key form, `auth.delivery_key.N` for the list form.
 */
export function deliveryKeyList(deliveryKey: DeliveryKeysConfig): Array<{ where: string; key: DeliveryKeyConfig }> {
  if (!Array.isArray(deliveryKey)) return [{ where: "auth.delivery_key", key: deliveryKey }];
  return deliveryKey.map((key, i) => ({ where: `auth.delivery_key.${i}`, key }));
}

// verbose: each error carries the schema it broke, whose known keys an unknown key is compared with ("did you mean").
const configAjv = new Ajv({ useDefaults: true, allErrors: false, strict: false, coerceTypes: false, verbose: true });
configAjv.addFormat("uri", (value: string) => URL.canParse(value));
const validateConfig = configAjv.compile<Config>(ConfigSchema as TSchema);

function describeError(error: ErrorObject): string {
  const key = error.instancePath === "" ? "(top level)" : error.instancePath.slice(1).replaceAll("/", ".");
  if (error.keyword === "additionalProperties") {
    const unknown = String(error.params["additionalProperty"]);
    const known = Object.keys((error.parentSchema as { properties?: object } | undefined)?.properties ?? {});
    return `${key === "(top level)" ? "" : `${key}: `}unknown key "${unknown}"${didYouMean(unknown, known)}`;
  }
  if (error.keyword === "required") {
    const missing = String(error.params["missingProperty"]);
    const where = key === "(top level)" ? missing : `${key}.${missing}`;
    // Ajv checks required keys before unknown ones: a misspelt required key first shows as missing.
    const known = Object.keys((error.parentSchema as { properties?: object } | undefined)?.properties ?? {});
    const given = typeof error.data === "object" && error.data !== null ? Object.keys(error.data) : [];
    const misspelt = given.find((name) => !known.includes(name) && didYouMean(name, [missing]) !== "");
    if (misspelt !== undefined) {
      return `${key === "(top level)" ? "" : `${key}: `}unknown key "${misspelt}"${didYouMean(misspelt, [missing])}; ${where} is required`;
    }
    return `${where}: is required`;
  }
  return `${key}: ${error.message ?? "is invalid"}`;
}

/**
 * The one error to report. For a union (`auth.delivery_key`: a key or a list of keys) Ajv lists every branch's
 * complaint, and one about the value's type only says which branch it is not ("must be object" of a list): the first
 * complaint about the content names the real problem, else the type complaint deepest inside the value (the list's
 * item that is not a key). Elsewhere there is one error, which this keeps.
 */
function reportedError(errors: ErrorObject[]): ErrorObject | undefined {
  const aboutContent = errors.find((error) => error.keyword !== "type" && error.keyword !== "anyOf");
  if (aboutContent) return aboutContent;
  return errors.reduce<ErrorObject | undefined>(
    (deepest, error) =>
      deepest === undefined || error.instancePath.length > deepest.instancePath.length ? error : deepest,
    undefined,
  );
}

/** Environment variables that override the file. */
export interface ConfigEnv {
  OPQUEUE_DATABASE_URL?: string | undefined;
  OPQUEUE_PORT?: string | undefined;
  OPQUEUE_HOST?: string | undefined;
  [name: string]: string | undefined;
}

/**
 * Which key material a command reads, so that it needs only the secrets it uses in its environment: `all` (serve),
 * `minting` (the first HS256 key of `auth.keys`, which `opqueue token` and `opqueue backup` sign with), `none`
 * (`migrate`, `restore`). Keys left unread keep their `*_env` reference, unresolved and unchecked.
 */
export type ConfigSecrets = "all" | "minting" | "none";

/**
 * Validates a raw configuration object (as parsed from YAML or JSON), applying environment overrides and
 * defaults, and resolving relative paths against `baseDir`. Throws `ConfigError` on the first problem.
 */
export function parseConfig(options: {
  raw: unknown;
  baseDir: string;
  env?: ConfigEnv;
  secrets?: ConfigSecrets;
}): Config {
  const env = options.env ?? {};
  if (typeof options.raw !== "object" || options.raw === null || Array.isArray(options.raw)) {
    throw new ConfigError("config: the file must hold a mapping of keys (YAML or JSON object)");
  }
  const raw = structuredClone(options.raw) as Record<string, unknown>;
  const listenGiven = raw["listen"];
  const headersTimeoutGiven =
    typeof listenGiven === "object" && listenGiven !== null && "headers_timeout_ms" in listenGiven;
  const limitsGiven = raw["limits"];
  const batchBudgetGiven =
    typeof limitsGiven === "object" && limitsGiven !== null && "batch_bytes_in_flight" in limitsGiven;
  applyEnvOverrides(raw, env);
  if (!validateConfig(raw)) {
    const reported = reportedError(validateConfig.errors ?? []);
    throw new ConfigError(`config: ${reported ? describeError(reported) : "is invalid"}`);
  }
  const config = raw as Config;
  config.openapi = resolvePath(options.baseDir, config.openapi);
  config.database = resolveDatabaseUrl(options.baseDir, config.database);
  resolveListenTimeouts(config.listen, headersTimeoutGiven);
  resolveBatchBudget(config.limits, batchBudgetGiven);
  const keys = keysRead(config, options.secrets ?? "all");
  checkKids(authKeys(config));
  resolveSecrets(keys, env);
  checkSecrets(keys);
  if (config.auth.audience === config.target.audience) {
    throw new ConfigError(
      `config: target.audience and auth.audience must differ (both are "${config.auth.audience}"), ` +
        "or a delivery token could be replayed as an enqueue assertion",
    );
  }
  return config;
}

function applyEnvOverrides(raw: Record<string, unknown>, env: ConfigEnv): void {
  if (env.OPQUEUE_DATABASE_URL) {
    // A relative sqlite: path given on the command line means the working directory, not the config's folder.
    const url = env.OPQUEUE_DATABASE_URL;
    const parsed = parseDatabaseUrl(url);
    raw["database"] =
      parsed?.engine === "sqlite" && parsed.path !== ":memory:" ? `sqlite:${resolve(parsed.path)}` : url;
  }
  if (env.OPQUEUE_PORT !== undefined || env.OPQUEUE_HOST !== undefined) {
    const listen = (typeof raw["listen"] === "object" && raw["listen"] !== null ? raw["listen"] : {}) as Record<
      string,
      unknown
    >;
    if (env.OPQUEUE_HOST) listen["host"] = env.OPQUEUE_HOST;
    if (env.OPQUEUE_PORT !== undefined) {
      if (!/^\d{1,5}$/.test(env.OPQUEUE_PORT)) {
        throw new ConfigError(`config: OPQUEUE_PORT must be a port number, got "${env.OPQUEUE_PORT}"`);
      }
      listen["port"] = Number(env.OPQUEUE_PORT);
    }
    raw["listen"] = listen;
  }
}

/**
 * The headers are part of the request, and Node refuses a headers timeout longer than the request timeout. Only a
 * value the file gives is refused: the default yields to a shorter `request_timeout_ms`, as Node's own does.
 */
function resolveListenTimeouts(listen: Config["listen"], headersTimeoutGiven: boolean): void {
  if (!headersTimeoutGiven) {
    listen.headers_timeout_ms = Math.min(listen.headers_timeout_ms, listen.request_timeout_ms);
  } else if (listen.headers_timeout_ms > listen.request_timeout_ms) {
    throw new ConfigError(
      `config: listen.headers_timeout_ms (${listen.headers_timeout_ms}) must not exceed listen.request_timeout_ms ` +
        `(${listen.request_timeout_ms}): the headers are part of the request`,
    );
  }
}

/**
 * The batch bytes in flight: room for two batches of the largest size when left out, whatever that size; given, room
 * for one at least.
 */
function resolveBatchBudget(limits: Config["limits"], given: boolean): void {
  const largest = limits.batch_body_bytes + BATCH_ITEMS_BYTES;
  if (!given) {
    limits.batch_bytes_in_flight = 2 * largest;
  } else if (limits.batch_bytes_in_flight < largest) {
    throw new ConfigError(
      `config: limits.batch_bytes_in_flight (${limits.batch_bytes_in_flight}) must be at least limits.batch_body_bytes ` +
        `plus ${BATCH_ITEMS_BYTES} (${largest}): a batch of the largest size could never be read`,
    );
  }
}

function resolvePath(baseDir: string, path: string): string {
  return isAbsolute(path) ? path : resolve(baseDir, path);
}

/** `sqlite:` URLs with a relative path are taken relative to the config file's folder. */
function resolveDatabaseUrl(baseDir: string, url: string): string {
  if (url === "sqlite:") throw new ConfigError("config: database: sqlite: needs a file path (or sqlite::memory:)");
  const parsed = parseDatabaseUrl(url);
  if (!parsed) {
    throw new ConfigError(
      `config: database: "${redactDatabaseUrl(url)}" is not a supported URL (sqlite:PATH, sqlite::memory: or postgres://...)`,
    );
  }
  if (parsed.engine === "postgres") {
    if (!URL.canParse(url)) {
      throw new ConfigError(
        `config: database: "${redactDatabaseUrl(url)}" is not a valid URL: postgres://USER:PASSWORD@HOST:PORT/DATABASE, ` +
          "with the password's special characters percent-encoded",
      );
    }
    return url;
  }
  if (parsed.path === ":memory:") return url;
  return `sqlite:${resolvePath(baseDir, parsed.path)}`;
}

function fromEnv(env: ConfigEnv, where: string, name: string): string {
  const value = env[name];
  if (value === undefined || value === "") {
    throw new ConfigError(`config: ${where}: environment variable ${name} is not set`);
  }
  return value;
}

/** One key of `auth`, with its name for messages and the field that holds its material. */
interface AuthKey {
  where: string;
  key: Record<string, unknown>;
  material: string;
}

/** Every key of `auth`. */
function authKeys(config: Config): AuthKey[] {
  return [
    ...config.auth.keys.map((key, i) => ({
      where: `auth.keys.${i}`,
      key: key as Record<string, unknown>,
      material: key.alg === "HS256" ? "secret" : "public_key",
    })),
    ...deliveryKeyList(config.auth.delivery_key).map(({ where, key }) => ({
      where,
      key: key as Record<string, unknown>,
      material: key.alg === "HS256" ? "secret" : "private_key",
    })),
  ];
}

/** The keys whose material `secrets` says to read. */
function keysRead(config: Config, secrets: ConfigSecrets): AuthKey[] {
  const keys = authKeys(config);
  if (secrets === "all") return keys;
  if (secrets === "none") return [];
  // `mintToken` signs with the first HS256 key of auth.keys, and reads nothing else.
  const minting = keys.find(({ where, key }) => where.startsWith("auth.keys.") && key["alg"] === "HS256");
  return minting ? [minting] : [];
}

/** Replaces the `*_env` reference of each of `keys` with the variable's value, so later code sees only inline material. */
function resolveSecrets(keys: AuthKey[], env: ConfigEnv): void {
  for (const { where, key } of keys) {
    for (const field of ["secret", "public_key", "private_key"]) {
      const envName = key[`${field}_env`];
      if (typeof envName === "string") {
        if (key[field] !== undefined) {
          throw new ConfigError(`config: ${where}: give either ${field} or ${field}_env, not both`);
        }
        key[field] = fromEnv(env, where, envName);
        delete key[`${field}_env`];
      }
    }
  }
}

function checkKids(keys: AuthKey[]): void {
  // A kid names one key wherever it appears (a token's header, the JWKS, a log line), across both lists: a verifier
  // choosing by kid must never find two keys under one.
  const kids = new Set<string>();
  for (const { where, key } of keys) {
    const kid = String(key["kid"]);
    if (kids.has(kid)) {
      throw new ConfigError(
        `config: ${where}.kid: "${kid}" is used by two keys (the kids of auth.keys and auth.delivery_key must all differ)`,
      );
    }
    kids.add(kid);
  }
}

/** Every key of `keys` has its material, and an HS256 secret is long enough. */
function checkSecrets(keys: AuthKey[]): void {
  for (const { where, key, material } of keys) {
    const value = key[material];
    if (typeof value !== "string" || value === "") {
      throw new ConfigError(
        `config: ${where}: ${material} (or ${material}_env) is required for alg ${String(key["alg"])}`,
      );
    }
    if (material === "secret" && Buffer.byteLength(value, "utf8") < 32) {
      throw new ConfigError(
        `config: ${where}.secret: must be at least 32 bytes (got ${Buffer.byteLength(value, "utf8")})`,
      );
    }
  }
}

/**
 * Reads a config file (YAML or JSON; JSON is YAML too) and validates it. The path comes from the argument,
 * else `OPQUEUE_CONFIG`.
 */
export function loadConfigFile(options: { path?: string | undefined; env?: ConfigEnv; secrets?: ConfigSecrets }): {
  config: Config;
  path: string;
} {
  const env = options.env ?? (process.env as ConfigEnv);
  const path = options.path ?? env["OPQUEUE_CONFIG"];
  if (!path) throw new ConfigError("config: no config file given (use --config FILE or OPQUEUE_CONFIG)");
  const absolute = resolve(path);
  let text: string;
  try {
    text = readFileSync(absolute, "utf8");
  } catch (error) {
    throw new ConfigError(`config: cannot read ${absolute}: ${(error as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (error) {
    throw new ConfigError(`config: ${absolute} is not valid YAML or JSON: ${(error as Error).message}`);
  }
  const secrets = options.secrets ?? "all";
  return { config: parseConfig({ raw, baseDir: dirname(absolute), env, secrets }), path: absolute };
}

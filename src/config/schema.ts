/**
 * The schema of the configuration file, in TypeBox: every key, its bounds and its default in one place, and the types
 * derived from it (`Config` is `Static<>` of the schema). Validating against it is `validate.ts`'s work; what the schema
 * cannot settle alone (relative paths, bounds between two keys, secrets) is `resolve.ts`'s and `auth-keys.ts`'s.
 */
import { Type, type Static } from "@sinclair/typebox";
import { RateLimit } from "../flow/schemas.js";
import { CronEntry } from "./cron.js";

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
 * The largest `max_async_ms`: a year. No timer is armed with it (an attempt's calls compare it with its start), so
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
    /**
     * JSON pointers into its jobs' request (`/body/password`; a `*` segment matches every member) whose values are
     * stored and delivered but never shown in an answer (docs/api.md, "Redaction").
     */
    redact: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { maxItems: 100 })),
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
        /**
         * After a claim for another node's work found nothing, how long the node's next claim for another node's work
         * or a freed slot waits, gathering the jobs that arrive meanwhile into one claim (docs/delivery.md, "Gathering
         * claims"). 0 claims at every wake-up.
         */
        claim_gather_ms: Type.Integer({ minimum: 0, maximum: 1000, default: 25 }),
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
    /**
     * Payloads encrypted at rest (docs/encryption.md): AES-256-GCM keys, the first encrypting, every one decrypting.
     * Absent, payloads are stored as they are.
     */
    encryption: Type.Optional(
      Type.Object(
        {
          keys: Type.Array(
            Type.Object(
              {
                /** Written with every value the key encrypts; never reused for other key material. */
                id: Type.String({ pattern: "^[A-Za-z0-9_-]{1,32}$" }),
                /** The variable holding the key: 32 random bytes, base64 (`openssl rand -base64 32`). */
                key_env: Type.String({ minLength: 1 }),
              },
              { additionalProperties: false },
            ),
            { minItems: 1, maxItems: 16 },
          ),
        },
        { additionalProperties: false },
      ),
    ),
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
/** `telemetry.otlp`: where spans are exported. */
export type OtlpConfig = Static<typeof OtlpExport>;

/**
 * The configuration file (docs/configuration.md): defaults, loading YAML and JSON, path resolution, environment
 * overrides, secrets from the environment, and one ConfigError naming the key for every rejection.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { BATCH_ITEMS_BYTES, ConfigError, loadConfigFile, parseConfig, type ConfigEnv } from "../../src/config.js";
import { OperationRegistry } from "../../src/operations/registry.js";
import { checkConfigAgainstRegistry } from "../../src/schedules/config-entries.js";
import { rawTestConfig, TEST_DELIVERY_SECRET, TEST_OPENAPI, TEST_SECRET } from "../helpers/service.js";

/** A fresh temporary folder, removed when the test ends. */
function tempDir(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "opqueue-config-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Only the keys the schema requires (no defaults exist for them). */
function minimalRaw(): Record<string, unknown> {
  return {
    openapi: "/abs/product.openapi.yaml",
    target: { base_url: "http://127.0.0.1:3000", audience: "product" },
    auth: {
      keys: [{ kid: "k1", alg: "HS256", secret: TEST_SECRET }],
      delivery_key: { kid: "q1", alg: "HS256", secret: TEST_DELIVERY_SECRET },
    },
  };
}

/** Asserts that `fn` throws a ConfigError whose message matches every pattern; returns the message. */
function assertConfigError(fn: () => unknown, ...patterns: RegExp[]): string {
  let message = "";
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof ConfigError, `expected a ConfigError, got ${String(error)}`);
    message = error.message;
    for (const pattern of patterns) assert.match(error.message, pattern);
    return true;
  });
  return message;
}

/** parseConfig of `minimalRaw()` changed by `change`, with `env`. */
function parseChanged(change: (raw: Record<string, unknown>) => void, env: ConfigEnv = {}) {
  const raw = minimalRaw();
  change(raw);
  return parseConfig({ raw, baseDir: "/base", env });
}

function auth(raw: Record<string, unknown>): Record<string, unknown> {
  return raw["auth"] as Record<string, unknown>;
}

function authKeys(raw: Record<string, unknown>): Array<Record<string, unknown>> {
  return auth(raw)["keys"] as Array<Record<string, unknown>>;
}

/** The defaults of the connection bounds of `listen` (docs/api.md, Revision 2). */
const LISTEN_BOUNDS = {
  request_timeout_ms: 30_000,
  headers_timeout_ms: 5000,
  keep_alive_timeout_ms: 5000,
  max_connections: 10_000,
};

/** The YAML example of docs/configuration.md, verbatim but for the two secrets (its placeholders are under 32 bytes). */
const CONFIG_EXAMPLE = `
listen: { host: 127.0.0.1, port: 8080 }
database: sqlite:./data/opqueue.db      # sqlite:PATH | sqlite::memory: | postgres://user:pass@host:5432/db
openapi: ./product.openapi.yaml          # the product API: operationId, method, path, tags of every operation
target:
  base_url: http://127.0.0.1:3000        # where target operations are served
  audience: product                      # \`aud\` of delivery tokens; must differ from auth.audience
auth:
  audience: opqueue                      # required \`aud\` of enqueue assertions and admin tokens
  keys:                                  # verify enqueue assertions and admin tokens; the first HS256 key also mints (opqueue token)
    - { kid: k1, alg: HS256, secret: "${TEST_SECRET}" }   # or secret_env: NAME
  delivery_key: { kid: q1, alg: HS256, secret: "${TEST_DELIVERY_SECRET}" }
triggers:                                # the trigger map: calling operationId -> targets it may enqueue
  createUser: [sendWelcomeEmail]
  sendWelcomeEmail: [recordEmailSent]
  "cron:nightly": [buildReport]
on_behalf_of: [importUsers]              # calling operations allowed to send on_behalf_of
defaults: { max_attempts: 5, timeout_ms: 30000 }
operations:                              # per-target overrides: max_attempts, timeout_ms, base_url, retry
  sendWelcomeEmail: { max_attempts: 8, timeout_ms: 10000 }
limits: { spawn_cap: 1000 }
retry: { base_ms: 5000, factor: 4, max_ms: 3600000, retry_after_max_ms: 86400000 }
worker: { concurrency: 32, poll_ms: 1000 }
lease: { heartbeat_ms: 5000, grace_ms: 30000, check_ms: 10000 }
shutdown: { grace_ms: 30000 }
retention: { terminal_days: 30 }         # null keeps terminal jobs forever
cron:
  - { name: nightly, schedule: "0 3 * * *", timezone: UTC, operation_id: buildReport, user_id: system, request: { body: {} } }
`;

// ---------------------------------------------------------------------------------------------------------
// Defaults

test("a config with only the required keys gets every default docs/configuration.md shows", () => {
  const config = parseConfig({ raw: minimalRaw(), baseDir: "/base", env: {} });
  assert.deepEqual(config, {
    listen: { host: "127.0.0.1", port: 8080, ...LISTEN_BOUNDS },
    database: `sqlite:${path.resolve("/base", "data/opqueue.db")}`,
    database_pool_size: 10,
    openapi: "/abs/product.openapi.yaml",
    target: { base_url: "http://127.0.0.1:3000", audience: "product" },
    auth: {
      audience: "opqueue",
      keys: [{ kid: "k1", alg: "HS256", secret: TEST_SECRET }],
      delivery_key: { kid: "q1", alg: "HS256", secret: TEST_DELIVERY_SECRET },
    },
    triggers: {},
    on_behalf_of: [],
    defaults: { max_attempts: 5, timeout_ms: 30000, validate_request: true, max_async_ms: 86_400_000 },
    operations: {},
    limits: {
      spawn_cap: 1000,
      batch_body_bytes: 16777216,
      max_schedules: 10_000,
      batch_bytes_in_flight: 2 * (16777216 + 262144),
    },
    idempotency: { window_ms: 86400000 },
    chains: { check_ms: 500 },
    expiry: { check_ms: 1000 },
    retry: { base_ms: 5000, factor: 4, max_ms: 3600000, retry_after_max_ms: 86400000 },
    worker: { concurrency: 32, poll_ms: 1000, claim_gather_ms: 25 },
    lease: { heartbeat_ms: 5000, grace_ms: 30000, check_ms: 10000 },
    shutdown: { grace_ms: 30000 },
    retention: { terminal_days: 30 },
    cron: [],
    telemetry: {},
  });
});

test("telemetry.otlp is off unless given; given, its endpoint is required and the rest takes defaults", () => {
  assert.equal(parseChanged(() => undefined).telemetry.otlp, undefined);
  const config = parseChanged((raw) => {
    raw["telemetry"] = { otlp: { endpoint: "http://collector:4318/v1/traces" } };
  });
  assert.deepEqual(config.telemetry, {
    otlp: { endpoint: "http://collector:4318/v1/traces", headers: {}, service_name: "opqueue", timeout_ms: 10_000 },
  });
  const given = {
    endpoint: "https://otlp.example.com/v1/traces",
    headers: { "x-api-key": "k" },
    service_name: "opqueue-eu",
    timeout_ms: 2000,
  };
  assert.deepEqual(parseChanged((raw) => void (raw["telemetry"] = { otlp: { ...given } })).telemetry, { otlp: given });
  assertConfigError(
    () => parseChanged((raw) => void (raw["telemetry"] = { otlp: {} })),
    /telemetry\.otlp\.endpoint: is required/,
  );
});

test("a telemetry.otlp endpoint that is not an http(s) URL, or a header that could not be sent, is refused, naming its key", () => {
  const otlp = (extra: Record<string, unknown>) => (raw: Record<string, unknown>) =>
    void (raw["telemetry"] = { otlp: { endpoint: "http://collector:4318/v1/traces", ...extra } });
  assertConfigError(() => parseChanged(otlp({ endpoint: "collector:4318" })), /telemetry\.otlp\.endpoint/);
  assertConfigError(() => parseChanged(otlp({ endpoint: "grpc://collector:4317" })), /telemetry\.otlp\.endpoint/);
  assertConfigError(() => parseChanged(otlp({ headers: { "x-key": "a\r\nb: c" } })), /telemetry\.otlp\.headers\.x-key/);
  assertConfigError(() => parseChanged(otlp({ headers: { "bad name": "v" } })), /telemetry\.otlp\.headers/);
  assertConfigError(() => parseChanged(otlp({ timeout_ms: 0 })), /telemetry\.otlp\.timeout_ms/);
  assertConfigError(() => parseChanged(otlp({ protocol: "grpc" })), /telemetry\.otlp/, /unknown key "protocol"/);
});

test("a partly given section keeps the given values and fills the rest from the defaults", () => {
  const config = parseChanged((raw) => {
    raw["retry"] = { base_ms: 100 };
    raw["listen"] = { port: 9000 };
  });
  assert.deepEqual(config.retry, { base_ms: 100, factor: 4, max_ms: 3600000, retry_after_max_ms: 86400000 });
  assert.deepEqual(config.listen, { host: "127.0.0.1", port: 9000, ...LISTEN_BOUNDS });
});

test("listen's connection bounds keep the values given", () => {
  const given = {
    request_timeout_ms: 60_000,
    headers_timeout_ms: 5000,
    keep_alive_timeout_ms: 75_000,
    max_connections: 500,
  };
  const config = parseChanged((raw) => {
    raw["listen"] = { ...given };
  });
  assert.deepEqual(config.listen, { host: "127.0.0.1", port: 8080, ...given });
});

test("a headers timeout longer than the request timeout is refused, naming both keys", () => {
  const message = assertConfigError(
    () =>
      parseChanged((raw) => {
        raw["listen"] = { request_timeout_ms: 5000, headers_timeout_ms: 8000 };
      }),
    /listen\.headers_timeout_ms \(8000\)/,
    /listen\.request_timeout_ms \(5000\)/,
  );
  assert.match(message, /must not exceed/);
});

test("left out, the headers timeout yields to a shorter request timeout", () => {
  const config = parseChanged((raw) => {
    raw["listen"] = { request_timeout_ms: 4000 };
  });
  assert.equal(config.listen.headers_timeout_ms, 4000);
  assert.equal(config.listen.request_timeout_ms, 4000);
});

test("left out, limits.batch_bytes_in_flight makes room for two batches of limits.batch_body_bytes; given, it must make room for one", () => {
  const derived = parseChanged((raw) => void (raw["limits"] = { batch_body_bytes: 1_048_576 }));
  assert.equal(derived.limits.batch_bytes_in_flight, 2 * (1_048_576 + BATCH_ITEMS_BYTES));
  const given = parseChanged(
    (raw) => void (raw["limits"] = { batch_body_bytes: 4096, batch_bytes_in_flight: 4096 + BATCH_ITEMS_BYTES }),
  );
  assert.equal(given.limits.batch_bytes_in_flight, 4096 + BATCH_ITEMS_BYTES);
  const message = assertConfigError(
    () =>
      parseChanged(
        (raw) => void (raw["limits"] = { batch_body_bytes: 4096, batch_bytes_in_flight: 4095 + BATCH_ITEMS_BYTES }),
      ),
    /limits\.batch_bytes_in_flight \(266239\)/,
    /limits\.batch_body_bytes/,
  );
  assert.match(message, /could never be read/);
});

test("a zero or negative timeout or connection cap is refused, naming its key: zero would mean no limit to Node", () => {
  for (const key of ["request_timeout_ms", "headers_timeout_ms", "keep_alive_timeout_ms", "max_connections"]) {
    for (const value of [0, -1]) {
      assertConfigError(
        () =>
          parseChanged((raw) => {
            raw["listen"] = { [key]: value };
          }),
        new RegExp(`listen\\.${key}`),
        />= 1/,
      );
    }
  }
});

test("a timeout beyond one day is refused, naming its key: Node's timers overflow past 2^31 - 1 ms", () => {
  for (const key of ["request_timeout_ms", "headers_timeout_ms", "keep_alive_timeout_ms"]) {
    assertConfigError(
      () =>
        parseChanged((raw) => {
          raw["listen"] = { [key]: 2 ** 31 };
        }),
      new RegExp(`listen\\.${key}`),
    );
  }
});

test("a cron entry without a timezone runs in UTC and gets an empty request", () => {
  const config = parseChanged((raw) => {
    raw["cron"] = [{ name: "nightly", schedule: "0 3 * * *", operation_id: "buildReport", user_id: "system" }];
  });
  assert.equal(config.cron[0]?.timezone, "UTC");
  assert.deepEqual(config.cron[0]?.request, {});
});

test("an operation override holds only the fields it gives, so the rest fall back to the global settings", () => {
  const config = parseChanged((raw) => {
    raw["retry"] = { base_ms: 100, factor: 2 };
    raw["operations"] = { sendWelcomeEmail: { max_attempts: 8 }, buildReport: { retry: { max_ms: 500 } } };
  });
  // No retry block is invented for an override that gives none, nor default values for fields it leaves out:
  // either would silently replace the global `retry` for that operation.
  assert.deepEqual(config.operations, {
    sendWelcomeEmail: { max_attempts: 8 },
    buildReport: { retry: { max_ms: 500 } },
  });
  assert.deepEqual(config.retry, { base_ms: 100, factor: 2, max_ms: 3600000, retry_after_max_ms: 86400000 });
  assertConfigError(
    () =>
      parseChanged((raw) => {
        raw["operations"] = { buildReport: { retry: { base_ms: 0 } } };
      }),
    /operations\.buildReport\.retry\.base_ms/,
  );
  assertConfigError(
    () =>
      parseChanged((raw) => {
        raw["operations"] = { buildReport: { retry: { jitter: true } } };
      }),
    /operations\.buildReport\.retry/,
    /unknown key "jitter"/,
  );
});

test("retention.terminal_days: null keeps terminal jobs forever and is kept as null", () => {
  const config = parseChanged((raw) => {
    raw["retention"] = { terminal_days: null };
  });
  assert.equal(config.retention.terminal_days, null);
});

test("parseConfig does not change the raw object it is given", () => {
  const raw = minimalRaw();
  const before = structuredClone(raw);
  parseConfig({ raw, baseDir: "/base", env: { OPQUEUE_PORT: "1234" } });
  assert.deepEqual(raw, before);
});

// ---------------------------------------------------------------------------------------------------------
// Loading files

test("the full docs/configuration.md example YAML loads from a file and passes the start-up cross-check", (t) => {
  const dir = tempDir(t);
  fs.copyFileSync(TEST_OPENAPI, path.join(dir, "product.openapi.yaml"));
  const file = path.join(dir, "opqueue.yaml");
  fs.writeFileSync(file, CONFIG_EXAMPLE);

  const { config, path: loadedFrom } = loadConfigFile({ path: file, env: {} });

  assert.equal(loadedFrom, file);
  assert.deepEqual(config, {
    listen: { host: "127.0.0.1", port: 8080, ...LISTEN_BOUNDS },
    database_pool_size: 10,
    database: `sqlite:${path.join(dir, "data", "opqueue.db")}`,
    openapi: path.join(dir, "product.openapi.yaml"),
    target: { base_url: "http://127.0.0.1:3000", audience: "product" },
    auth: {
      audience: "opqueue",
      keys: [{ kid: "k1", alg: "HS256", secret: TEST_SECRET }],
      delivery_key: { kid: "q1", alg: "HS256", secret: TEST_DELIVERY_SECRET },
    },
    triggers: {
      createUser: ["sendWelcomeEmail"],
      sendWelcomeEmail: ["recordEmailSent"],
      "cron:nightly": ["buildReport"],
    },
    on_behalf_of: ["importUsers"],
    defaults: { max_attempts: 5, timeout_ms: 30000, validate_request: true, max_async_ms: 86_400_000 },
    operations: { sendWelcomeEmail: { max_attempts: 8, timeout_ms: 10000 } },
    limits: {
      spawn_cap: 1000,
      batch_body_bytes: 16777216,
      max_schedules: 10_000,
      batch_bytes_in_flight: 2 * (16777216 + 262144),
    },
    idempotency: { window_ms: 86400000 },
    chains: { check_ms: 500 },
    expiry: { check_ms: 1000 },
    retry: { base_ms: 5000, factor: 4, max_ms: 3600000, retry_after_max_ms: 86400000 },
    worker: { concurrency: 32, poll_ms: 1000, claim_gather_ms: 25 },
    lease: { heartbeat_ms: 5000, grace_ms: 30000, check_ms: 10000 },
    shutdown: { grace_ms: 30000 },
    retention: { terminal_days: 30 },
    cron: [
      {
        name: "nightly",
        schedule: "0 3 * * *",
        timezone: "UTC",
        operation_id: "buildReport",
        user_id: "system",
        request: { body: {} },
      },
    ],
    telemetry: {},
  });
  const registry = OperationRegistry.fromFile(config.openapi);
  assert.deepEqual(checkConfigAgainstRegistry({ config, registry }), { warnings: [] });
});

test("a JSON config file loads like the same YAML", (t) => {
  const dir = tempDir(t);
  const raw = rawTestConfig(dir);
  const jsonFile = path.join(dir, "opqueue.json");
  fs.writeFileSync(jsonFile, JSON.stringify(raw, null, "\t"));
  const fromJson = loadConfigFile({ path: jsonFile, env: {} }).config;
  assert.deepEqual(fromJson, parseConfig({ raw, baseDir: dir, env: {} }));
  assert.equal(fromJson.database, `sqlite:${path.join(dir, "opqueue.db")}`);
  assert.deepEqual(fromJson.triggers["cron:nightly"], ["buildReport"]);
});

test("relative openapi and sqlite: paths resolve against the config file's folder, not the working directory", (t) => {
  const dir = tempDir(t);
  const confDir = path.join(dir, "conf");
  fs.mkdirSync(confDir);
  const raw = { ...minimalRaw(), openapi: "./api/product.yaml", database: "sqlite:../db/opqueue.db" };
  fs.writeFileSync(path.join(confDir, "opqueue.yaml"), JSON.stringify(raw));
  // A relative --config path is itself taken from the working directory.
  const relativeToCwd = path.relative(process.cwd(), path.join(confDir, "opqueue.yaml"));

  const { config, path: loadedFrom } = loadConfigFile({ path: relativeToCwd, env: {} });

  assert.equal(loadedFrom, path.join(confDir, "opqueue.yaml"));
  assert.equal(config.openapi, path.join(confDir, "api", "product.yaml"));
  assert.equal(config.database, `sqlite:${path.join(dir, "db", "opqueue.db")}`);
});

test("absolute sqlite: paths, sqlite::memory: and postgres URLs are kept as written", () => {
  for (const url of [
    "sqlite:/var/lib/opqueue/opqueue.db",
    "sqlite::memory:",
    "postgres://user:pass@db.example:5432/opqueue",
    "postgresql://user@localhost/opqueue?sslmode=require",
  ]) {
    const config = parseChanged((raw) => {
      raw["database"] = url;
    });
    assert.equal(config.database, url);
  }
});

// ---------------------------------------------------------------------------------------------------------
// Environment overrides

test("OPQUEUE_DATABASE_URL replaces the file's database", () => {
  const config = parseChanged(
    (raw) => {
      raw["database"] = "sqlite:./from-file.db";
    },
    { OPQUEUE_DATABASE_URL: "postgres://u:p@db:5432/q" },
  );
  assert.equal(config.database, "postgres://u:p@db:5432/q");
});

test("an unsupported OPQUEUE_DATABASE_URL is refused like one in the file", () => {
  assertConfigError(
    () => parseChanged(() => {}, { OPQUEUE_DATABASE_URL: "mysql://db/q" }),
    /database/,
    /mysql:\/\/db\/q/,
  );
});

test("OPQUEUE_PORT replaces listen.port with a number and keeps listen.host", () => {
  const config = parseChanged(
    (raw) => {
      raw["listen"] = { host: "10.0.0.1", port: 8080 };
    },
    { OPQUEUE_PORT: "9090" },
  );
  assert.deepEqual(config.listen, { host: "10.0.0.1", port: 9090, ...LISTEN_BOUNDS });
  assert.equal(parseChanged(() => {}, { OPQUEUE_PORT: "0" }).listen.port, 0);
});

test("a non-numeric OPQUEUE_PORT is a ConfigError naming OPQUEUE_PORT", () => {
  for (const value of ["http", "80a", "-1", "8080.5"]) {
    assertConfigError(
      () => parseChanged(() => {}, { OPQUEUE_PORT: value }),
      /OPQUEUE_PORT/,
      new RegExp(`"${value.replace(".", "\\.")}"`),
    );
  }
});

test("an OPQUEUE_PORT above 65535 is refused, naming listen.port", () => {
  assertConfigError(() => parseChanged(() => {}, { OPQUEUE_PORT: "70000" }), /listen\.port/);
});

test("OPQUEUE_HOST replaces listen.host and keeps listen.port", () => {
  const config = parseChanged(
    (raw) => {
      raw["listen"] = { port: 7000 };
    },
    { OPQUEUE_HOST: "0.0.0.0" },
  );
  assert.deepEqual(config.listen, { host: "0.0.0.0", port: 7000, ...LISTEN_BOUNDS });
});

test("OPQUEUE_CONFIG names the config file when no path is given", (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, "from-env.yaml");
  fs.writeFileSync(file, JSON.stringify(rawTestConfig(dir)));
  const { config, path: loadedFrom } = loadConfigFile({ env: { OPQUEUE_CONFIG: file } });
  assert.equal(loadedFrom, file);
  assert.equal(config.database, `sqlite:${path.join(dir, "opqueue.db")}`);
});

test("an explicit config path wins over OPQUEUE_CONFIG", (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, "given.yaml");
  fs.writeFileSync(file, JSON.stringify(rawTestConfig(dir)));
  const { path: loadedFrom } = loadConfigFile({ path: file, env: { OPQUEUE_CONFIG: path.join(dir, "absent.yaml") } });
  assert.equal(loadedFrom, file);
});

test("no config path and no OPQUEUE_CONFIG is a ConfigError saying how to give one", () => {
  assertConfigError(() => loadConfigFile({ env: {} }), /--config/, /OPQUEUE_CONFIG/);
});

test("environment overrides apply to a loaded file too", (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, "opqueue.yaml");
  fs.writeFileSync(file, JSON.stringify(rawTestConfig(dir)));
  const { config } = loadConfigFile({
    path: file,
    env: { OPQUEUE_PORT: "4321", OPQUEUE_HOST: "::1", OPQUEUE_DATABASE_URL: "sqlite::memory:" },
  });
  assert.deepEqual(config.listen, { host: "::1", port: 4321, ...LISTEN_BOUNDS });
  assert.equal(config.database, "sqlite::memory:");
});

// ---------------------------------------------------------------------------------------------------------
// Secrets from the environment

test("secret_env takes the secret from the named environment variable", () => {
  const enqueueSecret = "e".repeat(40);
  const deliverySecret = "d".repeat(40);
  const config = parseChanged(
    (raw) => {
      authKeys(raw)[0] = { kid: "k1", alg: "HS256", secret_env: "MY_ENQUEUE_SECRET" };
      auth(raw)["delivery_key"] = { kid: "q1", alg: "HS256", secret_env: "MY_DELIVERY_SECRET" };
    },
    { MY_ENQUEUE_SECRET: enqueueSecret, MY_DELIVERY_SECRET: deliverySecret },
  );
  assert.deepEqual(config.auth.keys[0], { kid: "k1", alg: "HS256", secret: enqueueSecret });
  assert.deepEqual(config.auth.delivery_key, { kid: "q1", alg: "HS256", secret: deliverySecret });
});

test("secret_env naming an unset (or empty) variable is a ConfigError naming the variable and the key", () => {
  for (const env of [{}, { MY_ENQUEUE_SECRET: "" }]) {
    assertConfigError(
      () =>
        parseChanged((raw) => {
          authKeys(raw)[0] = { kid: "k1", alg: "HS256", secret_env: "MY_ENQUEUE_SECRET" };
        }, env),
      /MY_ENQUEUE_SECRET/,
      /auth\.keys\.0/,
    );
  }
  assertConfigError(
    () =>
      parseChanged((raw) => {
        auth(raw)["delivery_key"] = { kid: "q1", alg: "HS256", secret_env: "MY_DELIVERY_SECRET" };
      }),
    /MY_DELIVERY_SECRET/,
    /auth\.delivery_key/,
  );
});

test("a secret from the environment must be at least 32 bytes too", () => {
  assertConfigError(
    () =>
      parseChanged(
        (raw) => {
          authKeys(raw)[0] = { kid: "k1", alg: "HS256", secret_env: "SHORT" };
        },
        { SHORT: "too short" },
      ),
    /auth\.keys\.0\.secret/,
    /32 bytes/,
  );
});

test("a key with both secret and secret_env is refused", () => {
  assertConfigError(
    () =>
      parseChanged(
        (raw) => {
          authKeys(raw)[0] = { kid: "k1", alg: "HS256", secret: TEST_SECRET, secret_env: "ALSO" };
        },
        { ALSO: TEST_SECRET },
      ),
    /auth\.keys\.0/,
    /secret_env/,
  );
});

test("an HS256 key with neither secret nor secret_env is refused", () => {
  assertConfigError(
    () =>
      parseChanged((raw) => {
        authKeys(raw)[0] = { kid: "k1", alg: "HS256" };
      }),
    /auth\.keys\.0/,
    /secret/,
  );
});

// ---------------------------------------------------------------------------------------------------------
// Rejections: one ConfigError naming the key

test("an unknown top-level key is refused, naming it", () => {
  const message = assertConfigError(
    () =>
      parseChanged((raw) => {
        raw["listn"] = { port: 1 };
      }),
    /unknown key "listn"/,
  );
  assert.match(message, /^config: /);
});

test("an unknown nested key is refused, naming it and its section", () => {
  assertConfigError(
    () =>
      parseChanged((raw) => {
        raw["retry"] = { base: 100 };
      }),
    /retry/,
    /unknown key "base"/,
  );
  assertConfigError(
    () =>
      parseChanged((raw) => {
        raw["operations"] = { sendWelcomeEmail: { max_attempt: 3 } };
      }),
    /operations\.sendWelcomeEmail/,
    /unknown key "max_attempt"/,
  );
});

/** The test product's whole config (with triggers and a cron entry), changed by `change`, parsed. */
function parseProductChanged(change: (raw: Record<string, unknown>) => void) {
  const raw = rawTestConfig(os.tmpdir());
  change(raw);
  return parseConfig({ raw, baseDir: os.tmpdir(), env: {} });
}

test("an unknown key at any level names the known key it most likely misspells", () => {
  const cases: Array<[(raw: Record<string, unknown>) => void, RegExp]> = [
    [(raw) => void (raw["listn"] = { port: 1 }), /^config: unknown key "listn" \(did you mean "listen"\?\)$/],
    [(raw) => void (raw["listen"] = { prot: 1 }), /^config: listen: unknown key "prot" \(did you mean "port"\?\)$/],
    [
      (raw) => void (raw["retry"] = { base_sm: 100 }),
      /^config: retry: unknown key "base_sm" \(did you mean "base_ms"\?\)$/,
    ],
    [
      (raw) => void (raw["operations"] = { sendWelcomeEmail: { max_attempt: 3 } }),
      /^config: operations\.sendWelcomeEmail: unknown key "max_attempt" \(did you mean "max_attempts"\?\)$/,
    ],
    [
      (raw) => void ((raw["auth"] as { keys: Array<Record<string, unknown>> }).keys[0]!["secert"] = "x"),
      /^config: auth\.keys\.0: unknown key "secert" \(did you mean "secret"\?\)$/,
    ],
    [
      (raw) => void ((raw["cron"] as Array<Record<string, unknown>>)[0]!["shedule"] = "* * * * *"),
      /^config: cron\.0: unknown key "shedule" \(did you mean "schedule"\?\)$/,
    ],
    // A misspelt required key first shows as the missing one: the message names both.
    [
      (raw) => {
        raw["tagret"] = raw["target"];
        delete raw["target"];
      },
      /^config: unknown key "tagret" \(did you mean "target"\?\); target is required$/,
    ],
    // Nothing near: no suggestion.
    [(raw) => void (raw["completely_else"] = 1), /^config: unknown key "completely_else"$/],
  ];
  for (const [change, pattern] of cases) assertConfigError(() => parseProductChanged(change), pattern);
});

test("the cross-check with the OpenAPI document suggests the operation a misspelt id most likely names", () => {
  const registry = OperationRegistry.fromFile(TEST_OPENAPI);
  assertConfigError(
    () =>
      checkConfigAgainstRegistry({
        config: parseProductChanged((raw) => {
          raw["triggers"] = { createUser: ["sendWelcomEmail"] };
          raw["cron"] = [];
        }),
        registry,
      }),
    /^config: triggers\.createUser: target "sendWelcomEmail" is not an operation of the OpenAPI document \(did you mean "sendWelcomeEmail"\?\)$/,
  );
  const { warnings } = checkConfigAgainstRegistry({
    config: parseProductChanged((raw) => {
      raw["operations"] = { sendWelcomEmail: { max_attempts: 3 } };
      raw["on_behalf_of"] = ["importUser"];
      (raw["triggers"] as Record<string, string[]>)["creatUser"] = ["buildReport"];
    }),
    registry,
  });
  assert.ok(
    warnings.some((w) => /operations\.sendWelcomEmail: .*\(did you mean "sendWelcomeEmail"\?\)/.test(w)),
    warnings.join("\n"),
  );
  assert.ok(
    warnings.some((w) => /on_behalf_of\.0: .*\(did you mean "importUsers"\?\)/.test(w)),
    warnings.join("\n"),
  );
  assert.ok(
    warnings.some((w) => /triggers\.creatUser: .*\(did you mean "createUser"\?\)/.test(w)),
    warnings.join("\n"),
  );
});

test("a cron entry without its trigger key points at a trigger key that looks misspelt", () => {
  const registry = OperationRegistry.fromFile(TEST_OPENAPI);
  assertConfigError(
    () =>
      checkConfigAgainstRegistry({
        config: parseProductChanged((raw) => {
          const triggers = raw["triggers"] as Record<string, string[]>;
          triggers["cron:nigthly"] = triggers["cron:nightly"] ?? [];
          delete triggers["cron:nightly"];
        }),
        registry,
      }),
    /^config: cron\.0\.name: cron entry "nightly" has no "cron:nightly" key in triggers .*; triggers has "cron:nigthly": is it misspelt\?$/,
  );
});

test("a value of the wrong type is refused, naming its key", () => {
  const cases: Array<[(raw: Record<string, unknown>) => void, RegExp]> = [
    [(raw) => void (raw["listen"] = { port: "8080" }), /listen\.port/],
    [(raw) => void (raw["listen"] = { request_timeout_ms: "30s" }), /listen\.request_timeout_ms/],
    [(raw) => void (raw["listen"] = { max_connections: 100.5 }), /listen\.max_connections/],
    [(raw) => void (raw["defaults"] = { max_attempts: 2.5 }), /defaults\.max_attempts/],
    [(raw) => void (raw["worker"] = { concurrency: 0 }), /worker\.concurrency/],
    [(raw) => void (raw["triggers"] = { createUser: "sendWelcomeEmail" }), /triggers\.createUser/],
    [(raw) => void (raw["on_behalf_of"] = "importUsers"), /on_behalf_of/],
    [(raw) => void (raw["target"] = { base_url: "not a url", audience: "product" }), /target\.base_url/],
    [(raw) => void (raw["listen"] = "127.0.0.1:8080"), /listen/],
  ];
  for (const [change, key] of cases) assertConfigError(() => parseChanged(change), key);
});

test("a missing required key is refused, naming it", () => {
  assertConfigError(
    () =>
      parseChanged((raw) => {
        delete raw["openapi"];
      }),
    /openapi: is required/,
  );
  assertConfigError(
    () =>
      parseChanged((raw) => {
        raw["target"] = { audience: "product" };
      }),
    /target\.base_url: is required/,
  );
  assertConfigError(
    () =>
      parseChanged((raw) => {
        delete auth(raw)["keys"];
      }),
    /auth\.keys: is required/,
  );
});

test("an empty auth.keys list is refused, naming auth.keys", () => {
  assertConfigError(
    () =>
      parseChanged((raw) => {
        auth(raw)["keys"] = [];
      }),
    /auth\.keys/,
  );
});

test("a secret under 32 bytes is refused, naming the key; the limit counts UTF-8 bytes", () => {
  assertConfigError(
    () =>
      parseChanged((raw) => {
        authKeys(raw)[0] = { kid: "k1", alg: "HS256", secret: "x".repeat(31) };
      }),
    /auth\.keys\.0\.secret/,
    /at least 32 bytes/,
  );
  assertConfigError(
    () =>
      parseChanged((raw) => {
        auth(raw)["delivery_key"] = { kid: "q1", alg: "HS256", secret: "short" };
      }),
    /auth\.delivery_key\.secret/,
  );
  // 16 characters of 2 bytes each: 32 bytes, so accepted.
  const config = parseChanged((raw) => {
    authKeys(raw)[0] = { kid: "k1", alg: "HS256", secret: "é".repeat(16) };
  });
  assert.equal(config.auth.keys[0]?.kid, "k1");
  assert.doesNotThrow(() =>
    parseChanged((raw) => {
      authKeys(raw)[0] = { kid: "k1", alg: "HS256", secret: "x".repeat(32) };
    }),
  );
});

test("equal target and auth audiences are refused, naming both keys", () => {
  assertConfigError(
    () =>
      parseChanged((raw) => {
        raw["target"] = { base_url: "http://127.0.0.1:3000", audience: "opqueue" };
      }),
    /target\.audience/,
    /auth\.audience/,
  );
});

test("two auth.keys with the same kid are refused, naming the second", () => {
  assertConfigError(
    () =>
      parseChanged((raw) => {
        authKeys(raw).push({ kid: "k1", alg: "HS256", secret: "y".repeat(32) });
      }),
    /auth\.keys\.1\.kid/,
    /"k1"/,
  );
});

test("auth.delivery_key may be a list of keys, kept in its order (the first signs), secrets read from the environment", () => {
  const config = parseChanged(
    (raw) => {
      auth(raw)["delivery_key"] = [
        { kid: "q2", alg: "HS256", secret_env: "NEW_DELIVERY_SECRET" },
        { kid: "q1", alg: "HS256", secret: TEST_DELIVERY_SECRET },
        { kid: "q0", alg: "EdDSA", private_key: "(a PEM private key)" },
      ];
    },
    { NEW_DELIVERY_SECRET: "n".repeat(32) },
  );
  assert.deepEqual(config.auth.delivery_key, [
    { kid: "q2", alg: "HS256", secret: "n".repeat(32) },
    { kid: "q1", alg: "HS256", secret: TEST_DELIVERY_SECRET },
    { kid: "q0", alg: "EdDSA", private_key: "(a PEM private key)" },
  ]);
});

test("a list of delivery keys is refused when empty, or for a problem of one key, naming that key by its place", () => {
  const withDeliveryKeys = (keys: unknown) =>
    parseChanged((raw) => {
      auth(raw)["delivery_key"] = keys;
    });
  const second = (key: Record<string, unknown>) => [{ kid: "q2", alg: "HS256", secret: "n".repeat(32) }, key];
  assertConfigError(() => withDeliveryKeys([]), /^config: auth\.delivery_key: /, /fewer than 1/);
  assertConfigError(
    () => withDeliveryKeys(second({ kid: "q1", alg: "HS256", secret: "short" })),
    /^config: auth\.delivery_key\.1\.secret: must be at least 32 bytes/,
  );
  assertConfigError(
    () => withDeliveryKeys(second({ kid: "q1", alg: "EdDSA" })),
    /^config: auth\.delivery_key\.1: private_key \(or private_key_env\) is required for alg EdDSA/,
  );
  assertConfigError(
    () => withDeliveryKeys(second({ kid: "q1", alg: "HS256", secret: TEST_DELIVERY_SECRET, public_key: "x" })),
    /^config: auth\.delivery_key\.1: unknown key "public_key"/,
  );
  assertConfigError(
    () => withDeliveryKeys(second({ kid: "q1", alg: "RS256", secret: TEST_DELIVERY_SECRET })),
    /^config: auth\.delivery_key\.1\.alg: /,
  );
  assertConfigError(
    () => withDeliveryKeys(second({ kid: "q1", alg: "HS256", secret_env: "UNSET_SECRET" })),
    /^config: auth\.delivery_key\.1: environment variable UNSET_SECRET is not set/,
  );
});

test("every kid is distinct across auth.keys and auth.delivery_key, in either form of the delivery key", () => {
  assertConfigError(
    () =>
      parseChanged((raw) => {
        auth(raw)["delivery_key"] = [
          { kid: "q1", alg: "HS256", secret: TEST_DELIVERY_SECRET },
          { kid: "q1", alg: "HS256", secret: "n".repeat(32) },
        ];
      }),
    /^config: auth\.delivery_key\.1\.kid: "q1" is used by two keys/,
  );
  assertConfigError(
    () =>
      parseChanged((raw) => {
        auth(raw)["delivery_key"] = [{ kid: "k1", alg: "HS256", secret: TEST_DELIVERY_SECRET }];
      }),
    /^config: auth\.delivery_key\.0\.kid: "k1" is used by two keys/,
  );
  assertConfigError(
    () =>
      parseChanged((raw) => {
        auth(raw)["delivery_key"] = { kid: "k1", alg: "HS256", secret: TEST_DELIVERY_SECRET };
      }),
    /^config: auth\.delivery_key\.kid: "k1" is used by two keys/,
  );
});

test("an unsupported database URL is refused, naming database", () => {
  for (const url of ["mysql://db/opqueue", "/var/lib/opqueue.db", "sqlite:"]) {
    assertConfigError(
      () =>
        parseChanged((raw) => {
          raw["database"] = url;
        }),
      /database/,
    );
  }
});

test("a file that is not YAML is refused, naming the file", (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, "broken.yaml");
  fs.writeFileSync(file, "listen: { host: 127.0.0.1\nopenapi: [unclosed\n");
  assertConfigError(() => loadConfigFile({ path: file, env: {} }), new RegExp(`${file}.*not valid YAML`));
});

test("a config file that does not exist is refused, naming the file", (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, "absent.yaml");
  assertConfigError(() => loadConfigFile({ path: file, env: {} }), /cannot read/, new RegExp(file));
});

test("a YAML file holding a list (or nothing) instead of a mapping is refused", (t) => {
  const dir = tempDir(t);
  const list = path.join(dir, "list.yaml");
  fs.writeFileSync(list, "- openapi: ./product.yaml\n- listen: {}\n");
  assertConfigError(() => loadConfigFile({ path: list, env: {} }), /mapping/);
  const empty = path.join(dir, "empty.yaml");
  fs.writeFileSync(empty, "# nothing here\n");
  assertConfigError(() => loadConfigFile({ path: empty, env: {} }), /mapping/);
});

test("every rejection is one line starting with config:", () => {
  const message = assertConfigError(() =>
    parseChanged((raw) => {
      raw["listen"] = { port: -1 };
    }),
  );
  assert.match(message, /^config: listen\.port: /);
  assert.doesNotMatch(message, /\n/);
});

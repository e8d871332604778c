/**
 * Builds a fresh service per test: its own temporary SQLite file, its own clock, nothing shared.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { InjectOptions, LightMyRequestResponse } from "fastify";
import type { Logger } from "pino";
import { mintToken } from "../../src/auth/tokens.js";
import { ManualClock } from "../../src/clock.js";
import { parseConfig, type Config } from "../../src/config.js";
import { createService, type Service } from "../../src/service.js";
import { dropSchema, freshSchemaName, POSTGRES_URL } from "./postgres.js";

/** The HS256 secret of test configs. */
export const TEST_SECRET = "test-secret-that-is-at-least-32-bytes-long";
/** The delivery secret of test configs. */
export const TEST_DELIVERY_SECRET = "delivery-secret-that-is-32-bytes-or-more";
/** The payload key of OPQUEUE_TEST_ENCRYPTION=1 runs: 32 bytes, base64. */
const TEST_PAYLOAD_KEY = Buffer.alloc(32, 7).toString("base64");
/** The test product's OpenAPI document. */
export const TEST_OPENAPI = fileURLToPath(new URL("../fixtures/product.openapi.yaml", import.meta.url));

/**
 * The engine tests of the API and the worker run on: `OPQUEUE_TEST_ENGINE=postgres` (set by `npm test` for its
 * PostgreSQL pass) runs them on the server of OPQUEUE_TEST_DATABASE_URL, one fresh schema per service.
 */
export const TEST_ENGINE: "sqlite" | "postgres" =
  process.env["OPQUEUE_TEST_ENGINE"] === "postgres" ? "postgres" : "sqlite";

/** A raw (unparsed) config for the test product, writing to `dir`. */
export function rawTestConfig(dir: string): Record<string, unknown> {
  return {
    database: `sqlite:${join(dir, "opqueue.db")}`,
    openapi: TEST_OPENAPI,
    target: { base_url: "http://127.0.0.1:9", audience: "product" },
    auth: {
      audience: "opqueue",
      keys: [{ kid: "k1", alg: "HS256", secret: TEST_SECRET }],
      delivery_key: { kid: "q1", alg: "HS256", secret: TEST_DELIVERY_SECRET },
    },
    triggers: {
      createUser: ["sendWelcomeEmail", "buildReport"],
      sendWelcomeEmail: ["recordEmailSent", "sendWelcomeEmail"],
      recordEmailSent: ["buildReport"],
      importUsers: ["sendWelcomeEmail", "buildReport"],
      "cron:nightly": ["buildReport"],
    },
    on_behalf_of: ["importUsers"],
    defaults: { max_attempts: 5, timeout_ms: 30000 },
    operations: { sendWelcomeEmail: { max_attempts: 8 } },
    limits: { spawn_cap: 1000 },
    cron: [{ name: "nightly", schedule: "0 3 * * *", operation_id: "buildReport", user_id: "system" }],
  };
}

/** A service built for one test, with helpers to mint tokens and call it. */
export interface TestService {
  service: Service;
  config: Config;
  clock: ManualClock;
  dir: string;
  /** Mints an enqueue assertion (defaults: sub u1, op createUser, rid req-1). */
  assertion(claims?: { sub?: string; op?: string; rid?: string; job?: string; ttlSeconds?: number }): Promise<string>;
  /** Mints an admin token (site admin unless told otherwise). */
  adminToken(options?: { siteAdmin?: boolean; sub?: string }): Promise<string>;
  /** `app.inject` with a bearer token. */
  inject(options: InjectOptions & { token?: string }): Promise<LightMyRequestResponse>;
  close(): Promise<void>;
}

/** Starts a test service; `configure` may change the raw config before it is parsed. */
export async function startTestService(
  options: {
    configure?: (raw: Record<string, unknown>) => void;
    clock?: ManualClock;
    /** Backoff jitter source (default Math.random). */
    random?: () => number;
    /** What times deliveries (default the machine's monotonic clock). */
    stopwatch?: () => number;
    /** The service's logger (default silent), for tests that read what it logs. */
    logger?: Logger;
    /** The environment the config's `*_env` keys are read from (default none). */
    env?: Record<string, string>;
  } = {},
): Promise<TestService> {
  const dir = mkdtempSync(join(tmpdir(), "opqueue-test-"));
  const raw = rawTestConfig(dir);
  let schema: string | undefined;
  if (TEST_ENGINE === "postgres") {
    if (!POSTGRES_URL) throw new Error("OPQUEUE_TEST_ENGINE=postgres needs OPQUEUE_TEST_DATABASE_URL");
    schema = freshSchemaName();
    const url = new URL(POSTGRES_URL);
    url.searchParams.set("schema", schema);
    raw["database"] = url.toString();
    raw["database_pool_size"] = 4;
  }
  options.configure?.(raw);
  // OPQUEUE_TEST_ENCRYPTION=1 runs every test service with its payloads encrypted at rest, unless the test sets keys.
  const env = { ...options.env };
  if (process.env["OPQUEUE_TEST_ENCRYPTION"] === "1" && raw["encryption"] === undefined) {
    raw["encryption"] = { keys: [{ id: "test", key_env: "OPQUEUE_TEST_PAYLOAD_KEY" }] };
    env["OPQUEUE_TEST_PAYLOAD_KEY"] = TEST_PAYLOAD_KEY;
  }
  const config = parseConfig({ raw, baseDir: dir, env });
  const clock = options.clock ?? new ManualClock(Date.UTC(2026, 10, 21, 12, 0, 0));
  const service = await createService({
    config,
    clock,
    ...(options.random ? { random: options.random } : {}),
    ...(options.stopwatch ? { stopwatch: options.stopwatch } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
    env,
  });
  return {
    service,
    config,
    clock,
    dir,
    assertion: (claims = {}) => {
      const op = claims.op ?? "createUser";
      return mintToken({
        auth: config.auth,
        clock,
        sub: claims.sub ?? "u1",
        op,
        ...(claims.job !== undefined ? { job: claims.job } : { rid: claims.rid ?? "req-1" }),
        ...(claims.rid !== undefined && claims.job !== undefined ? { rid: claims.rid } : {}),
        ...(claims.ttlSeconds !== undefined ? { ttlSeconds: claims.ttlSeconds } : {}),
      });
    },
    adminToken: (tokenOptions = {}) =>
      mintToken({
        auth: config.auth,
        clock,
        sub: tokenOptions.sub ?? "admin",
        siteAdmin: tokenOptions.siteAdmin ?? true,
      }),
    inject: ({ token, ...injectOptions }) =>
      service.app.inject({
        ...injectOptions,
        headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(injectOptions.headers ?? {}) },
      }),
    async close() {
      await service.close();
      rmSync(dir, { recursive: true, force: true });
      if (schema) await dropSchema(schema);
    },
  };
}

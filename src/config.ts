/**
 * The configuration file: one TypeBox schema, the type derived from it, the defaults in the schema itself.
 *
 * Loading is: read YAML or JSON → apply environment overrides → validate (filling defaults) → resolve
 * relative paths against the config file's folder → cross-check against the OpenAPI document (done by the
 * caller, see `src/operations/registry.ts`). Every problem becomes one `ConfigError` naming the key.
 */
import { readFileSync } from "node:fs";
import { dirname, isAbsolute, resolve } from "node:path";
import type { TSchema } from "@sinclair/typebox";
import { Ajv, type ErrorObject } from "ajv";
import { parse as parseYaml } from "yaml";
import { ConfigError } from "./config/config-error.js";
import {
  BATCH_ITEMS_BYTES,
  ConfigSchema,
  type Config,
  type DeliveryKeyConfig,
  type DeliveryKeysConfig,
} from "./config/schema.js";
import { parseDatabaseUrl, redactDatabaseUrl } from "./database-url.js";
import { didYouMean } from "./did-you-mean.js";

export { ConfigError } from "./config/config-error.js";
export { cronCaller, SCHEDULE_TRIGGER_KEY, type CronConfig } from "./config/cron.js";
export {
  BATCH_ITEMS_BYTES,
  ConfigSchema,
  type Config,
  type DeliveryKeyConfig,
  type DeliveryKeysConfig,
  type OtlpConfig,
  type VerifyKeyConfig,
} from "./config/schema.js";

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

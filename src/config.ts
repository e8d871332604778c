/**
 * The configuration: the module every caller imports. Loading is: read YAML or JSON → apply environment overrides →
 * validate (filling defaults) → resolve relative paths against the config file's folder → read and check the keys'
 * material → cross-check against the OpenAPI document (done by the caller: `checkConfigAgainstRegistry` in
 * `src/schedules/config-entries.ts`). Every problem becomes one `ConfigError` naming the key.
 *
 * The steps live in src/config/: `schema.ts` (the one TypeBox schema, its defaults and the types derived from it),
 * `cron.ts` (the cron entries), `env.ts` (the environment variables), `validate.ts` (the schema's check and its
 * messages), `resolve.ts` (paths, the database URL, settings that depend on another key), `auth-keys.ts` (key
 * material) and `config-error.ts`. This module runs them in order and re-exports what callers use.
 */
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { parse as parseYaml } from "yaml";
import { resolveAuthKeys, type ConfigSecrets } from "./config/auth-keys.js";
import { ConfigError } from "./config/config-error.js";
import { applyEnvOverrides, type ConfigEnv } from "./config/env.js";
import {
  checkRedactPointers,
  resolveBatchBudget,
  resolveDatabaseUrl,
  resolveListenTimeouts,
  resolvePath,
} from "./config/resolve.js";
import type { Config } from "./config/schema.js";
import { validateAgainstSchema } from "./config/validate.js";
import { PayloadCipher } from "./store/payload-cipher.js";

export { deliveryKeyList, type ConfigSecrets } from "./config/auth-keys.js";
export { ConfigError } from "./config/config-error.js";
export type { CronConfig } from "./config/cron.js";
export type { ConfigEnv } from "./config/env.js";
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
  const config = validateAgainstSchema(raw);
  config.openapi = resolvePath(options.baseDir, config.openapi);
  config.database = resolveDatabaseUrl(options.baseDir, config.database);
  resolveListenTimeouts(config.listen, headersTimeoutGiven);
  resolveBatchBudget(config.limits, batchBudgetGiven);
  resolveAuthKeys({ config, secrets: options.secrets ?? "all", env });
  checkRedactPointers(config.operations);
  // The encryption keys' variables are read again by the node that uses them; here they are only checked.
  if ((options.secrets ?? "all") === "all") PayloadCipher.fromConfig(config, env);
  if (config.auth.audience === config.target.audience) {
    throw new ConfigError(
      `config: target.audience and auth.audience must differ (both are "${config.auth.audience}"), ` +
        "or a delivery token could be replayed as an enqueue assertion",
    );
  }
  return config;
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

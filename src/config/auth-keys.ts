/**
 * The key material of `auth`: which keys a command reads, their `*_env` references replaced by the variables' values,
 * and the checks every key passes (one kid per key across both lists, material present, HS256 secrets long enough).
 */
import { ConfigError } from "./config-error.js";
import { fromEnv, type ConfigEnv } from "./env.js";
import type { Config, DeliveryKeyConfig, DeliveryKeysConfig } from "./schema.js";

/**
 * Which key material a command reads, so that it needs only the secrets it uses in its environment: `all` (serve),
 * `minting` (the first HS256 key of `auth.keys`, which `opqueue token` and `opqueue backup` sign with), `none`
 * (`migrate`, `restore`). Keys left unread keep their `*_env` reference, unresolved and unchecked.
 */
export type ConfigSecrets = "all" | "minting" | "none";

/**
 * The keys of `auth.delivery_key` in order (the first signs), each with the name messages give it: `auth.delivery_key`
 * for the single-key form, `auth.delivery_key.N` for the list form.
 */
export function deliveryKeyList(deliveryKey: DeliveryKeysConfig): Array<{ where: string; key: DeliveryKeyConfig }> {
  if (!Array.isArray(deliveryKey)) return [{ where: "auth.delivery_key", key: deliveryKey }];
  return deliveryKey.map((key, i) => ({ where: `auth.delivery_key.${i}`, key }));
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
 * Reads the key material `secrets` asks for from `env` into `config.auth`, in place, and checks every key; throws
 * `ConfigError` on the first problem.
 */
export function resolveAuthKeys(options: { config: Config; secrets: ConfigSecrets; env: ConfigEnv }): void {
  const keys = keysRead(options.config, options.secrets);
  checkKids(authKeys(options.config));
  resolveSecrets(keys, options.env);
  checkSecrets(keys);
}

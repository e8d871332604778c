/**
 * The environment's part in the configuration: the variables that override the file (database URL, host, port), and
 * the variables a key's `*_env` field names.
 */
import { resolve } from "node:path";
import { parseDatabaseUrl } from "../database-url.js";
import { ConfigError } from "./config-error.js";

/** Environment variables that override the file. */
export interface ConfigEnv {
  OPQUEUE_DATABASE_URL?: string | undefined;
  OPQUEUE_PORT?: string | undefined;
  OPQUEUE_HOST?: string | undefined;
  [name: string]: string | undefined;
}

/** Writes the overrides `env` gives into the raw file, before validation. */
export function applyEnvOverrides(raw: Record<string, unknown>, env: ConfigEnv): void {
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

/** The value of variable `name`, which `where` names; throws `ConfigError` when it is unset or empty. */
export function fromEnv(env: ConfigEnv, where: string, name: string): string {
  const value = env[name];
  if (value === undefined || value === "") {
    throw new ConfigError(`config: ${where}: environment variable ${name} is not set`);
  }
  return value;
}

/**
 * What the schema cannot settle alone, done once it has validated: relative paths made absolute against the config
 * file's folder, the database URL checked, and the defaults and bounds that depend on another key.
 */
import { isAbsolute, resolve } from "node:path";
import { parseDatabaseUrl, redactDatabaseUrl } from "../database-url.js";
import { ConfigError } from "./config-error.js";
import { parseRedactPointer } from "../job/redaction.js";
import { BATCH_ITEMS_BYTES, type Config } from "./schema.js";

/**
 * The headers are part of the request, and Node refuses a headers timeout longer than the request timeout. Only a
 * value the file gives is refused: the default yields to a shorter `request_timeout_ms`, as Node's own does.
 */
export function resolveListenTimeouts(listen: Config["listen"], headersTimeoutGiven: boolean): void {
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
export function resolveBatchBudget(limits: Config["limits"], given: boolean): void {
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

/** `path`, made absolute against `baseDir` when it is relative. */
export function resolvePath(baseDir: string, path: string): string {
  return isAbsolute(path) ? path : resolve(baseDir, path);
}

/** `sqlite:` URLs with a relative path are taken relative to the config file's folder. */
export function resolveDatabaseUrl(baseDir: string, url: string): string {
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

/** Every `operations.<id>.redact` entry is a pointer into a request (docs/api.md, "Redaction"). */
export function checkRedactPointers(operations: Config["operations"]): void {
  for (const [operationId, override] of Object.entries(operations)) {
    (override.redact ?? []).forEach((pointer, index) => {
      const parsed = parseRedactPointer(pointer);
      if (typeof parsed === "string") {
        throw new ConfigError(
          `config: operations.${operationId}.redact.${index}: ${JSON.stringify(pointer)}: ${parsed}`,
        );
      }
    });
  }
}

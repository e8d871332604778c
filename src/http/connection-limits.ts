/**
 * How many connections the HTTP listener may hold open, and how often Node looks for connections past their
 * timeouts (docs/api.md, "Connection bounds").
 *
 * Every accepted connection costs one file descriptor. When the process runs out of them, `accept` fails, and so
 * do the database pool's reconnects and the deliverer's outgoing sockets: an attacker holding idle sockets then
 * locks out enqueues and deliveries alike. So the listener's cap is `listen.max_connections`, lowered when the
 * process's descriptor limit could not hold that many beside what the rest of the service needs.
 */
import { readFileSync } from "node:fs";
import type { Config } from "../config.js";
import type { PerOperationSettings } from "../operations/settings.js";

/**
 * Descriptors kept for everything not counted on its own: the SQLite file with its WAL, shared-memory and lock
 * files, log and standard streams, the OpenAPI document and dashboard files being read, DNS lookups, the event
 * loop's own handles. A Node process uses about 20 of them at rest; 64 leaves room for bursts.
 */
export const FD_MARGIN = 64;

/** The listener's connection cap and how it was reached, for the start-up log. */
export interface ConnectionLimit {
  /** The value for `server.maxConnections`. */
  maxConnections: number;
  /** `listen.max_connections` as configured. */
  configured: number;
  /** The process's open-files limit; null when it could not be read (then the configured value stands). */
  fdLimit: number | null;
  /** Descriptors kept back from the listener, by what they are for. */
  reserved: { database: number; deliveries: number; margin: number };
  /** Whether the descriptor limit lowered the configured value. */
  lowered: boolean;
}

/**
 * The cap: `configured`, or the descriptor limit less the reserve when that is lower (at least 1, so that the
 * API still answers something while the operator raises `ulimit -n`).
 */
export function connectionLimit(options: {
  configured: number;
  fdLimit: number | null;
  /** PostgreSQL pool connections; the LISTEN connection is added on top. */
  databasePoolSize: number;
  /** Connections the deliverer keeps per origin. */
  deliveryConnectionsPerOrigin: number;
  /** Distinct origins deliveries go to (`target.base_url` and every `operations.*.base_url`). */
  deliveryOrigins: number;
}): ConnectionLimit {
  const reserved = {
    // Counted whatever the engine: a SQLite node needs fewer, and a wrong guess here would cost far more than
    // the few descriptors it keeps back.
    database: options.databasePoolSize + 1,
    deliveries: options.deliveryOrigins * options.deliveryConnectionsPerOrigin,
    margin: FD_MARGIN,
  };
  if (options.fdLimit === null) {
    return {
      maxConnections: options.configured,
      configured: options.configured,
      fdLimit: null,
      reserved,
      lowered: false,
    };
  }
  const room = Math.max(1, options.fdLimit - reserved.database - reserved.deliveries - reserved.margin);
  const maxConnections = Math.min(options.configured, room);
  return {
    maxConnections,
    configured: options.configured,
    fdLimit: options.fdLimit,
    reserved,
    lowered: maxConnections < options.configured,
  };
}

/**
 * The soft "Max open files" limit of a Linux `/proc/<pid>/limits` text; null when it is absent or `unlimited`.
 * The soft limit is the one the kernel enforces (Node raises it to the hard limit when it starts).
 */
export function parseOpenFilesLimit(limitsText: string): number | null {
  const match = /^Max open files\s+(\S+)/m.exec(limitsText);
  if (!match?.[1] || !/^\d+$/.test(match[1])) return null;
  return Number(match[1]);
}

/** This process's open-files limit, from /proc/self/limits; null where that cannot be read (not Linux). */
export function readOpenFilesLimit(path = "/proc/self/limits"): number | null {
  try {
    return parseOpenFilesLimit(readFileSync(path, "utf8"));
  } catch {
    return null;
  }
}

/** The connection cap for `config`, given the process's open-files limit (read from /proc by default). */
export function resolveConnectionLimit(
  config: Config,
  settings: PerOperationSettings,
  fdLimit: number | null = readOpenFilesLimit(),
): ConnectionLimit {
  return connectionLimit({
    configured: config.listen.max_connections,
    fdLimit,
    databasePoolSize: config.database_pool_size,
    deliveryConnectionsPerOrigin: settings.deliveryConnectionsPerOrigin,
    deliveryOrigins: settings.deliveryOrigins().length,
  });
}

/**
 * How often Node sweeps its connections for expired header and request timeouts. A timeout is noticed only at a
 * sweep, so it fires up to one interval late; a tenth of the shorter timeout keeps that lateness within 10 %, and
 * Node's default of 30 s would let a 10 s headers timeout run to 40 s. Never below 10 ms, so that tiny test
 * timeouts do not turn the sweep into a busy loop; never above 1 s, the lateness an operator would notice.
 */
export function connectionsCheckingIntervalMs(listen: {
  headers_timeout_ms: number;
  request_timeout_ms: number;
}): number {
  const shorter = Math.min(listen.headers_timeout_ms, listen.request_timeout_ms);
  return Math.min(1000, Math.max(10, Math.floor(shorter / 10)));
}

/**
 * How the PostgreSQL engine reads errors: which mean "the database cannot serve now" (503 `unavailable`), which a
 * constraint raised, and which values the server would refuse before any query.
 */
import { StoreUnavailableError } from "../store.js";

/**
 * SQLSTATEs that mean "the database cannot serve now, try again", answered 503 `unavailable` (docs/delivery.md, "When
 * the database is unavailable"), never 500:
 * - class 08, connection exceptions (08000, 08003, 08006, 08001, 08004 the server rejected the connection, ...);
 * - class 53, insufficient resources (53300 too many connections, 53100 disk full, 53200 out of memory, ...);
 * - 57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now (starting up, shutting down, in recovery),
 *   57P05 idle session timeout, and 57014 a query cancelled (by an operator, or statement_timeout);
 * - 25006 a read-only transaction (a standby just promoted, or the server set read-only for maintenance);
 * - 40001 and 40P01, a serialisation failure or deadlock: the transaction was rolled back and succeeds when retried;
 * - 58030 an I/O error of the server.
 * 55000 (object not in prerequisite state) means this only with "not currently accepting connections"
 * (`ALTER DATABASE ... ALLOW_CONNECTIONS false`); other 55000s are bugs.
 */
const UNAVAILABLE_SQLSTATE = /^(08...|53...|57P0[1235]|57014|25006|40001|40P01|58030)$/;

/**
 * Whether the server undid the statement's transaction so that another could go on: 40P01 (a deadlock, this
 * transaction chosen to end it) or 40001 (a serialisation failure). Sent again, it can succeed.
 */
export function undoneForAnother(error: unknown): boolean {
  const code = (error as { code?: string }).code;
  return code === "40P01" || code === "40001";
}

/** Errors of the network or the driver that mean the same. */
const UNAVAILABLE_ERRNO = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "ENOTFOUND",
  "EHOSTUNREACH",
  "EAI_AGAIN",
]);

/** Whether an error means "the database cannot serve now": connection trouble, shutdown, overload. */
export function isUnavailable(error: unknown): boolean {
  const err = error as { code?: string; message?: string };
  const code = err.code ?? "";
  if (UNAVAILABLE_SQLSTATE.test(code) || UNAVAILABLE_ERRNO.has(code)) return true;
  if (code === "55000" && /not currently accepting connections/i.test(err.message ?? "")) return true;
  return /Connection terminated|connection timeout|Query read timeout|timeout exceeded when trying to connect|Client has encountered a connection error|Cannot use a pool after calling end/i.test(
    err.message ?? "",
  );
}

/** The error a caller sees: `StoreUnavailableError` for every "cannot serve now", the error itself otherwise. */
export function mapError(error: unknown): unknown {
  return isUnavailable(error) ? new StoreUnavailableError(`PostgreSQL: ${(error as Error).message}`) : error;
}

/** Whether `error` is a unique violation of `constraint`. */
export function isUniqueViolation(error: unknown, constraint: string): boolean {
  const err = error as { code?: string; constraint?: string };
  return err.code === "23505" && err.constraint === constraint;
}

/**
 * PostgreSQL text cannot hold U+0000, so no stored id or key contains it: a lookup by such a string finds
 * nothing, and is answered so without asking the server (which would refuse the parameter).
 */
export function unstorable(...values: Array<string | undefined>): boolean {
  return values.some((value) => value !== undefined && value.includes("\u0000"));
}

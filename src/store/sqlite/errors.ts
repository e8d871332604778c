/** How the SQLite engine reads errors: which mean "the database cannot serve now" (503 `unavailable`). */
import Database from "better-sqlite3";
import { StoreLockedError, StoreUnavailableError } from "../store.js";

/** SQLite result codes that mean "the database cannot serve now", not "this request is wrong". */
const UNAVAILABLE_CODES = /^SQLITE_(BUSY|LOCKED|FULL|IOERR|READONLY|CANTOPEN|NOMEM|PROTOCOL)/;

/** The error a caller sees: `StoreUnavailableError` for every "cannot serve now", the error itself otherwise. */
export function mapError(error: unknown): unknown {
  if (error instanceof Database.SqliteError && UNAVAILABLE_CODES.test(error.code)) {
    return new StoreUnavailableError(`SQLite: ${error.message}`);
  }
  return error;
}

/**
 * The refusal of a database file that another process holds with the engine's exclusive lock (connection.ts): a
 * second `serve`, or a `restore` while a service runs.
 */
export function lockedError(path: string): StoreLockedError {
  return new StoreLockedError(
    `the SQLite database ${path} is in use by another opqueue process; SQLite serves one node ` +
      "(stop the other process, or use PostgreSQL to run several nodes)",
  );
}

/** How the SQLite engine reads errors: which mean "the database cannot serve now" (503 `unavailable`). */
import Database from "better-sqlite3";
import { StoreUnavailableError } from "../store.js";

/** SQLite result codes that mean "the database cannot serve now", not "this request is wrong". */
const UNAVAILABLE_CODES = /^SQLITE_(BUSY|LOCKED|FULL|IOERR|READONLY|CANTOPEN|NOMEM|PROTOCOL)/;

/** The error a caller sees: `StoreUnavailableError` for every "cannot serve now", the error itself otherwise. */
export function mapError(error: unknown): unknown {
  if (error instanceof Database.SqliteError && UNAVAILABLE_CODES.test(error.code)) {
    return new StoreUnavailableError(`SQLite: ${error.message}`);
  }
  return error;
}


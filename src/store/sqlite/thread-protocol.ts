/** The messages between `SqliteStore` and the thread that owns the connection (sqlite-thread.ts). */
import { StoreLockedError, StoreSetupError, StoreUnavailableError, type JobInsertOutcome } from "../store.js";
import type { SqliteEngine } from "./sqlite-engine.js";

/** The engine's methods a caller may name. */
export type EngineMethod = {
  [K in keyof SqliteEngine]: SqliteEngine[K] extends (...args: never[]) => unknown ? K : never;
}[keyof SqliteEngine];

export interface EngineCall {
  id: number;
  method: EngineMethod;
  args: unknown[];
  /** The caller's clock when it made the call. */
  now: number;
}

/** An error as it crosses the thread boundary: errors lose their class in a structured clone. */
export interface SerializedError {
  name: string;
  message: string;
  stack?: string;
}

/** What the store sends the thread: a call, or (to a thread whose last store closed) a database to open next. */
export type ToThread = EngineCall | { kind: "open"; path: string };

export type FromThread =
  | { kind: "ready" }
  | { kind: "failed"; error: SerializedError }
  | { kind: "answer"; id: number; ok: true; value: unknown }
  | { kind: "answer"; id: number; ok: false; error: SerializedError };

/**
 * How one insert of a batch comes back. A created job comes back as what the caller cannot know (its seq, its
 * creation and run times, whether its chain was cancelled); the caller rebuilds the row from its own parameters
 * (`createdJobRow`), so the job's payload does not cross the boundary twice.
 */
export type InsertAnswer =
  | {
      ok: true;
      created: { seq: number; createdAt: number; runAt: number; expiresAt: number | null; chainCancelled: boolean };
    }
  | { ok: true; value: JobInsertOutcome }
  | { ok: false; error: SerializedError };

export function serializeError(error: unknown): SerializedError {
  if (error instanceof Error) {
    return { name: error.name, message: error.message, ...(error.stack !== undefined ? { stack: error.stack } : {}) };
  }
  return { name: "Error", message: String(error) };
}

/** The classes the store's callers test for, by name. */
const KNOWN_ERRORS: Record<string, new (message: string) => Error> = {
  StoreUnavailableError,
  StoreLockedError,
  StoreSetupError,
};

/** The error again, with the class the store's callers test for (`StoreUnavailableError`, ...). */
export function deserializeError(serialized: SerializedError): Error {
  const Known = KNOWN_ERRORS[serialized.name];
  const error = Known
    ? new Known(serialized.message)
    : Object.assign(new Error(serialized.message), { name: serialized.name });
  if (serialized.stack !== undefined) error.stack = serialized.stack;
  return error;
}

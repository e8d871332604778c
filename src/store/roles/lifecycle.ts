/** The store's `StoreLifecycle` role; src/store/store.ts composes the roles into `Store`. */

/** What every store has, whatever else it does: its engine, the database's clock, its health, and its end. */
export interface StoreLifecycle {
  /** Which engine this is, for messages and skips. */
  readonly engine: "sqlite" | "postgres";
  /**
   * The database's clock as this node best knows it (its own clock plus the offset last measured by `clockOffset`).
   * For timers and figures only: every decision of what is due or expired, and every time written, is the
   * database's own.
   */
  now(): number;
  /**
   * Measures how far the database's clock is ahead of this node's (negative: behind), in ms, and remembers it for
   * `now`. Zero where the two are one clock (SQLite, or a store driven by a test clock).
   */
  clockOffset(): Promise<number>;
  /** Resolves when the database answers and its schema is fully migrated; throws `StoreUnavailableError` otherwise. */
  ping(): Promise<void>;
  /** Closes the database; pending writes are finished first. */
  close(): Promise<void>;
}

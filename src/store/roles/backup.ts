/** The store's `OnlineBackup` role, which only the SQLite engine has; it stays off `Store`. */

/** What an online backup copied (`OnlineBackup.databaseBackup`). */
export interface DatabaseBackupSummary {
  /** Pages in the copy, of `pageSize` bytes each. */
  pages: number;
  pageSize: number;
  /** Batches the copy took; the store served other calls between them. */
  steps: number;
}

/**
 * A store that copies its database while it serves: the SQLite engine, whose exclusive lock shuts out every other
 * reader. Kept off `Store` because only that engine has it: PostgreSQL is backed up with pg_dump.
 */
export interface OnlineBackup {
  /**
   * Copies the database into a new file at `to` while the store goes on serving every other call, consistent as of
   * the copy's end. Never take `to` from a request: it may name any file.
   */
  databaseBackup(params: { to: string }): Promise<DatabaseBackupSummary>;
}

/** Whether `store` can copy its database while it serves (see `OnlineBackup`). */
export function hasOnlineBackup<S extends object>(store: S): store is S & OnlineBackup {
  return typeof (store as Partial<OnlineBackup>).databaseBackup === "function";
}

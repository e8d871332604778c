/**
 * The online backup of the embedded engine: SQLite's backup API copies the open database into a new file a batch of
 * pages at a time, on the thread that owns the connection (sqlite-thread.ts). better-sqlite3 runs each batch in its
 * own turn of that thread's event loop, so the calls that arrive meanwhile (inserts and their group commits, claims,
 * outcomes) run between two batches rather than after the whole copy.
 *
 * Consistency: SQLite carries every write this connection makes during the copy into the pages already copied (a
 * write by another connection would restart the copy, but the exclusive lock admits none). The copy is the database
 * as it stands at the copy's last batch: everything committed before the backup began, and whatever was committed
 * while it ran.
 */
import { closeSync, fdatasyncSync, openSync } from "node:fs";
import type Database from "better-sqlite3";
import type { DatabaseBackupSummary } from "../store.js";

/**
 * Pages copied per batch. 256 pages of 4 KiB (1 MiB) took about 1 ms a batch here (a 300 MB database: 302 batches,
 * median 0.95 ms), so an insert that arrives mid-copy waits about that long; 1,000 pages a batch copied no faster
 * overall and made each wait four times longer.
 */
export const BACKUP_PAGES_PER_STEP = 256;

/**
 * Pages copied between two flushes of the copy to disk (16 MiB). SQLite syncs the copy once, in its last batch, and
 * the thread serves nothing while it does: 190 ms for the 300 MB database above, and more for a larger one. Flushed
 * as the copy goes, that last sync has little left to write, and no batch took more than about 30 ms.
 */
export const BACKUP_FLUSH_PAGES = 4096;

/**
 * Copies the database of `db` into a new file at `to` (its folder must exist; the file must not), a batch of
 * `BACKUP_PAGES_PER_STEP` pages per turn of the event loop. Resolves once the copy is complete and synced.
 */
export async function copyDatabase(db: Database.Database, options: { to: string }): Promise<DatabaseBackupSummary> {
  let steps = 0;
  let flushedPages = 0;
  let copyFd: number | undefined;
  try {
    const done = await db.backup(options.to, {
      // Called after every batch but the last (the first copies nothing: it only sizes the copy).
      progress: ({ totalPages, remainingPages }) => {
        steps++;
        const copied = totalPages - remainingPages;
        if (copied - flushedPages >= BACKUP_FLUSH_PAGES) {
          // Any descriptor of the file flushes what SQLite has written to it so far.
          copyFd ??= openSync(options.to, "r");
          fdatasyncSync(copyFd);
          flushedPages = copied;
        }
        return BACKUP_PAGES_PER_STEP;
      },
    });
    return { pages: done.totalPages, pageSize: db.pragma("page_size", { simple: true }) as number, steps };
  } finally {
    if (copyFd !== undefined) closeSync(copyFd);
  }
}

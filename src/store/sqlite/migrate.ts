/** The SQLite engine's migrations: numbered files of migrations/sqlite/, applied in one transaction. */
import type Database from "better-sqlite3";
import { readMigrations } from "../migrations.js";
import { StoreSetupError } from "../store.js";

/**
 * Applies pending migrations in one transaction and records the version in `user_version`. The version is
 * written even when nothing is pending: that write is what takes the exclusive lock at once.
 */
export function migrate(db: Database.Database): number {
  const migrations = readMigrations("sqlite");
  const latest = migrations.length;
  db.transaction(() => {
    const current = db.pragma("user_version", { simple: true }) as number;
    if (current > latest) {
      throw new StoreSetupError(
        `the database schema (version ${current}) is newer than this opqueue (version ${latest}): ` +
          "run the newer opqueue, or restore a backup taken before the upgrade",
      );
    }
    for (const migration of migrations.slice(current)) db.exec(migration.sql);
    db.pragma(`user_version = ${latest}`);
  }).immediate();
  return latest;
}

/**
 * Backup files of the embedded engine, handled away from any service: what a file holds (`inspectBackupFile`, run on
 * every copy `opqueue backup` downloads and every file `opqueue restore` is given), putting a file in place atomically
 * (`installFile`), and replacing a stopped node's database with a backup (`restoreBackupFile`).
 */
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  closeSync,
  constants,
  copyFileSync,
  fsyncSync,
  mkdirSync,
  openSync,
  renameSync,
  rmSync,
  statSync,
} from "node:fs";
import { basename, dirname, join } from "node:path";
import Database from "better-sqlite3";
import { readMigrations } from "../migrations.js";
import { lockedError } from "./errors.js";

/** A file that cannot be used as asked: not a SQLite database, corrupt, not opqueue's, or of a newer opqueue. */
export class BackupFileError extends Error {
  override readonly name = "BackupFileError";
}

/** What a checked backup file holds. */
export interface BackupFileFacts {
  bytes: number;
  /** Its schema version (`user_version`): how many of the files of migrations/sqlite/ it has applied. */
  schemaVersion: number;
  jobs: number;
}

/** The schema version this opqueue migrates a database to. */
export function latestSchemaVersion(): number {
  return readMigrations("sqlite").length;
}

/**
 * The tables the first `version` migrations leave behind: those they create and do not drop again, under the name
 * the last rename gave them (a table rebuilt as SQLite does it: created anew, the old one dropped, the new renamed).
 */
function tablesOfVersion(version: number): string[] {
  const tables = new Set<string>();
  const statements = /\b(?:(CREATE|DROP) TABLE (?:IF (?:NOT )?EXISTS )?(\w+)|ALTER TABLE (\w+) RENAME TO (\w+))/gi;
  for (const migration of readMigrations("sqlite").slice(0, version)) {
    for (const [, verb, name, renamed, newName] of migration.sql.matchAll(statements)) {
      if (renamed !== undefined) {
        tables.delete(renamed);
        tables.add(newName ?? "");
      } else if (verb?.toUpperCase() === "CREATE") tables.add(name ?? "");
      else tables.delete(name ?? "");
    }
  }
  return [...tables];
}

/** A SQLite error met while reading `path`, said as what it means for a backup. */
function unusable(path: string, error: InstanceType<typeof Database.SqliteError>): BackupFileError {
  if (error.code === "SQLITE_NOTADB") return new BackupFileError(`${path} is not a SQLite database`);
  if (error.code.startsWith("SQLITE_CORRUPT")) return new BackupFileError(`${path} is corrupt: ${error.message}`);
  return new BackupFileError(`${path} cannot be read: ${error.message}`);
}

/**
 * Checks that `path` is an opqueue database in one piece (`PRAGMA integrity_check`, every table of its schema
 * version) and says what it holds. Throws `BackupFileError` otherwise, naming the file `name` (the one the user
 * gave, of which `path` is a copy). It opens the file read-write (a WAL database cannot be opened read-only without
 * its -shm file), so pass a copy of the caller's own, never a file in use.
 */
export function inspectBackupFile(path: string, name = path): BackupFileFacts {
  let db: Database.Database;
  try {
    db = new Database(path, { fileMustExist: true, timeout: 0 });
  } catch (error) {
    if (error instanceof Database.SqliteError) throw unusable(name, error);
    throw error;
  }
  try {
    // Exclusive: no -shm file is made beside the copy, and nothing else can open it while it is read.
    db.pragma("locking_mode = EXCLUSIVE");
    const problems = (db.pragma("integrity_check") as Array<{ integrity_check: string }>).map(
      (row) => row.integrity_check,
    );
    if (problems.length !== 1 || problems[0] !== "ok") {
      throw new BackupFileError(
        `${name} is corrupt: ${problems.slice(0, 3).join("; ")}${problems.length > 3 ? "; ..." : ""}`,
      );
    }
    const schemaVersion = db.pragma("user_version", { simple: true }) as number;
    const present = new Set(
      db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").pluck().all() as string[],
    );
    const missing = schemaVersion < 1 ? [] : tablesOfVersion(schemaVersion).filter((table) => !present.has(table));
    if (schemaVersion < 1 || missing.length > 0) {
      const why = schemaVersion < 1 ? "it has no opqueue schema version" : `it lacks the tables ${missing.join(", ")}`;
      throw new BackupFileError(`${name} is not an opqueue database: ${why}`);
    }
    const jobs = db.prepare("SELECT count(*) FROM jobs").pluck().get() as number;
    return { bytes: statSync(path).size, schemaVersion, jobs };
  } catch (error) {
    if (error instanceof Database.SqliteError) throw unusable(name, error);
    throw error;
  } finally {
    db.close();
  }
}

/** fsyncs a file or folder, so that what was written to it, or renamed into it, survives a power cut. */
function syncPath(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** A name for a temporary file beside `path`, in its folder (so that renaming it onto `path` is atomic). */
export function tempPathBeside(path: string, purpose: string): string {
  return join(dirname(path), `.${basename(path)}.${purpose}-${randomBytes(6).toString("hex")}`);
}

/**
 * Renames the finished file `temp` onto `path` (same folder), syncing both first and the folder after, so that
 * `path` is the old file or the whole new one, even across a power cut.
 */
export function installFile(temp: string, path: string): void {
  syncPath(temp);
  renameSync(temp, path);
  syncPath(dirname(path));
}

/**
 * Takes the exclusive lock of the database at `path` and keeps it until closed, so that no service opens the file
 * while it is replaced; undefined when there is no file. Throws the engine's `StoreLockedError` while a service holds
 * it. The database is first switched to a rollback journal, which folds its WAL into it and removes the -wal file:
 * closing this connection then touches no -wal file, which by then is the restored database's.
 */
function holdDatabase(path: string): Database.Database | undefined {
  if (statSync(path, { throwIfNoEntry: false }) === undefined) return undefined;
  const db = new Database(path, { fileMustExist: true, timeout: 0 });
  try {
    db.pragma("locking_mode = EXCLUSIVE");
    db.pragma("journal_mode = DELETE");
    // A transaction takes the exclusive lock whatever the journal mode was; exclusive locking mode keeps it until close.
    db.exec("BEGIN EXCLUSIVE; COMMIT");
    return db;
  } catch (error) {
    db.close();
    if (error instanceof Database.SqliteError && /^SQLITE_BUSY/.test(error.code)) throw lockedError(path);
    if (error instanceof Database.SqliteError) {
      throw new BackupFileError(`the database to replace, ${path}, cannot be opened: ${error.message}`);
    }
    throw error;
  }
}

/** What `restoreBackupFile` did. */
export interface RestoreSummary extends BackupFileFacts {
  /** Whether a database was there before (it is gone now). */
  replaced: boolean;
  /** The version `serve` will migrate the restored database to when it starts. */
  latestSchemaVersion: number;
}

/**
 * Puts the backup `from` in place of the database at `to`, for a node that is not running: refuses while a service
 * holds `to` (`StoreLockedError`), checks a copy of `from` beside `to` (`BackupFileError` for one that is not a
 * whole opqueue database, or has a newer schema than this opqueue's), then renames it onto `to`, having removed the
 * -wal and -shm files of the database it replaces. The backup itself is only read.
 */
export function restoreBackupFile(options: { from: string; to: string }): RestoreSummary {
  const { from, to } = options;
  if (!statSync(from, { throwIfNoEntry: false })?.isFile()) throw new BackupFileError(`${from} is not a file`);
  mkdirSync(dirname(to), { recursive: true });
  const hold = holdDatabase(to);
  const temp = tempPathBeside(to, "restore");
  try {
    copyFileSync(from, temp, constants.COPYFILE_EXCL);
    // Job payloads and the evidence of their authority are in it: readable by this user alone, as the database is.
    chmodSync(temp, 0o600);
    const facts = inspectBackupFile(temp, from);
    const latest = latestSchemaVersion();
    if (facts.schemaVersion > latest) {
      throw new BackupFileError(
        `${from} has schema version ${facts.schemaVersion}, newer than this opqueue's (${latest}): restore it with that opqueue or a later one`,
      );
    }
    // The -wal file of another database would be replayed into this one on its first open, corrupting it: it goes
    // first. (Holding the old database folded its WAL in and removed it already; a stray one has no database.)
    for (const suffix of ["-wal", "-shm"]) rmSync(`${to}${suffix}`, { force: true });
    installFile(temp, to);
    return { ...facts, replaced: hold !== undefined, latestSchemaVersion: latest };
  } finally {
    rmSync(temp, { force: true });
    hold?.close();
  }
}

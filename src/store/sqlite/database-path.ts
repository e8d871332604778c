/**
 * The SQLite file's place on disk, made ready before the engine opens it, and what an operator is told when it cannot
 * be: every such mistake is a `StoreSetupError` naming the `database` setting, the path and the fix (the CLI prints it
 * on one line and exits 2).
 *
 * The folders are made one at a time. Node's `mkdirSync(path, { recursive: true })` loops for ever, at full CPU and
 * deaf to signals (the loop is native code, which no termination interrupts), on a filesystem that answers ENOENT to
 * any mkdir: `sqlite:/proc/opq/x.db` hung `serve` that way.
 */
import { accessSync, constants, mkdirSync, statSync } from "node:fs";
import { dirname, parse, sep } from "node:path";
import Database from "better-sqlite3";
import { StoreSetupError } from "../store.js";

/** What every message ends with: how to point the setting elsewhere. */
const ELSEWHERE = "set database to a path on a writable disk (e.g. sqlite:./data/opqueue.db)";

function setupError(path: string, problem: string): StoreSetupError {
  return new StoreSetupError(`database sqlite:${path}: ${problem}`);
}

/** "EACCES: permission denied" of a system error, without the call and path Node appends. */
function reasonOf(error: unknown): string {
  const { code, message } = error as NodeJS.ErrnoException;
  const text = message.replace(/^[A-Z]+: /, "").replace(/, \w+ '.*'$/, "");
  return code ? `${code}: ${text}` : text;
}

/** The fix for a folder the service may not write in, by the reason the system gave. */
function writeFix(folder: string, code: string | undefined): string {
  if (code === "EROFS") return `the filesystem of ${folder} is read-only: ${ELSEWHERE}`;
  if (code === "EACCES" || code === "EPERM")
    return `let the service's user write in ${folder} (chown or chmod), or ${ELSEWHERE}`;
  return `${folder} is on a filesystem that holds no files of its own (such as /proc or /sys): ${ELSEWHERE}`;
}

/**
 * Makes the folders of `path` that are missing, and checks that the file can be opened or created there. Throws
 * `StoreSetupError` when a folder on the way is a file, cannot be made, or may not be written in, or `path` is a folder.
 */
export function prepareDatabasePath(path: string): void {
  const folder = dirname(path);
  const { root } = parse(folder);
  let current = root;
  for (const part of folder
    .slice(root.length)
    .split(sep)
    .filter((name) => name !== "")) {
    current = current === root ? `${root}${part}` : `${current}${sep}${part}`;
    const stat = statSync(current, { throwIfNoEntry: false });
    if (stat?.isDirectory()) continue;
    if (stat) throw setupError(path, `${current} is a file, not a folder: ${ELSEWHERE}`);
    try {
      mkdirSync(current);
    } catch (error) {
      const { code } = error as NodeJS.ErrnoException;
      // Made meanwhile by someone else: as good.
      if (code === "EEXIST" && statSync(current, { throwIfNoEntry: false })?.isDirectory()) continue;
      throw setupError(
        path,
        `cannot create the folder ${current} (${reasonOf(error)}): ${writeFix(dirname(current), code)}`,
      );
    }
  }
  const file = statSync(path, { throwIfNoEntry: false });
  if (file?.isDirectory())
    throw setupError(path, `${path} is a folder: name a file in it, e.g. sqlite:${path}${sep}opqueue.db`);
  // SQLite writes the file, its -wal and its -shm beside it: it needs the folder writable even when the file exists.
  try {
    accessSync(folder, constants.W_OK);
  } catch (error) {
    const { code } = error as NodeJS.ErrnoException;
    throw setupError(path, `the folder ${folder} is not writable (${reasonOf(error)}): ${writeFix(folder, code)}`);
  }
}

/**
 * The message of an error SQLite raised while opening `path`, when it is the file's fault (not a database, cannot be
 * opened or written); undefined for any other error.
 */
export function openFailure(path: string, error: unknown): StoreSetupError | undefined {
  if (!(error instanceof Database.SqliteError)) return undefined;
  if (/^SQLITE_NOTADB/.test(error.code)) {
    return setupError(
      path,
      `${path} is not a SQLite database (${error.message}): name a new file or an opqueue database, or ${ELSEWHERE}`,
    );
  }
  if (/^SQLITE_(CANTOPEN|READONLY|IOERR|PERM|AUTH)/.test(error.code)) {
    return setupError(
      path,
      `SQLite cannot open ${path} for writing (${error.code}: ${error.message}): let the service's user read and write ` +
        `it and its folder, or ${ELSEWHERE}`,
    );
  }
  return undefined;
}

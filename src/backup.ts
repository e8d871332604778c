/**
 * `opqueue backup` (src/cli.ts is the entry point): asks a running SQLite node for a copy of its database
 * (`GET /admin/backup`, src/http/routes/admin-backup.ts), writes it beside its destination, checks it, and renames it
 * into place. The service picks where it makes its own copy; this side only names where the downloaded one goes.
 */
import { createWriteStream } from "node:fs";
import { mkdir, rm, stat } from "node:fs/promises";
import { dirname } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { inspectBackupFile, installFile, tempPathBeside, type BackupFileFacts } from "./store/sqlite/backup-file.js";

/** The service refused the backup, or could not be reached; `exitCode` is the command's (2: asked wrongly). */
export class BackupError extends Error {
  override readonly name = "BackupError";
  constructor(
    message: string,
    readonly exitCode: 1 | 2,
  ) {
    super(message);
  }
}

/** What `downloadBackup` wrote. */
export interface DownloadedBackup extends BackupFileFacts {
  /** The endpoint it was fetched from. */
  endpoint: string;
}

/** The `{code, message}` of an error answer, as one line; the raw text when it is not one. */
function refusal(text: string): string {
  try {
    const body = JSON.parse(text) as { code?: unknown; message?: unknown };
    if (typeof body.code === "string" && typeof body.message === "string") return `${body.code}: ${body.message}`;
  } catch {
    // Not JSON: a proxy's page, say.
  }
  return text.trim().slice(0, 500) || "(no body)";
}

/**
 * Fetches a copy of the database of the service at `url` with the admin token `token` and puts it at `to`: written
 * to a temporary file beside it (readable by this user alone: it holds job payloads), checked with
 * `inspectBackupFile`, then renamed onto `to`. Throws `BackupError` for a refusal, `BackupFileError` for a copy that
 * fails its check; `to` is left as it was either way.
 */
export async function downloadBackup(options: { url: string; token: string; to: string }): Promise<DownloadedBackup> {
  const endpoint = new URL("admin/backup", options.url.endsWith("/") ? options.url : `${options.url}/`).href;
  let response: Response;
  try {
    response = await fetch(endpoint, { headers: { authorization: `Bearer ${options.token}` } });
  } catch (error) {
    const cause = (error as { cause?: { message?: string } }).cause?.message ?? (error as Error).message;
    throw new BackupError(`backup: cannot reach the service at ${endpoint}: ${cause}`, 1);
  }
  if (!response.ok || response.body === null) {
    // A 4xx will be answered the same way again (no such route, a PostgreSQL node, a refused token): the command was
    // asked wrongly. A 5xx may pass.
    const exitCode = response.status >= 400 && response.status < 500 ? 2 : 1;
    throw new BackupError(
      `backup: ${endpoint} answered ${response.status} ${refusal(await response.text())}`,
      exitCode,
    );
  }
  await mkdir(dirname(options.to), { recursive: true });
  const temp = tempPathBeside(options.to, "backup");
  try {
    try {
      await pipeline(
        Readable.fromWeb(response.body as WebReadableStream<Uint8Array>),
        createWriteStream(temp, { flags: "wx", mode: 0o600 }),
      );
    } catch (error) {
      // The connection broke mid-copy (the service stopped, say), or this side could not write.
      throw new BackupError(`backup: the copy from ${endpoint} could not be saved: ${(error as Error).message}`, 1);
    }
    const announced = response.headers.get("content-length");
    const received = (await stat(temp)).size;
    if (announced !== null && Number(announced) !== received) {
      throw new BackupError(`backup: ${endpoint} sent ${received} of the ${announced} bytes it announced`, 1);
    }
    const facts = inspectBackupFile(temp, `the copy from ${endpoint}`);
    installFile(temp, options.to);
    return { ...facts, endpoint };
  } finally {
    await rm(temp, { force: true });
  }
}

/**
 * `GET /admin/backup`: a copy of a running SQLite node's database, for `opqueue backup` (docs/deploying.md, "Backup and
 * restore"). The exclusive lock keeps every other SQLite client off the file, so the store makes the copy itself,
 * with SQLite's online backup API, while it goes on serving (src/store/sqlite/online-backup.ts). This route picks
 * where: a new private folder in the system's temporary folder, never a path from the request. It streams the copy
 * back and leaves nothing behind. A PostgreSQL node answers 404 `not_found`: its database is backed up with pg_dump.
 */
import { mkdtemp, open, rm, type FileHandle } from "node:fs/promises";
import type { Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import type { AdminHook } from "../auth.js";
import { ApiError } from "../../errors.js";
import { ErrorBody } from "../../job/schemas.js";
import { hasOnlineBackup, StoreUnavailableError, type StoreLifecycle } from "../../store/store.js";

/** The media type of a SQLite database file (registered with IANA). */
export const SQLITE_MEDIA_TYPE = "application/vnd.sqlite3";

/** What the backup route needs. */
export interface AdminBackupRoutesOptions {
  /** The SQLite engine copies its database online (`OnlineBackup`); PostgreSQL is answered with a refusal. */
  store: Pick<StoreLifecycle, "engine">;
  /** The admin guard (site admin required). */
  adminOnly: AdminHook;
}

/** Sets how long the connection may sit with nothing moving; `inject`'s stand-in socket has no such bound. */
function setIdleBound(socket: Socket, ms: number): void {
  if (typeof socket.setTimeout === "function") socket.setTimeout(ms);
}

/** Registers `GET /admin/backup`. */
export const adminBackupRoutes: FastifyPluginAsyncTypebox<AdminBackupRoutesOptions> = async (app, options) => {
  app.get(
    "/admin/backup",
    {
      onRequest: options.adminOnly,
      schema: {
        operationId: "backupDatabase",
        summary: "A consistent copy of the SQLite database, made while the service runs",
        tags: ["admin"],
        security: [{ adminToken: [] }],
        produces: SQLITE_MEDIA_TYPE,
        response: {
          // The file's bytes in the document; a stream of them to the type checker.
          200: Type.Unsafe<Readable>({
            type: "string",
            contentMediaType: SQLITE_MEDIA_TYPE,
            description: "the database file",
          }),
          401: ErrorBody,
          403: ErrorBody,
          404: ErrorBody,
          503: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      const { store } = options;
      if (!hasOnlineBackup(store)) {
        throw new ApiError(
          404,
          "not_found",
          `this node's database is ${store.engine === "postgres" ? "PostgreSQL" : store.engine}, which opqueue does not ` +
            'copy: back it up with pg_dump (docs/deploying.md, "Backup and restore")',
        );
      }
      // Nothing moves on the connection while the copy is made, which may take longer than the listener's idle bound.
      setIdleBound(request.raw.socket, 0);
      const folder = await mkdtemp(join(tmpdir(), "opqueue-backup-"));
      const startedAt = performance.now();
      request.log.info("backup started");
      let copy: FileHandle | undefined;
      let bytes: number;
      try {
        const file = join(folder, "opqueue.db");
        const summary = await store.databaseBackup({ to: file });
        // Logged at once: an enqueue answered before this line was committed before the copy's last batch.
        const durationMs = Math.round(performance.now() - startedAt);
        const { pages, pageSize, steps } = summary;
        request.log.info({ bytes: pages * pageSize, pages, steps, durationMs }, "backup copied");
        copy = await open(file, "r");
        bytes = (await copy.stat()).size;
      } catch (error) {
        await copy?.close();
        if (error instanceof StoreUnavailableError) {
          throw new ApiError(503, "unavailable", `the backup could not be made: ${error.message}`, {
            "retry-after": "1",
          });
        }
        throw error;
      } finally {
        // The open handle keeps the copy readable without its name: nothing is left behind however the answer ends.
        await rm(folder, { recursive: true, force: true });
      }
      setIdleBound(request.raw.socket, app.server.timeout);
      return reply
        .type(SQLITE_MEDIA_TYPE)
        .header("content-length", bytes)
        .header("content-disposition", 'attachment; filename="opqueue-backup.db"')
        .send(copy.createReadStream());
    },
  );
};

/**
 * `GET /admin/backup` (docs/api.md, "Backup"): a site administrator gets a copy of a SQLite node's database, made while
 * the service runs; a PostgreSQL node answers 404 `not_found` naming pg_dump. Runs on both engines; the copy's own
 * cases name the engine they skip.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { inspectBackupFile } from "../../src/store/sqlite/backup-file.js";
import { TEST_ENGINE } from "../helpers/service.js";
import { assertError, enqueue, startService, welcomeEmail } from "../helpers/jobs.js";

const SQLITE_ONLY =
  TEST_ENGINE === "sqlite" ? false : "the online backup is the SQLite engine's; PostgreSQL has pg_dump";
const POSTGRES_ONLY =
  TEST_ENGINE === "postgres" ? false : "what a PostgreSQL node answers; the SQLite engine copies itself";

test(
  "GET /admin/backup answers a site admin with the SQLite database, holding every job",
  { skip: SQLITE_ONLY },
  async (t) => {
    const s = await startService(t);
    const jobs = [await enqueue(s, welcomeEmail()), await enqueue(s, welcomeEmail({ dedupe_key: "second" }))];
    const res = await s.inject({ method: "GET", url: "/admin/backup", token: await s.adminToken() });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.headers["content-type"], "application/vnd.sqlite3");
    assert.equal(res.headers["content-disposition"], 'attachment; filename="opqueue-backup.db"');
    assert.equal(Number(res.headers["content-length"]), res.rawPayload.length);
    assert.equal(res.rawPayload.subarray(0, 16).toString("latin1"), "SQLite format 3\0");

    const dir = mkdtempSync(join(tmpdir(), "opqueue-backup-route-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, "copy.db");
    writeFileSync(file, res.rawPayload);
    assert.equal(inspectBackupFile(file).jobs, 2);
    const db = new Database(file);
    try {
      assert.deepEqual(
        db.prepare("SELECT id FROM jobs ORDER BY seq").pluck().all(),
        jobs.map((job) => job.id),
      );
    } finally {
      db.close();
    }
  },
);

test(
  "GET /admin/backup on a PostgreSQL node answers 404 not_found, saying to use pg_dump",
  { skip: POSTGRES_ONLY },
  async (t) => {
    const s = await startService(t);
    const res = await s.inject({ method: "GET", url: "/admin/backup", token: await s.adminToken() });
    assertError(res, 404, "not_found");
    assert.match(
      (res.json() as { message: string }).message,
      /PostgreSQL, which opqueue does not copy: back it up with pg_dump/,
    );
  },
);

test("GET /admin/backup needs a site admin: 401 without a token, 403 without site_admin", async (t) => {
  const s = await startService(t);
  assertError(await s.inject({ method: "GET", url: "/admin/backup" }), 401, "unauthenticated");
  const notAdmin = await s.adminToken({ siteAdmin: false });
  assertError(await s.inject({ method: "GET", url: "/admin/backup", token: notAdmin }), 403, "site_admin_required");
});

test("/openapi.json lists backupDatabase, answering the file as application/vnd.sqlite3", async (t) => {
  const s = await startService(t);
  const doc = (await s.inject({ method: "GET", url: "/openapi.json" })).json() as {
    paths: Record<
      string,
      Record<string, { operationId?: string; responses: Record<string, { content: Record<string, unknown> }> }>
    >;
  };
  const operation = doc.paths["/admin/backup"]?.["get"];
  assert.equal(operation?.operationId, "backupDatabase");
  assert.deepEqual(Object.keys(operation?.responses["200"]?.content ?? {}), ["application/vnd.sqlite3"]);
  assert.deepEqual(Object.keys(operation?.responses["404"]?.content ?? {}), ["application/json"]);
});

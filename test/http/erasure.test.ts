/**
 * Erasing one user's data (docs/api.md, "Erasing a user's data"), on the engine of the run: through the API, the
 * user's payloads and error bodies leave the database's files (searched byte by byte, after a checkpoint, and on
 * PostgreSQL a VACUUM FULL), their waiting jobs are cancelled when asked, other users' data stays, the audit holds no
 * data of the user, and bad calls are 400s.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { erasureSubject } from "../../src/http/routes/erasure.js";
import { databaseBytes, queryDatabase } from "../helpers/database-bytes.js";
import { capturedLogger } from "../helpers/logs.js";
import { startTestService, TEST_ENGINE, type TestService } from "../helpers/service.js";
import { assertError, driveTo, enqueue, startService, welcomeEmail } from "../helpers/jobs.js";

const USER = "ada@example.com";

/** The audit rows of the erasures, read from the database. */
function erasureRows(s: TestService): Promise<Array<Record<string, unknown>>> {
  const sql = "SELECT actor, role, subject, erased, cancelled FROM erasures ORDER BY id";
  return queryDatabase(s, { sqlite: sql, postgres: sql });
}

describe("erasing a user's data", () => {
  test("no byte of the user's payloads or error bodies is left in the database; other users' data stays", async (t) => {
    const s = await startTestService();
    let closed = false;
    t.after(async () => {
      if (!closed) await s.close();
    });
    const marker = `secret-${randomBytes(8).toString("hex")}`;
    const theirs = `kept-${randomBytes(8).toString("hex")}`;
    // A large value too, which PostgreSQL keeps out of line (TOAST) and SQLite on overflow pages; random, so that it
    // is not compressed away.
    const big = `${marker}-${randomBytes(6_000).toString("hex")}`;
    const finished = await enqueue(
      s,
      welcomeEmail({ request: { path_params: { userId: "1" }, body: { note: big } } }),
      { sub: USER },
    );
    const waiting = await enqueue(
      s,
      welcomeEmail({ request: { path_params: { userId: "1" }, body: { note: marker } }, delay_ms: 3_600_000 }),
      { sub: USER },
    );
    await enqueue(s, welcomeEmail({ request: { path_params: { userId: "2" }, body: { note: theirs } } }), {
      sub: "bob",
    });
    await driveTo(s, finished.id, "dead");
    assert.ok((await databaseBytes(s, { vacuum: false })).includes(marker), "the marker is found before the erasure");

    const res = await s.inject({
      method: "POST",
      url: "/admin/erasures",
      token: await s.adminToken({ sub: "dpo" }),
      payload: { user_id: USER, cancel_waiting: true },
    });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), {
      subject: erasureSubject(USER),
      erased: 2,
      cancelled: 1,
      waiting: 0,
      running: 0,
      more: false,
    });
    for (const id of [finished.id, waiting.id]) {
      const job = (await s.inject({ method: "GET", url: `/jobs/${id}`, token: await s.adminToken() })).json().job;
      assert.deepEqual(job.request, {});
      assert.equal(job.result.error_body, null);
    }
    assert.equal((await s.service.store.jobGet({ id: waiting.id }))?.status, "cancelled");

    const again = await s.inject({
      method: "POST",
      url: "/admin/erasures",
      token: await s.adminToken({ sub: "dpo" }),
      payload: { user_id: USER },
    });
    assert.equal(again.json().erased, 0, "idempotent: nothing left to do");

    if (TEST_ENGINE === "sqlite") {
      await s.service.close(); // The last connection's close checkpoints the WAL into the file.
    }
    const bytes = await databaseBytes(s, { vacuum: true });
    assert.ok(!bytes.includes(marker), "no byte of the erased payloads is left");
    assert.ok(bytes.includes(theirs), "another user's payload is there");
    const audit = await erasureRows(s);
    assert.deepEqual(
      audit.map((row) => ({ ...row, erased: Number(row["erased"]), cancelled: Number(row["cancelled"]) })),
      [
        { actor: "dpo", role: "admin", subject: erasureSubject(USER), erased: 2, cancelled: 1 },
        { actor: "dpo", role: "admin", subject: erasureSubject(USER), erased: 0, cancelled: 0 },
      ],
    );
    assert.ok(!JSON.stringify(audit).includes(USER), "the audit does not hold the user's id");
    if (TEST_ENGINE === "sqlite") {
      rmSync(s.dir, { recursive: true, force: true });
      closed = true;
    }
  });

  test("the log line names the user by digest only", async (t) => {
    const { logger, lines } = capturedLogger();
    const s = await startService(t, { logger });
    const res = await s.inject({
      method: "POST",
      url: "/admin/erasures",
      token: await s.adminToken({ sub: "dpo" }),
      payload: { user_id: USER },
    });
    assert.equal(res.statusCode, 200, res.body);
    const line = lines.find((entry) => entry["action"] === "erase-user");
    assert.equal(line?.["subject"], erasureSubject(USER));
    assert.equal(line?.["actor"], "dpo");
    assert.ok(!JSON.stringify(lines).includes(USER), "no log line holds the user's id");
  });

  test("refuses a missing user_id, a limit out of 1..1000, unknown fields and U+0000 with 400", async (t) => {
    const s = await startService(t);
    for (const payload of [
      {},
      { user_id: "" },
      { user_id: "a", limit: 0 },
      { user_id: "a", limit: 1001 },
      { user_id: "a", x: 1 },
      { user_id: "a\u0000" },
    ]) {
      assertError(
        await s.inject({ method: "POST", url: "/admin/erasures", token: await s.adminToken(), payload }),
        400,
        "invalid_request",
      );
    }
  });
});

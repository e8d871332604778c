/**
 * Payloads encrypted at rest (docs/encryption.md), on the engine of the run: what the API answers and what a target
 * receives are as sent, while no byte of a request, an error body, a stored result or a progress is in clear in the database (nor,
 * on SQLite, in an online backup); a second key added mid-flight encrypts new writes while the first still decrypts
 * old rows, on two nodes at once on PostgreSQL; and the keys are checked when the config is read.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import type { LightMyRequestResponse } from "fastify";
import { parseConfig } from "../../src/config.js";
import { ConfigError } from "../../src/config/config-error.js";
import { createService } from "../../src/service.js";
import { runningAttempt } from "../helpers/async-attempts.js";
import { databaseBytes, queryDatabase } from "../helpers/database-bytes.js";
import { assertError, buildReport, driveTo, enqueue, getJob, startService } from "../helpers/jobs.js";
import { startLiveService } from "../helpers/live-service.js";
import { rawTestConfig, TEST_ENGINE, type TestService } from "../helpers/service.js";
import { answer, startTarget } from "../helpers/target.js";

const K1 = randomBytes(32).toString("base64");
const K2 = randomBytes(32).toString("base64");
const ENV = { OPQ_K1: K1, OPQ_K2: K2 };

const withKeys =
  (...ids: Array<"k1" | "k2">) =>
  (raw: Record<string, unknown>) => {
    raw["encryption"] = { keys: ids.map((id) => ({ id, key_env: `OPQ_${id.toUpperCase()}` })) };
    raw["operations"] = { buildReport: { store_result: true } };
  };

/** The request column of every job, as stored (on SQLite, once no node holds the file). */
async function storedRequests(s: TestService): Promise<string[]> {
  const rows = await queryDatabase(s, {
    sqlite: "SELECT request AS r FROM jobs ORDER BY seq",
    postgres: "SELECT request::text AS r FROM job_specs ORDER BY seq",
  });
  return rows.map((row) => String(row["r"]));
}

describe("payloads encrypted at rest", () => {
  test("requests, error bodies and stored results are answered and delivered in clear, and stored encrypted", async (t) => {
    const marker = `clear-${randomBytes(8).toString("hex")}`;
    const target = await startTarget(t, answer(500, `failed for ${marker}-error`));
    const s = await startLiveService(t, {
      worker: true,
      env: ENV,
      configure: (raw) => {
        withKeys("k1")(raw);
        raw["target"] = { base_url: target.url, audience: "product" };
        raw["defaults"] = { max_attempts: 1, timeout_ms: 30_000 };
      },
    });
    const job = await enqueue(s, buildReport({ request: { body: { note: `${marker}-request` } } }));
    assert.deepEqual(job.request, { body: { note: `${marker}-request` } }, "the enqueue's answer");
    const [delivery] = await target.waitForRequests(1);
    assert.deepEqual(JSON.parse(delivery?.body ?? "null"), { note: `${marker}-request` }, "the delivery");
    await s.deliveryFinished(job.id);
    const dead = await getJob(s, job.id);
    assert.equal(dead.status, "dead");
    assert.equal(dead.result?.error_body, `failed for ${marker}-error`);
    const attempts = await s.inject({ method: "GET", url: `/jobs/${job.id}/attempts`, token: await s.adminToken() });
    assert.equal(attempts.json().attempts[0].error_body, `failed for ${marker}-error`);

    if (TEST_ENGINE === "postgres") {
      const stored = await storedRequests(s);
      assert.match(stored[0] ?? "", /^"opq1:k1:[A-Za-z0-9_-]+"$/, "the request is a sealed value");
    }
    const bytes = await databaseBytes(s, { vacuum: false });
    assert.ok(!bytes.includes(marker), "no byte of the payloads is in clear in the database");
    assert.ok(bytes.includes(Buffer.from("opq1:k1:")), "the sealed values are there");
  });

  test("a stored result is answered in clear and stored sealed; its status code and reason stay readable", async (t) => {
    const s = await startService(t, { env: ENV, configure: withKeys("k1") });
    const job = await enqueue(s, buildReport());
    await driveTo(s, job.id, "running");
    const marker = `result-${randomBytes(8).toString("hex")}`;
    await s.service.store.jobSetStateIfRunningMany({
      outcomes: [
        {
          id: job.id,
          attempt: 1,
          status: "succeeded",
          result: { status_code: 200, error_body: null, terminal_reason: null, body: { marker }, body_format: "json" },
        },
      ],
    });
    const done = await getJob(s, job.id);
    assert.deepEqual((done.result as { body?: unknown }).body, { marker });
    assert.ok(!(await databaseBytes(s, { vacuum: false })).includes(marker));
  });

  test("a long job's progress is answered in clear and stored sealed", async (t) => {
    const s = await startService(t, { env: ENV, configure: withKeys("k1") });
    const { job, token } = await runningAttempt(s);
    const marker = `progress-${randomBytes(8).toString("hex")}`;
    const heartbeat = await s.inject({
      method: "POST",
      url: `/jobs/${job.id}/heartbeat`,
      token,
      payload: { progress: { stage: marker } },
    });
    assert.equal(heartbeat.statusCode, 200, heartbeat.body);
    const res = await s.inject({ method: "GET", url: `/jobs/${job.id}/extensions`, token: await s.adminToken() });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().extensions.progress.value, { stage: marker });
    // As stored: the encrypting store passes the payload columns' text through untouched.
    const page = await s.service.store.payloadPage({ table: "jobs", after: null, limit: 10 });
    const stored = page.rows[0]?.columns.find((entry) => entry.column === "progress")?.text;
    assert.match(stored ?? "", /^"opq1:k1:[A-Za-z0-9_-]+"$/, "the progress is a sealed value");
    assert.ok(!(await databaseBytes(s, { vacuum: false })).includes(marker));
  });

  test("a key added first encrypts new writes; the older key still decrypts what it wrote", async (t) => {
    const first = await startService(t, { env: ENV, configure: withKeys("k1") });
    const old = await enqueue(first, buildReport({ request: { body: { n: 1 } }, delay_ms: 60_000 }));
    // The same database under [k2, k1]: beside the first node on PostgreSQL, after it on SQLite (one node).
    if (TEST_ENGINE === "sqlite") await first.service.close();
    const raw = rawTestConfig(first.dir);
    withKeys("k2", "k1")(raw);
    raw["database"] = first.config.database;
    const second = await createService({
      config: parseConfig({ raw, baseDir: first.dir, env: ENV }),
      clock: first.clock,
      env: ENV,
    });
    let open = true;
    t.after(async () => {
      if (open) await second.close();
    });
    const admin = await first.adminToken();
    const read = async (id: string) =>
      (
        await second.app.inject({ method: "GET", url: `/jobs/${id}`, headers: { authorization: `Bearer ${admin}` } })
      ).json().job;
    const inserted = await second.app.inject({
      method: "POST",
      url: "/jobs",
      headers: { authorization: `Bearer ${await first.assertion({ rid: "req-2" })}` },
      payload: buildReport({ request: { body: { n: 2 } } }),
    });
    assert.equal(inserted.statusCode, 201, inserted.body);
    assert.deepEqual((await read(old.id)).request, { body: { n: 1 } });
    assert.deepEqual((await read(inserted.json().job.id)).request, { body: { n: 2 } });
    if (TEST_ENGINE === "postgres") {
      // The first node, which knows only k1, cannot read what k2 sealed: every node must know a key before any
      // node encrypts with it (docs/encryption.md, "Rotating keys").
      const res = await first.inject({ method: "GET", url: `/jobs/${inserted.json().job.id}`, token: admin });
      assert.equal(res.statusCode, 500);
    }
    // SQLite's file is read once no node holds it.
    if (TEST_ENGINE === "sqlite") {
      await second.close();
      open = false;
    }
    const stored = await storedRequests(first);
    assert.deepEqual(
      stored.map((value) => /^"opq1:(k\d):/.exec(value)?.[1]),
      ["k1", "k2"],
    );
  });

  test(
    "an online backup of a SQLite node holds no payload in clear",
    { skip: TEST_ENGINE !== "sqlite" && "SQLite's online backup" },
    async (t) => {
      const s = await startService(t, { env: ENV, configure: withKeys("k1") });
      const marker = `backup-${randomBytes(8).toString("hex")}`;
      await enqueue(s, buildReport({ request: { body: { marker } } }));
      const res = await s.inject({ method: "GET", url: "/admin/backup", token: await s.adminToken() });
      assert.equal(res.statusCode, 200);
      const backup = res.rawPayload;
      assert.ok(backup.length > 4096 && backup.includes(Buffer.from("SQLite format 3")), "a database file");
      assert.ok(!backup.includes(marker), "no payload in clear");
      assert.ok(backup.includes(Buffer.from("opq1:k1:")));
    },
  );

  test("a rewrap pass seals every payload under the newest key, clear ones too; then the older key can go", async (t) => {
    // Written in clear, then under k1, then rewrapped under k2 by a node holding [k2, k1]; read by a node holding k2 alone.
    const clear = await startService(t, {
      configure: (raw) => {
        (raw["triggers"] as Record<string, string[]>)["cron:*"] = ["buildReport"];
      },
    });
    const dead = await enqueue(clear, buildReport({ request: { body: { n: 0 } } }));
    await driveTo(clear, dead.id, "dead");
    const long = await enqueue(clear, buildReport({ request: { body: { n: 2 } } }));
    await driveTo(clear, long.id, "running");
    const token = { hash: "h", expired: false, claim: 1 };
    const progressJson = JSON.stringify({ p: 1 });
    assert.equal(
      (await clear.service.store.jobHeartbeatExternal({ id: long.id, attempt: 1, token, progressJson })).kind,
      "renewed",
    );
    const schedule = await clear.inject({
      method: "POST",
      url: "/schedules",
      token: await clear.adminToken(),
      payload: {
        name: "hourly",
        schedule: "0 * * * *",
        operation_id: "buildReport",
        user_id: "system",
        request: { body: { s: 1 } },
      },
    });
    assert.equal(schedule.statusCode, 201, schedule.body);
    const node = async (keys: Array<"k1" | "k2">) => {
      await current.close();
      const raw = rawTestConfig(clear.dir);
      withKeys(...keys)(raw);
      (raw["triggers"] as Record<string, string[]>)["cron:*"] = ["buildReport"];
      raw["database"] = clear.config.database;
      const service = await createService({
        config: parseConfig({ raw, baseDir: clear.dir, env: ENV }),
        clock: clear.clock,
        env: ENV,
      });
      current = service;
      return service;
    };
    let current: { close(): Promise<void> } = { close: () => clear.service.close() };
    t.after(() => current.close());
    const admin = await clear.adminToken();
    const k1 = await node(["k1"]);
    const later = await k1.app.inject({
      method: "POST",
      url: "/jobs",
      headers: { authorization: `Bearer ${await clear.assertion({ rid: "req-2" })}` },
      payload: buildReport({ request: { body: { n: 1 } } }),
    });
    assert.equal(later.statusCode, 201, later.body);

    const k2 = await node(["k2", "k1"]);
    let cursor: string | null = null;
    let rewrapped = 0;
    for (let calls = 0; calls < 20; calls++) {
      const res: LightMyRequestResponse = await k2.app.inject({
        method: "POST",
        url: "/admin/encryption/rewrap",
        headers: { authorization: `Bearer ${admin}` },
        payload: { limit: 1, ...(cursor === null ? {} : { cursor }) },
      });
      assert.equal(res.statusCode, 200, res.body);
      rewrapped += res.json().rewrapped;
      assert.equal(res.json().key_id, "k2");
      cursor = res.json().cursor;
      if (cursor === null) break;
    }
    assert.equal(cursor, null, "the pass ends");
    // Three requests, one result's error body, one attempt's, one progress, one schedule's request.
    assert.equal(rewrapped, 7);
    for (const table of ["jobs", "attempts", "schedules"] as const) {
      const page = await k2.store.payloadPage({ table, after: null, limit: 100 });
      for (const { column, text } of page.rows.flatMap((row) => row.columns)) {
        if (text === null || column === "callbacks") continue;
        assert.doesNotMatch(text, /opq1:k1:/, `${table}.${column}`);
        if (column !== "result") assert.match(text, /^"?opq1:k2:/, `${table}.${column}: ${text}`);
      }
    }
    const again = await k2.app.inject({
      method: "POST",
      url: "/admin/encryption/rewrap",
      headers: { authorization: `Bearer ${admin}` },
      payload: { limit: 100 },
    });
    assert.equal(again.json().rewrapped, 0, "a second pass has nothing to do");

    const only = await node(["k2"]);
    const read = async (url: string) =>
      (await only.app.inject({ method: "GET", url, headers: { authorization: `Bearer ${admin}` } })).json();
    assert.deepEqual((await read(`/jobs/${dead.id}`)).job.request, { body: { n: 0 } });
    assert.equal((await read(`/jobs/${dead.id}/attempts`)).attempts[0].error_body, "x");
    assert.deepEqual((await read(`/jobs/${later.json().job.id}`)).job.request, { body: { n: 1 } });
    assert.deepEqual((await read(`/jobs/${long.id}/extensions`)).extensions.progress.value, { p: 1 });
    assert.deepEqual((await read("/schedules/hourly")).schedule.request, { body: { s: 1 } });
  });

  test("rewrap without encryption configured, or with a cursor it did not answer, is 400", async (t) => {
    const plain = await startService(t);
    const res = await plain.inject({
      method: "POST",
      url: "/admin/encryption/rewrap",
      token: await plain.adminToken(),
    });
    assertError(res, 400, "invalid_request");
    const s = await startService(t, { env: ENV, configure: withKeys("k1") });
    for (const cursor of ["nowhere:1", "jobs"]) {
      assertError(
        await s.inject({
          method: "POST",
          url: "/admin/encryption/rewrap",
          token: await s.adminToken(),
          payload: { cursor },
        }),
        400,
        "invalid_request",
      );
    }
  });

  test("the keys are checked when the config is read", () => {
    const parse = (keys: unknown, env: Record<string, string>) => {
      const raw = rawTestConfig("/tmp");
      raw["encryption"] = { keys };
      return () => parseConfig({ raw, baseDir: "/tmp", env });
    };
    const refused = (fn: () => unknown, message: RegExp) =>
      assert.throws(fn, (error: unknown) => error instanceof ConfigError && message.test(error.message));
    refused(
      parse([{ id: "k1", key_env: "NOPE" }], {}),
      /encryption\.keys\.0\.key_env: environment variable NOPE is not set/,
    );
    refused(
      parse([{ id: "k1", key_env: "K" }], { K: randomBytes(16).toString("base64") }),
      /must hold 32 bytes in base64.*holds 16 bytes/,
    );
    refused(
      parse(
        [
          { id: "k1", key_env: "K" },
          { id: "k1", key_env: "K" },
        ],
        { K: K1 },
      ),
      /encryption\.keys\.1\.id: "k1" is the id of an earlier key too/,
    );
    refused(parse([{ id: "a:b", key_env: "K" }], { K: K1 }), /encryption\/keys\/0\/id|encryption\.keys\.0\.id/);
    refused(parse([], {}), /encryption\.keys/);
  });
});

/**
 * What producers send beyond the contract, over HTTP (docs/api.md, "Batch enqueue", "Idempotency", "Expiry";
 * docs/tracing.md): POST /jobs/batch answering each item in order, Idempotency-Key on POST /jobs, ttl_ms and
 * expires_at, and the traceparent a job keeps. One fresh service per test, on SQLite and then PostgreSQL.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { Readable } from "node:stream";
import { BATCH_ITEMS_BYTES } from "../../src/config.js";
import type { Job } from "../../src/job/schemas.js";
import type { TestService } from "../helpers/service.js";
import { capturedLogger } from "../helpers/logs.js";
import {
  assertError,
  buildReport,
  driveTo,
  enqueue,
  getJob,
  JOB_FIELDS,
  postJob,
  startService,
  welcomeEmail,
} from "../helpers/jobs.js";

interface BatchResult {
  status: number;
  id?: string;
  replayed?: true;
  code?: string;
  message?: string;
}

/** POST /jobs/batch with `jobs` (and optional headers); the response. */
async function postBatch(
  s: TestService,
  jobs: unknown[],
  options: {
    claims?: Parameters<TestService["assertion"]>[0];
    headers?: Record<string, string>;
    payload?: unknown;
  } = {},
) {
  return s.inject({
    method: "POST",
    url: "/jobs/batch",
    token: await s.assertion(options.claims ?? {}),
    payload: (options.payload ?? { jobs }) as object,
    ...(options.headers ? { headers: options.headers } : {}),
  });
}

/** POST /jobs/batch that must answer 200; its results. */
async function batch(
  s: TestService,
  jobs: unknown[],
  claims: Parameters<TestService["assertion"]>[0] = {},
): Promise<BatchResult[]> {
  const res = await postBatch(s, jobs, { claims });
  assert.equal(res.statusCode, 200, res.body);
  return (res.json() as { results: BatchResult[] }).results;
}

describe("POST /jobs/batch", () => {
  test("answers each item in order: created, deduplicated, and each refusal with the status and code POST /jobs would give", async (t) => {
    const s = await startService(t, { configure: (raw) => void (raw["limits"] = { spawn_cap: 3 }) });
    const holder = await enqueue(s, welcomeEmail({ dedupe_key: "dk" }), { rid: "other-chain" });
    const results = await batch(s, [
      buildReport(),
      welcomeEmail({ dedupe_key: "dk" }),
      { operation_id: "buildReport", request: {}, bogus: 1 },
      buildReport({ operation_id: "noSuchOperation" }),
      { operation_id: "recordEmailSent", request: { path_params: { emailId: "1" } } },
      welcomeEmail({ request: { path_params: {} } }),
      buildReport({ request: { body: "x".repeat(17_000) } }),
      buildReport(),
      buildReport(),
      buildReport(),
      buildReport({ ttl_ms: 1000, delay_ms: 5000 }),
    ]);
    assert.deepEqual(
      results.map((result) => [result.status, result.code ?? null]),
      [
        [201, null],
        [200, null],
        [400, "invalid_request"],
        [422, "unknown_operation"],
        [403, "trigger_not_allowed"],
        [400, "missing_path_param"],
        [400, "payload_too_large"],
        [201, null],
        [201, null],
        [429, "spawn_cap_exceeded"],
        [400, "invalid_request"],
      ],
    );
    assert.equal(results[1]?.id, holder.id, "the upsert answers with the job holding the key");
    assert.match(results[2]?.message ?? "", /^jobs\/2/, "an item's schema problem names the item");
    for (const result of results.filter((r) => r.status < 300))
      assert.deepEqual(Object.keys(result).sort(), ["id", "status"]);
    const created = results.filter((r) => r.status === 201).map((r) => r.id as string);
    for (const id of created) assert.equal((await getJob(s, id)).status, "pending");
    // The chain's cap (3) counted the batch's items one by one: three created in it, the fourth refused.
    assert.equal(created.length, 3);
  });

  test("refuses the whole request only for what is not a batch: 401 without an assertion, 400 for a bad envelope", async (t) => {
    const s = await startService(t);
    const noToken = await s.inject({ method: "POST", url: "/jobs/batch", payload: { jobs: [buildReport()] } });
    assertError(noToken, 401, "invalid_assertion");
    for (const payload of [{ jobs: [] }, {}, { jobs: {} }, { jobs: [buildReport()], extra: true }, []]) {
      assertError(await postBatch(s, [], { payload }), 400, "invalid_request");
    }
    assertError(
      await postBatch(s, [], { payload: { jobs: Array.from({ length: 1001 }, () => buildReport()) } }),
      400,
      "invalid_request",
    );
    const notJson = await s.inject({
      method: "POST",
      url: "/jobs/batch",
      token: await s.assertion(),
      payload: "{",
      headers: { "content-type": "application/json" },
    });
    assertError(notJson, 400, "invalid_request");
    assert.equal((await s.service.store.jobList({ limit: 10 })).length, 0);
  });

  test("a batch body over limits.batch_body_bytes is 413 body_too_large; a larger batch than POST /jobs takes is accepted", async (t) => {
    const s = await startService(t, {
      configure: (raw) => void (raw["limits"] = { batch_body_bytes: 4096 }),
    });
    const big = Array.from({ length: 60 }, () => buildReport({ request: { body: { pad: "x".repeat(40) } } }));
    assertError(await postBatch(s, big), 413, "body_too_large");
    assert.equal((await batch(s, big.slice(0, 10))).filter((r) => r.status === 201).length, 10);
  });

  test("a batch past limits.batch_bytes_in_flight is refused 503 unavailable with Retry-After, unread; the bytes come back once a batch is answered or refused", async (t) => {
    // Room for 3,000 bytes of bodies beside two batches' items: two batches of 2,000 bytes do not fit together, one of
    // 2,000 and one of 500 do.
    const s = await startService(t, {
      configure: (raw) =>
        void (raw["limits"] = { batch_body_bytes: 4096, batch_bytes_in_flight: 2 * BATCH_ITEMS_BYTES + 3000 }),
    });
    const padded = (bytes: number, tag: string) => {
      const jobs = [buildReport({ request: { body: { tag, pad: "" } } })];
      const pad = bytes - JSON.stringify({ jobs }).length;
      return [buildReport({ request: { body: { tag, pad: "x".repeat(pad) } } })];
    };
    const [a, b, c] = [padded(2000, "a"), padded(2000, "b"), padded(500, "c")];
    assert.deepEqual(
      [a, b, c].map((jobs) => JSON.stringify({ jobs }).length),
      [2000, 2000, 500],
    );

    // Holds the next batch in the store until released: its bytes are in flight meanwhile.
    const store = s.service.store;
    const insertMany = store.jobInsertMany.bind(store);
    let hold: { entered: () => void; gate: Promise<void> } | undefined;
    store.jobInsertMany = async (params) => {
      const held = hold;
      hold = undefined;
      if (held) {
        held.entered();
        await held.gate;
      }
      return insertMany(params);
    };
    const holdNext = async (jobs: unknown[]) => {
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const entered = new Promise<void>((resolve) => (hold = { entered: resolve, gate }));
      const answer = postBatch(s, jobs);
      await entered;
      return { release, answer };
    };
    const tags = async () =>
      (await store.jobList({ limit: 100 })).map((job) => (job.request.body as { tag: string }).tag).sort();

    const first = await holdNext(a);
    const busy = await postBatch(s, b);
    assertError(busy, 503, "unavailable");
    assert.equal(busy.headers["retry-after"], "1");
    assert.match((busy.json() as { message: string }).message, /limits\.batch_bytes_in_flight/);
    assert.equal((await postBatch(s, c)).statusCode, 200, "500 bytes fit beside the 2,000 in flight");
    const oversize = await postBatch(s, padded(5000, "e"));
    assertError(oversize, 413, "body_too_large");
    assert.match(
      (oversize.json() as { message: string }).message,
      /limits\.batch_body_bytes \(4096 bytes\)/,
      "413 comes before 503",
    );
    // Without a content-length, a batch counts as the largest body it may be.
    const token = await s.assertion();
    const chunked = () =>
      s.inject({
        method: "POST",
        url: "/jobs/batch",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        payload: Readable.from([Buffer.from(JSON.stringify({ jobs: c }))]),
      });
    assertError(await chunked(), 503, "unavailable");
    first.release();
    assert.equal((await first.answer).statusCode, 200);
    assert.equal((await postBatch(s, b)).statusCode, 200, "the first batch's bytes came back");
    assert.equal((await chunked()).statusCode, 200);
    assert.deepEqual(await tags(), ["a", "b", "c", "c"]);

    // Batches refused after their bytes were taken (not JSON, not a batch, too large while being read) give them back.
    const notJson = `{"jobs": [${" ".repeat(1988)}`;
    for (let i = 0; i < 4; i++) {
      assertError(
        await postBatch(s, [], { payload: notJson, headers: { "content-type": "application/json" } }),
        400,
        "invalid_request",
      );
      assertError(await postBatch(s, [], { payload: { jobs: [], pad: "x".repeat(1980) } }), 400, "invalid_request");
      const tooLarge = await s.inject({
        method: "POST",
        url: "/jobs/batch",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        payload: Readable.from([Buffer.from(JSON.stringify({ jobs: padded(5000, "d") }))]),
      });
      assertError(tooLarge, 413, "body_too_large");
    }
    const again = await holdNext(a);
    assertError(await postBatch(s, b), 503, "unavailable");
    assert.equal((await postBatch(s, c)).statusCode, 200, "no refused batch kept its bytes");
    again.release();
    assert.equal((await again.answer).statusCode, 200);
  });

  test("a batch whose client goes away while its body is being read gives its bytes back, and the node serves on", async (t) => {
    // Room for one batch at a time.
    const s = await startService(t, {
      configure: (raw) =>
        void (raw["limits"] = { batch_body_bytes: 4096, batch_bytes_in_flight: 4096 + BATCH_ITEMS_BYTES }),
    });
    await s.service.app.listen({ host: "127.0.0.1", port: 0 });
    const { port } = s.service.app.server.address() as AddressInfo;
    const body = Buffer.from(JSON.stringify({ jobs: [buildReport({ request: { body: { pad: "x".repeat(1900) } } })] }));
    const headers = {
      "content-type": "application/json",
      authorization: `Bearer ${await s.assertion()}`,
      "content-length": String(body.length),
    };
    const send = () =>
      new Promise<number>((resolve, reject) => {
        const req = httpRequest({ host: "127.0.0.1", port, path: "/jobs/batch", method: "POST", headers }, (res) => {
          res.resume();
          res.on("end", () => resolve(res.statusCode ?? 0));
        });
        req.on("error", reject);
        req.end(body);
      });
    let halfSocket: Socket | undefined;
    s.service.app.server.on("request", (req: { headers: Record<string, unknown>; socket: Socket }) => {
      if (req.headers["x-test"] === "half") halfSocket = req.socket;
    });
    const half = httpRequest({
      host: "127.0.0.1",
      port,
      path: "/jobs/batch",
      method: "POST",
      headers: { ...headers, "x-test": "half" },
    });
    half.on("error", () => undefined);
    half.write(body.subarray(0, 500));
    // Its bytes are taken once its assertion checked out: from then on, another batch is refused.
    let answer = await send();
    for (let tries = 0; answer !== 503 && tries < 100; tries++) answer = await send();
    assert.equal(answer, 503);
    assert.ok(halfSocket);
    // Closed with the parser's error (the body ended short), which events.once would throw: wait for the close alone.
    const closed = new Promise((resolve) => halfSocket?.once("close", resolve));
    half.destroy();
    await closed;
    answer = await send();
    for (let tries = 0; answer !== 200 && tries < 100; tries++) answer = await send();
    assert.equal(answer, 200, "the bytes of the batch whose client went away came back");
  });

  test("an item the database fails to store is answered 500 alone, and the items beside it are stored", async (t) => {
    const s = await startService(t);
    // The real store, given a batch whose second job reuses the first one's id: the database refuses one of the two
    // (on PostgreSQL, retried item by item, either may be the one), and nothing else.
    const store = s.service.store;
    const jobInsertMany = store.jobInsertMany.bind(store);
    store.jobInsertMany = async ({ jobs }) =>
      jobInsertMany({ jobs: jobs.map((job, i) => (i === 1 ? { ...job, id: jobs[0]?.id ?? job.id } : job)) });
    const results = await batch(s, [
      buildReport({ request: { body: { i: 0 } } }),
      buildReport({ request: { body: { i: 1 } } }),
      buildReport(),
    ]);
    const statuses = results.map((result) => result.status).sort();
    assert.deepEqual(statuses, [201, 201, 500], JSON.stringify(results));
    const failed = results.find((result) => result.status === 500);
    assert.equal(failed?.code, "internal");
    assert.match(failed?.message ?? "", /not enqueued/);
    for (const result of results.filter((r) => r.status === 201))
      assert.equal((await getJob(s, result.id as string)).status, "pending");
    assert.equal((await store.jobList({ limit: 10 })).length, 2);
  });

  test("a telemetry subscriber that throws does not turn a committed batch or enqueue into a 500, nor silence the others", async (t) => {
    const { logger, lines: logged } = capturedLogger("error");
    const s = await startService(t, { logger });
    s.service.telemetry.on("job:enqueued", () => {
      throw new Error("a broken subscriber");
    });
    const heard: string[] = [];
    s.service.telemetry.on("job:enqueued", (event) => heard.push(event.outcome));
    const results = await batch(s, [buildReport(), buildReport()]);
    assert.deepEqual(
      results.map((result) => result.status),
      [201, 201],
    );
    const single = await postJob(s, buildReport());
    assert.equal(single.statusCode, 201, single.body);
    assert.deepEqual(heard, ["created", "created", "created"]);
    assert.equal((await s.service.store.jobList({ limit: 10 })).length, 3);
    // Each throw is reported, naming the event.
    const reports = logged.filter(
      (line) => line["msg"] === "a telemetry subscriber failed; what it was told of stands",
    );
    assert.deepEqual(
      reports.map((line) => line["event"]),
      ["job:enqueued", "job:enqueued", "job:enqueued"],
    );
  });

  test("a thousand jobs in one batch are all created, under the assertion's caller", async (t) => {
    const s = await startService(t);
    const results = await batch(
      s,
      Array.from({ length: 1000 }, (_, i) => buildReport({ request: { body: { i } } })),
      { sub: "u7", rid: "bulk-1" },
    );
    assert.equal(results.filter((r) => r.status === 201).length, 1000);
    const job = await getJob(s, results[999]?.id as string);
    assert.equal(job.user_id, "u7");
    assert.equal(job.original_request_id, "bulk-1");
    assert.deepEqual(job.request, { body: { i: 999 } });
  });
});

describe("Idempotency-Key", () => {
  test("the same key again answers 200 with the job it created, marked replayed, even after the job ran", async (t) => {
    const s = await startService(t);
    const first = await s.inject({
      method: "POST",
      url: "/jobs",
      token: await s.assertion(),
      payload: buildReport(),
      headers: { "idempotency-key": "order-17" },
    });
    assert.equal(first.statusCode, 201, first.body);
    assert.equal(first.headers["idempotent-replayed"], undefined);
    const job = (first.json() as { job: Job }).job;
    await driveTo(s, job.id, "succeeded");
    const again = await s.inject({
      method: "POST",
      url: "/jobs",
      token: await s.assertion({ rid: "req-2" }),
      payload: buildReport(),
      headers: { "idempotency-key": "order-17" },
    });
    assert.equal(again.statusCode, 200, again.body);
    assert.equal(again.headers["idempotent-replayed"], "true");
    assert.equal((again.json() as { job: Job }).job.id, job.id);
    assert.equal((again.json() as { job: Job }).job.status, "succeeded");
    assert.equal((await s.service.store.jobList({ limit: 10 })).length, 1);
  });

  test("the body's idempotency_key works as the header does, in batches too; a key is the caller's own", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, buildReport({ idempotency_key: "k1" }));
    const replay = await postJob(s, buildReport({ idempotency_key: "k1" }));
    assert.equal(replay.statusCode, 200);
    assert.equal((replay.json() as { job: Job }).job.id, job.id);
    const results = await batch(s, [buildReport({ idempotency_key: "k1" }), buildReport({ idempotency_key: "k2" })]);
    assert.deepEqual(
      results.map((r) => [r.status, r.replayed ?? false]),
      [
        [200, true],
        [201, false],
      ],
    );
    assert.equal(results[0]?.id, job.id);
    const otherUser = await enqueue(s, buildReport({ idempotency_key: "k1" }), { sub: "u2" });
    assert.notEqual(otherUser.id, job.id, "another user's key of the same name is another key");
  });

  test("the same key with another request is 422 idempotency_key_reused; header and body must agree; a malformed key is 400", async (t) => {
    const s = await startService(t);
    await enqueue(s, buildReport({ idempotency_key: "k1" }));
    assertError(await postJob(s, buildReport({ idempotency_key: "k1", priority: 5 })), 422, "idempotency_key_reused");
    const mismatch = await s.inject({
      method: "POST",
      url: "/jobs",
      token: await s.assertion(),
      payload: buildReport({ idempotency_key: "a" }),
      headers: { "idempotency-key": "b" },
    });
    assertError(mismatch, 400, "invalid_request");
    const malformed = await s.inject({
      method: "POST",
      url: "/jobs",
      token: await s.assertion(),
      payload: buildReport(),
      headers: { "idempotency-key": "has space" },
    });
    assertError(malformed, 400, "invalid_request");
    assertError(await postJob(s, buildReport({ idempotency_key: "" })), 400, "invalid_request");
  });

  test("a refused enqueue does not use its key up, whether the service or the store refused it", async (t) => {
    const s = await startService(t, { configure: (raw) => void (raw["limits"] = { spawn_cap: 1 }) });
    // Each refusal by the same caller (createUser, u1) as the enqueue after it, which sends another request under the
    // key: had the refusal taken the key, that would be 422 idempotency_key_reused.
    assertError(
      await postJob(s, {
        operation_id: "recordEmailSent",
        request: { path_params: { emailId: "1" } },
        idempotency_key: "k1",
      }),
      403,
      "trigger_not_allowed",
    );
    assert.equal((await postJob(s, welcomeEmail({ idempotency_key: "k1" }), { rid: "r-1" })).statusCode, 201);
    // The store's refusals: a dedupe key held by a job of another operation, and a chain at its spawn cap.
    assert.equal((await postJob(s, buildReport({ dedupe_key: "dk" }), { rid: "r-2" })).statusCode, 201);
    assertError(
      await postJob(s, welcomeEmail({ dedupe_key: "dk", idempotency_key: "k2" }), { rid: "r-3" }),
      409,
      "dedupe_conflict",
    );
    assertError(await postJob(s, buildReport({ idempotency_key: "k3" }), { rid: "r-1" }), 429, "spawn_cap_exceeded");
    assert.equal(
      (await postJob(s, buildReport({ request: { body: { n: 2 } }, idempotency_key: "k2" }), { rid: "r-4" }))
        .statusCode,
      201,
    );
    assert.equal(
      (await postJob(s, buildReport({ request: { body: { n: 3 } }, idempotency_key: "k3" }), { rid: "r-5" }))
        .statusCode,
      201,
    );
  });
});

describe("expiry", () => {
  test("ttl_ms and expires_at set when a job expires; the wire form keeps the contract's fields", async (t) => {
    const s = await startService(t);
    const now = s.clock.now();
    const relative = await enqueue(s, buildReport({ ttl_ms: 60_000 }));
    const absolute = await enqueue(s, buildReport({ expires_at: new Date(now + 120_000).toISOString() }));
    assert.deepEqual(Object.keys(relative).sort(), [...JOB_FIELDS]);
    assert.equal((await s.service.store.jobGet({ id: relative.id }))?.expiresAt, now + 60_000);
    assert.equal((await s.service.store.jobGet({ id: absolute.id }))?.expiresAt, now + 120_000);
  });

  test("an expiry at or before the job's run time is 400 invalid_request", async (t) => {
    const s = await startService(t);
    const now = s.clock.now();
    assertError(await postJob(s, buildReport({ ttl_ms: 1000, delay_ms: 1000 })), 400, "invalid_request");
    assertError(await postJob(s, buildReport({ expires_at: new Date(now).toISOString() })), 400, "invalid_request");
    assertError(
      await postJob(
        s,
        buildReport({ run_at: new Date(now + 10_000).toISOString(), expires_at: new Date(now + 5000).toISOString() }),
      ),
      400,
      "invalid_request",
    );
    assertError(await postJob(s, buildReport({ ttl_ms: 0 })), 400, "invalid_request");
    assert.equal((await postJob(s, buildReport({ ttl_ms: 2000, delay_ms: 1000 }))).statusCode, 201);
  });

  test("a job past its expiry ends cancelled with terminal reason expired, never delivered", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, buildReport({ ttl_ms: 1000, delay_ms: 500 }));
    s.clock.advance(1000);
    assert.deepEqual(await s.service.store.jobClaimMany({ limit: 10 }), []);
    await s.service.store.jobExpireMany({ limit: 10 });
    const expired = await getJob(s, job.id);
    assert.equal(expired.status, "cancelled");
    assert.deepEqual(expired.result, { error_body: null, terminal_reason: "expired" });
    assert.equal(expired.attempt, 0);
  });
});

describe("traceparent", () => {
  test("a valid traceparent is kept with the job; an invalid one is ignored and the enqueue goes on", async (t) => {
    const s = await startService(t);
    const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const kept = await s.inject({
      method: "POST",
      url: "/jobs",
      token: await s.assertion(),
      payload: buildReport(),
      headers: { traceparent },
    });
    assert.equal(kept.statusCode, 201);
    const keptJob = (kept.json() as { job: Job }).job;
    assert.equal((await s.service.store.jobGet({ id: keptJob.id }))?.traceparent, traceparent);
    for (const bad of [
      "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
      "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
      "junk",
    ]) {
      const res = await s.inject({
        method: "POST",
        url: "/jobs",
        token: await s.assertion(),
        payload: buildReport(),
        headers: { traceparent: bad },
      });
      assert.equal(res.statusCode, 201);
      assert.equal((await s.service.store.jobGet({ id: (res.json() as { job: Job }).job.id }))?.traceparent, null);
    }
  });

  test("a chained job carries its parent's trace context unless the call sends its own", async (t) => {
    const s = await startService(t);
    const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const parentRes = await s.inject({
      method: "POST",
      url: "/jobs",
      token: await s.assertion(),
      payload: welcomeEmail(),
      headers: { traceparent },
    });
    const parent = (parentRes.json() as { job: Job }).job;
    await driveTo(s, parent.id, "running");
    const child = await enqueue(
      s,
      { operation_id: "recordEmailSent", request: { path_params: { emailId: "42" } } },
      { op: "sendWelcomeEmail", job: parent.id },
    );
    assert.equal((await s.service.store.jobGet({ id: child.id }))?.traceparent, traceparent);
  });
});

describe("GET /jobs/{id}/extensions", () => {
  test("answers the rate key, expiry and trace context a job keeps beyond its wire form; site admins only", async (t) => {
    const s = await startService(t);
    const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const res = await s.inject({
      method: "POST",
      url: "/jobs",
      token: await s.assertion(),
      payload: buildReport({ rate_key: "tenant-9", ttl_ms: 60_000 }),
      headers: { traceparent },
    });
    const job = (res.json() as { job: Job }).job;
    const extensions = await s.inject({
      method: "GET",
      url: `/jobs/${job.id}/extensions`,
      token: await s.adminToken(),
    });
    assert.equal(extensions.statusCode, 200, extensions.body);
    assert.deepEqual(extensions.json(), {
      extensions: {
        rate_key: "tenant-9",
        expires_at: new Date(s.clock.now() + 60_000).toISOString(),
        traceparent,
        async: null,
        progress: null,
      },
    });
    const plain = await enqueue(s, buildReport());
    const none = await s.inject({ method: "GET", url: `/jobs/${plain.id}/extensions`, token: await s.adminToken() });
    assert.deepEqual(none.json(), {
      extensions: { rate_key: null, expires_at: null, traceparent: null, async: null, progress: null },
    });
    assertError(
      await s.inject({ method: "GET", url: "/jobs/nope1234/extensions", token: await s.adminToken() }),
      404,
      "job_not_found",
    );
    assertError(
      await s.inject({
        method: "GET",
        url: `/jobs/${job.id}/extensions`,
        token: await s.adminToken({ siteAdmin: false }),
      }),
      403,
      "site_admin_required",
    );
  });
});

/**
 * POST /jobs against docs/api.md, "Enqueue, step by step": every step, every status and code, and that the
 * first failing step is the one that answers. One fresh service per test.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mintToken } from "../../src/auth/tokens.js";
import type { Job } from "../../src/job/schemas.js";
import type { TestService } from "../helpers/service.js";
import {
  assertError,
  buildReport,
  driveTo,
  enqueue,
  getJob,
  iso,
  JOB_FIELDS,
  postJob,
  RFC3339_MS_UTC,
  startService,
  welcomeEmail,
} from "../helpers/jobs.js";

/** A config change: the spawn cap of every chain. */
const spawnCap =
  (cap: number) =>
  (raw: Record<string, unknown>): void => {
    raw["limits"] = { spawn_cap: cap };
  };

const REQUEST_AUTHORITY = { kind: "request", request_id: "imported-7", user_id: "u9" };
const RESOURCE_AUTHORITY = { kind: "resource", resource_id: "org-3", resource_kind: "organization", user_id: "u9" };
const CRON_AUTHORITY = { kind: "cron", cron_job_name: "nightly", user_id: "u9" };

/** An enqueue body sent by `importUsers` on behalf of u9. */
function onBehalfOf(authority: Record<string, unknown>, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return welcomeEmail({ on_behalf_of: { user_id: "u9", authority }, ...extra });
}

/** POSTs a raw body text with a content type. */
async function postRaw(
  s: TestService,
  payload: string,
  token?: string,
): Promise<Awaited<ReturnType<TestService["inject"]>>> {
  return s.inject({
    method: "POST",
    url: "/jobs",
    token: token ?? (await s.assertion()),
    payload,
    headers: { "content-type": "application/json" },
  });
}

/** Counts every job of the service. */
async function countJobs(s: TestService): Promise<number> {
  return (await s.service.store.jobList({ limit: 10_000 })).length;
}

describe("step 1: 401 invalid_assertion", () => {
  test("returns 401 invalid_assertion when the Authorization header is missing", async (t) => {
    const s = await startService(t);
    const res = await s.inject({ method: "POST", url: "/jobs", payload: welcomeEmail() });
    assertError(res, 401, "invalid_assertion");
  });

  test("returns 401 invalid_assertion for a garbage token or a non-Bearer scheme", async (t) => {
    const s = await startService(t);
    for (const authorization of [
      "Bearer not-a-jwt",
      "Bearer a.b.c",
      "Basic dXNlcjpwYXNz",
      "Bearer",
      await s.assertion(),
    ]) {
      const res = await s.inject({ method: "POST", url: "/jobs", payload: welcomeEmail(), headers: { authorization } });
      assertError(res, 401, "invalid_assertion");
    }
  });

  test("returns 401 invalid_assertion for an expired assertion", async (t) => {
    const s = await startService(t);
    const token = await s.assertion();
    s.clock.advance((300 + 30 + 1) * 1000);
    const res = await s.inject({ method: "POST", url: "/jobs", token, payload: welcomeEmail() });
    assertError(res, 401, "invalid_assertion");
  });

  test("returns 401 invalid_assertion for an assertion minted for another audience", async (t) => {
    const s = await startService(t);
    const token = await mintToken({
      auth: s.config.auth,
      clock: s.clock,
      sub: "u1",
      op: "createUser",
      rid: "req-1",
      extraClaims: { aud: "x" },
    });
    const res = await s.inject({ method: "POST", url: "/jobs", token, payload: welcomeEmail() });
    assertError(res, 401, "invalid_assertion");
  });

  test("returns 401 invalid_assertion for an assertion signed with another secret", async (t) => {
    const s = await startService(t);
    const token = await mintToken({
      auth: {
        ...s.config.auth,
        keys: [{ kid: "k1", alg: "HS256", secret: "a-different-secret-of-at-least-32-bytes" }],
      },
      clock: s.clock,
      sub: "u1",
      op: "createUser",
      rid: "req-1",
    });
    const res = await s.inject({ method: "POST", url: "/jobs", token, payload: welcomeEmail() });
    assertError(res, 401, "invalid_assertion");
  });

  test("returns 401 invalid_assertion for an assertion with neither rid nor job, or without op", async (t) => {
    const s = await startService(t);
    const base = { auth: s.config.auth, clock: s.clock, sub: "u1" };
    for (const token of [
      await mintToken({ ...base, op: "createUser" }),
      await mintToken({ ...base, rid: "req-1", ttlSeconds: 300 }),
    ]) {
      const res = await s.inject({ method: "POST", url: "/jobs", token, payload: welcomeEmail() });
      assertError(res, 401, "invalid_assertion");
    }
  });

  test("returns 401 invalid_assertion for an assertion that lives longer than 300 s", async (t) => {
    const s = await startService(t);
    const res = await postJob(s, welcomeEmail(), { ttlSeconds: 301 });
    assertError(res, 401, "invalid_assertion");
  });

  test("returns 401 invalid_assertion for an assertion naming a job that does not exist", async (t) => {
    const s = await startService(t);
    const res = await postJob(s, welcomeEmail(), { op: "sendWelcomeEmail", job: "doesNotExist01" });
    assertError(res, 401, "invalid_assertion");
  });

  test("answers 401 before anything else: an unauthenticated request that is also schema-invalid, not JSON, too large or of another media type gets 401", async (t) => {
    const s = await startService(t);
    const bad = await s.inject({ method: "POST", url: "/jobs", payload: { operation_id: 7, nonsense: true } });
    assertError(bad, 401, "invalid_assertion");
    const notJson = await s.inject({
      method: "POST",
      url: "/jobs",
      payload: "{not json",
      headers: { "content-type": "application/json" },
    });
    assertError(notJson, 401, "invalid_assertion");
    const unknownOp = await s.inject({
      method: "POST",
      url: "/jobs",
      headers: { authorization: "Bearer garbage" },
      payload: { operation_id: "nope", request: {} },
    });
    assertError(unknownOp, 401, "invalid_assertion");
    const tooLarge = await s.inject({
      method: "POST",
      url: "/jobs",
      payload: "x".repeat(2 * 1024 * 1024),
      headers: { "content-type": "application/json" },
    });
    assertError(tooLarge, 401, "invalid_assertion");
    const wrongType = await s.inject({
      method: "POST",
      url: "/jobs",
      payload: "x",
      headers: { "content-type": "text/plain" },
    });
    assertError(wrongType, 401, "invalid_assertion");
    assert.equal(await countJobs(s), 0);
  });
});

describe("step 2: 400 invalid_request", () => {
  test("returns 400 invalid_request for an unknown top-level field", async (t) => {
    const s = await startService(t);
    assertError(await postJob(s, welcomeEmail({ colour: "blue" })), 400, "invalid_request");
  });

  test("returns 400 invalid_request for an unknown field inside request", async (t) => {
    const s = await startService(t);
    const res = await postJob(s, {
      operation_id: "sendWelcomeEmail",
      request: { path_params: { userId: "1" }, headers: {} },
    });
    assertError(res, 400, "invalid_request");
  });

  test("returns 400 invalid_request when operation_id or request is missing or mistyped", async (t) => {
    const s = await startService(t);
    const bodies: unknown[] = [
      { request: { path_params: { userId: "1" } } },
      { operation_id: "sendWelcomeEmail" },
      { operation_id: "", request: {} },
      { operation_id: 12, request: {} },
      { operation_id: "sendWelcomeEmail", request: "hello" },
      { operation_id: "sendWelcomeEmail", request: null },
      { operation_id: "sendWelcomeEmail", request: { path_params: ["42"] } },
      { operation_id: "sendWelcomeEmail", request: { path_params: { userId: "1" }, query: "a=b" } },
    ];
    for (const body of bodies) assertError(await postJob(s, body), 400, "invalid_request");
    assert.equal(await countJobs(s), 0);
  });

  test("returns 400 invalid_request for a body that is not an object, not JSON, or empty", async (t) => {
    const s = await startService(t);
    for (const text of ["[]", '"x"', "42", "null", "true", "{", '{"operation_id": "sendWelcomeEmail",}', ""]) {
      assertError(await postRaw(s, text), 400, "invalid_request");
    }
    const noBody = await s.inject({ method: "POST", url: "/jobs", token: await s.assertion() });
    assertError(noBody, 400, "invalid_request");
  });

  test("returns 400 invalid_request, saying why, for a __proto__ or constructor.prototype key anywhere in the body", async (t) => {
    const s = await startService(t);
    for (const inner of ['{"__proto__": {"admin": true}}', '{"constructor": {"prototype": {"admin": true}}}']) {
      const res = await postRaw(s, `{"operation_id": "buildReport", "request": {"body": ${inner}}}`);
      assertError(res, 400, "invalid_request");
      assert.match((res.json() as { message: string }).message, /__proto__ or constructor\.prototype/);
    }
    assert.equal(await countJobs(s), 0);
  });

  test("returns 400 invalid_request for a priority that is not an integer in [-2^31, 2^31)", async (t) => {
    const s = await startService(t);
    for (const priority of [1.5, "1", 2 ** 31, -(2 ** 31) - 1, null, true]) {
      assertError(await postJob(s, welcomeEmail({ priority })), 400, "invalid_request");
    }
    for (const priority of [2 ** 31 - 1, -(2 ** 31), 0, -1]) {
      assert.equal((await enqueue(s, welcomeEmail({ priority }))).priority, priority);
    }
  });

  test("returns 400 invalid_request for a delay_ms that is negative or not an integer", async (t) => {
    const s = await startService(t);
    for (const delay_ms of [-1, 1.5, "10", null]) {
      assertError(await postJob(s, welcomeEmail({ delay_ms })), 400, "invalid_request");
    }
    assert.equal((await enqueue(s, welcomeEmail({ delay_ms: 0 }))).run_at, iso(s.clock.now()));
  });

  test("returns 400 invalid_request for a run_at that is not an RFC 3339 date-time", async (t) => {
    const s = await startService(t);
    const bad = [
      "tomorrow",
      "2026-11-21",
      "2026-11-21T12:00:00",
      "2026-13-01T00:00:00Z",
      "2026-11-21T25:00:00Z",
      "2026-02-29T12:00:00Z",
      "2026-11-21T13:00:00+0100",
      "2026-11-21T13:00:00+01",
      "2026-11-21 13:00:00Z",
      "2026-11-21T13:00Z",
      "21/11/2026 12:00",
      "",
      1_800_000_000_000,
      null,
    ];
    for (const run_at of bad) assertError(await postJob(s, welcomeEmail({ run_at })), 400, "invalid_request");
    assert.equal(await countJobs(s), 0);
  });

  test("returns 400 invalid_request for a dedupe_key of 0 or 256 characters, and accepts 1 and 255", async (t) => {
    const s = await startService(t);
    for (const dedupe_key of ["", "k".repeat(256), 0, ["k"]]) {
      assertError(await postJob(s, welcomeEmail({ dedupe_key })), 400, "invalid_request");
    }
    const long = "k".repeat(255);
    assert.equal((await enqueue(s, welcomeEmail({ dedupe_key: long }))).dedupe_key, long);
    assert.equal((await enqueue(s, welcomeEmail({ dedupe_key: "k" }))).dedupe_key, "k");
    assert.equal((await enqueue(s, welcomeEmail({ dedupe_key: null }))).dedupe_key, null);
  });

  test("returns 400 invalid_request for a concurrency_key of 0 or 256 characters, and accepts 255", async (t) => {
    const s = await startService(t);
    for (const concurrency_key of ["", "c".repeat(256), 5]) {
      assertError(await postJob(s, welcomeEmail({ concurrency_key })), 400, "invalid_request");
    }
    const long = "c".repeat(255);
    assert.equal((await enqueue(s, welcomeEmail({ concurrency_key: long }))).concurrency_key, long);
    assert.equal((await enqueue(s, welcomeEmail({ concurrency_key: null }))).concurrency_key, null);
  });
});

describe("step 2: 400 payload_too_large", () => {
  /** A request payload whose `JSON.stringify` is `{"body":"<text>"}`: 11 bytes plus the text's. */
  const payloadOf = (text: string) => ({ body: text });
  const bytesOf = (request: unknown) => Buffer.byteLength(JSON.stringify(request), "utf8");

  test("accepts a request payload of exactly 16384 UTF-8 bytes and refuses 16385", async (t) => {
    const s = await startService(t);
    const atCap = payloadOf("a".repeat(16384 - 11));
    assert.equal(bytesOf(atCap), 16384);
    const job = await enqueue(s, buildReport({ request: atCap }));
    assert.deepEqual(job.request, atCap);

    const overCap = payloadOf("a".repeat(16385 - 11));
    assert.equal(bytesOf(overCap), 16385);
    assertError(await postJob(s, buildReport({ request: overCap })), 400, "payload_too_large");
  });

  test("comes before invalid_on_behalf_of, whether on_behalf_of breaks its schema or names another user", async (t) => {
    const s = await startService(t);
    const overCap = payloadOf("a".repeat(16385 - 11));
    const authority = { kind: "request", request_id: "req-9", user_id: "u9" };
    for (const on_behalf_of of [
      { authority },
      { user_id: "u8", authority },
      { user_id: "u9", authority: { kind: "request" } },
    ]) {
      assertError(await postJob(s, buildReport({ request: overCap, on_behalf_of })), 400, "payload_too_large");
      // The same on_behalf_of with a small payload is its own error.
      assertError(await postJob(s, buildReport({ on_behalf_of })), 400, "invalid_on_behalf_of");
    }
  });

  test("counts path_params, query and body together", async (t) => {
    const s = await startService(t);
    const request = { path_params: { userId: "1" }, query: { q: "a".repeat(8000) }, body: "b".repeat(8400) };
    assert.ok(bytesOf(request) > 16384);
    assert.ok(JSON.stringify(request.body).length < 16384);
    assertError(await postJob(s, welcomeEmail({ request })), 400, "payload_too_large");
  });

  test("counts UTF-8 bytes, not characters: multi-byte payloads under 16384 characters can be too large", async (t) => {
    const s = await startService(t);
    for (const char of ["é", "😀"]) {
      const bytesPerChar = Buffer.byteLength(char, "utf8");
      // The smallest repetition whose payload passes the cap by one byte or more.
      const count = Math.floor((16384 - 11) / bytesPerChar) + 1;
      const request = payloadOf(char.repeat(count));
      assert.ok(JSON.stringify(request).length < 16384, "fewer than 16384 characters");
      assert.ok(bytesOf(request) > 16384, "more than 16384 bytes");
      assertError(await postJob(s, buildReport({ request })), 400, "payload_too_large");
    }
    const atCap = payloadOf(`${"é".repeat(8186)}a`);
    assert.equal(bytesOf(atCap), 16384);
    assert.deepEqual((await enqueue(s, buildReport({ request: atCap }))).request, atCap);
    assert.equal(await countJobs(s), 1);
  });
});

describe("step 2: 400 invalid_on_behalf_of", () => {
  const asImporter = { op: "importUsers", rid: "imp-1" };

  test("returns 400 invalid_on_behalf_of when user_id or authority is missing", async (t) => {
    const s = await startService(t);
    for (const on_behalf_of of [
      { authority: REQUEST_AUTHORITY },
      { user_id: "u9" },
      {},
      { user_id: "", authority: REQUEST_AUTHORITY },
    ]) {
      assertError(await postJob(s, welcomeEmail({ on_behalf_of }), asImporter), 400, "invalid_on_behalf_of");
    }
  });

  test("returns 400 invalid_on_behalf_of when the authority lacks a field of its kind", async (t) => {
    const s = await startService(t);
    const broken = [
      { kind: "request", user_id: "u9" },
      { kind: "resource", resource_id: "org-3", user_id: "u9" },
      { kind: "resource", resource_kind: "organization", user_id: "u9" },
      { kind: "cron", user_id: "u9" },
      { kind: "cron", cron_job_name: "nightly" },
      { kind: "request", request_id: "", user_id: "u9" },
    ];
    for (const authority of broken) {
      assertError(await postJob(s, onBehalfOf(authority), asImporter), 400, "invalid_on_behalf_of");
    }
  });

  test("returns 400 invalid_on_behalf_of for an unknown authority kind or extra fields", async (t) => {
    const s = await startService(t);
    for (const authority of [
      { kind: "webhook", request_id: "w1", user_id: "u9" },
      { request_id: "w1", user_id: "u9" },
      { ...REQUEST_AUTHORITY, assertion: "forged" },
    ]) {
      assertError(await postJob(s, onBehalfOf(authority), asImporter), 400, "invalid_on_behalf_of");
    }
    const extra = welcomeEmail({ on_behalf_of: { user_id: "u9", authority: REQUEST_AUTHORITY, why: "x" } });
    assertError(await postJob(s, extra, asImporter), 400, "invalid_on_behalf_of");
  });

  test("returns 400 invalid_on_behalf_of when authority.user_id differs from user_id", async (t) => {
    const s = await startService(t);
    for (const authority of [REQUEST_AUTHORITY, RESOURCE_AUTHORITY, CRON_AUTHORITY]) {
      const res = await postJob(s, onBehalfOf({ ...authority, user_id: "someone-else" }), asImporter);
      assertError(res, 400, "invalid_on_behalf_of");
    }
    assert.equal(await countJobs(s), 0);
  });

  test("answers 400 invalid_on_behalf_of before 403 on_behalf_of_not_allowed", async (t) => {
    const s = await startService(t);
    const res = await postJob(s, onBehalfOf({ kind: "request", user_id: "u9" }), { op: "createUser" });
    assertError(res, 400, "invalid_on_behalf_of");
  });
});

describe("step 2: 400 missing_path_param", () => {
  test("returns 400 missing_path_param when the target's path template needs a parameter that is absent", async (t) => {
    const s = await startService(t);
    for (const request of [
      {},
      { path_params: {} },
      { path_params: { user_id: "1" } },
      { path_params: { userId: null } },
    ]) {
      const res = await postJob(s, { operation_id: "sendWelcomeEmail", request });
      assertError(res, 400, "missing_path_param");
      assert.match(res.json().message, /userId/);
    }
    assert.equal(await countJobs(s), 0);
  });
});

describe("step 2: 400 invalid_path_param (Revision 2)", () => {
  test("returns 400 invalid_path_param for a path parameter that is empty, '.' or '..', creating nothing", async (t) => {
    const s = await startService(t);
    // [] and [".."] are delivered as their text ("" and ".."), so they are refused alike.
    for (const userId of ["", ".", "..", [], [".."]]) {
      const res = await postJob(s, welcomeEmail({ request: { path_params: { userId } } }));
      assertError(res, 400, "invalid_path_param");
      assert.match(res.json().message, /userId/);
    }
    assert.equal(await countJobs(s), 0);
  });

  test("accepts values that only look like dot segments once encoded: '...', '.x', '%2e%2e', 'a/..'", async (t) => {
    const s = await startService(t);
    for (const userId of ["...", ".x", "%2e%2e", "a/..", 0]) {
      await enqueue(s, welcomeEmail({ request: { path_params: { userId } } }));
    }
    assert.equal(await countJobs(s), 5);
  });

  test("answers 400 invalid_path_param before 422 and 403", async (t) => {
    const s = await startService(t);
    const dots = { request: { path_params: { userId: ".." } } };
    assertError(await postJob(s, welcomeEmail(dots), { op: "recordEmailSent" }), 400, "invalid_path_param");
  });
});

describe("steps 2 and 3: the first failing step answers", () => {
  test("answers 400 invalid_request, not 422, when the body is schema-invalid and the operation unknown", async (t) => {
    const s = await startService(t);
    assertError(await postJob(s, { operation_id: "nope", request: {}, extra: 1 }), 400, "invalid_request");
    assertError(await postJob(s, { operation_id: "nope", request: {}, priority: 0.5 }), 400, "invalid_request");
  });

  test("answers 400 payload_too_large, not 422, for an oversize payload to an unknown operation", async (t) => {
    const s = await startService(t);
    const res = await postJob(s, { operation_id: "nope", request: { body: "a".repeat(20_000) } });
    assertError(res, 400, "payload_too_large");
  });

  test("answers 400 missing_path_param, not 403, when the trigger map also refuses", async (t) => {
    const s = await startService(t);
    const res = await postJob(s, { operation_id: "sendWelcomeEmail", request: {} }, { op: "recordEmailSent" });
    assertError(res, 400, "missing_path_param");
  });
});

describe("step 3: 422", () => {
  test("returns 422 unknown_operation for an operation that is not in the OpenAPI document", async (t) => {
    const s = await startService(t);
    assertError(await postJob(s, { operation_id: "deleteEverything", request: {} }), 422, "unknown_operation");
  });

  test("returns 422 operation_not_background for an operation without the background tag", async (t) => {
    const s = await startService(t);
    const getUser = { operation_id: "getUser", request: { path_params: { userId: "1" } } };
    assertError(await postJob(s, getUser), 422, "operation_not_background");
    assertError(await postJob(s, { operation_id: "createUser", request: {} }), 422, "operation_not_background");
    assert.equal(await countJobs(s), 0);
  });

  test("answers 422, not 403, when the operation is unknown and the trigger map would refuse it anyway", async (t) => {
    const s = await startService(t);
    const claims = { op: "someUnlistedCaller" };
    assertError(await postJob(s, { operation_id: "nope", request: {} }, claims), 422, "unknown_operation");
    const getUser = { operation_id: "getUser", request: { path_params: { userId: "1" } } };
    assertError(await postJob(s, getUser, claims), 422, "operation_not_background");
  });
});

describe("step 4: 403", () => {
  test("returns 403 trigger_not_allowed when the trigger map does not let op enqueue the target", async (t) => {
    const s = await startService(t);
    const recordEmail = { operation_id: "recordEmailSent", request: { path_params: { emailId: "e1" } } };
    assertError(await postJob(s, recordEmail, { op: "createUser" }), 403, "trigger_not_allowed");
    assertError(await postJob(s, buildReport(), { op: "getUser" }), 403, "trigger_not_allowed");
    assertError(await postJob(s, buildReport(), { op: "cron:other" }), 403, "trigger_not_allowed");
    assert.equal(await countJobs(s), 0);
  });

  test("returns 403 on_behalf_of_not_allowed when op is not listed under on_behalf_of", async (t) => {
    const s = await startService(t);
    const res = await postJob(s, onBehalfOf(REQUEST_AUTHORITY), { op: "createUser" });
    assertError(res, 403, "on_behalf_of_not_allowed");
    assert.equal(await countJobs(s), 0);
  });

  test("returns 403 on_behalf_of_not_allowed for a chained call, even from an op listed under on_behalf_of", async (t) => {
    const s = await startService(t, {
      configure: (raw) => {
        raw["on_behalf_of"] = ["importUsers", "sendWelcomeEmail"];
      },
    });
    const parent = await enqueue(s, welcomeEmail());
    const res = await postJob(
      s,
      {
        operation_id: "recordEmailSent",
        request: { path_params: { emailId: "e1" } },
        on_behalf_of: { user_id: "u9", authority: REQUEST_AUTHORITY },
      },
      { op: "sendWelcomeEmail", sub: "u1", job: parent.id },
    );
    assertError(res, 403, "on_behalf_of_not_allowed");
    assert.equal(await countJobs(s), 1);
  });

  test("returns 403 chain_mismatch when the parent job's operation is not the assertion's op", async (t) => {
    const s = await startService(t);
    const parent = await enqueue(s, welcomeEmail());
    // recordEmailSent may enqueue buildReport, but the parent runs sendWelcomeEmail.
    const res = await postJob(s, buildReport(), { op: "recordEmailSent", sub: "u1", job: parent.id });
    assertError(res, 403, "chain_mismatch");
  });

  test("returns 403 chain_mismatch when the parent job's user is not the assertion's sub", async (t) => {
    const s = await startService(t);
    const parent = await enqueue(s, welcomeEmail(), { sub: "u1" });
    const res = await postJob(s, welcomeEmail(), { op: "sendWelcomeEmail", sub: "u2", job: parent.id });
    assertError(res, 403, "chain_mismatch");
    assert.equal(await countJobs(s), 1);
  });

  test("answers 403, not 200 or 409, when a refused caller names a held dedupe key", async (t) => {
    const s = await startService(t);
    const held = await enqueue(s, welcomeEmail({ dedupe_key: "k", request: { path_params: { userId: "1" } } }));
    const recordEmail = {
      operation_id: "recordEmailSent",
      request: { path_params: { emailId: "e1" } },
      dedupe_key: "k",
    };
    assertError(await postJob(s, recordEmail, { op: "createUser" }), 403, "trigger_not_allowed");
    const sameOp = welcomeEmail({ dedupe_key: "k", request: { path_params: { userId: "2" } } });
    assertError(await postJob(s, sameOp, { op: "recordEmailSent" }), 403, "trigger_not_allowed");
    assert.deepEqual(await getJob(s, held.id), held);
  });
});

describe("step 5: dedupe upsert and 409 dedupe_conflict", () => {
  test("returns 200 with the pending job holding the dedupe key, its run_at and request refreshed, the rest unchanged", async (t) => {
    const s = await startService(t);
    const first = await enqueue(
      s,
      welcomeEmail({
        dedupe_key: "k",
        delay_ms: 1000,
        priority: 5,
        request: { path_params: { userId: "1" }, body: { v: 1 } },
      }),
    );
    s.clock.advance(5000);
    const newRequest = { path_params: { userId: "1" }, query: { lang: "fr" }, body: { v: 2 } };
    const upserted = await enqueue(
      s,
      welcomeEmail({ dedupe_key: "k", delay_ms: 2000, priority: 9, concurrency_key: "c", request: newRequest }),
      {},
      200,
    );
    assert.equal(upserted.id, first.id);
    assert.equal(upserted.run_at, iso(s.clock.now() + 2000));
    assert.deepEqual(upserted.request, newRequest);
    assert.equal(upserted.status, "pending");
    assert.equal(upserted.attempt, 0);
    assert.equal(upserted.priority, 5);
    assert.equal(upserted.concurrency_key, null);
    assert.equal(upserted.dedupe_key, "k");
    assert.equal(upserted.created_at, first.created_at);
    assert.equal(upserted.max_attempts, first.max_attempts);
    assert.deepEqual(await getJob(s, first.id), upserted);
    assert.equal(await countJobs(s), 1);
  });

  test("sets run_at to the newly computed time even when it is earlier than before", async (t) => {
    const s = await startService(t);
    const first = await enqueue(s, welcomeEmail({ dedupe_key: "k", delay_ms: 3_600_000 }));
    s.clock.advance(1000);
    const upserted = await enqueue(s, welcomeEmail({ dedupe_key: "k" }), {}, 200);
    assert.equal(upserted.id, first.id);
    assert.equal(upserted.run_at, iso(s.clock.now()));
    const runAt = "2030-01-01T00:00:00.000Z";
    assert.equal((await enqueue(s, welcomeEmail({ dedupe_key: "k", run_at: runAt }), {}, 200)).run_at, runAt);
  });

  test("returns 200 with a retrying job holding the dedupe key, keeping its status and attempt", async (t) => {
    const s = await startService(t);
    const first = await enqueue(s, welcomeEmail({ dedupe_key: "k" }));
    await driveTo(s, first.id, "retrying");
    const retrying = await getJob(s, first.id);
    const upserted = await enqueue(s, welcomeEmail({ dedupe_key: "k", delay_ms: 10 }), {}, 200);
    assert.equal(upserted.id, first.id);
    assert.equal(upserted.status, "retrying");
    assert.equal(upserted.attempt, 1);
    assert.equal(upserted.run_at, iso(s.clock.now() + 10));
    assert.deepEqual(upserted.result, retrying.result);
  });

  test("treats dedupe keys as global: another chain of the same user upserts the same job, which keeps its chain", async (t) => {
    const s = await startService(t);
    const first = await enqueue(s, welcomeEmail({ dedupe_key: "k" }), { sub: "u1", rid: "req-1" });
    const upserted = await enqueue(s, welcomeEmail({ dedupe_key: "k" }), { sub: "u1", rid: "req-2" }, 200);
    assert.equal(upserted.id, first.id);
    assert.equal(upserted.user_id, "u1");
    assert.equal(upserted.original_request_id, "req-1");
  });

  test("does not charge the spawn cap for an upsert, which still succeeds when the chain is at its cap", async (t) => {
    const s = await startService(t, { configure: spawnCap(2) });
    const held = await enqueue(s, buildReport({ dedupe_key: "k" }));
    await enqueue(s, buildReport({ dedupe_key: "k" }), {}, 200);
    // The upsert used no slot: the chain can still create its second job.
    await enqueue(s, buildReport());
    // At the cap now: an upsert still answers 200, a new job 429.
    assert.equal((await enqueue(s, buildReport({ dedupe_key: "k" }), {}, 200)).id, held.id);
    assertError(await postJob(s, buildReport()), 429, "spawn_cap_exceeded");
    assert.equal(await countJobs(s), 2);
  });

  test("creates a new job beside a running job with the same dedupe key (201)", async (t) => {
    const s = await startService(t);
    const first = await enqueue(s, welcomeEmail({ dedupe_key: "k" }));
    const claimed = await s.service.store.jobClaimMany({ limit: 10 });
    assert.deepEqual(
      claimed.map((job) => job.id),
      [first.id],
    );
    const second = await enqueue(s, welcomeEmail({ dedupe_key: "k" }));
    assert.notEqual(second.id, first.id);
    assert.equal(second.status, "pending");
    assert.equal(second.dedupe_key, "k");
    assert.equal((await getJob(s, first.id)).status, "running");
  });

  test("creates a new job when the job with the same dedupe key is terminal (201)", async (t) => {
    const s = await startService(t);
    const first = await enqueue(s, welcomeEmail({ dedupe_key: "k" }));
    await driveTo(s, first.id, "dead");
    const second = await enqueue(s, welcomeEmail({ dedupe_key: "k" }));
    assert.notEqual(second.id, first.id);
    const cancelled = await s.inject({ method: "POST", url: `/jobs/${second.id}/cancel`, token: await s.adminToken() });
    assert.equal(cancelled.statusCode, 200, cancelled.body);
    assert.notEqual((await enqueue(s, welcomeEmail({ dedupe_key: "k" }))).id, second.id);
  });

  test("returns 409 dedupe_conflict when a claimable job of another operation holds the key, changing nothing", async (t) => {
    const s = await startService(t);
    const held = await enqueue(s, welcomeEmail({ dedupe_key: "k" }));
    s.clock.advance(1000);
    const res = await postJob(s, buildReport({ dedupe_key: "k", delay_ms: 99 }));
    assertError(res, 409, "dedupe_conflict");
    assert.deepEqual(await getJob(s, held.id), held);
    assert.equal(await countJobs(s), 1);
  });

  test("returns 409 dedupe_conflict when the job holding the key runs as another user, changing nothing (Revision 2)", async (t) => {
    const s = await startService(t);
    const held = await enqueue(
      s,
      welcomeEmail({ dedupe_key: "k", request: { path_params: { userId: "42" }, body: "a's" } }),
    );
    s.clock.advance(1000);
    const res = await postJob(
      s,
      welcomeEmail({ dedupe_key: "k", request: { path_params: { userId: "43" }, body: "b's" } }),
      {
        sub: "u2",
        rid: "req-b",
      },
    );
    assertError(res, 409, "dedupe_conflict");
    assert.match(res.json().message, new RegExp(held.id));
    assert.deepEqual(await getJob(s, held.id), held);
    assert.equal(await countJobs(s), 1);
  });

  test("returns 409 dedupe_conflict when the job holding the key runs under another kind of authority, changing nothing", async (t) => {
    const s = await startService(t);
    const held = await enqueue(s, onBehalfOf(RESOURCE_AUTHORITY, { dedupe_key: "k" }), { op: "importUsers" });
    const res = await postJob(s, onBehalfOf(REQUEST_AUTHORITY, { dedupe_key: "k", delay_ms: 5 }), {
      op: "importUsers",
    });
    assertError(res, 409, "dedupe_conflict");
    assert.deepEqual(await getJob(s, held.id), held);
    // The same user under the same kind of authority still upserts.
    const again = await postJob(s, onBehalfOf(RESOURCE_AUTHORITY, { dedupe_key: "k", delay_ms: 5 }), {
      op: "importUsers",
    });
    assert.equal(again.statusCode, 200, again.body);
  });

  test("answers 409 dedupe_conflict before 429 when the chain is also at its cap", async (t) => {
    const s = await startService(t, { configure: spawnCap(1) });
    await enqueue(s, welcomeEmail({ dedupe_key: "k" }));
    assertError(await postJob(s, buildReport({ dedupe_key: "k" })), 409, "dedupe_conflict");
    assertError(await postJob(s, buildReport({ dedupe_key: "other" })), 429, "spawn_cap_exceeded");
  });
});

describe("step 6: 429 spawn_cap_exceeded", () => {
  test("returns 429 spawn_cap_exceeded once the chain has created limits.spawn_cap jobs", async (t) => {
    const s = await startService(t, { configure: spawnCap(3) });
    const root = await enqueue(s, welcomeEmail());
    await enqueue(s, buildReport());
    // Chained jobs are in the same chain and count too.
    await enqueue(s, welcomeEmail(), { op: "sendWelcomeEmail", job: root.id });
    assertError(await postJob(s, buildReport()), 429, "spawn_cap_exceeded");
    assertError(await postJob(s, welcomeEmail(), { op: "sendWelcomeEmail", job: root.id }), 429, "spawn_cap_exceeded");
    assert.equal(await countJobs(s), 3);
    // Another chain has its own count.
    assert.equal((await enqueue(s, buildReport(), { rid: "req-2" })).original_request_id, "req-2");
  });

  test("counts every job ever created in the chain, whatever its status, cancelled included", async (t) => {
    const s = await startService(t, { configure: spawnCap(3) });
    const succeeded = await enqueue(s, buildReport());
    await driveTo(s, succeeded.id, "succeeded");
    const dead = await enqueue(s, buildReport());
    await driveTo(s, dead.id, "dead");
    const cancelled = await enqueue(s, buildReport());
    const cancel = await s.inject({ method: "POST", url: `/jobs/${cancelled.id}/cancel`, token: await s.adminToken() });
    assert.equal(cancel.statusCode, 200, cancel.body);
    // No job of the chain is active, yet the chain has used its three.
    assertError(await postJob(s, buildReport()), 429, "spawn_cap_exceeded");
  });

  test("counts jobs created already cancelled in a cancelled chain", async (t) => {
    const s = await startService(t, { configure: spawnCap(2) });
    const cancelChain = await s.inject({ method: "POST", url: "/chains/req-1/cancel", token: await s.adminToken() });
    assert.equal(cancelChain.statusCode, 200, cancelChain.body);
    assert.equal((await enqueue(s, buildReport())).status, "cancelled");
    assert.equal((await enqueue(s, buildReport())).status, "cancelled");
    assertError(await postJob(s, buildReport()), 429, "spawn_cap_exceeded");
  });
});

describe("step 7: 201 and the defaults of a new job", () => {
  test("creates a pending job with attempt 0, priority 0, run_at now and no result", async (t) => {
    const s = await startService(t);
    const res = await postJob(s, welcomeEmail());
    assert.equal(res.statusCode, 201, res.body);
    assert.match(String(res.headers["content-type"]), /^application\/json/);
    const job = (res.json() as { job: Job }).job;
    assert.equal(job.status, "pending");
    assert.equal(job.attempt, 0);
    assert.equal(job.priority, 0);
    assert.equal(job.run_at, iso(s.clock.now()));
    assert.equal(job.created_at, iso(s.clock.now()));
    assert.equal(job.started_at, null);
    assert.equal(job.finished_at, null);
    assert.equal(job.result, null);
    assert.equal(job.dedupe_key, null);
    assert.equal(job.concurrency_key, null);
    assert.match(job.id, /^[0-9A-Za-z_-]{8,32}$/);
    assert.deepEqual(job.request, { path_params: { userId: "42" } });
  });

  test("takes max_attempts from operations.X.max_attempts, else defaults.max_attempts", async (t) => {
    const s = await startService(t);
    assert.equal((await enqueue(s, welcomeEmail())).max_attempts, 8);
    assert.equal((await enqueue(s, buildReport())).max_attempts, 5);
  });

  test("sets run_at to now + delay_ms, to run_at when given, and lets delay_ms win over run_at", async (t) => {
    const s = await startService(t);
    s.clock.advance(1234);
    const now = s.clock.now();
    assert.equal((await enqueue(s, welcomeEmail({ delay_ms: 60_000 }))).run_at, iso(now + 60_000));
    assert.equal(
      (await enqueue(s, welcomeEmail({ run_at: "2030-05-06T07:08:09.123Z" }))).run_at,
      "2030-05-06T07:08:09.123Z",
    );
    // An offset is normalised to UTC; a past run_at is simply due at once.
    assert.equal(
      (await enqueue(s, welcomeEmail({ run_at: "2030-05-06T09:08:09+02:00" }))).run_at,
      "2030-05-06T07:08:09.000Z",
    );
    assert.equal(
      (await enqueue(s, welcomeEmail({ run_at: "2001-01-01T00:00:00Z" }))).run_at,
      "2001-01-01T00:00:00.000Z",
    );
    // RFC 3339 allows a lower-case t and z, and any fraction of a second.
    assert.equal(
      (await enqueue(s, welcomeEmail({ run_at: "2028-02-29t10:00:00.5z" }))).run_at,
      "2028-02-29T10:00:00.500Z",
    );
    const both = await enqueue(s, welcomeEmail({ delay_ms: 500, run_at: "2030-05-06T07:08:09.123Z" }));
    assert.equal(both.run_at, iso(now + 500));
  });

  test("keeps priority, dedupe_key, concurrency_key and request as sent", async (t) => {
    const s = await startService(t);
    const request = { path_params: { userId: 7 }, query: { a: [1, 2], b: null }, body: [{ x: "é😀" }] };
    const job = await enqueue(s, welcomeEmail({ priority: -3, dedupe_key: "d", concurrency_key: "c", request }));
    assert.equal(job.priority, -3);
    assert.equal(job.dedupe_key, "d");
    assert.equal(job.concurrency_key, "c");
    assert.deepEqual(job.request, request);
  });

  test("writes every time as RFC 3339 UTC with milliseconds", async (t) => {
    const s = await startService(t);
    s.clock.set(Date.UTC(2026, 10, 21, 23, 52, 7, 123));
    const job = await enqueue(s, welcomeEmail({ delay_ms: 1 }));
    assert.equal(job.created_at, "2026-11-21T23:52:07.123Z");
    assert.equal(job.run_at, "2026-11-21T23:52:07.124Z");
    for (const time of [job.created_at, job.run_at]) assert.match(time, RFC3339_MS_UTC);
  });
});

describe("authority and chain", () => {
  test("runs a root call without on_behalf_of as sub under a request authority of rid", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail(), { sub: "u7", op: "createUser", rid: "req-77" });
    assert.deepEqual(job.authority, { kind: "request", request_id: "req-77", user_id: "u7" });
    assert.equal(job.user_id, "u7");
    assert.equal(job.original_request_id, "req-77");
    assert.equal(job.enqueued_by_operation_id, "createUser");
    assert.equal(job.parent_job_id, null);
  });

  test("uses each kind of on_behalf_of authority verbatim, running as on_behalf_of.user_id", async (t) => {
    const s = await startService(t);
    for (const authority of [REQUEST_AUTHORITY, RESOURCE_AUTHORITY, CRON_AUTHORITY]) {
      const job = await enqueue(s, onBehalfOf(authority), { sub: "importer", op: "importUsers", rid: "imp-1" });
      assert.deepEqual(job.authority, authority);
      assert.equal(job.user_id, "u9");
      assert.equal(job.original_request_id, "imp-1");
      assert.equal(job.enqueued_by_operation_id, "importUsers");
      assert.equal(job.parent_job_id, null);
    }
  });

  test("copies the parent's authority of each kind, user_id and original_request_id into a chained job", async (t) => {
    const s = await startService(t);
    for (const [i, authority] of [REQUEST_AUTHORITY, RESOURCE_AUTHORITY, CRON_AUTHORITY].entries()) {
      const parent = await enqueue(s, onBehalfOf(authority), { sub: "importer", op: "importUsers", rid: `imp-${i}` });
      const child = await enqueue(
        s,
        { operation_id: "recordEmailSent", request: { path_params: { emailId: "e1" } } },
        { op: "sendWelcomeEmail", sub: "u9", job: parent.id },
      );
      assert.deepEqual(child.authority, authority);
      assert.equal(child.user_id, "u9");
      assert.equal(child.original_request_id, `imp-${i}`);
      assert.equal(child.parent_job_id, parent.id);
      assert.equal(child.enqueued_by_operation_id, "sendWelcomeEmail");
      assert.equal(child.status, "pending");
    }
  });

  test("keeps the chain's original_request_id even when a chained assertion carries another rid", async (t) => {
    const s = await startService(t);
    const parent = await enqueue(s, welcomeEmail(), { rid: "req-root" });
    const child = await enqueue(s, welcomeEmail(), { op: "sendWelcomeEmail", job: parent.id, rid: "req-other" });
    assert.equal(child.original_request_id, "req-root");
    assert.deepEqual(child.authority, { kind: "request", request_id: "req-root", user_id: "u1" });
  });

  test("carries root authority down a chain of three levels", async (t) => {
    const s = await startService(t);
    const root = await enqueue(s, welcomeEmail(), { sub: "u3", op: "createUser", rid: "req-3" });
    const second = await enqueue(
      s,
      { operation_id: "recordEmailSent", request: { path_params: { emailId: "e3" } } },
      { sub: "u3", op: "sendWelcomeEmail", job: root.id },
    );
    const third = await enqueue(s, buildReport(), { sub: "u3", op: "recordEmailSent", job: second.id });
    const authority = { kind: "request", request_id: "req-3", user_id: "u3" };
    for (const [job, parentId, op] of [
      [root, null, "createUser"],
      [second, root.id, "sendWelcomeEmail"],
      [third, second.id, "recordEmailSent"],
    ] as const) {
      assert.deepEqual(job.authority, authority);
      assert.equal(job.user_id, "u3");
      assert.equal(job.original_request_id, "req-3");
      assert.equal(job.parent_job_id, parentId);
      assert.equal(job.enqueued_by_operation_id, op);
    }
  });
});

describe("cancelled chains", () => {
  test("creates a root enqueue into a cancelled chain as cancelled with cancelled-by-chain (201)", async (t) => {
    const s = await startService(t);
    const cancel = await s.inject({ method: "POST", url: "/chains/req-1/cancel", token: await s.adminToken() });
    assert.equal(cancel.statusCode, 200, cancel.body);
    s.clock.advance(1000);
    const job = await enqueue(s, welcomeEmail(), { rid: "req-1" });
    assert.equal(job.status, "cancelled");
    assert.deepEqual(job.result, { error_body: null, terminal_reason: "cancelled-by-chain" });
    assert.equal(job.finished_at, iso(s.clock.now()));
    assert.equal(job.attempt, 0);
    // Other chains are untouched.
    assert.equal((await enqueue(s, welcomeEmail(), { rid: "req-2" })).status, "pending");
  });

  test("creates a chained enqueue from a running job of a cancelled chain as cancelled (201)", async (t) => {
    const s = await startService(t);
    const parent = await enqueue(s, welcomeEmail(), { rid: "req-1" });
    await driveTo(s, parent.id, "running");
    const cancel = await s.inject({ method: "POST", url: "/chains/req-1/cancel", token: await s.adminToken() });
    assert.deepEqual(cancel.json(), { jobs: [] });
    const child = await enqueue(s, welcomeEmail(), { op: "sendWelcomeEmail", job: parent.id });
    assert.equal(child.status, "cancelled");
    assert.equal(child.result?.terminal_reason, "cancelled-by-chain");
    assert.notEqual(child.finished_at, null);
    assert.equal(child.parent_job_id, parent.id);
    assert.equal((await getJob(s, parent.id)).status, "running");
  });
});

describe("wire form", () => {
  test("never shows the enqueue assertion, and a job has exactly the fields of docs/api.md", async (t) => {
    const s = await startService(t);
    const admin = await s.adminToken();
    const rootToken = await s.assertion({ rid: "req-w" });
    const bodies: string[] = [];
    const collect = (res: Awaited<ReturnType<TestService["inject"]>>, status: number): Job => {
      assert.equal(res.statusCode, status, res.body);
      bodies.push(res.body);
      return (res.json() as { job: Job }).job;
    };

    const root = collect(
      await s.inject({ method: "POST", url: "/jobs", token: rootToken, payload: welcomeEmail({ dedupe_key: "w" }) }),
      201,
    );
    collect(
      await s.inject({ method: "POST", url: "/jobs", token: rootToken, payload: welcomeEmail({ dedupe_key: "w" }) }),
      200,
    );
    const importToken = await s.assertion({ op: "importUsers", rid: "req-w" });
    const imported = collect(
      await s.inject({ method: "POST", url: "/jobs", token: importToken, payload: onBehalfOf(RESOURCE_AUTHORITY) }),
      201,
    );
    const childToken = await s.assertion({ op: "sendWelcomeEmail", job: root.id });
    const child = collect(
      await s.inject({ method: "POST", url: "/jobs", token: childToken, payload: welcomeEmail() }),
      201,
    );
    for (const job of [root, imported, child])
      collect(await s.inject({ method: "GET", url: `/jobs/${job.id}`, token: admin }), 200);
    const list = await s.inject({ method: "GET", url: "/jobs", token: admin });
    assert.equal(list.statusCode, 200);
    bodies.push(list.body);
    collect(await s.inject({ method: "POST", url: `/jobs/${imported.id}/cancel`, token: admin }), 200);
    collect(await s.inject({ method: "POST", url: `/jobs/${imported.id}/retry`, token: admin }), 200);
    const chain = await s.inject({ method: "POST", url: "/chains/req-w/cancel", token: admin });
    assert.equal(chain.statusCode, 200);
    bodies.push(chain.body);
    assert.equal((chain.json() as { jobs: Job[] }).jobs.length, 3);

    for (const body of bodies) {
      for (const token of [rootToken, importToken, childToken])
        assert.ok(!body.includes(token), "no token in a response");
      assert.ok(!body.includes("assertion"), `no "assertion" in ${body.slice(0, 200)}`);
    }
    const jobs = [root, imported, child, ...(list.json() as { jobs: Job[] }).jobs];
    for (const job of jobs) {
      assert.deepEqual(Object.keys(job).sort(), [...JOB_FIELDS]);
      const authorityKeys = {
        request: ["kind", "request_id", "user_id"],
        resource: ["kind", "resource_id", "resource_kind", "user_id"],
        cron: ["cron_job_name", "kind", "user_id"],
      }[job.authority.kind];
      assert.deepEqual(Object.keys(job.authority).sort(), authorityKeys);
    }
  });
});

describe("text no engine can store", () => {
  test("refuses U+0000 and lone surrogates anywhere in the body with 400 invalid_request, storing nothing", async (t) => {
    const s = await startService(t);
    const token = await s.assertion();
    const bodies = [
      '{"operation_id":"buildReport","request":{"body":"a\\u0000b"}}',
      '{"operation_id":"buildReport","request":{"query":{"\\ud800":1}}}',
      '{"operation_id":"buildReport","request":{"body":["\\udc00"]}}',
      '{"operation_id":"buildReport","request":{},"dedupe_key":"k\\u0000"}',
    ];
    for (const body of bodies) assertError(await postRaw(s, body, token), 400, "invalid_request");
    assert.equal(await countJobs(s), 0);
    // A well-formed pair is fine.
    const ok = await postRaw(s, '{"operation_id":"buildReport","request":{"body":"\\ud83d\\ude00"}}', token);
    assert.equal(ok.statusCode, 201, ok.body);
  });

  test("refuses an assertion whose claims hold U+0000 with 401 invalid_assertion", async (t) => {
    const s = await startService(t);
    const token = await s.assertion({ rid: "r\u0000" });
    assertError(await postRaw(s, '{"operation_id":"buildReport","request":{}}', token), 401, "invalid_assertion");
  });
});

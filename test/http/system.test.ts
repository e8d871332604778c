/**
 * The system routes and the HTTP edges of docs/api.md, §10 and §11: health, readiness, metrics, the served
 * OpenAPI document, body limits and media types, unknown routes, the error body, and 503 when the store is gone.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { ERROR_CODES } from "../../src/errors.js";
import type { TestService } from "../helpers/service.js";
import { assertError, buildReport, enqueue, postJob, startService, welcomeEmail } from "../helpers/jobs.js";

type Response = Awaited<ReturnType<TestService["inject"]>>;

const MIB = 1024 * 1024;

/** Asserts the error body and that its code is one §11 lists for its status. */
function assertContractError(res: Response, status: number, code: string): void {
  assertError(res, status, code);
  const codes = ERROR_CODES[status as keyof typeof ERROR_CODES] as readonly string[] | undefined;
  assert.ok(codes?.includes(code), `${code} is a §11 code for ${status}`);
  assert.match(String(res.headers["content-type"]), /^application\/json/);
}

/** The samples of a Prometheus text exposition, keyed `name{label="value",...}` with labels sorted. */
function parseMetrics(text: string): Map<string, number> {
  const samples = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(match, `a sample line: ${line}`);
    const [, name, labelText, value] = match;
    const labels = [...(labelText ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)]
      .map(([, key, labelValue]) => `${key}="${labelValue}"`)
      .sort();
    samples.set(labels.length > 0 ? `${name}{${labels.join(",")}}` : String(name), Number(value));
  }
  return samples;
}

describe("liveness and readiness", () => {
  test("GET /healthz answers 200 {status: ok} without auth", async (t) => {
    const s = await startService(t);
    const res = await s.inject({ method: "GET", url: "/healthz" });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { status: "ok" });
  });

  test("GET /readyz answers 200 when the database answers and is migrated", async (t) => {
    const s = await startService(t);
    const res = await s.inject({ method: "GET", url: "/readyz" });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(typeof res.json().status, "string");
  });

  test("GET /readyz answers 503 unavailable with Retry-After once the store is closed, while /healthz stays 200", async (t) => {
    const s = await startService(t);
    await s.service.store.close();
    const res = await s.inject({ method: "GET", url: "/readyz" });
    assertContractError(res, 503, "unavailable");
    assert.match(String(res.headers["retry-after"]), /^\d+$/);
    assert.equal((await s.inject({ method: "GET", url: "/healthz" })).statusCode, 200);
  });
});

describe("metrics", () => {
  test("GET /metrics serves Prometheus text with both enqueue counters declared", async (t) => {
    const s = await startService(t);
    const res = await s.inject({ method: "GET", url: "/metrics" });
    assert.equal(res.statusCode, 200);
    assert.match(String(res.headers["content-type"]), /^text\/plain; version=0\.0\.4/);
    assert.match(res.body, /^# HELP opqueue_jobs_enqueued_total .+$/m);
    assert.match(res.body, /^# TYPE opqueue_jobs_enqueued_total counter$/m);
    assert.match(res.body, /^# HELP opqueue_enqueue_refused_total .+$/m);
    assert.match(res.body, /^# TYPE opqueue_enqueue_refused_total counter$/m);
    parseMetrics(res.body);
  });

  test("counts accepted enqueues by operation_id and outcome, and refused ones by code", async (t) => {
    const s = await startService(t);
    await enqueue(s, welcomeEmail({ dedupe_key: "k" }));
    await enqueue(s, welcomeEmail());
    await enqueue(s, welcomeEmail({ dedupe_key: "k" }), {}, 200);
    await enqueue(s, buildReport());
    assert.equal(
      (await s.inject({ method: "POST", url: "/chains/gone/cancel", token: await s.adminToken() })).statusCode,
      200,
    );
    await enqueue(s, buildReport(), { rid: "gone" });

    assertError(await postJob(s, { operation_id: "nope", request: {} }), 422, "unknown_operation");
    assertError(await postJob(s, { operation_id: "nope", request: {} }), 422, "unknown_operation");
    assertError(await postJob(s, buildReport(), { op: "getUser" }), 403, "trigger_not_allowed");
    assertError(await postJob(s, buildReport({ dedupe_key: "k" })), 409, "dedupe_conflict");
    assertError(await postJob(s, { operation_id: "buildReport" }), 400, "invalid_request");
    assertError(await s.inject({ method: "POST", url: "/jobs", payload: buildReport() }), 401, "invalid_assertion");

    const res = await s.inject({ method: "GET", url: "/metrics" });
    const samples = parseMetrics(res.body);
    const enqueued = (operation: string, outcome: string) =>
      samples.get(`opqueue_jobs_enqueued_total{operation_id="${operation}",outcome="${outcome}"}`);
    const refused = (code: string) => samples.get(`opqueue_enqueue_refused_total{code="${code}"}`);
    assert.equal(enqueued("sendWelcomeEmail", "created"), 2);
    assert.equal(enqueued("sendWelcomeEmail", "deduplicated"), 1);
    assert.equal(enqueued("buildReport", "created"), 1);
    assert.equal(enqueued("buildReport", "cancelled-by-chain"), 1);
    assert.equal(refused("unknown_operation"), 2);
    assert.equal(refused("trigger_not_allowed"), 1);
    assert.equal(refused("dedupe_conflict"), 1);
    assert.equal(refused("invalid_request"), 1);
    assert.equal(refused("invalid_assertion"), 1);
    assert.equal(refused("job_not_found"), undefined);
  });
});

describe("stats", () => {
  test("GET /stats counts jobs by status and by operation, the queue lag, and an hour of attempts per minute", async (t) => {
    const s = await startService(t);
    await enqueue(s, welcomeEmail());
    await enqueue(s, welcomeEmail());
    await enqueue(s, buildReport({ delay_ms: 60_000 }));
    s.clock.advance(12_000);
    const res = await s.inject({ method: "GET", url: "/stats", token: await s.adminToken() });
    assert.equal(res.statusCode, 200, res.body);
    const stats = res.json() as {
      by_status: Record<string, number>;
      by_operation: Array<{ operation_id: string; status: string; count: number }>;
      queue_lag_seconds: number;
      throughput: Array<{ start: string }>;
    };
    assert.deepEqual(stats.by_status, { pending: 3, running: 0, retrying: 0, succeeded: 0, dead: 0, cancelled: 0 });
    assert.deepEqual(stats.by_operation, [
      { operation_id: "buildReport", status: "pending", count: 1 },
      { operation_id: "sendWelcomeEmail", status: "pending", count: 2 },
    ]);
    assert.equal(stats.queue_lag_seconds, 12);
    assert.equal(stats.throughput.length, 60);
  });

  test("a second GET /stats right after a change counts it (a small database is counted afresh every time)", async (t) => {
    const s = await startService(t);
    const token = await s.adminToken();
    const pending = async () =>
      ((await s.inject({ method: "GET", url: "/stats", token })).json() as { by_status: { pending: number } }).by_status
        .pending;
    assert.equal(await pending(), 0);
    await enqueue(s, welcomeEmail());
    assert.equal(await pending(), 1);
  });

  test("a count a busy machine made slow is not served again to a service given a clock (a test's): its counts are read afresh", async (t) => {
    const s = await startService(t);
    const token = await s.adminToken();
    const store = s.service.store;
    const jobStats = store.jobStats.bind(store);
    // 300 ms of real time: past COUNTS_READ's 250 ms, which makes a read timed on a real clock servable for 3 s.
    store.jobStats = async (params) => {
      await new Promise((resolve) => setTimeout(resolve, 300));
      return jobStats(params);
    };
    const pending = async () =>
      ((await s.inject({ method: "GET", url: "/stats", token })).json() as { by_status: { pending: number } }).by_status
        .pending;
    assert.equal(await pending(), 0);
    await enqueue(s, welcomeEmail());
    assert.equal(await pending(), 1);
  });
});

describe("the service's OpenAPI document", () => {
  interface Operation {
    operationId?: string;
    parameters: Array<{
      name: string;
      in: string;
      required: boolean;
      schema: Record<string, unknown>;
      explode?: boolean;
    }>;
    requestBody?: { required: boolean; content: Record<string, { schema: Record<string, unknown> }> };
    responses: Record<string, { description: string; content?: Record<string, { schema: Record<string, unknown> }> }>;
    security?: unknown[];
  }
  interface Document {
    openapi: string;
    info: { title: string; version: string };
    paths: Record<string, Record<string, Operation>>;
    components: { securitySchemes: Record<string, unknown> };
  }

  async function fetchDocument(s: TestService): Promise<Document> {
    const res = await s.inject({ method: "GET", url: "/openapi.json" });
    assert.equal(res.statusCode, 200, res.body);
    assert.match(String(res.headers["content-type"]), /^application\/json/);
    return res.json() as Document;
  }

  const jsonSchema = (operation: Operation | undefined, status: string) =>
    operation?.responses[status]?.content?.["application/json"]?.schema;

  test("GET /openapi.json is an OpenAPI 3.1 document listing every route of §3 with its operationId", async (t) => {
    const s = await startService(t);
    const doc = await fetchDocument(s);
    assert.equal(doc.openapi, "3.1.0");
    assert.equal(doc.info.title, "opqueue");
    assert.equal(typeof doc.info.version, "string");
    const expected: Array<[string, string, string]> = [
      ["/jobs", "post", "enqueueJob"],
      ["/jobs", "get", "listJobs"],
      ["/jobs/{id}", "get", "getJob"],
      ["/jobs/{id}/cancel", "post", "cancelJob"],
      ["/jobs/{id}/retry", "post", "retryJob"],
      ["/chains/{original_request_id}/cancel", "post", "cancelChain"],
      ["/jobs/{id}/run-now", "post", "runJobNow"],
      ["/jobs/{id}/history", "get", "getJobHistory"],
      ["/jobs/{id}/attempts", "get", "listJobAttempts"],
      ["/jobs/retry-dead", "post", "retryDeadJobs"],
      ["/operations", "get", "listOperations"],
    ];
    for (const [path, method, operationId] of expected) {
      assert.equal(doc.paths[path]?.[method]?.operationId, operationId, `${method} ${path}`);
    }
    for (const path of ["/healthz", "/readyz", "/metrics"]) assert.ok(doc.paths[path]?.["get"], path);
    const operationIds = Object.values(doc.paths).flatMap((item) => Object.values(item).map((op) => op.operationId));
    assert.equal(new Set(operationIds).size, operationIds.length, "operationIds are unique");
    assert.ok(doc.components.securitySchemes["enqueueAssertion"]);
    assert.ok(doc.components.securitySchemes["adminToken"]);
  });

  test("documents enqueueJob's request body and its 200, 201 and error responses", async (t) => {
    const s = await startService(t);
    const doc = await fetchDocument(s);
    const enqueueJob = doc.paths["/jobs"]?.["post"];
    assert.ok(enqueueJob);
    assert.equal(enqueueJob.requestBody?.required, true);
    const body = enqueueJob.requestBody?.content["application/json"]?.schema as {
      properties: Record<string, unknown>;
      required: string[];
      additionalProperties: boolean;
    };
    assert.deepEqual(Object.keys(body.properties).sort(), [
      "concurrency_key",
      "dedupe_key",
      "delay_ms",
      "expires_at",
      "idempotency_key",
      "on_behalf_of",
      "on_complete",
      "on_dead",
      "on_settled",
      "operation_id",
      "priority",
      "rate_key",
      "request",
      "run_at",
      "ttl_ms",
    ]);
    assert.deepEqual([...body.required].sort(), ["operation_id", "request"]);
    assert.equal(body.additionalProperties, false);
    for (const status of ["200", "201"]) {
      const schema = jsonSchema(enqueueJob, status) as { properties: { job: { properties: Record<string, unknown> } } };
      assert.ok(schema.properties.job.properties["authority"], status);
      assert.ok(!("assertion" in schema.properties.job.properties));
    }
    for (const status of ["400", "401", "403", "409", "422", "429"]) {
      const schema = jsonSchema(enqueueJob, status) as { properties: Record<string, unknown> };
      assert.deepEqual(Object.keys(schema.properties).sort(), ["code", "message"], status);
    }
  });

  test("documents the batch enqueue: each item an enqueueJob body, one result per item", async (t) => {
    const s = await startService(t);
    const doc = await fetchDocument(s);
    const batch = doc.paths["/jobs/batch"]?.["post"];
    assert.ok(batch);
    const body = batch.requestBody?.content["application/json"]?.schema as {
      properties: { jobs: { items: { properties: Record<string, unknown> }; maxItems: number } };
    };
    assert.ok(body.properties.jobs.items.properties["operation_id"]);
    assert.equal(body.properties.jobs.maxItems, 1000);
    const answer = jsonSchema(batch, "200") as { properties: Record<string, unknown> };
    assert.deepEqual(Object.keys(answer.properties), ["results"]);
  });

  test("documents the admin routes' parameters and responses", async (t) => {
    const s = await startService(t);
    const doc = await fetchDocument(s);
    const listJobs = doc.paths["/jobs"]?.["get"];
    const byName = new Map(listJobs?.parameters.map((parameter) => [parameter.name, parameter]));
    assert.deepEqual([...byName.keys()].sort(), [
      "cursor",
      "dedupe_key",
      "limit",
      "operation_id",
      "original_request_id",
      "parent_job_id",
      "status",
      "user_id",
    ]);
    for (const parameter of byName.values()) assert.equal(parameter.in, "query");
    assert.equal(byName.get("status")?.schema["type"], "array");
    assert.equal(byName.get("status")?.explode, true);
    assert.equal(byName.get("limit")?.schema["minimum"], 1);
    assert.equal(byName.get("limit")?.schema["maximum"], 500);
    assert.equal(byName.get("limit")?.schema["default"], 50);
    const page = jsonSchema(listJobs, "200") as { properties: Record<string, unknown> };
    assert.deepEqual(Object.keys(page.properties).sort(), ["jobs", "next_cursor"]);

    for (const [path, method, statuses] of [
      ["/jobs/{id}", "get", ["200", "401", "403", "404"]],
      ["/jobs/{id}/cancel", "post", ["200", "401", "403", "404", "409"]],
      ["/jobs/{id}/retry", "post", ["200", "401", "403", "404", "409"]],
      ["/chains/{original_request_id}/cancel", "post", ["200", "401", "403"]],
    ] as const) {
      const operation = doc.paths[path]?.[method];
      assert.ok(operation, path);
      const pathParameters = operation.parameters.filter((parameter) => parameter.in === "path");
      assert.equal(pathParameters.length, 1, path);
      assert.equal(pathParameters[0]?.required, true);
      assert.ok(path.includes(`{${pathParameters[0]?.name}}`), path);
      for (const status of statuses) assert.ok(jsonSchema(operation, status), `${method} ${path} ${status}`);
      assert.ok(operation.security && operation.security.length > 0, `${path} is secured`);
    }
  });
});

describe("HTTP edges", () => {
  test("returns 413 body_too_large for a body over 1 MiB, and parses one of exactly 1 MiB", async (t) => {
    const s = await startService(t);
    const token = await s.assertion();
    const prefix = '{"operation_id":"buildReport","request":{"body":"';
    const suffix = '"}}';
    const exact = `${prefix}${"a".repeat(MIB - prefix.length - suffix.length)}${suffix}`;
    assert.equal(Buffer.byteLength(exact), MIB);
    const json = { "content-type": "application/json" };
    const atLimit = await s.inject({ method: "POST", url: "/jobs", token, payload: exact, headers: json });
    assertContractError(atLimit, 400, "payload_too_large");
    const over = `${prefix}${"a".repeat(MIB - prefix.length - suffix.length + 1)}${suffix}`;
    const tooLarge = await s.inject({ method: "POST", url: "/jobs", token, payload: over, headers: json });
    assertContractError(tooLarge, 413, "body_too_large");
    const admin = await s.adminToken();
    const adminTooLarge = await s.inject({
      method: "POST",
      url: "/jobs/abcdefgh/cancel",
      token: admin,
      payload: over,
      headers: json,
    });
    assertContractError(adminTooLarge, 413, "body_too_large");
  });

  test("returns 415 unsupported_media_type for a body that is not application/json", async (t) => {
    const s = await startService(t);
    const token = await s.assertion();
    for (const [contentType, payload] of [
      ["text/plain", JSON.stringify(buildReport())],
      ["application/x-www-form-urlencoded", "operation_id=buildReport"],
      ["multipart/form-data; boundary=x", "--x--"],
      ["application/xml", "<job/>"],
    ] as const) {
      const res = await s.inject({
        method: "POST",
        url: "/jobs",
        token,
        payload,
        headers: { "content-type": contentType },
      });
      assertContractError(res, 415, "unsupported_media_type");
    }
  });

  test("accepts application/json with a charset parameter", async (t) => {
    const s = await startService(t);
    const res = await s.inject({
      method: "POST",
      url: "/jobs",
      token: await s.assertion(),
      payload: JSON.stringify(buildReport()),
      headers: { "content-type": "application/json; charset=utf-8" },
    });
    assert.equal(res.statusCode, 201, res.body);
  });

  test("returns 400 invalid_request for malformed JSON", async (t) => {
    const s = await startService(t);
    const token = await s.assertion();
    for (const payload of [
      "{",
      "{'a': 1}",
      '{"operation_id": }',
      "undefined",
      '{"a":1}{"b":2}',
      '{"__proto__": {"x": 1}}',
    ]) {
      const res = await s.inject({
        method: "POST",
        url: "/jobs",
        token,
        payload,
        headers: { "content-type": "application/json" },
      });
      assertContractError(res, 400, "invalid_request");
    }
  });

  test("returns 404 not_found for an unknown route or an unknown method on a known path", async (t) => {
    const s = await startService(t);
    const admin = await s.adminToken();
    for (const [method, url] of [
      ["GET", "/nope"],
      ["GET", "/"],
      ["POST", "/jobs/abcdefgh/explode"],
      ["GET", "/jobs/abcdefgh/cancel"],
      ["DELETE", "/jobs/abcdefgh"],
      ["PUT", "/jobs"],
      ["PATCH", "/healthz"],
      ["POST", "/readyz"],
      ["GET", "/chains/req-1/explode"],
    ] as const) {
      assertContractError(await s.inject({ method, url, token: admin }), 404, "not_found");
    }
  });

  test("returns 400 invalid_request for a URL that does not decode", async (t) => {
    const s = await startService(t);
    const res = await s.inject({ method: "GET", url: "/jobs/%E0%A4%A", token: await s.adminToken() });
    assertContractError(res, 400, "invalid_request");
  });

  test("answers every error with exactly {code, message}, a §11 code and a non-empty message", async (t) => {
    const s = await startService(t);
    const token = await s.assertion();
    const admin = await s.adminToken();
    const json = { "content-type": "application/json" };
    const pending = await enqueue(s, welcomeEmail());
    await s.service.store.jobClaimMany({ limit: 1 });
    const cases: Array<[Promise<Response>, number, string]> = [
      [s.inject({ method: "POST", url: "/jobs", payload: buildReport() }), 401, "invalid_assertion"],
      [s.inject({ method: "POST", url: "/jobs", token, payload: "{", headers: json }), 400, "invalid_request"],
      [postJob(s, { operation_id: "buildReport", request: { body: "a".repeat(17_000) } }), 400, "payload_too_large"],
      [postJob(s, { operation_id: "sendWelcomeEmail", request: {} }), 400, "missing_path_param"],
      [postJob(s, welcomeEmail({ on_behalf_of: {} }), { op: "importUsers" }), 400, "invalid_on_behalf_of"],
      [postJob(s, { operation_id: "nope", request: {} }), 422, "unknown_operation"],
      [postJob(s, { operation_id: "createUser", request: {} }), 422, "operation_not_background"],
      [postJob(s, buildReport(), { op: "getUser" }), 403, "trigger_not_allowed"],
      [s.inject({ method: "GET", url: "/jobs" }), 401, "unauthenticated"],
      [
        s.inject({ method: "GET", url: "/jobs", token: await s.adminToken({ siteAdmin: false }) }),
        403,
        "site_admin_required",
      ],
      [s.inject({ method: "GET", url: "/jobs/nosuchjob1", token: admin }), 404, "job_not_found"],
      [s.inject({ method: "POST", url: `/jobs/${pending.id}/cancel`, token: admin }), 409, "job_running"],
      [s.inject({ method: "POST", url: `/jobs/${pending.id}/retry`, token: admin }), 409, "job_not_retryable"],
      [s.inject({ method: "GET", url: "/jobs?limit=0", token: admin }), 400, "invalid_request"],
      [s.inject({ method: "GET", url: "/nope" }), 404, "not_found"],
      [
        s.inject({ method: "POST", url: "/jobs", token, payload: "x", headers: { "content-type": "text/plain" } }),
        415,
        "unsupported_media_type",
      ],
    ];
    for (const [pendingResponse, status, code] of cases) assertContractError(await pendingResponse, status, code);
  });
});

describe("an unavailable store", () => {
  test("answers 503 unavailable with Retry-After on POST /jobs and every admin route, never another 5xx", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail());
    const rootToken = await s.assertion();
    const chainedToken = await s.assertion({ op: "sendWelcomeEmail", job: job.id });
    const admin = await s.adminToken();
    await s.service.store.close();

    const requests: Array<{ method: "GET" | "POST"; url: string; token: string; payload?: object }> = [
      { method: "POST", url: "/jobs", token: rootToken, payload: welcomeEmail() },
      { method: "POST", url: "/jobs", token: rootToken, payload: buildReport({ dedupe_key: "k" }) },
      { method: "POST", url: "/jobs", token: chainedToken, payload: welcomeEmail() },
      { method: "GET", url: "/jobs", token: admin },
      { method: "GET", url: "/jobs?status=pending&limit=5", token: admin },
      { method: "GET", url: `/jobs/${job.id}`, token: admin },
      { method: "POST", url: `/jobs/${job.id}/cancel`, token: admin },
      { method: "POST", url: `/jobs/${job.id}/retry`, token: admin },
      { method: "POST", url: "/chains/req-1/cancel", token: admin },
    ];
    for (const request of requests) {
      const res = await s.inject(request);
      assertContractError(res, 503, "unavailable");
      const retryAfter = Number(res.headers["retry-after"]);
      assert.ok(Number.isInteger(retryAfter) && retryAfter > 0, `${request.method} ${request.url}: Retry-After`);
    }
    // Refusals decided without the database are still given, and authentication still comes first.
    assertContractError(await s.inject({ method: "GET", url: "/jobs" }), 401, "unauthenticated");
    assertContractError(
      await s.inject({ method: "POST", url: "/jobs", payload: buildReport() }),
      401,
      "invalid_assertion",
    );
  });
});

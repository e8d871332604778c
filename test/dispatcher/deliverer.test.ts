/**
 * docs/delivery.md, "The delivery request": the HTTP request a job turns into, as a real target server receives it, and how each way an
 * exchange can end is reported. Most tests enqueue through the API, claim through the store and call the
 * deliverer once; the ones about the stored outcome let the dispatcher run.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { jwtVerify } from "jose";
import { pino } from "pino";
import { parse as parseYaml } from "yaml";
import { deliveryTokenHash } from "../../src/auth/delivery-tokens.js";
import {
  buildPath,
  buildQueryString,
  cutUtf8,
  Deliverer,
  MAX_ERROR_BODY_BYTES,
} from "../../src/dispatcher/deliverer.js";
import { Dispatcher } from "../../src/dispatcher/dispatcher.js";
import { OperationRegistry } from "../../src/operations/registry.js";
import type { JobRow } from "../../src/job/job.js";
import { startDeliveryService, waitForStatus } from "../helpers/delivery.js";
import { enqueue, type AssertionClaims } from "../helpers/jobs.js";
import { TEST_DELIVERY_SECRET, TEST_OPENAPI, type TestService } from "../helpers/service.js";
import { answer, closedPort, reply, startTarget, type Target, type TargetHandler } from "../helpers/target.js";

const PACKAGE_VERSION = (
  JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }
).version;

const welcome = (request: Record<string, unknown> = { path_params: { userId: "42" } }) => ({
  operation_id: "sendWelcomeEmail",
  request,
});

type TestContext = { after: (fn: () => Promise<void>) => void };

/** A target and a service delivering to it. */
async function setup(
  t: TestContext,
  options: { handler?: TargetHandler; configure?: (raw: Record<string, unknown>) => void } = {},
): Promise<{ s: TestService; target: Target }> {
  const target = await startTarget(t, options.handler ?? answer(204));
  const s = await startDeliveryService(t, { target, ...(options.configure ? { configure: options.configure } : {}) });
  return { s, target };
}

function delivererOf(s: TestService): Deliverer {
  assert.ok(s.service.worker, "the test service has a worker");
  return s.service.worker.deliverer;
}

async function claimNext(s: TestService): Promise<JobRow> {
  const [job] = await s.service.store.jobClaimMany({ limit: 1 });
  assert.ok(job, "a job is claimable");
  return job;
}

/** Enqueues through the API, claims, and runs one delivery attempt. */
async function deliverOnce(s: TestService, body: object, claims: AssertionClaims = {}) {
  await enqueue(s, body, claims);
  const job = await claimNext(s);
  const result = await delivererOf(s).deliver(job);
  return { job, result };
}

function verifyDeliveryToken(s: TestService, authorization: string | undefined) {
  assert.match(authorization ?? "", /^Bearer [\w-]+\.[\w-]+\.[\w-]+$/);
  const token = (authorization ?? "").slice("Bearer ".length);
  return jwtVerify(token, new TextEncoder().encode(TEST_DELIVERY_SECRET), {
    audience: "product",
    issuer: "opqueue",
    algorithms: ["HS256"],
    currentDate: new Date(s.clock.now()),
  });
}

describe("the delivered request", () => {
  test("is a POST to the OpenAPI path with the JSON body and every delivery header", async (t) => {
    const { s, target } = await setup(t);
    const body = { hello: "wörld", n: [1, 2] };
    const { job, result } = await deliverOnce(s, welcome({ path_params: { userId: "42" }, body }), { rid: "req-abc" });
    assert.deepEqual(result, {
      kind: "response",
      statusCode: 204,
      jobRetry: undefined,
      retryAfter: undefined,
      body: null,
    });
    const [request] = target.requests;
    assert.ok(request);
    assert.equal(request.method, "POST");
    assert.equal(request.url, "/users/42/welcome-email");
    assert.equal(request.headers["content-type"], "application/json");
    assert.equal(request.body, JSON.stringify(body));
    assert.match(request.headers["authorization"] ?? "", /^Bearer /);
    assert.equal(request.headers["idempotency-key"], job.id);
    assert.equal(request.headers["x-request-id"], "req-abc");
    assert.equal(request.headers["x-job-id"], job.id);
    assert.equal(request.headers["x-job-attempt"], "1");
    assert.equal(request.headers["user-agent"], `opqueue/${PACKAGE_VERSION}`);
  });

  test("uses the OpenAPI method: PUT for recordEmailSent", async (t) => {
    const { s, target } = await setup(t);
    await deliverOnce(
      s,
      { operation_id: "recordEmailSent", request: { path_params: { emailId: "e-1" }, body: { ok: true } } },
      { op: "sendWelcomeEmail" },
    );
    assert.equal(target.requests[0]?.method, "PUT");
    assert.equal(target.requests[0]?.url, "/emails/e-1/record");
  });

  test("sends no body and no content-type when the request has no body", async (t) => {
    const { s, target } = await setup(t);
    await deliverOnce(s, { operation_id: "buildReport", request: {} });
    const [request] = target.requests;
    assert.equal(request?.method, "POST");
    assert.equal(request?.url, "/reports");
    assert.equal(request?.headers["content-type"], undefined);
    assert.equal(request?.body, "");
  });

  test("replaces {param} with encodeURIComponent(String(value))", async (t) => {
    const { s, target } = await setup(t);
    const cases: Array<[unknown, string]> = [
      ["a b", "a%20b"],
      ["a/b", "a%2Fb"],
      ["é✓", "%C3%A9%E2%9C%93"],
      ["😀", "%F0%9F%98%80"],
      ["x?y#z%", "x%3Fy%23z%25"],
      [42, "42"],
      [1.5, "1.5"],
      [true, "true"],
    ];
    for (const [value, encoded] of cases) {
      await deliverOnce(s, welcome({ path_params: { userId: value } }));
      assert.equal(
        target.requests.at(-1)?.url,
        `/users/${encoded}/welcome-email`,
        `path param ${JSON.stringify(value)}`,
      );
      assert.equal(encoded, encodeURIComponent(String(value)));
    }
  });

  test("buildPath replaces every {param} of a template", () => {
    assert.equal(buildPath("/orgs/{org}/users/{user}/x", { org: "a b", user: 7 }), "/orgs/a%20b/users/7/x");
    assert.equal(buildPath("/reports", undefined), "/reports");
  });

  test("appends query: scalars as strings, arrays as repeated keys, null omitted, objects as JSON", async (t) => {
    const { s, target } = await setup(t);
    const query = {
      q: "a b&c=d",
      n: 5,
      flag: false,
      empty: "",
      tags: ["x", "y z", 3, null],
      none: null,
      filter: { a: [1, 2], b: "é" },
      objects: [{ k: 1 }, { k: 2 }],
    };
    await deliverOnce(s, welcome({ path_params: { userId: "1" }, query }));
    const [request] = target.requests;
    assert.ok(request);
    assert.equal(request.path, "/users/1/welcome-email");
    const params = request.query;
    assert.deepEqual(params.getAll("q"), ["a b&c=d"]);
    assert.deepEqual(params.getAll("n"), ["5"]);
    assert.deepEqual(params.getAll("flag"), ["false"]);
    assert.deepEqual(params.getAll("empty"), [""]);
    assert.deepEqual(params.getAll("tags"), ["x", "y z", "3"]);
    assert.equal(params.has("none"), false);
    assert.deepEqual(params.getAll("filter"), [JSON.stringify(query.filter)]);
    assert.deepEqual(params.getAll("objects"), ['{"k":1}', '{"k":2}']);
    assert.deepEqual([...new Set(params.keys())], ["q", "n", "flag", "empty", "tags", "filter", "objects"]);
  });

  test("appends nothing for an absent, empty or all-null query", () => {
    assert.equal(buildQueryString(undefined), "");
    assert.equal(buildQueryString({}), "");
    assert.equal(buildQueryString({ a: null, b: [] }), "");
  });

  test("carries a delivery token with every claim of docs/tokens.md (clm included), signed with the delivery key", async (t) => {
    const { s, target } = await setup(t, {
      handler: answer(503),
      configure: (raw) => {
        raw["operations"] = { sendWelcomeEmail: { timeout_ms: 1200 } };
      },
    });
    const { job } = await deliverOnce(s, welcome(), { sub: "u9", rid: "req-tok" });
    const iat = Math.floor(s.clock.now() / 1000);
    const { payload, protectedHeader } = await verifyDeliveryToken(s, target.requests[0]?.headers["authorization"]);
    assert.deepEqual(protectedHeader, { alg: "HS256", kid: "q1", typ: "JWT" });
    assert.deepEqual(payload, {
      iss: "opqueue",
      aud: "product",
      sub: "u9",
      op: "sendWelcomeEmail",
      job: job.id,
      att: 1,
      clm: 1,
      rid: "req-tok",
      authority: { kind: "request", request_id: "req-tok", user_id: "u9" },
      iat,
      // ceil(1200 / 1000) + 60
      exp: iat + 62,
      jti: `${job.id}:1`,
    });

    // The second attempt carries its own number, in the token and in x-job-attempt.
    const written = await s.service.store.jobSetStateIfRunningMany({
      outcomes: [
        { id: job.id, attempt: 1, status: "retrying", delayMs: 0, result: { error_body: "", terminal_reason: null } },
      ],
    });
    assert.deepEqual(written, [true]);
    s.clock.advance(5000);
    const again = await claimNext(s);
    await delivererOf(s).deliver(again);
    const second = target.requests[1];
    assert.equal(second?.headers["x-job-attempt"], "2");
    assert.equal(second?.headers["idempotency-key"], job.id);
    const { payload: secondPayload } = await verifyDeliveryToken(s, second?.headers["authorization"]);
    assert.equal(secondPayload["att"], 2);
    assert.equal(secondPayload["clm"], 2, "and its own claim");
    assert.equal(secondPayload["jti"], `${job.id}:2`);
    assert.equal(secondPayload["iat"], iat + 5);
  });

  test("carries the job's authority in wire form, never the enqueue assertion", async (t) => {
    const { s, target } = await setup(t);
    const authority = { kind: "resource", resource_id: "imp-1", resource_kind: "import", user_id: "u7" };
    const { job } = await deliverOnce(
      s,
      { ...welcome(), on_behalf_of: { user_id: "u7", authority } },
      { op: "importUsers", sub: "importer", rid: "req-import" },
    );
    assert.equal(typeof job.authority.assertion, "string", "the stored authority keeps its evidence");
    const { payload } = await verifyDeliveryToken(s, target.requests[0]?.headers["authorization"]);
    assert.equal(payload.sub, "u7");
    assert.deepEqual(payload["authority"], authority);
    assert.doesNotMatch(JSON.stringify(payload), /assertion/);
  });

  test("goes to operations.X.base_url, with its path prefix, instead of target.base_url", async (t) => {
    const main = await startTarget(t);
    const other = await startTarget(t);
    const s = await startDeliveryService(t, {
      target: main,
      configure: (raw) => {
        raw["operations"] = { buildReport: { base_url: `${other.url}/v2/` } };
      },
    });
    await deliverOnce(s, { operation_id: "buildReport", request: { body: {} } });
    assert.equal(other.requests.length, 1);
    assert.equal(other.requests[0]?.url, "/v2/reports");
    await deliverOnce(s, welcome());
    assert.equal(main.requests.length, 1, "an operation without override goes to target.base_url");
    assert.equal(main.requests[0]?.url, "/users/42/welcome-email");
    assert.equal(other.requests.length, 1);
  });

  test("reads x-job-retry and Retry-After whatever their case, x-job-retry lower-cased", async (t) => {
    const { s } = await setup(t, {
      handler: (_request, res) =>
        reply(res, 503, { headers: { "X-Job-Retry": " Never ", "Retry-After": "120" }, body: "no" }),
    });
    const { result } = await deliverOnce(s, welcome());
    assert.deepEqual(result, { kind: "response", statusCode: 503, jobRetry: "never", retryAfter: "120", body: "no" });
  });
});

describe("how an exchange ends", () => {
  test("a 202 with x-job-async: 1 takes the attempt asynchronously, bound to the digest of the token it was sent with", async (t) => {
    const { s, target } = await setup(t, {
      handler: (_request, res) => reply(res, 202, { headers: { "x-job-async": " 1 " } }),
    });
    const { result } = await deliverOnce(s, welcome());
    const token = (target.requests[0]?.headers["authorization"] ?? "").slice("Bearer ".length);
    assert.deepEqual(result, { kind: "async", tokenHash: deliveryTokenHash(token) });
    for (const [status, value] of [
      [202, "true"],
      [202, "0"],
      [200, "1"],
      [204, "1"],
    ] as const) {
      target.setHandler((_request, res) => reply(res, status, { headers: { "x-job-async": value } }));
      const other = await deliverOnce(s, welcome());
      assert.equal(other.result.kind, "response", `${status} with x-job-async: ${value} is an answer like any`);
    }
  });

  test("a redirect is not followed and ends the job dead permanent-status", async (t) => {
    const target = await startTarget(t, (request, res) => {
      if (request.path === "/elsewhere") reply(res, 204);
      else reply(res, 302, { headers: { location: "/elsewhere" }, body: "moved" });
    });
    const s = await startDeliveryService(t, { target });
    const job = await enqueue(s, welcome());
    s.service.start();
    const done = await waitForStatus(s, job.id, "dead");
    assert.deepEqual(done.result, { status_code: 302, error_body: "moved", terminal_reason: "permanent-status" });
    assert.deepEqual(
      target.requests.map((request) => request.path),
      ["/users/42/welcome-email"],
    );
  });

  test("a failure body is cut at 8192 bytes on a UTF-8 boundary", async (t) => {
    let failureBody = "";
    const { s } = await setup(t, { handler: (_request, res) => reply(res, 500, { body: failureBody }) });
    const cases: Array<{ name: string; body: string; expectedBytes: number }> = [
      { name: "5000 é (2 bytes each)", body: "é".repeat(5000), expectedBytes: 8192 },
      { name: "3000 € (3 bytes each)", body: "€".repeat(3000), expectedBytes: 8190 },
      { name: "an ASCII byte then 3000 😀 (4 bytes each)", body: `a${"😀".repeat(3000)}`, expectedBytes: 8189 },
      { name: "10000 ASCII bytes", body: "x".repeat(10_000), expectedBytes: 8192 },
      { name: "exactly 8192 bytes", body: "y".repeat(8192), expectedBytes: 8192 },
      { name: "a short body", body: "short", expectedBytes: 5 },
    ];
    for (const { name, body, expectedBytes } of cases) {
      failureBody = body;
      const { result } = await deliverOnce(s, welcome());
      assert.equal(result.kind, "response", name);
      const cut = result.kind === "response" ? (result.body ?? "") : "";
      assert.equal(Buffer.byteLength(cut, "utf8"), expectedBytes, name);
      assert.ok(body.startsWith(cut), `${name}: the cut is a prefix of the body`);
      assert.equal(Buffer.from(cut, "utf8").toString("utf8"), cut, `${name}: valid UTF-8`);
      assert.doesNotMatch(cut, /\uFFFD/, `${name}: no replacement character`);
    }
  });

  // PostgreSQL's text cannot hold U+0000: stored as is, one such body made every write of the outcome batch fail, and
  // the completer retried that batch for ever while the node's finished jobs stayed running.
  test("a failure body holding U+0000 is stored with U+FFFD, and later outcomes are written", async (t) => {
    const bodies = ["bad\u0000body", "busy\u0000"];
    const { s } = await setup(t, {
      handler: (_request, res) => {
        const body = bodies.shift();
        if (body === undefined) reply(res, 204);
        else reply(res, body.startsWith("bad") ? 400 : 503, { body });
      },
    });
    const dead = await enqueue(s, welcome());
    s.service.start();
    assert.deepEqual((await waitForStatus(s, dead.id, "dead")).result, {
      status_code: 400,
      error_body: "bad\ufffdbody",
      terminal_reason: "permanent-status",
    });
    const retried = await enqueue(s, welcome());
    assert.equal((await waitForStatus(s, retried.id, "retrying")).result?.error_body, "busy\ufffd");
    const next = await enqueue(s, welcome());
    assert.equal((await waitForStatus(s, next.id, "succeeded")).result?.status_code, 204);
  });

  test("the stored error_body of a failure is the cut body", async (t) => {
    const body = "é".repeat(5000);
    const { s } = await setup(t, { handler: (_request, res) => reply(res, 500, { body }) });
    const job = await enqueue(s, welcome());
    s.service.start();
    const failed = await waitForStatus(s, job.id, "retrying");
    assert.equal(failed.result?.status_code, 500);
    assert.equal(failed.result?.error_body, "é".repeat(4096));
  });

  test("cutUtf8 never splits a character and never exceeds the cap", () => {
    const text = "aé€😀".repeat(10);
    for (let max = 0; max <= Buffer.byteLength(text); max++) {
      const cut = cutUtf8(Buffer.from(text, "utf8"), max);
      assert.ok(Buffer.byteLength(cut, "utf8") <= max, `cap ${max}`);
      assert.ok(text.startsWith(cut), `cap ${max}: a prefix`);
      assert.ok(Buffer.byteLength(cut, "utf8") > max - 4, `cap ${max}: at most one character dropped`);
    }
  });

  test("a 1 MB failure body is capped and the target stays usable for the next request", async (t) => {
    const big = Buffer.alloc(1024 * 1024, "z");
    const { s, target } = await setup(t, { handler: (_request, res) => reply(res, 500, { body: big.toString() }) });
    const { result } = await deliverOnce(s, welcome());
    assert.equal(result.kind, "response");
    assert.equal(result.kind === "response" && result.body, "z".repeat(MAX_ERROR_BODY_BYTES));
    target.setHandler(answer(204));
    const next = await deliverOnce(s, welcome());
    assert.equal(next.result.kind === "response" && next.result.statusCode, 204);
    assert.equal(target.requests.length, 2);
  });

  test("a failure body a little past the cap is read to its end, so the next delivery reuses the connection", async (t) => {
    const ports: Array<number | undefined> = [];
    const { s } = await setup(t, {
      handler: (_request, res) => {
        ports.push(res.socket?.remotePort);
        if (ports.length === 1) reply(res, 500, { body: "e".repeat(20_000) });
        else reply(res, 204);
      },
    });
    const { result } = await deliverOnce(s, welcome());
    assert.equal(result.kind === "response" && result.body, "e".repeat(MAX_ERROR_BODY_BYTES));
    const next = await deliverOnce(s, welcome());
    assert.equal(next.result.kind === "response" && next.result.statusCode, 204);
    assert.equal(ports.length, 2);
    assert.equal(ports[1], ports[0], "both requests came over one connection");
  });

  test("an endless failure body is cut without waiting for its end", async (t) => {
    // If the deliverer buffered the whole body, this attempt could only end by timing out.
    const chunk = Buffer.alloc(64 * 1024, "w");
    const { s, target } = await setup(t, {
      configure: (raw) => {
        raw["operations"] = { sendWelcomeEmail: { timeout_ms: 20_000 } };
      },
      handler: (_request, res) => {
        res.writeHead(500, { "content-type": "text/plain" });
        let sent = 0;
        const pump = () => {
          // Bounded, so a broken deliverer fails the test instead of filling the memory.
          while (!res.destroyed && sent < 1024 && res.write(chunk)) sent++;
        };
        res.on("drain", pump);
        pump();
      },
    });
    const { result } = await deliverOnce(s, welcome());
    assert.equal(result.kind, "response", JSON.stringify(result).slice(0, 200));
    assert.equal(result.kind === "response" && result.body, "w".repeat(MAX_ERROR_BODY_BYTES));
    target.setHandler(answer(204));
    const next = await deliverOnce(s, welcome());
    assert.equal(next.result.kind === "response" && next.result.statusCode, 204);
  });

  test("a target that never answers times out with no status code and retries", async (t) => {
    const { s } = await setup(t, {
      handler: () => new Promise<void>(() => undefined),
      configure: (raw) => {
        raw["operations"] = { sendWelcomeEmail: { timeout_ms: 200 } };
      },
    });
    const job = await enqueue(s, welcome());
    s.service.start();
    const failed = await waitForStatus(s, job.id, "retrying");
    assert.deepEqual(failed.result, { error_body: "timed out after 200 ms", terminal_reason: null });
    assert.equal(failed.attempt, 1);
  });

  test("a body that stalls past the timeout is a timeout, not a response", async (t) => {
    const { s } = await setup(t, {
      handler: (_request, res) => {
        res.writeHead(500);
        res.write("partial");
      },
      configure: (raw) => {
        raw["operations"] = { sendWelcomeEmail: { timeout_ms: 200 } };
      },
    });
    const { result } = await deliverOnce(s, welcome());
    assert.deepEqual(result, { kind: "no-response", error: "timed out after 200 ms" });
  });

  test("a refused connection retries with an error body naming it and no status code", async (t) => {
    const port = await closedPort();
    const s = await startDeliveryService(t, { target: `http://127.0.0.1:${port}` });
    const job = await enqueue(s, welcome());
    s.service.start();
    const failed = await waitForStatus(s, job.id, "retrying");
    assert.equal(failed.result?.terminal_reason, null);
    assert.equal(failed.result && "status_code" in failed.result, false);
    assert.match(failed.result?.error_body ?? "", /ECONNREFUSED/);
  });

  test("an operation gone from the OpenAPI document at delivery time is dead permanent-status", async (t) => {
    const { s, target } = await setup(t);
    const doc = parseYaml(readFileSync(TEST_OPENAPI, "utf8")) as { paths: Record<string, unknown> };
    delete doc.paths["/users/{userId}/welcome-email"];
    const registry = OperationRegistry.fromDocument(doc);
    assert.equal(registry.get("sendWelcomeEmail"), undefined);
    const deliverer = new Deliverer({ settings: s.service.settings, registry, signer: s.service.signer });
    t.after(() => deliverer.close());

    const direct = await deliverer.deliver(await claimNextAfterEnqueue(s));
    assert.equal(direct.kind, "undeliverable");

    const job = await enqueue(s, welcome());
    const dispatcher = new Dispatcher({
      config: s.config,
      settings: s.service.settings,
      store: s.service.store,
      deliverer,
      clock: s.clock,
      telemetry: s.service.telemetry,
      logger: pino({ level: "silent" }),
    });
    t.after(() => dispatcher.stop({ graceMs: 0 }));
    dispatcher.start();
    const dead = await waitForStatus(s, job.id, "dead");
    assert.equal(dead.result?.terminal_reason, "permanent-status");
    assert.equal(dead.result && "status_code" in dead.result, false);
    assert.match(dead.result?.error_body ?? "", /sendWelcomeEmail/);
    assert.equal(target.requests.length, 0, "nothing was sent");
  });
});

async function claimNextAfterEnqueue(s: TestService): Promise<JobRow> {
  await enqueue(s, welcome());
  return claimNext(s);
}

/**
 * Unknown query parameters (docs/api.md, "Errors"): every operation the served OpenAPI document lists answers a query
 * parameter it does not declare with 400 `invalid_request`, naming it, once its caller is authenticated; the routes
 * the document leaves out (the dashboard's files, /openapi.json, the key set) ignore the query string. The first test
 * walks the document itself, so a route added without the check fails it.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { LightMyRequestResponse } from "fastify";
import type { JobRow } from "../../src/job/job.js";
import { wireAuthority } from "../../src/job/wire.js";
import { strictQueryStrings } from "../../src/http/validation.js";
import type { TestService } from "../helpers/service.js";
import { buildReport, enqueue, startService } from "../helpers/jobs.js";

/** The parameter no route takes. */
const UNKNOWN = "opqueue_unknown_param";

type Operation = { operationId?: string; security?: Array<Record<string, string[]>>; requestBody?: unknown };
type Document = { paths: Record<string, Record<string, Operation>> };

/** Asserts the answer is the refusal of the unknown parameter `name`: 400 invalid_request, `{code, message}`, naming it. */
function assertRefused(res: LightMyRequestResponse, name: string, what: string): void {
  assert.equal(res.statusCode, 400, `${what}: ${res.body}`);
  const body = res.json() as Record<string, unknown>;
  assert.deepEqual(Object.keys(body).sort(), ["code", "message"], `${what}: ${res.body}`);
  assert.equal(body["code"], "invalid_request", `${what}: ${res.body}`);
  assert.ok(String(body["message"]).includes(`"${name}"`), `${what}: the message names the parameter: ${res.body}`);
}

/** A valid body for each operation whose document has one that `{}` does not satisfy. */
const BODIES: Record<string, unknown> = {
  enqueueJob: buildReport(),
  enqueueJobs: { jobs: [buildReport()] },
  setOperationLimits: { max_concurrency: null },
  createSchedule: { name: "hourly", schedule: "0 * * * *", operation_id: "buildReport", user_id: "system" },
  updateSchedule: { priority: 1 },
  eraseUserData: { user_id: "nobody" },
};

/** What every call needs: a job, its delivery token and the admin token. */
interface Fixtures {
  job: JobRow;
  deliveryToken: string;
  adminToken: string;
}

async function fixtures(s: TestService): Promise<Fixtures> {
  const created = await enqueue(s, buildReport());
  const job = (await s.service.store.jobGet({ id: created.id })) as JobRow;
  const deliveryToken = await s.service.signer.sign({
    sub: job.userId,
    op: job.operationId,
    job: job.id,
    att: 1,
    clm: 1,
    rid: job.originalRequestId,
    authority: wireAuthority(job.authority),
    timeoutMs: s.service.settings.of(job.operationId).timeoutMs,
  });
  return { job, deliveryToken, adminToken: await s.adminToken() };
}

/** The path with each `{name}` replaced by a value that exists (a job, an operation, the config's schedule, ...). */
function fill(path: string, f: Fixtures): string {
  return path.replace(/\{([^}]+)\}/g, (_match, name: string) => {
    switch (name) {
      case "id":
        return path.startsWith("/operations/") ? "buildReport" : f.job.id;
      case "original_request_id":
        return encodeURIComponent(f.job.originalRequestId);
      case "name":
        return "nightly";
      case "key":
        return "key-1";
      default:
        throw new Error(`${path}: give the test a value for the path parameter {${name}}`);
    }
  });
}

/** The credentials the operation's first security scheme asks for; none when it has none. */
async function tokenFor(s: TestService, operation: Operation, f: Fixtures, what: string): Promise<string | undefined> {
  const scheme = Object.keys(operation.security?.[0] ?? {})[0];
  switch (scheme) {
    case undefined:
      return undefined;
    case "adminToken":
      return f.adminToken;
    case "enqueueAssertion":
      return s.assertion();
    case "deliveryToken":
      return f.deliveryToken;
    default:
      throw new Error(`${what}: give the test credentials for the security scheme ${scheme}`);
  }
}

describe("unknown query parameters", () => {
  test("every operation of the served OpenAPI document refuses an unknown query parameter with 400 invalid_request", async (t) => {
    const s = await startService(t);
    const f = await fixtures(s);
    const res = await s.inject({ method: "GET", url: "/openapi.json" });
    assert.equal(res.statusCode, 200, res.body);
    const doc = res.json() as Document;
    let walked = 0;
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const [method, operation] of Object.entries(methods)) {
        const what = `${method.toUpperCase()} ${path} (${operation.operationId ?? "no operationId"})`;
        const token = await tokenFor(s, operation, f, what);
        const body = operation.requestBody === undefined ? undefined : (BODIES[operation.operationId ?? ""] ?? {});
        const answer = await s.inject({
          method: method.toUpperCase() as "GET",
          url: `${fill(path, f)}?${UNKNOWN}=1`,
          ...(token === undefined ? {} : { token }),
          ...(body === undefined ? {} : { payload: body as object }),
        });
        assertRefused(answer, UNKNOWN, what);
        walked += 1;
      }
    }
    // The document is the service's whole API: a walk of a few routes would prove little.
    assert.ok(walked >= 35, `walked ${walked} operations`);
    // Each refusal came before its handler: the job is as it was (not cancelled, retried or made due).
    assert.deepEqual(await s.service.store.jobGet({ id: f.job.id }), f.job);
  });

  test("the routes of issue 28 refuse it too, documented parameters still pass, and non-API routes ignore the query", async (t) => {
    const s = await startService(t);
    const f = await fixtures(s);
    const token = f.adminToken;
    const rid = encodeURIComponent(f.job.originalRequestId);
    const refused: Array<[method: "GET" | "POST", url: string, name: string]> = [
      ["GET", "/schedules?x=1", "x"],
      ["GET", `/chains/${rid}?x=1`, "x"],
      ["GET", "/operations?x=1", "x"],
      ["GET", `/jobs/${f.job.id}/extensions?x=1`, "x"],
      ["GET", `/jobs/${f.job.id}/history?x=1`, "x"],
      ["GET", "/stats?x=1", "x"],
      ["GET", "/concurrency-keys/paused?x=1", "x"],
      ["POST", `/jobs/${f.job.id}/run-now?x=1`, "x"],
      ["POST", "/operations/buildReport/resume?x=1", "x"],
      ["GET", "/admin/backup?to=/tmp/x", "to"],
      ["GET", `/jobs/${f.job.id}?x=1`, "x"],
      ["GET", `/jobs/${f.job.id}?wait_ms=0&x=1`, "x"],
      ["GET", "/jobs?status=dead&limit=5&statuss=pending", "statuss"],
      ["POST", `/jobs/${f.job.id}/cancel?abort=true&x=1`, "x"],
    ];
    for (const [method, url, name] of refused)
      assertRefused(await s.inject({ method, url, token }), name, `${method} ${url}`);
    // The probes are in the document too, on the ops listener as on the API's.
    for (const app of [s.service.app, s.service.ops]) {
      for (const url of ["/healthz?x=1", "/readyz?x=1", "/metrics?x=1"])
        assertRefused(await app.inject({ method: "GET", url }), "x", url);
    }
    // The enqueue answers an unknown parameter after its assertion checked out, as any other schema problem.
    const enqueued = await s.inject({
      method: "POST",
      url: "/jobs?x=1",
      token: await s.assertion(),
      payload: buildReport(),
    });
    assertRefused(enqueued, "x", "POST /jobs?x=1");
    const unauthenticated = await s.inject({ method: "POST", url: "/jobs?x=1", payload: buildReport() });
    assert.equal(unauthenticated.statusCode, 401, unauthenticated.body);
    assert.equal(await s.service.store.jobGet({ id: f.job.id }).then((job) => job?.status), "pending");

    // What a route declares passes (a repeated array parameter included).
    const passes: Array<[method: "GET" | "POST", url: string]> = [
      ["GET", "/jobs?status=dead&status=pending&limit=5"],
      ["GET", `/jobs?original_request_id=${rid}`],
      ["GET", `/jobs/${f.job.id}?wait_ms=0`],
      ["POST", `/jobs/${f.job.id}/cancel?abort=false`],
    ];
    for (const [method, url] of passes) {
      const res = await s.inject({ method, url, token });
      assert.equal(res.statusCode, 200, `${method} ${url}: ${res.body}`);
    }
    // The dashboard's files, the document and the key set are not API routes: a query string (a cache buster) changes nothing.
    for (const url of ["/ui?v=1", "/ui/?v=1", "/ui/app.js?v=1", "/openapi.json?x=1"]) {
      const res = await s.inject({ method: "GET", url });
      assert.equal(res.statusCode, 200, `${url}: ${res.body}`);
    }
    const jwks = await s.inject({ method: "GET", url: "/.well-known/jwks.json?x=1" });
    assert.equal(
      jwks.json<{ code: string }>().code,
      "not_found",
      "HS256 delivery keys: no key set, whatever the query",
    );
  });

  test("a route declaring a querystring schema that admits other parameters is refused when it is added", () => {
    const route = (querystring: object) => ({
      method: "GET" as const,
      url: "/lax",
      handler: async () => ({}),
      schema: { querystring },
    });
    assert.throws(
      () => strictQueryStrings(route({ type: "object", properties: { a: { type: "string" } } })),
      /additionalProperties: false/,
    );
    assert.throws(
      () => strictQueryStrings(route({ type: "object", properties: {}, additionalProperties: true })),
      /route GET \/lax: its querystring schema must be an object with additionalProperties: false/,
    );
    strictQueryStrings(route({ type: "object", properties: { a: { type: "string" } }, additionalProperties: false }));
    const bare: Parameters<typeof strictQueryStrings>[0] = { method: "GET", url: "/bare", handler: async () => ({}) };
    strictQueryStrings(bare);
    assert.deepEqual(bare.schema?.querystring, { type: "object", properties: {}, additionalProperties: false });
    const hidden: Parameters<typeof strictQueryStrings>[0] = {
      method: "GET",
      url: "/h",
      handler: async () => ({}),
      schema: { hide: true },
    };
    strictQueryStrings(hidden);
    assert.equal(hidden.schema?.querystring, undefined);
  });
});

/**
 * POST /jobs, step 4a of docs/api.md, "Enqueue, step by step": the request checked against the target operation's own
 * schemas (test/fixtures/request-schemas*.openapi.yaml), refused with 422 request_schema_mismatch naming the pointer of
 * the first mismatch. One fresh service per test.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import type { TestService } from "../helpers/service.js";
import { assertError, enqueue, postJob, startService } from "../helpers/jobs.js";

const OPENAPI_31 = fileURLToPath(new URL("../fixtures/request-schemas.openapi.yaml", import.meta.url));
const OPENAPI_30 = fileURLToPath(new URL("../fixtures/request-schemas-3.0.openapi.yaml", import.meta.url));

type Response = Awaited<ReturnType<TestService["inject"]>>;

/** A service on one of the fixture documents, where `signUp` (the assertions' default `op`) may enqueue `targets`. */
async function schemaService(
  t: Parameters<typeof startService>[0],
  options: { openapi?: string; targets?: string[]; configure?: (raw: Record<string, unknown>) => void } = {},
): Promise<TestService> {
  return startService(t, {
    configure: (raw) => {
      raw["openapi"] = options.openapi ?? OPENAPI_31;
      raw["triggers"] = {
        signUp: options.targets ?? ["sendEmail", "listReports", "storeTree", "addNote", "brokenSchema"],
      };
      raw["on_behalf_of"] = [];
      raw["operations"] = {};
      raw["cron"] = [];
      options.configure?.(raw);
    },
  });
}

/** A valid enqueue body for `sendEmail`, with `request` fields replaced by `request`. */
function sendEmail(request: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    operation_id: "sendEmail",
    request: { path_params: { userId: 7 }, body: { to: { email: "ada@example.com" }, subject: "Welcome" }, ...request },
  };
}

/** Asserts a 422 request_schema_mismatch whose message starts with `pointer` and a colon. */
function assertMismatch(res: Response, pointer: string): string {
  assertError(res, 422, "request_schema_mismatch");
  const { message } = res.json() as { message: string };
  assert.ok(message.startsWith(`${pointer}: `), `the message names ${pointer}: ${message}`);
  return message;
}

/** Counts every job of the service. */
async function countJobs(s: TestService): Promise<number> {
  return (await s.service.store.jobList({ limit: 10_000 })).length;
}

const assertion = { op: "signUp" };

describe("step 4a: 422 request_schema_mismatch", () => {
  test("returns 201 for a request that matches every schema of its target", async (t) => {
    const s = await schemaService(t);
    const job = await enqueue(s, sendEmail({ query: { locale: "fr" } }), assertion);
    assert.equal(job.status, "pending");
    assert.deepEqual(job.request.body, { to: { email: "ada@example.com" }, subject: "Welcome" });
  });

  test("returns 422 naming /request/body/subject for a body field of the wrong type, and stores nothing", async (t) => {
    const s = await schemaService(t);
    const body = { to: { email: "ada@example.com" }, subject: 42 };
    const message = assertMismatch(await postJob(s, sendEmail({ body }), assertion), "/request/body/subject");
    assert.match(message, /must be string, got 42/);
    assert.match(message, /operation "sendEmail"/);
    assert.equal(await countJobs(s), 0);
  });

  test("returns 422 naming /request/body when the target requires a body and the request has none", async (t) => {
    const s = await schemaService(t);
    const message = assertMismatch(await postJob(s, sendEmail({ body: undefined }), assertion), "/request/body");
    assert.match(message, /is required/);
  });

  test("returns 422 naming a field of a nested $ref schema, and a property the schema does not admit", async (t) => {
    const s = await schemaService(t);
    const wrongEmail = { to: { email: "not an address" }, subject: "Hi" };
    assert.match(
      assertMismatch(await postJob(s, sendEmail({ body: wrongEmail }), assertion), "/request/body/to/email"),
      /email/,
    );
    const noEmail = { to: { name: "Ada" }, subject: "Hi" };
    assertMismatch(await postJob(s, sendEmail({ body: noEmail }), assertion), "/request/body/to/email");
    const extra = { to: { email: "ada@example.com" }, subject: "Hi", cc: "bob@example.com" };
    assertMismatch(await postJob(s, sendEmail({ body: extra }), assertion), "/request/body/cc");
  });

  test("follows a recursive schema to any depth", async (t) => {
    const s = await schemaService(t);
    const tree = (leaf: unknown) => ({
      name: "root",
      children: [{ name: "a", children: [{ name: "b", children: [leaf] }] }],
    });
    await enqueue(s, { operation_id: "storeTree", request: { body: tree({ name: "c" }) } }, assertion);
    const res = await postJob(s, { operation_id: "storeTree", request: { body: tree({ name: 3 }) } }, assertion);
    assertMismatch(res, "/request/body/children/0/children/0/children/0/name");
  });

  test("returns 422 naming /request/query/limit when a required query parameter is missing or null", async (t) => {
    const s = await schemaService(t);
    for (const query of [undefined, {}, { limit: null }, { limit: [] }, { period: ["day"] }]) {
      const res = await postJob(
        s,
        { operation_id: "listReports", request: query === undefined ? {} : { query } },
        assertion,
      );
      assert.match(assertMismatch(res, "/request/query/limit"), /is required/);
    }
  });

  test('checks query parameters by the text delivery sends: 5 and "5" both pass type integer, "five" does not', async (t) => {
    const s = await schemaService(t);
    const reports = (query: Record<string, unknown>) => ({ operation_id: "listReports", request: { query } });
    for (const limit of [5, "5", [5]]) await enqueue(s, reports({ limit, period: ["day", "week"] }), assertion);
    assert.match(
      assertMismatch(await postJob(s, reports({ limit: "five" }), assertion), "/request/query/limit"),
      /must be integer, got "five"/,
    );
    assertMismatch(await postJob(s, reports({ limit: 500 }), assertion), "/request/query/limit");
    // The null item is not sent, yet the pointer counts it: it indexes the array the caller gave.
    assertMismatch(
      await postJob(s, reports({ limit: 5, period: ["day", null, "month"] }), assertion),
      "/request/query/period/2",
    );
    const locale = sendEmail({ query: { locale: "French" } });
    assertMismatch(await postJob(s, locale, assertion), "/request/query/locale");
  });

  test("returns 422 naming /request/path_params/userId for a path parameter its schema refuses; 400 for a missing one", async (t) => {
    const s = await schemaService(t);
    await enqueue(s, sendEmail({ path_params: { userId: "12" } }), assertion);
    const ada = await postJob(s, sendEmail({ path_params: { userId: "ada" } }), assertion);
    assert.match(assertMismatch(ada, "/request/path_params/userId"), /integer/);
    assertMismatch(
      await postJob(s, sendEmail({ path_params: { userId: 0 } }), assertion),
      "/request/path_params/userId",
    );
    assertError(await postJob(s, sendEmail({ path_params: {} }), assertion), 400, "missing_path_param");
  });

  test("lets a body through to an operation that declares none, and checks nothing of an operation without schemas", async (t) => {
    const s = await schemaService(t);
    await enqueue(
      s,
      { operation_id: "addNote", request: { body: { anything: [1, "two"] }, query: { x: {} } } },
      assertion,
    );
    await enqueue(s, { operation_id: "addNote", request: {} }, assertion);
  });

  test("keeps every message short, whatever the request holds", async (t) => {
    const s = await schemaService(t);
    const body = { to: { email: "ada@example.com" }, subject: "Hi", ["k".repeat(10_000)]: 1 };
    const res = await postJob(s, sendEmail({ body }), assertion);
    assertError(res, 422, "request_schema_mismatch");
    const { message } = res.json() as { message: string };
    assert.match(message, /^\/request\/body\/k+\.\.\.: is not allowed/);
    assert.ok(message.length <= 600, `${message.length} characters`);
  });
});

describe("step 4a's place among the steps", () => {
  test("a trigger-map refusal answers before the schema, so a refused caller learns nothing of it", async (t) => {
    const s = await schemaService(t, { targets: ["addNote"] });
    const res = await postJob(s, sendEmail({ body: { subject: 42 } }), assertion);
    assertError(res, 403, "trigger_not_allowed");
    assert.doesNotMatch((res.json() as { message: string }).message, /subject|request_schema/);
  });

  test("a chain mismatch answers before the schema", async (t) => {
    const s = await schemaService(t);
    const parent = await enqueue(s, { operation_id: "addNote", request: {} }, assertion);
    const res = await postJob(s, sendEmail({ body: {} }), { op: "signUp", job: parent.id });
    assertError(res, 403, "chain_mismatch");
  });

  test("a schema mismatch answers before a dedupe upsert, which then leaves the held job as it was", async (t) => {
    const s = await schemaService(t);
    const first = sendEmail({ body: { to: { email: "ada@example.com" }, subject: "First" } });
    const held = await enqueue(s, { ...first, dedupe_key: "welcome-7" }, assertion);
    const res = await postJob(s, { ...sendEmail({ body: { subject: "" } }), dedupe_key: "welcome-7" }, assertion);
    assertMismatch(res, "/request/body/to");
    const { job } = (
      await s.inject({ method: "GET", url: `/jobs/${held.id}`, token: await s.adminToken() })
    ).json() as {
      job: { request: unknown };
    };
    assert.deepEqual(job.request, held.request);
    assert.equal(await countJobs(s), 1);
  });
});

describe("OpenAPI 3.0 documents", () => {
  test("honours nullable: null passes where the schema is nullable, not elsewhere", async (t) => {
    const s = await schemaService(t, { openapi: OPENAPI_30, targets: ["saveProfile"] });
    const profile = (body: unknown) => ({ operation_id: "saveProfile", request: { body } });
    await enqueue(s, profile({ name: "Ada", nickname: null, manager: null }), assertion);
    await enqueue(s, profile({ name: "Ada", manager: { name: "Grace", manager: null } }), assertion);
    assert.match(
      assertMismatch(await postJob(s, profile({ name: null }), assertion), "/request/body/name"),
      /must be string, got null/,
    );
    assertMismatch(
      await postJob(s, profile({ name: "Ada", manager: { nickname: "G" } }), assertion),
      "/request/body/manager/name",
    );
  });

  test("does not require a readOnly property, and reads a boolean exclusiveMinimum", async (t) => {
    const s = await schemaService(t, { openapi: OPENAPI_30, targets: ["saveProfile"] });
    const profile = (version: number) => ({
      operation_id: "saveProfile",
      request: { query: { version }, body: { name: "Ada" } },
    });
    await enqueue(s, profile(1), assertion);
    assert.match(assertMismatch(await postJob(s, profile(0), assertion), "/request/query/version"), /> 0/);
  });
});

describe("opting out, and schemas opqueue cannot use", () => {
  test("operations.<id>.validate_request: false lets any request through to that operation only", async (t) => {
    const s = await schemaService(t, {
      configure: (raw) => {
        raw["operations"] = { sendEmail: { validate_request: false } };
      },
    });
    await enqueue(s, sendEmail({ body: { subject: 42 } }), assertion);
    assertMismatch(await postJob(s, { operation_id: "listReports", request: {} }, assertion), "/request/query/limit");
  });

  test("defaults.validate_request: false turns the check off, and an operation may turn it back on", async (t) => {
    const s = await schemaService(t, {
      configure: (raw) => {
        raw["defaults"] = { validate_request: false };
        raw["operations"] = { listReports: { validate_request: true } };
      },
    });
    await enqueue(s, sendEmail({ body: { subject: 42 } }), assertion);
    assertMismatch(await postJob(s, { operation_id: "listReports", request: {} }, assertion), "/request/query/limit");
  });

  test("a schema opqueue cannot compile leaves its operation unchecked, with one start-up warning naming it", async (t) => {
    const s = await schemaService(t);
    const warnings = s.service.warnings.filter((warning) => warning.includes("brokenSchema"));
    assert.equal(warnings.length, 1, s.service.warnings.join("\n"));
    assert.match(warnings[0] ?? "", /NoSuchSchema/);
    await enqueue(s, { operation_id: "brokenSchema", request: {} }, assertion);
    // The other operations of the document are still checked.
    assertMismatch(await postJob(s, { operation_id: "listReports", request: {} }, assertion), "/request/query/limit");
  });

  test("a cron entry whose request its target's schemas refuse starts with a warning naming the entry", async (t) => {
    const s = await schemaService(t, {
      configure: (raw) => {
        raw["triggers"] = { signUp: ["listReports"], "cron:hourly": ["listReports"] };
        raw["cron"] = [{ name: "hourly", schedule: "0 * * * *", operation_id: "listReports", user_id: "system" }];
      },
    });
    assert.ok(
      s.service.warnings.some(
        (warning) => warning.startsWith("config: cron.0.request:") && warning.includes("/request/query/limit"),
      ),
      s.service.warnings.join("\n"),
    );
  });

  test("a schedule created or changed through the API with a request its target's schemas refuse gets 422, and none is stored", async (t) => {
    const s = await schemaService(t, {
      configure: (raw) => (raw["triggers"] = { signUp: ["listReports"], "cron:*": ["listReports"] }),
    });
    const token = await s.adminToken({ sub: "alice" });
    const post = (payload: Record<string, unknown>) => s.inject({ method: "POST", url: "/schedules", token, payload });
    const hourly = { name: "hourly", schedule: "0 * * * *", operation_id: "listReports", user_id: "system" };
    assertMismatch(await post(hourly), "/request/query/limit");
    assert.equal((await post({ ...hourly, request: { query: { limit: "10" } } })).statusCode, 201);
    const patch = await s.inject({ method: "PATCH", url: "/schedules/hourly", token, payload: { request: {} } });
    assertMismatch(patch, "/request/query/limit");
    const stored = await s.inject({ method: "GET", url: "/schedules/hourly", token });
    assert.deepEqual((stored.json() as { schedule: { request: unknown } }).schedule.request, {
      query: { limit: "10" },
    });
  });
});

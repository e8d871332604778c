/**
 * `GET /operations` (docs/api.md, "Operations"): the background operations of the product's document with their
 * resolved attempts and timeout, sorted by operation_id, for site administrators only.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { assertError, startService } from "../helpers/jobs.js";

describe("GET /operations", () => {
  test("lists every background operation of the product's document with its settings, sorted by operation_id", async (t) => {
    const s = await startService(t, {
      configure: (raw) => {
        raw["operations"] = { sendWelcomeEmail: { max_attempts: 8 }, buildReport: { timeout_ms: 120_000 } };
      },
    });
    const res = await s.inject({ method: "GET", url: "/operations", token: await s.adminToken() });
    assert.equal(res.statusCode, 200, res.body);
    assert.match(String(res.headers["content-type"]), /^application\/json/);
    // createUser, importUsers and getUser lack the background tag: no job can target them.
    const control = {
      paused: null,
      limits: { rate: null, rate_per_key: null, max_concurrency: null, concurrency_limit: 1 },
      limits_source: "config",
      limits_set: null,
    };
    assert.deepEqual(res.json(), {
      operations: [
        {
          operation_id: "buildReport",
          method: "POST",
          path: "/reports",
          max_attempts: 5,
          timeout_ms: 120_000,
          control,
        },
        {
          operation_id: "recordEmailSent",
          method: "PUT",
          path: "/emails/{emailId}/record",
          max_attempts: 5,
          timeout_ms: 30_000,
          control,
        },
        {
          operation_id: "sendWelcomeEmail",
          method: "POST",
          path: "/users/{userId}/welcome-email",
          max_attempts: 8,
          timeout_ms: 30_000,
          control,
        },
      ],
    });
  });

  test("returns 401 unauthenticated without an admin token, with a malformed one or an expired one", async (t) => {
    const s = await startService(t);
    assertError(await s.inject({ method: "GET", url: "/operations" }), 401, "unauthenticated");
    assertError(await s.inject({ method: "GET", url: "/operations", token: "a.b.c" }), 401, "unauthenticated");
    const expired = await s.adminToken();
    s.clock.advance((3600 + 31) * 1000);
    assertError(await s.inject({ method: "GET", url: "/operations", token: expired }), 401, "unauthenticated");
  });

  test("returns 403 site_admin_required for an admin token without site_admin", async (t) => {
    const s = await startService(t);
    const token = await s.adminToken({ siteAdmin: false });
    assertError(await s.inject({ method: "GET", url: "/operations", token }), 403, "site_admin_required");
  });

  test("is described in the service's OpenAPI document as listOperations, secured, with its 200 schema", async (t) => {
    const s = await startService(t);
    const doc = (await s.inject({ method: "GET", url: "/openapi.json" })).json() as {
      paths: Record<
        string,
        Record<
          string,
          {
            operationId: string;
            security: unknown[];
            responses: Record<string, { content: Record<string, { schema: { properties: Record<string, unknown> } }> }>;
          }
        >
      >;
    };
    const operation = doc.paths["/operations"]?.["get"];
    assert.equal(operation?.operationId, "listOperations");
    assert.deepEqual(operation?.security, [{ adminToken: [] }]);
    assert.deepEqual(Object.keys(operation?.responses ?? {}).sort(), ["200", "401", "403", "503"]);
    assert.deepEqual(Object.keys(operation?.responses["200"]?.content["application/json"]?.schema.properties ?? {}), [
      "operations",
    ]);
  });
});

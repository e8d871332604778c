/**
 * Admin roles (docs/api.md, "Roles"), on the engine of the run: every administrators' route of the served OpenAPI
 * states the role it needs, that role is the table's below (a route added without a row fails the first case), and
 * each role is let through exactly the routes at or below it. Then an operator limited by `ops`, the role a job's
 * history records with each action, and `GET /admin/me`.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { LightMyRequestResponse } from "fastify";
import { ADMIN_ROLES, mintToken, type AdminRole } from "../../src/auth/tokens.js";
import type { TestService } from "../helpers/service.js";
import { assertError, buildReport, driveTo, enqueue, startService, welcomeEmail } from "../helpers/jobs.js";

/** The role each administrators' operation needs. A new admin route must be added here, or the first case fails. */
const ROLE_OF: Record<string, AdminRole> = {
  getJob: "viewer",
  listJobs: "viewer",
  listJobAttempts: "viewer",
  getJobHistory: "viewer",
  getJobExtensions: "viewer",
  getChain: "viewer",
  getStats: "viewer",
  listOperations: "viewer",
  listPausedKeys: "viewer",
  listSchedules: "viewer",
  getSchedule: "viewer",
  getAdminSession: "viewer",
  cancelJob: "operator",
  cancelJobs: "operator",
  retryJob: "operator",
  retryDeadJobs: "operator",
  runJobNow: "operator",
  cancelChain: "operator",
  pauseOperation: "operator",
  resumeOperation: "operator",
  setOperationLimits: "operator",
  resetOperationLimits: "operator",
  pauseConcurrencyKey: "operator",
  resumeConcurrencyKey: "operator",
  pauseSchedule: "operator",
  resumeSchedule: "operator",
  runScheduleNow: "operator",
  createSchedule: "admin",
  updateSchedule: "admin",
  deleteSchedule: "admin",
  backupDatabase: "admin",
  listRevocations: "admin",
  revokeAdminTokens: "admin",
  eraseUserData: "admin",
  rewrapPayloads: "admin",
};

/** The bodies of the routes that take one: valid, so that what is let through is answered as the route would. */
const BODY_OF: Record<string, object> = {
  cancelJobs: { operation_id: "buildReport" },
  retryDeadJobs: { operation_id: "buildReport" },
  setOperationLimits: { max_concurrency: 3 },
  createSchedule: { name: "hourly", schedule: "0 * * * *", operation_id: "buildReport", user_id: "system" },
  updateSchedule: { schedule: "5 * * * *" },
  revokeAdminTokens: { jti: "some-other-token" },
  eraseUserData: { user_id: "nobody" },
};

interface AdminRoute {
  operationId: string;
  method: string;
  path: string;
  role: unknown;
}

/** The administrators' routes of the served document: every operation an admin token may call. */
async function adminRoutesOf(s: TestService): Promise<AdminRoute[]> {
  const res = await s.inject({ method: "GET", url: "/openapi.json" });
  const document = res.json() as {
    paths: Record<string, Record<string, { operationId: string; security: object[]; "x-opqueue-role"?: unknown }>>;
  };
  return Object.entries(document.paths).flatMap(([path, methods]) =>
    Object.entries(methods)
      .filter(([, operation]) => operation.security.some((requirement) => "adminToken" in requirement))
      .map(([method, operation]) => ({
        operationId: operation.operationId,
        method: method.toUpperCase(),
        path,
        role: operation["x-opqueue-role"],
      })),
  );
}

/** Lets schedules enqueue both operations the cases use. */
const schedulesAllowed = {
  configure: (raw: Record<string, unknown>) => {
    (raw["triggers"] as Record<string, string[]>)["cron:*"] = ["buildReport", "sendWelcomeEmail"];
  },
};

/** A route's path with its parameters filled in. */
function urlOf(route: AdminRoute, jobId: string): string {
  return route.path
    .replace("{id}", route.path.startsWith("/operations/") ? "buildReport" : jobId)
    .replace("{original_request_id}", "req-1")
    .replace("{name}", "hourly")
    .replace("{key}", "k1");
}

/** Calls `route` with `token`. */
async function call(s: TestService, route: AdminRoute, jobId: string, token: string): Promise<LightMyRequestResponse> {
  const body = BODY_OF[route.operationId];
  return s.inject({
    method: route.method as "GET",
    url: urlOf(route, jobId),
    token,
    ...(body === undefined ? {} : { payload: body }),
  });
}

describe("roles, route by route", () => {
  test("every administrators' route states its role in the OpenAPI document, and it is the table's", async (t) => {
    const s = await startService(t);
    const routes = await adminRoutesOf(s);
    assert.deepEqual(
      routes.map((route) => route.operationId).sort(),
      Object.keys(ROLE_OF).sort(),
      "every admin route has a row in ROLE_OF (add the new route's role there), and every row a route",
    );
    for (const route of routes) {
      assert.equal(route.role, ROLE_OF[route.operationId], `${route.operationId}'s x-opqueue-role`);
    }
  });

  test("each role is let through the routes at or below it and refused 403 insufficient_role above it", async (t) => {
    const s = await startService(t, schedulesAllowed);
    const job = await enqueue(s, buildReport());
    const routes = await adminRoutesOf(s);
    // The schedule the routes act on exists before any of them is called (creating it again answers 409).
    const admin = await s.adminToken();
    const created = await s.inject({
      method: "POST",
      url: "/schedules",
      token: admin,
      payload: BODY_OF["createSchedule"],
    });
    assert.equal(created.statusCode, 201, created.body);
    const ranks = (role: AdminRole) => ADMIN_ROLES.indexOf(role);
    // Least to most, and the destructive routes last, so that each role finds what it acts on.
    const order = (route: AdminRoute) => (route.operationId === "deleteSchedule" ? 1 : 0);
    routes.sort((a, b) => order(a) - order(b));
    for (const role of ADMIN_ROLES) {
      const token = await mintToken({ auth: s.config.auth, clock: s.clock, sub: `${role}@example.com`, role });
      for (const route of routes) {
        const needed = ROLE_OF[route.operationId] as AdminRole;
        const res = await call(s, route, job.id, token);
        if (ranks(role) >= ranks(needed)) {
          assert.ok(
            res.statusCode !== 401 && res.statusCode !== 403,
            `${role} is let through ${route.operationId}: ${res.statusCode} ${res.body}`,
          );
        } else {
          assertError(res, 403, "insufficient_role");
          assert.match(res.json().message, new RegExp(`signed in as ${role}; this needs ${needed}`));
        }
      }
    }
  });

  test("a token without a role is refused 403 site_admin_required on every route, and a revoked one 401", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, buildReport());
    const plain = await mintToken({ auth: s.config.auth, clock: s.clock, sub: "nobody" });
    const revoked = await mintToken({ auth: s.config.auth, clock: s.clock, sub: "gone", role: "admin", jti: "leak" });
    await s.service.store.adminTokenRevoke({ jti: "leak", actor: "test" });
    for (const route of await adminRoutesOf(s)) {
      if (route.operationId === "getJob") continue; // it reads an assertion first; its own case is in admin.test.ts
      assertError(await call(s, route, job.id, plain), 403, "site_admin_required");
      const res = await call(s, route, job.id, revoked);
      assertError(res, 401, "unauthenticated");
      assert.match(res.json().message, /revoked/);
    }
  });
});

describe("an operator limited by ops", () => {
  const limitedOperator = (s: TestService) =>
    mintToken({
      auth: s.config.auth,
      clock: s.clock,
      sub: "mail-oncall",
      role: "operator",
      operations: ["sendWelcomeEmail"],
    });

  test("acts on the jobs, the flow control and the bulk actions of its operations, and reads everything", async (t) => {
    const s = await startService(t);
    const token = await limitedOperator(s);
    const mail = await enqueue(s, welcomeEmail({ run_at: new Date(s.clock.now() + 60_000).toISOString() }));
    const report = await enqueue(s, buildReport());
    const ok = async (method: "GET" | "POST" | "PATCH" | "DELETE", url: string, payload?: object) => {
      const res = await s.inject({ method, url, token, ...(payload ? { payload } : {}) });
      assert.equal(res.statusCode, 200, `${method} ${url}: ${res.body}`);
    };
    await ok("POST", `/jobs/${mail.id}/run-now`);
    await ok("POST", `/jobs/${mail.id}/cancel`);
    await ok("POST", `/jobs/${mail.id}/retry`);
    await ok("POST", "/operations/sendWelcomeEmail/pause");
    await ok("POST", "/operations/sendWelcomeEmail/resume");
    await ok("PATCH", "/operations/sendWelcomeEmail/limits", { max_concurrency: 2 });
    await ok("DELETE", "/operations/sendWelcomeEmail/limits");
    await ok("POST", "/jobs/cancel", { operation_id: "sendWelcomeEmail" });
    await ok("POST", "/jobs/retry-dead", { operation_id: "sendWelcomeEmail" });
    await ok("GET", `/jobs/${report.id}`);
    await ok("GET", `/jobs/${report.id}/history`);
    await ok("GET", "/jobs");
    await ok("GET", "/stats");
  });

  test("is refused 403 insufficient_role outside them, and on what no one operation bounds", async (t) => {
    const s = await startService(t);
    const token = await limitedOperator(s);
    const report = await enqueue(s, buildReport());
    await driveTo(s, report.id, "dead");
    const refused = async (method: "POST" | "PATCH" | "DELETE", url: string, payload?: object) => {
      const res = await s.inject({ method, url, token, ...(payload ? { payload } : {}) });
      assertError(res, 403, "insufficient_role");
      return res.json().message as string;
    };
    assert.match(await refused("POST", `/jobs/${report.id}/retry`), /not on "buildReport"/);
    await refused("POST", `/jobs/${report.id}/cancel`);
    await refused("POST", `/jobs/${report.id}/run-now`);
    await refused("POST", "/operations/buildReport/pause");
    await refused("PATCH", "/operations/buildReport/limits", { max_concurrency: 2 });
    await refused("DELETE", "/operations/buildReport/limits");
    await refused("POST", "/jobs/cancel", { operation_id: "buildReport" });
    assert.match(await refused("POST", "/jobs/cancel", { user_id: "u1" }), /bulk cancel without operation_id/);
    await refused("POST", "/jobs/retry-dead", { operation_id: "buildReport" });
    await refused("POST", "/jobs/retry-dead");
    await refused("POST", "/chains/req-1/cancel");
    await refused("POST", "/concurrency-keys/k1/pause");
    await refused("POST", "/concurrency-keys/k1/resume");
    await refused("POST", "/schedules/nightly/run-now");
    await refused("POST", "/schedules/nightly/pause");
    assert.equal((await s.service.store.jobGet({ id: report.id }))?.status, "dead", "nothing changed");
  });

  test("acts on the schedules of its operations only", async (t) => {
    const s = await startService(t, schedulesAllowed);
    const admin = await s.adminToken();
    for (const [name, operation_id] of [
      ["mail", "sendWelcomeEmail"],
      ["report", "buildReport"],
    ]) {
      const request = operation_id === "sendWelcomeEmail" ? { path_params: { userId: "1" } } : { body: {} };
      const res = await s.inject({
        method: "POST",
        url: "/schedules",
        token: admin,
        payload: { name, schedule: "0 * * * *", operation_id, user_id: "system", request },
      });
      assert.equal(res.statusCode, 201, res.body);
    }
    const token = await limitedOperator(s);
    const pause = (name: string) => s.inject({ method: "POST", url: `/schedules/${name}/pause`, token });
    assert.equal((await pause("mail")).statusCode, 200);
    assertError(await pause("report"), 403, "insufficient_role");
    assertError(await pause("missing"), 404, "schedule_not_found");
  });
});

describe("the audit of a job's actions", () => {
  test("records the role each action was made with: an operator's, an admin's, and site_admin as admin", async (t) => {
    const s = await startService(t);
    const operator = await mintToken({ auth: s.config.auth, clock: s.clock, sub: "oncall", role: "operator" });
    const admin = await mintToken({ auth: s.config.auth, clock: s.clock, sub: "lead", role: "admin" });
    const legacy = await s.adminToken({ sub: "root" });
    const job = await enqueue(s, welcomeEmail({ run_at: new Date(s.clock.now() + 60_000).toISOString() }));
    for (const [url, token] of [
      [`/jobs/${job.id}/run-now`, operator],
      [`/jobs/${job.id}/cancel`, admin],
      [`/jobs/${job.id}/retry`, legacy],
    ] as const) {
      const res = await s.inject({ method: "POST", url, token });
      assert.equal(res.statusCode, 200, `${url}: ${res.body}`);
    }
    const history = await s.inject({ method: "GET", url: `/jobs/${job.id}/history`, token: operator });
    assert.equal(history.statusCode, 200, history.body);
    const events = (history.json() as { events: Array<Record<string, unknown>> }).events;
    assert.deepEqual(
      events.filter((event) => event["type"] === "admin").map((e) => [e["action"], e["actor"], e["role"]]),
      [
        ["run-now", "oncall", "operator"],
        ["cancel", "lead", "admin"],
        ["retry", "root", "admin"],
      ],
    );
  });
});

describe("GET /admin/me", () => {
  test("answers the token as opqueue reads it: sub, role, ops, jti, issue and expiry", async (t) => {
    const s = await startService(t);
    const token = await mintToken({
      auth: s.config.auth,
      clock: s.clock,
      sub: "mail-oncall",
      role: "operator",
      operations: ["sendWelcomeEmail"],
      jti: "t-1",
      ttlSeconds: 600,
    });
    const res = await s.inject({ method: "GET", url: "/admin/me", token });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), {
      sub: "mail-oncall",
      role: "operator",
      operations: ["sendWelcomeEmail"],
      jti: "t-1",
      issued_at: new Date(s.clock.now()).toISOString(),
      expires_at: new Date(s.clock.now() + 600_000).toISOString(),
    });
    const legacy = await s.inject({ method: "GET", url: "/admin/me", token: await s.adminToken() });
    assert.equal(legacy.json().role, "admin", "site_admin: true reads as admin");
    assert.equal(legacy.json().jti, null);
  });
});

/**
 * Chains as a unit, end to end (docs/chains.md): a real service delivering to a real target. Stored results, a job's
 * callback enqueued once with the outcome, a chain's on_settled once, GET /chains/{rid} as a tree, and
 * GET /jobs/{id}?wait_ms answering at the terminal state. On SQLite, then on PostgreSQL (test/helpers/service.ts).
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { Job } from "../../src/job/schemas.js";
import { startLiveService, type LiveService } from "../helpers/live-service.js";
import { reply, startTarget } from "../helpers/target.js";

/** POST /jobs on the live service; the answer's status and body. */
async function post(s: LiveService, body: unknown, claims: Parameters<LiveService["assertion"]>[0] = {}) {
  const response = await fetch(`${s.url}/jobs`, {
    method: "POST",
    headers: { authorization: `Bearer ${await s.assertion(claims)}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as { job?: Job; code?: string } };
}

/** A GET with an admin token (or `token`); status and body. */
async function get(s: LiveService, path: string, token?: string) {
  const response = await fetch(`${s.url}${path}`, {
    headers: { authorization: `Bearer ${token ?? (await s.adminToken())}` },
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/** A service delivering to `target`, storing buildReport's results; the chain sweeper runs often. */
async function service(t: Parameters<typeof startLiveService>[0], targetUrl: string): Promise<LiveService> {
  return startLiveService(t, {
    worker: true,
    configure: (raw) => {
      raw["target"] = { base_url: targetUrl, audience: "product" };
      raw["operations"] = { buildReport: { store_result: true } };
      raw["chains"] = { check_ms: 20 };
      raw["triggers"] = {
        createUser: ["buildReport", "sendWelcomeEmail"],
        buildReport: ["recordEmailSent", "buildReport"],
        sendWelcomeEmail: ["recordEmailSent", "buildReport"],
        "cron:nightly": ["buildReport"],
      };
    },
  });
}

describe("stored results and callbacks", () => {
  test("a stored 2xx JSON body is the job's result.body as JSON; on_complete is enqueued once, chained, with the outcome as its body", async (t) => {
    const target = await startTarget(t, (request, res) =>
      request.path === "/reports"
        ? reply(res, 200, { headers: { "content-type": "application/json; charset=utf-8" }, body: '{"rows":42}' })
        : reply(res, 204),
    );
    const s = await service(t, target.url);
    const { status, body } = await post(s, {
      operation_id: "buildReport",
      request: { body: {} },
      on_complete: { operation_id: "recordEmailSent", request: { path_params: { emailId: "e-1" } } },
    });
    assert.equal(status, 201);
    const job = body.job as Job;
    const done = await s.waitForJob(job.id, (row) => row.status === "succeeded");
    assert.deepEqual(done.result, {
      status_code: 200,
      error_body: null,
      terminal_reason: null,
      body: { rows: 42 },
      body_format: "json",
    });
    const [, callbackRequest] = await target.waitForRequests(2);
    assert.ok(callbackRequest);
    assert.equal(callbackRequest.path, "/emails/e-1/record");
    const outcome = JSON.parse(callbackRequest.body) as { job_id: string; status: string; result: Job["result"] };
    assert.equal(outcome.job_id, job.id);
    assert.equal(outcome.status, "succeeded");
    assert.deepEqual(
      outcome.result?.body,
      { rows: 42 },
      "the callback carries the result as JSON, not a string to parse again",
    );
    assert.equal(outcome.result?.body_format, "json");
    const callbackJob = (await s.service.store.jobList({ limit: 10 })).find(
      (row) => row.operationId === "recordEmailSent",
    );
    assert.equal(callbackJob?.parentJobId, job.id);
    assert.equal(callbackJob?.enqueuedByOperationId, "buildReport");
    assert.equal(callbackJob?.originalRequestId, job.original_request_id);
    // Later sweeps enqueue no second callback.
    await s.service.store.jobCallbackDueList({ limit: 10 }).then((due) => assert.deepEqual(due, []));
    assert.equal(
      (await s.service.store.jobList({ limit: 10 })).filter((row) => row.operationId === "recordEmailSent").length,
      1,
    );
  });

  test("a text body stays text, a JSON body cut at 8,192 bytes or not JSON stays text (body_truncated says it was cut), a JSON string is JSON", async (t) => {
    const long = JSON.stringify({ rows: "r".repeat(9000) });
    const answers: Record<string, { headers?: Record<string, string>; body: string }> = {
      plain: { headers: { "content-type": "text/plain" }, body: '{"looks":"like JSON"}' },
      long: { headers: { "content-type": "application/json" }, body: long },
      broken: { headers: { "content-type": "application/json" }, body: "{not json" },
      string: { headers: { "content-type": "application/vnd.api+json" }, body: '"done"' },
      deep: { headers: { "content-type": "application/json" }, body: `${"[".repeat(200)}${"]".repeat(200)}` },
    };
    const target = await startTarget(t, (request, res) => {
      const kind = String((JSON.parse(request.body) as { kind: string }).kind);
      reply(res, 200, answers[kind] ?? { body: "" });
    });
    const s = await service(t, target.url);
    const results: Record<string, unknown> = {};
    for (const kind of Object.keys(answers)) {
      const { body } = await post(
        s,
        { operation_id: "buildReport", request: { body: { kind } } },
        { rid: `stored-${kind}` },
      );
      const done = await s.waitForJob((body.job as Job).id, (row) => row.status === "succeeded");
      results[kind] = done.result;
    }
    const ok = { status_code: 200, error_body: null, terminal_reason: null };
    assert.deepEqual(results, {
      plain: { ...ok, body: '{"looks":"like JSON"}', body_format: "text" },
      long: { ...ok, body: long.slice(0, 8192), body_format: "text", body_truncated: true },
      broken: { ...ok, body: "{not json", body_format: "text" },
      string: { ...ok, body: "done", body_format: "json" },
      deep: { ...ok, body: `${"[".repeat(200)}${"]".repeat(200)}`, body_format: "text" },
    });
    // The API answers the same as the store keeps.
    const listed = await get(s, "/jobs?operation_id=buildReport&limit=10");
    const string = (listed.body["jobs"] as Job[]).find((job) => job.original_request_id === "stored-string");
    assert.deepEqual(string?.result, results["string"]);
  });

  test("on_dead is enqueued when the job dies, not per attempt; a callback the trigger map forbids is refused at enqueue", async (t) => {
    const target = await startTarget(t, (request, res) =>
      reply(res, request.path === "/reports" ? 400 : 204, { body: "bad" }),
    );
    const s = await service(t, target.url);
    const forbidden = await post(s, {
      operation_id: "buildReport",
      request: { body: {} },
      on_dead: { operation_id: "sendWelcomeEmail", request: { path_params: { userId: "1" } } },
    });
    assert.equal(forbidden.status, 403);
    assert.equal(forbidden.body.code, "trigger_not_allowed");
    const unknown = await post(s, {
      operation_id: "buildReport",
      request: { body: {} },
      on_dead: { operation_id: "nope" },
    });
    assert.equal(unknown.status, 422);
    const { body } = await post(s, {
      operation_id: "buildReport",
      request: { body: {} },
      on_dead: { operation_id: "buildReport" },
    });
    const job = body.job as Job;
    await s.waitForJob(job.id, (row) => row.status === "dead");
    const callback = await target.waitForRequests(2).then((requests) => requests[1]);
    assert.equal(JSON.parse(callback?.body ?? "{}").result.terminal_reason, "permanent-status");
  });
});

describe("chains", () => {
  test("on_settled fires once when the chain settles; GET /chains answers the tree, counts and settling", async (t) => {
    let chained = false;
    const target = await startTarget(t);
    const s = await service(t, target.url);
    target.setHandler(async (request, res) => {
      // The root's delivery enqueues two children into the chain, as a product's handler would.
      if (!chained && request.path.startsWith("/users/")) {
        chained = true;
        const jobId = String(request.headers["x-job-id"]);
        for (const n of [1, 2]) {
          await post(
            s,
            { operation_id: "buildReport", request: { body: { n } } },
            { op: "sendWelcomeEmail", job: jobId },
          );
        }
      }
      reply(res, 204);
    });
    const { body } = await post(
      s,
      {
        operation_id: "sendWelcomeEmail",
        request: { path_params: { userId: "9" } },
        on_settled: { operation_id: "recordEmailSent", request: { path_params: { emailId: "done" } } },
      },
      { rid: "chain-9" },
    );
    const root = body.job as Job;
    const requests = await target.waitForRequests(4);
    const settledCall = requests.find((request) => request.path === "/emails/done/record");
    assert.ok(settledCall, "on_settled was delivered");
    const outcome = JSON.parse(settledCall.body) as {
      original_request_id: string;
      counts: Record<string, number>;
      jobs: number;
    };
    assert.equal(outcome.original_request_id, "chain-9");
    assert.deepEqual(outcome.counts, { succeeded: 3, dead: 0, cancelled: 0 });
    const callback = (await s.service.store.jobList({ originalRequestId: "chain-9", limit: 10 })).find(
      (row) => row.operationId === "recordEmailSent",
    );
    assert.ok(callback);
    await s.waitForJob(callback.id, (row) => row.status === "succeeded");

    const answer = await get(s, "/chains/chain-9");
    assert.equal(answer.status, 200);
    const chain = answer.body["chain"] as {
      settled: boolean;
      counts: Record<string, number>;
      spawn_cap: { used: number };
      jobs: Array<{ job: Job; attempts: unknown[]; children: Array<{ job: Job }> }>;
      on_settled: { fired_at: string | null };
    };
    assert.equal(chain.settled, true);
    assert.equal(chain.counts["succeeded"], 4);
    assert.equal(chain.spawn_cap.used, 4);
    assert.notEqual(chain.on_settled.fired_at, null);
    assert.equal(chain.jobs.length, 1, "one root");
    assert.equal(chain.jobs[0]?.job.id, root.id);
    assert.equal(chain.jobs[0]?.attempts.length, 1);
    assert.equal(chain.jobs[0]?.children.length, 3, "two children and the callback, under the root");
    assert.equal((await get(s, "/chains/no-such-chain")).body["code"], "chain_not_found");
    assert.equal(
      (
        await post(
          s,
          { operation_id: "buildReport", request: { body: {} }, on_settled: { operation_id: "buildReport" } },
          { rid: "chain-9" },
        )
      ).body.code,
      "chain_exists",
    );
  });

  test("GET /jobs/{id}?wait_ms answers at the terminal state, not at its bound; a producer reads its own jobs only", async (t) => {
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    const target = await startTarget(t, async (_request, res) => {
      await held;
      reply(res, 200, { body: "ok" });
    });
    const s = await service(t, target.url);
    const { body } = await post(
      s,
      { operation_id: "buildReport", request: { body: {} } },
      { sub: "u5", rid: "wait-1" },
    );
    const job = body.job as Job;
    await target.waitForRequests(1);
    const producer = await s.assertion({ sub: "u5", rid: "wait-1" });
    const waiting = get(s, `/jobs/${job.id}?wait_ms=25000`, producer);
    const started = Date.now();
    release();
    const answer = await waiting;
    assert.equal(answer.status, 200);
    assert.equal((answer.body["job"] as Job).status, "succeeded");
    assert.ok(Date.now() - started < 20_000, "answered at the terminal state");
    const stranger = await get(s, `/jobs/${job.id}`, await s.assertion({ sub: "someone-else" }));
    assert.equal(stranger.status, 404);
    assert.equal((await get(s, `/jobs/${job.id}?wait_ms=30001`)).status, 400);
  });
});

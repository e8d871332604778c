/**
 * The shortest path through the service: enqueue a job, read it back by id and in the list of pending jobs, and find
 * the enqueue in the served API document.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { startTestService } from "../helpers/service.js";

test("enqueues a job and reads it back", async (t) => {
  const s = await startTestService();
  t.after(() => s.close());
  const res = await s.inject({
    method: "POST",
    url: "/jobs",
    token: await s.assertion(),
    payload: { operation_id: "sendWelcomeEmail", request: { path_params: { userId: "42" }, body: { hello: "world" } } },
  });
  assert.equal(res.statusCode, 201, res.body);
  const job = res.json().job;
  assert.equal(job.operation_id, "sendWelcomeEmail");
  assert.equal(job.status, "pending");
  assert.equal(job.attempt, 0);
  assert.deepEqual(job.request, { path_params: { userId: "42" }, body: { hello: "world" } });
  assert.deepEqual(job.authority, { kind: "request", request_id: "req-1", user_id: "u1" });
  const got = await s.inject({ method: "GET", url: `/jobs/${job.id}`, token: await s.adminToken() });
  assert.equal(got.statusCode, 200, got.body);
  assert.deepEqual(got.json().job, job);
  const list = await s.inject({ method: "GET", url: `/jobs?status=pending`, token: await s.adminToken() });
  assert.equal(list.statusCode, 200, list.body);
  assert.deepEqual(list.json(), { jobs: [job], next_cursor: null });
  const doc = await s.inject({ method: "GET", url: "/openapi.json" });
  assert.equal(doc.statusCode, 200);
  assert.equal(doc.json().paths["/jobs"].post.operationId, "enqueueJob");
});

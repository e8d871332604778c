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
  console.log(job);
  const got = await s.inject({ method: "GET", url: `/jobs/${job.id}`, token: await s.adminToken() });
  assert.equal(got.statusCode, 200, got.body);
  assert.deepEqual(got.json().job, job);
  const list = await s.inject({ method: "GET", url: `/jobs?status=pending`, token: await s.adminToken() });
  assert.equal(list.statusCode, 200, list.body);
  console.log(list.json());
  const doc = await s.inject({ method: "GET", url: "/openapi.json" });
  console.log(JSON.stringify(doc.json()).slice(0, 400));
});

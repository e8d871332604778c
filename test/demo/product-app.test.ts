/**
 * The demo product behind `npm start`, written with opqueue/client, against a real service: a sign-up enqueues
 * the welcome email, whose delivery chains recordEmailSent with no token code; erin's first delivery fails for
 * good (dead), and an administrator's retry then succeeds.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { request } from "undici";
import { buildProductApp } from "../../src/demo/product-app.js";
import { startLiveService, type LiveService } from "../helpers/live-service.js";

const DEMO_OPENAPI = fileURLToPath(new URL("../../examples/demo/product.openapi.yaml", import.meta.url));

/**
 * A free port of 127.0.0.1, held until `release` is called: the service (which listens on port 0) starts in
 * between, and must not be handed the same port.
 */
async function reservePort(): Promise<{ port: number; release: () => Promise<void> }> {
  const server = createServer().listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return { port, release: () => new Promise((resolve) => server.close(() => resolve())) };
}

async function startDemo(t: {
  after: (fn: () => Promise<void>) => void;
}): Promise<{ s: LiveService; productUrl: string }> {
  const { port: productPort, release } = await reservePort();
  t.after(release); // should the service fail to start; closing twice is harmless
  const s = await startLiveService(t, {
    worker: true,
    configure: (raw) => {
      raw["openapi"] = DEMO_OPENAPI;
      raw["target"] = { base_url: `http://127.0.0.1:${productPort}`, audience: "product" };
      raw["triggers"] = { createUser: ["sendWelcomeEmail"], sendWelcomeEmail: ["recordEmailSent"] };
      raw["operations"] = {};
      raw["cron"] = [];
    },
  });
  const product = await buildProductApp({ config: s.config, opqueueUrl: s.url, failureRate: 0, log: () => undefined });
  await release();
  await product.listen({ host: "127.0.0.1", port: productPort });
  t.after(() => product.close());
  return { s, productUrl: `http://127.0.0.1:${productPort}` };
}

async function signUp(productUrl: string, name: string): Promise<string> {
  const response = await request(`${productUrl}/users`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ name }),
  });
  assert.equal(response.statusCode, 201);
  return ((await response.body.json()) as { welcome_job: string }).welcome_job;
}

test("a sign-up's welcome email is delivered and chains recordEmailSent through the client", async (t) => {
  const { s, productUrl } = await startDemo(t);
  const welcome = await signUp(productUrl, "alice-1");
  await s.waitForJob(welcome, (job) => job.status === "succeeded", "succeeded");
  const [child] = await s.service.store.jobList({ parentJobId: welcome, limit: 10 });
  assert.ok(child, "recordEmailSent was chained");
  assert.equal(child.operationId, "recordEmailSent");
  assert.equal(child.enqueuedByOperationId, "sendWelcomeEmail");
  const finished = await s.waitForJob(child.id, (job) => job.status === "succeeded", "succeeded");
  assert.equal(finished.userId, "alice-1");
});

test("erin's welcome email goes dead once, and an administrator's retry then succeeds", async (t) => {
  const { s, productUrl } = await startDemo(t);
  const welcome = await signUp(productUrl, "erin-1");
  const dead = await s.waitForJob(welcome, (job) => job.status === "dead", "dead");
  assert.equal(dead.result?.terminal_reason, "permanent-status");
  assert.equal(dead.result?.status_code, 400);
  const retried = await s.inject({ method: "POST", url: `/jobs/${welcome}/retry`, token: await s.adminToken() });
  assert.equal(retried.statusCode, 200, retried.body);
  await s.waitForJob(welcome, (job) => job.status === "succeeded", "succeeded");
});

test("the demo's background routes take a delivery token only for their own operation and with its delivery headers", async (t) => {
  const { s, productUrl } = await startDemo(t);
  const claims = {
    sub: "alice-2",
    job: "job_demo_0001",
    att: 1,
    clm: 1,
    rid: "signup-demo",
    authority: { kind: "request", request_id: "signup-demo", user_id: "alice-2" },
    timeoutMs: 10_000,
  };
  const headersFor = (token: string) => ({
    authorization: `Bearer ${token}`,
    "idempotency-key": claims.job,
    "x-request-id": claims.rid,
    "x-job-id": claims.job,
    "x-job-attempt": String(claims.att),
  });
  const welcome = headersFor(await s.service.signer.sign({ ...claims, op: "sendWelcomeEmail" }));
  const recorded = headersFor(await s.service.signer.sign({ ...claims, op: "recordEmailSent" }));
  const put = (headers: Record<string, string>) =>
    request(`${productUrl}/emails/alice-2/sent`, { method: "PUT", headers });

  const refused = await put(welcome);
  assert.equal(refused.statusCode, 401);
  assert.equal(((await refused.body.json()) as { code: string }).code, "invalid_delivery_token");
  const replayed = await put({ ...recorded, "idempotency-key": "a-fresh-key" });
  assert.equal(replayed.statusCode, 401);
  await replayed.body.dump();
  const accepted = await put(recorded);
  assert.equal(accepted.statusCode, 204);
  await accepted.body.dump();
});

/**
 * Long jobs with the client library (docs/delivery.md, "Long jobs"): a target behind the Fastify plugin or the Express
 * middleware answers `continueAsync`, keeps `{ jobId, attempt, token }` of the delivery, and later calls
 * `heartbeat`, `complete` or `fail` over real HTTP to a listening service. Tests wait for what happens (a delivery
 * arriving, a stored state), never for time to pass.
 */
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";
import Fastify from "fastify";
import {
  continueAsync,
  createJobsClient,
  InvalidDeliveryTokenError,
  JobNotRunningError,
  opqueueDelivery,
  opqueueDeliveryMiddleware,
  OpqueueError,
  type AsyncAttempt,
  type DeliveryContext,
} from "@opqueue/client";
import { startLiveService, type LiveService } from "../helpers/live-service.js";
import { TEST_DELIVERY_SECRET, TEST_SECRET } from "../helpers/service.js";
import { deferred } from "../helpers/target.js";

type After = { after: (fn: () => Promise<void>) => void };

const DELIVERY_OPTIONS = { secret: TEST_DELIVERY_SECRET, audience: "product" } as const;
const CALLER = { userId: "u1", operationId: "createUser", requestId: "async-1" } as const;
/** The test config's HS256 key, as a product would hand it to the client. */
const SIGN = { kid: "k1", secret: TEST_SECRET } as const;

/** A service delivering to `targetUrl`, its worker running. */
function startDeliveringService(t: After, targetUrl: string): Promise<LiveService> {
  return startLiveService(t, {
    worker: true,
    configure: (raw) => {
      raw["target"] = { base_url: targetUrl, audience: "product" };
    },
  });
}

/**
 * A Fastify target whose `buildReport` route takes every delivery asynchronously: it answers `continueAsync` and hands
 * what it keeps of the delivery to `taken`, as a product hands work to its own background worker.
 */
/**
 * Waits until the service has recorded the target's 202 (the hand-off): the job is `running` from its claim on, before
 * the 202 comes back, and a call the target makes before the hand-off is written acts on a job never marked async.
 */
async function waitForHandOff(s: LiveService, id: string): Promise<void> {
  await s.waitForJob(id, (row) => row.status === "running", "running");
  // A bound for a hand-off that never comes, never a pause: each look ends the wait once it is written.
  const deadline = Date.now() + 30_000;
  for (;;) {
    if ((await s.service.store.jobAsyncStateGet({ id }))?.accepted) return;
    if (Date.now() > deadline) throw new Error(`job ${id}: the target's 202 was never recorded`);
    // The hand-off is written on a turn of the event loop after the 202 arrives: yield to it, do not pause.
    await new Promise((resolve) => setImmediate(resolve));
  }
}

async function startAsyncFastifyTarget(t: After, taken: (delivery: DeliveryContext) => void): Promise<string> {
  const app = Fastify({ logger: false });
  await app.register(async (background) => {
    await background.register(opqueueDelivery, DELIVERY_OPTIONS);
    background.post("/reports", { schema: { operationId: "buildReport" } }, async (request, reply) => {
      taken(request.delivery as DeliveryContext);
      continueAsync(reply);
      return reply.send();
    });
  });
  await app.listen({ host: "127.0.0.1", port: 0 });
  t.after(() => app.close());
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

describe("long jobs with @opqueue/client", () => {
  test("Fastify: continueAsync answers 202 x-job-async: 1; heartbeat with progress, then complete, end it succeeded", async (t) => {
    const delivered = deferred<DeliveryContext>();
    const targetUrl = await startAsyncFastifyTarget(t, (delivery) => delivered.resolve(delivery));
    const s = await startDeliveringService(t, targetUrl);
    const client = createJobsClient({ baseUrl: s.url, sign: SIGN });
    const { job } = await client.enqueue({
      caller: CALLER,
      operationId: "buildReport",
      request: { body: { video: 7 } },
    });
    const delivery = await delivered.promise;
    assert.equal(delivery.jobId, job.id);
    assert.equal(typeof delivery.token, "string", "the delivery carries its token");

    // What the product's worker keeps: three fields of plain JSON, saved and read back elsewhere.
    const kept = JSON.parse(
      JSON.stringify({ jobId: delivery.jobId, attempt: delivery.attempt, token: delivery.token }),
    ) as AsyncAttempt;
    await waitForHandOff(s, job.id);
    const beat = await client.heartbeat(kept, { progress: { done: 1, of: 3 } });
    assert.ok(Date.parse(beat.lease_expires_at) > Date.now(), beat.lease_expires_at);
    assert.deepEqual((await s.service.store.jobAsyncStateGet({ id: job.id }))?.progress?.value, { done: 1, of: 3 });
    await client.heartbeat(kept);
    const done = await client.complete(kept, { result: { url: "s3://reports/7.pdf" } });
    assert.equal(done.status, "succeeded");
    assert.deepEqual(done.result, { status_code: 200, error_body: null, terminal_reason: null });

    await assert.rejects(
      client.heartbeat(kept),
      (error: unknown) => error instanceof JobNotRunningError && error.status === 409,
    );
    await assert.rejects(client.complete(kept), JobNotRunningError);
    await assert.rejects(
      client.heartbeat({ ...kept, token: `${kept.token}x` }),
      (error: unknown) => error instanceof InvalidDeliveryTokenError && error.status === 401,
    );
  });

  test("Express: the middleware keeps the token too; fail with a permanent status ends the job dead", async (t) => {
    const delivered = deferred<DeliveryContext>();
    const middleware = opqueueDeliveryMiddleware({ ...DELIVERY_OPTIONS, operationId: "buildReport" });
    const server = createServer((req: IncomingMessage & { delivery?: DeliveryContext }, res: ServerResponse) => {
      middleware(req, res, () => {
        if (req.delivery) delivered.resolve(req.delivery);
        continueAsync(res);
        res.end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    t.after(async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    });
    const s = await startDeliveringService(t, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    const client = createJobsClient({ baseUrl: s.url, sign: SIGN, adminToken: () => s.adminToken() });
    await client.enqueue({ caller: CALLER, operationId: "buildReport", request: { body: {} } });
    const delivery = await delivered.promise;
    await waitForHandOff(s, delivery.jobId);
    const failed = await client.fail(delivery, { statusCode: 404, error: "no such report" });
    assert.equal(failed.status, "dead");
    assert.deepEqual(failed.result, {
      status_code: 404,
      error_body: "no such report",
      terminal_reason: "permanent-status",
    });
    const extensions = await client.extensions(delivery.jobId);
    assert.equal(extensions.async?.attempt, 1);
  });

  test("a heartbeat after an administrator's cancel with abort is JobNotRunningError: the target stops", async (t) => {
    const delivered = deferred<DeliveryContext>();
    const targetUrl = await startAsyncFastifyTarget(t, (delivery) => delivered.resolve(delivery));
    const s = await startDeliveringService(t, targetUrl);
    const client = createJobsClient({ baseUrl: s.url, sign: SIGN, adminToken: () => s.adminToken() });
    await client.enqueue({ caller: CALLER, operationId: "buildReport", request: { body: {} } });
    const delivery = await delivered.promise;
    await waitForHandOff(s, delivery.jobId);
    await client.heartbeat(delivery, { progress: 0.5 });
    const cancelled = await client.cancel(delivery.jobId, { abort: true });
    assert.equal(cancelled.status, "cancelled");
    const stopped = await client.heartbeat(delivery, { progress: 0.6 }).then(
      () => undefined,
      (error: unknown) => error,
    );
    assert.ok(stopped instanceof JobNotRunningError, String(stopped));
    assert.match(stopped.message, /cancelled/);
  });

  test("heartbeat, complete and fail need the attempt's token: without one they throw before sending", async () => {
    const client = createJobsClient({ baseUrl: "http://127.0.0.1:9" });
    const attempt = { jobId: "job_12345678", attempt: 1 };
    for (const call of [() => client.heartbeat(attempt), () => client.complete(attempt), () => client.fail(attempt)]) {
      await assert.rejects(
        call(),
        (error: unknown) => !(error instanceof OpqueueError) && /has no token/.test(String(error)),
      );
    }
  });
});

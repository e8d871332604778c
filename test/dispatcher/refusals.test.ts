/**
 * Deliveries opqueue refuses to send or cannot send, docs/tokens.md and docs/api.md: a URL whose path a parser or proxy would
 * normalise into another route is never sent (the job ends dead), and a failure of opqueue's own process (no file
 * descriptor, no memory) is not the target's answer, so it uses up no attempt.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { pino } from "pino";
import { Agent, buildConnector } from "undici";
import { buildPath, Deliverer, pathShapeProblem } from "../../src/dispatcher/deliverer.js";
import { Dispatcher } from "../../src/dispatcher/dispatcher.js";
import { newJobId } from "../../src/job/job-id.js";
import type { JobInsertParams } from "../../src/store/store.js";
import { startDeliveryService, waitForJob, waitForStatus } from "../helpers/delivery.js";
import { enqueue } from "../helpers/jobs.js";
import type { TestService } from "../helpers/service.js";
import { answer, startTarget } from "../helpers/target.js";

const TEMPLATE = "/users/{userId}/welcome-email";

test("pathShapeProblem refuses dot and empty segments made by parameters, and lets every other encoded value through", () => {
  for (const userId of ["..", ".", ""]) {
    assert.ok(pathShapeProblem(TEMPLATE, buildPath(TEMPLATE, { userId })), JSON.stringify(userId));
  }
  for (const userId of ["...", ".x", "%2e%2e", "a/..", "?", "#", "\\..", "42"]) {
    assert.equal(pathShapeProblem(TEMPLATE, buildPath(TEMPLATE, { userId })), undefined, JSON.stringify(userId));
  }
  // A parameter at the end of the template, where ".." would climb to the parent.
  assert.ok(pathShapeProblem("/files/{name}", buildPath("/files/{name}", { name: ".." })));
  assert.equal(pathShapeProblem("/files/{name}.json", buildPath("/files/{name}.json", { name: ".." })), undefined);
});

/** Inserts a job straight into the store, as one enqueued before the enqueue refused such path parameters. */
async function insertStoredJob(s: TestService, pathParams: Record<string, unknown>): Promise<string> {
  const id = newJobId();
  const params: JobInsertParams = {
    id,
    operationId: "sendWelcomeEmail",
    priority: 0,
    runTime: { delayMs: 0 },
    maxAttempts: 5,
    dedupeKey: null,
    concurrencyKey: null,
    rateKey: null,
    enqueuedByOperationId: "createUser",
    parentJobId: null,
    originalRequestId: "req-old",
    userId: "u1",
    authority: { kind: "request", request_id: "req-old", user_id: "u1" },
    request: { path_params: pathParams },
    spawnCap: 1000,
    traceparent: null,
    expiry: null,
    callbacks: null,
  };
  const outcome = await s.service.store.jobInsert(params);
  assert.equal(outcome.kind, "created");
  return id;
}

test("a stored job whose path parameter is '..' is never sent: it ends dead permanent-status, and the target sees nothing", async (t) => {
  const target = await startTarget(t, answer(204));
  const s = await startDeliveryService(t, { target });
  const id = await insertStoredJob(s, { userId: ".." });
  s.service.start();
  const dead = await waitForStatus(s, id, "dead");
  assert.equal(dead.result?.terminal_reason, "permanent-status");
  assert.match(dead.result?.error_body ?? "", /not sent: .*normalises to another route/);
  assert.equal(dead.attempt, 1);
  // A job enqueued after it is delivered: the target was up all along.
  const later = await enqueue(s, { operation_id: "sendWelcomeEmail", request: { path_params: { userId: "42" } } });
  await waitForStatus(s, later.id, "succeeded");
  assert.deepEqual(
    target.requests.map((request) => request.path),
    ["/users/42/welcome-email"],
  );
});

/** An undici Agent whose first `failures` connections fail as a process out of file descriptors does. */
function agentFailingConnects(failures: number): { agent: Agent; attempts: () => number } {
  const connect = buildConnector({});
  let attempts = 0;
  const agent = new Agent({
    connect: (options, callback) => {
      attempts++;
      if (attempts <= failures) {
        callback(
          Object.assign(new Error("connect EMFILE: too many open files"), { code: "EMFILE", syscall: "connect" }),
          null,
        );
        return;
      }
      connect(options, callback);
    },
  });
  return { agent, attempts: () => attempts };
}

test("a delivery this process cannot send (EMFILE) uses no attempt: the job goes back to the queue, then is delivered once with attempt 1", async (t) => {
  const target = await startTarget(t, answer(204));
  // One attempt only: were the local failure counted, the job would end dead exhausted at once.
  const s = await startDeliveryService(t, {
    target,
    configure: (raw) => {
      raw["operations"] = { sendWelcomeEmail: { max_attempts: 1 } };
      raw["worker"] = { concurrency: 4, poll_ms: 20 };
    },
  });
  const { agent, attempts } = agentFailingConnects(2);
  const deliverer = new Deliverer({
    settings: s.service.settings,
    registry: s.service.registry,
    signer: s.service.signer,
    agent,
  });
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
  const job = await enqueue(s, { operation_id: "sendWelcomeEmail", request: { path_params: { userId: "42" } } });
  dispatcher.start();

  for (let failure = 1; failure <= 2; failure++) {
    const back = await waitForJob(
      s,
      job.id,
      (row) => row.status === "retrying" && attempts() === failure,
      `failure ${failure} written`,
    );
    assert.equal(back.attempt, 0, "the attempt was refunded");
    assert.match(back.result?.error_body ?? "", /not counted as an attempt: .*EMFILE/);
    // The job is due again poll_ms after the failure, on the store's (manual) clock.
    s.clock.advance(s.config.worker.poll_ms);
  }
  const succeeded = await waitForStatus(s, job.id, "succeeded");
  assert.equal(succeeded.attempt, 1);
  assert.equal(target.requests.length, 1);
});

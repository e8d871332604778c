/**
 * A target's calls on an attempt it took asynchronously (docs/api.md, "Asynchronous attempts"): POST
 * /jobs/{id}/heartbeat, /complete and /fail, authenticated by the attempt's delivery token. Jobs reach `running` through
 * the store, and are marked asynchronous as the dispatcher marks them on a 202 with x-job-async: 1; the dispatcher's
 * side is test/async-jobs/long-jobs.test.ts.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { exportPKCS8, generateKeyPair } from "jose";
import { DeliverySigner, mintToken } from "../../src/auth/tokens.js";
import { FAILED_WITHOUT_DETAILS, timedOutError } from "../../src/async-jobs/decisions.js";
import type { JobRow } from "../../src/job/job.js";
import type { Job } from "../../src/job/schemas.js";
import { rescueExpiredLeases } from "../../src/maintenance/rescuer.js";
import { deliveryToken, runningAttempt } from "../helpers/async-attempts.js";
import { TEST_DELIVERY_SECRET, type TestService } from "../helpers/service.js";
import { assertError, buildReport, driveTo, enqueue, iso, startService, welcomeEmail } from "../helpers/jobs.js";

type Response = Awaited<ReturnType<TestService["inject"]>>;

/** `POST /jobs/{id}/{action}` with a delivery token and an optional JSON body. */
function call(
  s: TestService,
  id: string,
  action: "heartbeat" | "complete" | "fail",
  token?: string,
  payload?: unknown,
): Promise<Response> {
  return s.inject({
    method: "POST",
    url: `/jobs/${id}/${action}`,
    ...(token === undefined ? {} : { token }),
    ...(payload === undefined ? {} : { payload: payload as object }),
  });
}

/** The job of a 200 `{job}` answer. */
function jobOf(res: Response): Job {
  assert.equal(res.statusCode, 200, res.body);
  return (res.json() as { job: Job }).job;
}

/** The extensions of a job, as an administrator reads them. */
async function extensionsOf(s: TestService, id: string): Promise<Record<string, unknown>> {
  const res = await s.inject({ method: "GET", url: `/jobs/${id}/extensions`, token: await s.adminToken() });
  assert.equal(res.statusCode, 200, res.body);
  return (res.json() as { extensions: Record<string, unknown> }).extensions;
}

/** Backoff of these tests: the first retry waits 1000 × 0.75 ms at random 0.5. */
const RETRY = { base_ms: 1000, factor: 2, max_ms: 60_000, retry_after_max_ms: 600_000 };

describe("authentication of the attempt calls", () => {
  test("answers 401 invalid_delivery_token without a token, with junk, an admin token, an assertion, or another key's token", async (t) => {
    const s = await startService(t);
    const { job, token } = await runningAttempt(s);
    const foreignSigner = await DeliverySigner.create({
      deliveryKey: { kid: "q1", alg: "HS256", secret: "another-delivery-secret-of-32-bytes-or-more" },
      audience: "product",
      clock: s.clock,
    });
    const otherAudience = await DeliverySigner.create({
      deliveryKey: { kid: "q1", alg: "HS256", secret: TEST_DELIVERY_SECRET },
      audience: "opqueue",
      clock: s.clock,
    });
    const refused = [
      undefined,
      "garbage",
      "a.b.c",
      `${token}=`,
      await s.adminToken(),
      await s.assertion(),
      await deliveryToken(s, job, foreignSigner),
      await deliveryToken(s, job, otherAudience),
      await mintToken({
        auth: s.config.auth,
        clock: s.clock,
        sub: "u1",
        extraClaims: { aud: "product", iss: "opqueue", job: job.id, att: 1, op: "buildReport", jti: `${job.id}:1` },
      }),
    ];
    for (const action of ["heartbeat", "complete", "fail"] as const) {
      for (const bad of refused) assertError(await call(s, job.id, action, bad), 401, "invalid_delivery_token");
      assertError(
        await s.inject({
          method: "POST",
          url: `/jobs/${job.id}/${action}`,
          headers: { authorization: "Basic YWRtaW46YWRtaW4=" },
        }),
        401,
        "invalid_delivery_token",
      );
    }
    const after = await s.service.store.jobGet({ id: job.id });
    assert.equal(after?.status, "running", "no refused call changed the job");
  });

  test("a token for one job is refused on another job's routes", async (t) => {
    const s = await startService(t);
    const first = await runningAttempt(s);
    const second = await runningAttempt(s, { enqueue: { priority: -1 } });
    const res = await call(s, second.job.id, "complete", first.token);
    assertError(res, 401, "invalid_delivery_token");
    assert.match((res.json() as { message: string }).message, /is for job/);
    assert.equal((await s.service.store.jobGet({ id: second.job.id }))?.status, "running");
  });

  test("a token whose exp passed acts on an attempt taken asynchronously, and on no other", async (t) => {
    const s = await startService(t);
    const taken = await runningAttempt(s);
    const waiting = await runningAttempt(s, { async: false, enqueue: { priority: -1 } });
    // exp = iat + ceil(30000 / 1000) + 60; 30 s of tolerance after it.
    s.clock.advance((30 + 60 + 31) * 1000);
    assert.equal((await call(s, taken.job.id, "heartbeat", taken.token)).statusCode, 200);
    const expired = await call(s, waiting.job.id, "heartbeat", waiting.token);
    assertError(expired, 401, "invalid_delivery_token");
    assert.match((expired.json() as { message: string }).message, /token expired/);
  });

  test("an attempt taken asynchronously answers only the token it was sent with", async (t) => {
    const s = await startService(t);
    const { job, token } = await runningAttempt(s);
    s.clock.advance(1000);
    // A valid token for the same job and attempt, signed later: not the one the attempt was delivered with.
    const another = await deliveryToken(s, job);
    assert.notEqual(another, token);
    for (const action of ["heartbeat", "complete", "fail"] as const) {
      const res = await call(s, job.id, action, another);
      assertError(res, 401, "invalid_delivery_token");
      assert.match((res.json() as { message: string }).message, /another delivery token/);
    }
    assert.equal((await call(s, job.id, "heartbeat", token)).statusCode, 200);
  });

  test("after an administrator's retry re-claimed within the same second, the old claim's token is refused and differs from the new one", async (t) => {
    const s = await startService(t);
    const { job, token } = await runningAttempt(s);
    assert.equal(jobOf(await call(s, job.id, "fail", token, { retry: "never", error: "given up" })).status, "dead");
    const retried = await s.inject({ method: "POST", url: `/jobs/${job.id}/retry`, token: await s.adminToken() });
    assert.equal(retried.statusCode, 200, retried.body);
    await driveTo(s, job.id, "running");
    const again = (await s.service.store.jobGet({ id: job.id })) as JobRow;
    assert.deepEqual(
      [again.attempt, again.startedAt, again.claimCount],
      [1, job.startedAt, 2],
      "attempt 1 again, in the same instant",
    );
    const current = await deliveryToken(s, again);
    assert.notEqual(current, token, "each claim's token is its own");
    for (const action of ["heartbeat", "complete", "fail"] as const) {
      assertError(await call(s, job.id, action, token), 409, "job_not_running");
    }
    assert.equal((await call(s, job.id, "heartbeat", current)).statusCode, 200);
  });

  test("EdDSA and ES256 delivery keys: the public half checks the token; during a rotation, the older key's still acts", async (t) => {
    const older = await generateKeyPair("EdDSA", { extractable: true });
    const newer = await generateKeyPair("ES256", { extractable: true });
    const keys = [
      { kid: "d2", alg: "ES256", private_key: await exportPKCS8(newer.privateKey) },
      { kid: "d1", alg: "EdDSA", private_key: await exportPKCS8(older.privateKey) },
    ];
    const rotating = await startService(t, {
      configure: (raw) => {
        (raw["auth"] as Record<string, unknown>)["delivery_key"] = keys;
      },
    });
    const { job } = await runningAttempt(rotating, { async: false });
    const olderSigner = await DeliverySigner.create({
      deliveryKey: keys[1] as never,
      audience: "product",
      clock: rotating.clock,
    });
    const byOlder = await deliveryToken(rotating, job, olderSigner);
    assert.equal((await call(rotating, job.id, "heartbeat", byOlder)).statusCode, 200);
    const byNewer = await deliveryToken(rotating, job);
    assert.equal((await call(rotating, job.id, "heartbeat", byNewer)).statusCode, 200);
    const forged = `${byNewer.slice(0, byNewer.lastIndexOf(".") + 1)}${byOlder.slice(byOlder.lastIndexOf(".") + 1)}`;
    assertError(await call(rotating, job.id, "heartbeat", forged), 401, "invalid_delivery_token");
  });
});

describe("POST /jobs/{id}/heartbeat", () => {
  test("renews the lease: answers when it now expires, the asynchronous lease for an attempt taken asynchronously", async (t) => {
    const s = await startService(t, {
      configure: (raw) => {
        raw["lease"] = { heartbeat_ms: 5000, grace_ms: 1000, check_ms: 1000 };
        raw["operations"] = { buildReport: { timeout_ms: 2000, async_lease_ms: 60_000 } };
      },
    });
    const taken = await runningAttempt(s);
    const waiting = await runningAttempt(s, { async: false, enqueue: { priority: -1 } });
    s.clock.advance(2500);
    const res = await call(s, taken.job.id, "heartbeat", taken.token);
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { lease_expires_at: iso(s.clock.now() + 60_000) });
    assert.deepEqual((await call(s, waiting.job.id, "heartbeat", waiting.token)).json(), {
      lease_expires_at: iso(s.clock.now() + 3000),
    });
    assert.equal((await s.service.store.jobGet({ id: taken.job.id }))?.heartbeatAt, s.clock.now());

    // The rescuer holds each to its lease: past 3 s the one not taken asynchronously, past 60 s the other.
    const rescue = () =>
      rescueExpiredLeases({
        settings: s.service.settings,
        store: s.service.store,
        clock: s.clock,
        telemetry: s.service.telemetry,
      });
    s.clock.advance(3001);
    assert.equal(await rescue(), 1);
    assert.equal((await s.service.store.jobGet({ id: waiting.job.id }))?.status, "retrying");
    assert.equal((await s.service.store.jobGet({ id: taken.job.id }))?.status, "running");
    s.clock.advance(57_000);
    assert.equal(await rescue(), 1);
    assert.equal((await s.service.store.jobGet({ id: taken.job.id }))?.status, "retrying");
  });

  test("keeps the progress it carries, shown by GET /jobs/{id}/extensions; without progress the last one stays", async (t) => {
    const s = await startService(t);
    const { job, token } = await runningAttempt(s);
    const acceptedAt = s.clock.now();
    assert.deepEqual(await extensionsOf(s, job.id), {
      rate_key: null,
      expires_at: null,
      traceparent: null,
      async: { attempt: 1, accepted_at: iso(acceptedAt) },
      progress: null,
    });
    s.clock.advance(700);
    const progress = { step: "resize", done: 3, of: 8, note: "ünïcødé ✓" };
    assert.equal((await call(s, job.id, "heartbeat", token, { progress })).statusCode, 200);
    const reportedAt = s.clock.now();
    s.clock.advance(700);
    assert.equal((await call(s, job.id, "heartbeat", token)).statusCode, 200, "no body");
    assert.equal(
      (
        await s.inject({
          method: "POST",
          url: `/jobs/${job.id}/heartbeat`,
          token,
          headers: { "content-type": "application/json" },
          payload: "",
        })
      ).statusCode,
      200,
      "an empty JSON body",
    );
    assert.deepEqual((await extensionsOf(s, job.id))["progress"], {
      attempt: 1,
      value: progress,
      reported_at: iso(reportedAt),
    });
    assert.equal((await call(s, job.id, "heartbeat", token, { progress: null })).statusCode, 200);
    assert.deepEqual((await extensionsOf(s, job.id))["progress"], {
      attempt: 1,
      value: null,
      reported_at: iso(s.clock.now()),
    });
  });

  test("refuses progress it cannot keep: over 4 KB of JSON, unstorable text, too deep, or an unknown field", async (t) => {
    const s = await startService(t);
    const { job, token } = await runningAttempt(s);
    assertError(await call(s, job.id, "heartbeat", token, { progress: "x".repeat(4095) }), 400, "payload_too_large");
    assert.equal(
      (await call(s, job.id, "heartbeat", token, { progress: "x".repeat(4094) })).statusCode,
      200,
      "4096 bytes of JSON fit",
    );
    assertError(
      await call(s, job.id, "heartbeat", token, { progress: { text: "nul \u0000 here" } }),
      400,
      "invalid_request",
    );
    assertError(await call(s, job.id, "heartbeat", token, { progress: { ["\ud800"]: 1 } }), 400, "invalid_request");
    let deep: unknown = 1;
    for (let level = 0; level < 200; level++) deep = [deep];
    assertError(await call(s, job.id, "heartbeat", token, { progress: deep }), 400, "invalid_request");
    assertError(await call(s, job.id, "heartbeat", token, { progress: 1, percent: 50 }), 400, "invalid_request");
    assertError(await call(s, job.id, "heartbeat", token, [1]), 400, "invalid_request");
  });

  test("answers 409 job_not_running once the attempt is over: cancelled with abort, rescued, succeeded", async (t) => {
    const s = await startService(t, { configure: (raw) => void (raw["retry"] = RETRY) });
    const cancelled = await runningAttempt(s);
    const cancel = await s.inject({
      method: "POST",
      url: `/jobs/${cancelled.job.id}/cancel?abort=true`,
      token: await s.adminToken(),
    });
    assert.equal(cancel.statusCode, 200, cancel.body);
    for (const action of ["heartbeat", "complete", "fail"] as const) {
      const res = await call(s, cancelled.job.id, action, cancelled.token);
      assertError(res, 409, "job_not_running");
      assert.match((res.json() as { message: string }).message, /the job is cancelled/);
    }

    const rescued = await runningAttempt(s, { enqueue: { priority: -1 } });
    s.clock.advance(60_001);
    await rescueExpiredLeases({
      settings: s.service.settings,
      store: s.service.store,
      clock: s.clock,
      telemetry: s.service.telemetry,
    });
    assert.equal((await s.service.store.jobGet({ id: rescued.job.id }))?.status, "retrying");
    assertError(await call(s, rescued.job.id, "heartbeat", rescued.token), 409, "job_not_running");
    // Its second attempt: the first attempt's token cannot touch it.
    s.clock.advance(60_000);
    await driveTo(s, rescued.job.id, "running");
    const res = await call(s, rescued.job.id, "complete", rescued.token);
    assertError(res, 409, "job_not_running");
    assert.match((res.json() as { message: string }).message, /runs attempt 2/);
    assert.equal((await s.service.store.jobGet({ id: rescued.job.id }))?.status, "running");

    const pending = await enqueue(s, buildReport({ delay_ms: 3_600_000 }));
    const row = (await s.service.store.jobGet({ id: pending.id })) as JobRow;
    assertError(
      await call(s, pending.id, "heartbeat", await deliveryToken(s, { ...row, attempt: 1, claimCount: 1 })),
      409,
      "job_not_running",
    );
  });

  test("past its operation's max_async_ms from its claim, an attempt's next call ends it as timed out and is refused 409 job_not_running", async (t) => {
    const s = await startService(t, {
      random: () => 0.5,
      configure: (raw) => {
        raw["retry"] = RETRY;
        raw["defaults"] = { max_attempts: 5, timeout_ms: 30_000, max_async_ms: 3_600_000 };
        raw["operations"] = {
          buildReport: { async_lease_ms: 600_000, max_async_ms: 1_800_000 },
          sendWelcomeEmail: { async_lease_ms: 600_000, max_attempts: 1 },
        };
      },
    });
    const finished: Array<{ via: string; outcome: string }> = [];
    s.service.telemetry.on("async:finished", ({ via, outcome }) => finished.push({ via, outcome }));
    const heartbeat = await runningAttempt(s);
    const completing = await runningAttempt(s, { enqueue: { priority: -1 } });
    const last = await runningAttempt(s, { enqueue: welcomeEmail({ priority: -2 }) });

    // Heartbeats keep the lease alive up to the cap itself: 30 minutes of buildReport's.
    for (let minutes = 5; minutes <= 30; minutes += 5) {
      s.clock.advance(300_000);
      assert.equal(
        (await call(s, heartbeat.job.id, "heartbeat", heartbeat.token)).statusCode,
        200,
        `heartbeat at ${minutes} min`,
      );
    }
    s.clock.advance(1);
    const overrun = await call(s, heartbeat.job.id, "heartbeat", heartbeat.token, { progress: { done: 99 } });
    assertError(overrun, 409, "job_not_running");
    assert.match(
      (overrun.json() as { message: string }).message,
      /ran longer than its operation's max_async_ms \(1800000 ms\).*retrying/,
    );
    const retried = jobOf(
      await s.inject({ method: "GET", url: `/jobs/${heartbeat.job.id}`, token: await s.adminToken() }),
    );
    assert.equal(retried.status, "retrying");
    assert.deepEqual(retried.result, { error_body: timedOutError(1_800_000), terminal_reason: null });
    assert.equal(retried.run_at, iso(s.clock.now() + 750), "the backoff after attempt 1, as for any timeout");
    assert.equal((await extensionsOf(s, heartbeat.job.id))["progress"], null, "the refused heartbeat kept nothing");
    assertError(await call(s, heartbeat.job.id, "heartbeat", heartbeat.token), 409, "job_not_running");

    // A complete past the cap does not succeed the attempt, as an answer after an exchange's timeout does not.
    const completed = await call(s, completing.job.id, "complete", completing.token);
    assertError(completed, 409, "job_not_running");
    assert.equal((await s.service.store.jobGet({ id: completing.job.id }))?.status, "retrying");

    // sendWelcomeEmail has the default cap, an hour, and one attempt: a fail past it ends the job dead, exhausted.
    assert.equal((await call(s, last.job.id, "heartbeat", last.token)).statusCode, 200, "within its own cap");
    s.clock.advance(3_600_000 - 1_800_001);
    assert.equal((await call(s, last.job.id, "heartbeat", last.token)).statusCode, 200, "at its cap");
    s.clock.advance(1);
    assertError(await call(s, last.job.id, "fail", last.token, { status_code: 404 }), 409, "job_not_running");
    const dead = (await s.service.store.jobGet({ id: last.job.id })) as JobRow;
    assert.equal(dead.status, "dead");
    assert.deepEqual(dead.result, { error_body: timedOutError(3_600_000), terminal_reason: "exhausted" });
    assert.deepEqual(finished, [
      { via: "max_async_ms", outcome: "retrying" },
      { via: "max_async_ms", outcome: "retrying" },
      { via: "max_async_ms", outcome: "dead" },
    ]);
  });

  test("answers 404 job_not_found for a token of a job that no longer exists", async (t) => {
    const s = await startService(t);
    const { job } = await runningAttempt(s, { async: false });
    const gone = await deliveryToken(s, { ...job, id: "gone1234gone1234" });
    assertError(await call(s, "gone1234gone1234", "heartbeat", gone), 404, "job_not_found");
    assertError(await call(s, "gone1234gone1234", "complete", gone), 404, "job_not_found");
  });
});

describe("POST /jobs/{id}/complete", () => {
  test("ends the attempt succeeded, as a 2xx would: the status code given (200 by default), durably, once", async (t) => {
    const s = await startService(t);
    const { job, token } = await runningAttempt(s);
    s.clock.advance(3_600_000);
    const done = jobOf(
      await call(s, job.id, "complete", token, { status_code: 201, result: { url: "s3://bucket/out.mp4" } }),
    );
    assert.equal(done.status, "succeeded");
    assert.equal(done.finished_at, iso(s.clock.now()));
    assert.deepEqual(done.result, { status_code: 201, error_body: null, terminal_reason: null });
    assertError(await call(s, job.id, "complete", token), 409, "job_not_running");

    const other = await runningAttempt(s, { enqueue: { priority: -1 } });
    assert.deepEqual(jobOf(await call(s, other.job.id, "complete", other.token)).result, {
      status_code: 200,
      error_body: null,
      terminal_reason: null,
    });
    const attempts = await s.inject({
      method: "GET",
      url: `/jobs/${other.job.id}/attempts`,
      token: await s.adminToken(),
    });
    assert.deepEqual(
      (attempts.json() as { attempts: Array<{ outcome: string; status_code: number }> }).attempts.map(
        ({ outcome, status_code }) => ({ outcome, status_code }),
      ),
      [{ outcome: "succeeded", status_code: 200 }],
    );
  });

  test("keeps the result as result.body (the JSON value itself, body_format json) for an operation that stores its results", async (t) => {
    const s = await startService(t, {
      configure: (raw) => (raw["operations"] = { buildReport: { store_result: true } }),
    });
    const { job, token } = await runningAttempt(s);
    const done = jobOf(
      await call(s, job.id, "complete", token, { result: { url: "s3://bucket/out.mp4", parts: [1, 2] } }),
    );
    const stored = {
      status_code: 200,
      error_body: null,
      terminal_reason: null,
      body: { url: "s3://bucket/out.mp4", parts: [1, 2] },
      body_format: "json",
    };
    assert.deepEqual(done.result, stored);
    const read = await s.inject({ method: "GET", url: `/jobs/${job.id}`, token: await s.adminToken() });
    assert.deepEqual(jobOf(read).result, stored, "read back as it was answered");
    const bare = await runningAttempt(s, { enqueue: { priority: -1 } });
    assert.deepEqual(jobOf(await call(s, bare.job.id, "complete", bare.token)).result, {
      status_code: 200,
      error_body: null,
      terminal_reason: null,
    });
  });

  test("refuses a status code outside 2xx, an unknown field, and a result over 8 KB of JSON", async (t) => {
    const s = await startService(t);
    const { job, token } = await runningAttempt(s);
    for (const body of [{ status_code: 300 }, { status_code: 199 }, { status_code: "200" }, { outcome: "ok" }]) {
      assertError(await call(s, job.id, "complete", token, body), 400, "invalid_request");
    }
    assertError(await call(s, job.id, "complete", token, { result: "x".repeat(8191) }), 400, "payload_too_large");
    assert.equal((await s.service.store.jobGet({ id: job.id }))?.status, "running");
  });
});

describe("POST /jobs/{id}/fail", () => {
  const cases: Array<{ name: string; body: Record<string, unknown>; status: Job["status"]; result: Job["result"] }> = [
    {
      name: "no details: retried, like an attempt that got no answer",
      body: {},
      status: "retrying",
      result: { error_body: FAILED_WITHOUT_DETAILS, terminal_reason: null },
    },
    {
      name: "retry never without a status: dead rejected-by-endpoint",
      body: { retry: "never", error: "the file is corrupt" },
      status: "dead",
      result: { error_body: "the file is corrupt", terminal_reason: "rejected-by-endpoint" },
    },
    {
      name: "a 503: retried",
      body: { status_code: 503, error: "encoder busy" },
      status: "retrying",
      result: { status_code: 503, error_body: "encoder busy", terminal_reason: null },
    },
    {
      name: "a 404: dead permanent-status",
      body: { status_code: 404, error: "no such video" },
      status: "dead",
      result: { status_code: 404, error_body: "no such video", terminal_reason: "permanent-status" },
    },
    {
      name: "a 400 with retry always: retried",
      body: { status_code: 400, retry: "always" },
      status: "retrying",
      result: { status_code: 400, error_body: "", terminal_reason: null },
    },
    {
      name: "a 503 with retry never: dead rejected-by-endpoint",
      body: { status_code: 503, retry: "never", error: "stop" },
      status: "dead",
      result: { status_code: 503, error_body: "stop", terminal_reason: "rejected-by-endpoint" },
    },
    {
      name: "a 401 auth_unresolvable: dead auth-unresolvable",
      body: { status_code: 401, error: '{"code":"auth_unresolvable","message":"user deleted"}' },
      status: "dead",
      result: {
        status_code: 401,
        error_body: '{"code":"auth_unresolvable","message":"user deleted"}',
        terminal_reason: "auth-unresolvable",
      },
    },
  ];
  for (const { name, body, status, result } of cases) {
    test(`reads the failure by the rules of an answer: ${name}`, async (t) => {
      const s = await startService(t, { random: () => 0.5, configure: (raw) => void (raw["retry"] = RETRY) });
      const { job, token } = await runningAttempt(s);
      s.clock.advance(10);
      const failed = jobOf(await call(s, job.id, "fail", token, body));
      assert.equal(failed.status, status);
      assert.deepEqual(failed.result, result);
      if (status === "retrying") assert.equal(failed.run_at, iso(s.clock.now() + 750), "the backoff after attempt 1");
      else assert.equal(failed.finished_at, iso(s.clock.now()));
    });
  }

  test("the last attempt's retryable failure ends the job dead exhausted; a cancelled chain's, cancelled-by-chain", async (t) => {
    const s = await startService(t, {
      configure: (raw) => void (raw["operations"] = { buildReport: { max_attempts: 1 } }),
    });
    const last = await runningAttempt(s);
    assert.deepEqual(jobOf(await call(s, last.job.id, "fail", last.token, { status_code: 503 })).result, {
      status_code: 503,
      error_body: "",
      terminal_reason: "exhausted",
    });
    const chained = await runningAttempt(s, { enqueue: { priority: -1 } });
    const cancelChain = await s.inject({
      method: "POST",
      url: `/chains/${chained.job.originalRequestId}/cancel`,
      token: await s.adminToken(),
    });
    assert.equal(cancelChain.statusCode, 200, cancelChain.body);
    const ended = jobOf(await call(s, chained.job.id, "fail", chained.token, { error: "gave up" }));
    assert.equal(ended.status, "cancelled");
    assert.equal(ended.result?.terminal_reason, "cancelled-by-chain");
  });

  test("cuts a long error to 8,192 bytes on a UTF-8 boundary, and stores U+0000 as U+FFFD", async (t) => {
    const s = await startService(t);
    const { job, token } = await runningAttempt(s);
    const failed = jobOf(
      await call(s, job.id, "fail", token, { status_code: 500, error: `${"é".repeat(5000)}\u0000` }),
    );
    assert.equal(failed.result?.error_body, "é".repeat(4096));
    const other = await runningAttempt(s, { enqueue: { priority: -1 } });
    assert.equal(
      jobOf(await call(s, other.job.id, "fail", other.token, { error: "a\u0000b" })).result?.error_body,
      "a\ufffdb",
    );
  });

  test("refuses a 2xx status code, an unknown retry, and an unknown field", async (t) => {
    const s = await startService(t);
    const { job, token } = await runningAttempt(s);
    for (const body of [
      { status_code: 200 },
      { status_code: 600 },
      { retry: "sometimes" },
      { reason: "x" },
      { error: 5 },
    ]) {
      assertError(await call(s, job.id, "fail", token, body), 400, "invalid_request");
    }
    assert.equal((await s.service.store.jobGet({ id: job.id }))?.status, "running");
  });
});

test("GET /openapi.json lists the three calls, authenticated by the delivery token", async (t) => {
  const s = await startService(t);
  const doc = (await s.inject({ method: "GET", url: "/openapi.json" })).json() as {
    paths: Record<string, Record<string, { operationId: string; security: unknown[] }>>;
    components: { securitySchemes: Record<string, unknown> };
  };
  for (const [action, operationId] of [
    ["heartbeat", "heartbeatJob"],
    ["complete", "completeJob"],
    ["fail", "failJob"],
  ]) {
    const operation = doc.paths[`/jobs/{id}/${action}`]?.["post"];
    assert.equal(operation?.operationId, operationId);
    assert.deepEqual(operation?.security, [{ deliveryToken: [] }]);
  }
  assert.ok(doc.components.securitySchemes["deliveryToken"]);
});

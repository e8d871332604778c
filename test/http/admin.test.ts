/**
 * The site-admin routes of docs/api.md: get, list, cancel, retry, run now, history and cancel chain, with their
 * 401/403/404/409 answers, and who each change is recorded as. Jobs reach running/retrying/dead/succeeded through the store, as the dispatcher would move them.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mintToken } from "../../src/auth/tokens.js";
import type { Job } from "../../src/job/schemas.js";
import type { TestService } from "../helpers/service.js";
import {
  assertError,
  buildReport,
  driveTo,
  enqueue,
  FAILED,
  getJob,
  iso,
  startService,
  welcomeEmail,
} from "../helpers/jobs.js";

type Response = Awaited<ReturnType<TestService["inject"]>>;

/** Calls an admin route as a site admin (or with the token given). */
async function admin(s: TestService, method: "GET" | "POST", url: string, token?: string): Promise<Response> {
  return s.inject({ method, url, token: token ?? (await s.adminToken()) });
}

/** `GET /jobs?{query}`: the page. */
async function list(s: TestService, query = ""): Promise<{ jobs: Job[]; next_cursor: string | null }> {
  const res = await admin(s, "GET", `/jobs${query === "" ? "" : `?${query}`}`);
  assert.equal(res.statusCode, 200, res.body);
  return res.json() as { jobs: Job[]; next_cursor: string | null };
}

const ids = (jobs: Job[]): string[] => jobs.map((job) => job.id);

/** Every admin route, with a job id to use in it. */
function adminRoutes(id: string): Array<{ method: "GET" | "POST"; url: string }> {
  return [
    { method: "GET", url: `/jobs/${id}` },
    { method: "GET", url: "/jobs" },
    { method: "POST", url: `/jobs/${id}/cancel` },
    { method: "POST", url: `/jobs/${id}/retry` },
    { method: "POST", url: `/jobs/${id}/run-now` },
    { method: "GET", url: `/jobs/${id}/history` },
    { method: "POST", url: "/chains/req-1/cancel" },
    { method: "GET", url: "/stats" },
  ];
}

describe("admin authentication", () => {
  test("returns 401 unauthenticated on every admin route without a token, with a bad token, or an expired one", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail());
    const expired = await s.adminToken();
    s.clock.advance((3600 + 31) * 1000);
    const foreign = await mintToken({
      auth: {
        ...s.config.auth,
        keys: [{ kid: "k1", alg: "HS256", secret: "a-different-secret-of-at-least-32-bytes" }],
      },
      clock: s.clock,
      sub: "admin",
      siteAdmin: true,
    });
    const wrongAudience = await mintToken({
      auth: s.config.auth,
      clock: s.clock,
      sub: "admin",
      siteAdmin: true,
      extraClaims: { aud: "x" },
    });
    for (const route of adminRoutes(job.id)) {
      assertError(await s.inject(route), 401, "unauthenticated");
      for (const token of ["garbage", "a.b.c", expired, foreign, wrongAudience]) {
        assertError(await s.inject({ ...route, token }), 401, "unauthenticated");
      }
      assertError(
        await s.inject({ ...route, headers: { authorization: "Basic YWRtaW46YWRtaW4=" } }),
        401,
        "unauthenticated",
      );
    }
    assert.equal((await getJob(s, job.id)).status, "pending");
  });

  test("returns 403 site_admin_required on every admin route for a valid token without site_admin: true", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail());
    const plain = await s.adminToken({ siteAdmin: false });
    const stringly = await mintToken({
      auth: s.config.auth,
      clock: s.clock,
      sub: "eve",
      extraClaims: { site_admin: "true" },
    });
    for (const route of adminRoutes(job.id)) {
      for (const token of [plain, stringly])
        assertError(await s.inject({ ...route, token }), 403, "site_admin_required");
    }
    assert.equal((await getJob(s, job.id)).status, "pending");
  });

  test("answers 401 before 404 for an unknown job", async (t) => {
    const s = await startService(t);
    assertError(await s.inject({ method: "GET", url: "/jobs/nosuchjob1" }), 401, "unauthenticated");
    assertError(
      await admin(s, "GET", "/jobs/nosuchjob1", await s.adminToken({ siteAdmin: false })),
      403,
      "site_admin_required",
    );
  });
});

describe("get job", () => {
  test("returns 200 with the job as enqueued", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail({ priority: 3 }));
    const res = await admin(s, "GET", `/jobs/${job.id}`);
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { job });
  });

  test("returns 404 job_not_found for an id no job has", async (t) => {
    const s = await startService(t);
    await enqueue(s, welcomeEmail());
    for (const id of ["nosuchjob1", "x", encodeURIComponent("a b/../c"), "%F0%9F%98%80"]) {
      assertError(await admin(s, "GET", `/jobs/${id}`), 404, "job_not_found");
    }
  });
});

describe("list jobs", () => {
  test("lists jobs newest first with a null next_cursor when all fit", async (t) => {
    const s = await startService(t);
    const created: Job[] = [];
    for (let i = 0; i < 4; i++) {
      created.push(await enqueue(s, buildReport()));
      s.clock.advance(10);
    }
    const page = await list(s);
    assert.deepEqual(ids(page.jobs), ids(created).reverse());
    assert.equal(page.next_cursor, null);
    assert.deepEqual(page.jobs[0], await getJob(s, created[3]?.id ?? ""));
  });

  test("returns an empty page when no job matches", async (t) => {
    const s = await startService(t);
    assert.deepEqual(await list(s), { jobs: [], next_cursor: null });
    await enqueue(s, buildReport());
    assert.deepEqual(await list(s, "status=dead"), { jobs: [], next_cursor: null });
  });

  test("filters by status, and by any of several statuses when status repeats", async (t) => {
    const s = await startService(t);
    const running = await enqueue(s, buildReport());
    await driveTo(s, running.id, "running");
    const dead = await enqueue(s, buildReport());
    await driveTo(s, dead.id, "dead");
    const retrying = await enqueue(s, buildReport());
    await driveTo(s, retrying.id, "retrying");
    const succeeded = await enqueue(s, buildReport());
    await driveTo(s, succeeded.id, "succeeded");
    const pending = await enqueue(s, buildReport());
    const cancelled = await enqueue(s, buildReport());
    assert.equal((await admin(s, "POST", `/jobs/${cancelled.id}/cancel`)).statusCode, 200);

    const byStatus = { running, dead, retrying, succeeded, pending, cancelled };
    for (const [status, job] of Object.entries(byStatus)) {
      const page = await list(s, `status=${status}`);
      assert.deepEqual(ids(page.jobs), [job.id], status);
      assert.equal(page.jobs[0]?.status, status);
    }
    assert.deepEqual(ids((await list(s, "status=pending&status=dead&status=retrying")).jobs), [
      pending.id,
      retrying.id,
      dead.id,
    ]);
    assert.equal((await list(s)).jobs.length, 6);
  });

  test("filters by operation_id, original_request_id, user_id and parent_job_id, together with AND", async (t) => {
    const s = await startService(t);
    const a = await enqueue(s, welcomeEmail(), { sub: "alice", rid: "r-a" });
    const b = await enqueue(s, buildReport(), { sub: "alice", rid: "r-a" });
    const c = await enqueue(s, buildReport(), { sub: "bob", rid: "r-b" });
    const childOfA = await enqueue(s, welcomeEmail(), { sub: "alice", op: "sendWelcomeEmail", job: a.id });
    const childOfC = await enqueue(
      s,
      { operation_id: "recordEmailSent", request: { path_params: { emailId: "e" } } },
      {
        sub: "alice",
        op: "sendWelcomeEmail",
        job: childOfA.id,
      },
    );

    assert.deepEqual(ids((await list(s, "operation_id=buildReport")).jobs), [c.id, b.id]);
    assert.deepEqual(ids((await list(s, "operation_id=sendWelcomeEmail")).jobs), [childOfA.id, a.id]);
    assert.deepEqual(ids((await list(s, "original_request_id=r-a")).jobs), [childOfC.id, childOfA.id, b.id, a.id]);
    assert.deepEqual(ids((await list(s, "original_request_id=r-b")).jobs), [c.id]);
    assert.deepEqual(ids((await list(s, "user_id=bob")).jobs), [c.id]);
    assert.deepEqual(ids((await list(s, `parent_job_id=${a.id}`)).jobs), [childOfA.id]);
    assert.deepEqual(ids((await list(s, `parent_job_id=${childOfA.id}`)).jobs), [childOfC.id]);
    assert.deepEqual(ids((await list(s, "user_id=alice&operation_id=buildReport")).jobs), [b.id]);
    assert.deepEqual(ids((await list(s, "user_id=bob&original_request_id=r-a")).jobs), []);
    assert.deepEqual(ids((await list(s, "operation_id=nope")).jobs), []);
  });

  test("filters by dedupe_key (exact match, any status), with the other filters and with paging", async (t) => {
    const s = await startService(t);
    const first = await enqueue(s, buildReport({ dedupe_key: "report:daily" }), { sub: "alice" });
    await driveTo(s, first.id, "dead");
    const other = await enqueue(s, buildReport({ dedupe_key: "report:weekly" }), { sub: "alice" });
    const holder = await enqueue(s, buildReport({ dedupe_key: "report:daily" }), { sub: "bob" });
    await enqueue(s, buildReport(), { sub: "alice" });

    assert.deepEqual(ids((await list(s, "dedupe_key=report%3Adaily")).jobs), [holder.id, first.id]);
    assert.deepEqual(ids((await list(s, "dedupe_key=report:weekly")).jobs), [other.id]);
    assert.deepEqual(ids((await list(s, "dedupe_key=report:daily&status=dead")).jobs), [first.id]);
    assert.deepEqual(ids((await list(s, "dedupe_key=report:daily&user_id=bob")).jobs), [holder.id]);
    assert.deepEqual(ids((await list(s, "dedupe_key=report")).jobs), []);
    const page = await list(s, "dedupe_key=report:daily&limit=1");
    assert.deepEqual(ids(page.jobs), [holder.id]);
    const rest = await list(s, `dedupe_key=report:daily&limit=1&cursor=${encodeURIComponent(page.next_cursor ?? "")}`);
    assert.deepEqual(ids(rest.jobs), [first.id]);
    assert.equal(rest.next_cursor, null);
  });

  test("returns 400 invalid_request for a limit outside 1..500 or not an integer", async (t) => {
    const s = await startService(t);
    for (const limit of ["0", "501", "-1", "1.5", "abc", "", "1e3"]) {
      assertError(await admin(s, "GET", `/jobs?limit=${limit}`), 400, "invalid_request");
    }
    await enqueue(s, buildReport());
    await enqueue(s, buildReport());
    assert.equal((await list(s, "limit=1")).jobs.length, 1);
    assert.equal((await list(s, "limit=500")).jobs.length, 2);
  });

  test("returns 50 jobs by default, with a next_cursor to the rest", async (t) => {
    const s = await startService(t);
    const created: Job[] = [];
    for (let i = 0; i < 51; i++) created.push(await enqueue(s, buildReport()));
    const first = await list(s);
    assert.equal(first.jobs.length, 50);
    assert.deepEqual(ids(first.jobs), ids(created).reverse().slice(0, 50));
    assert.equal(typeof first.next_cursor, "string");
    const rest = await list(s, `cursor=${encodeURIComponent(first.next_cursor ?? "")}`);
    assert.deepEqual(ids(rest.jobs), [created[0]?.id]);
    assert.equal(rest.next_cursor, null);
  });

  test("walks every job exactly once with cursor paging, ending with a null next_cursor", async (t) => {
    const s = await startService(t);
    for (const total of [7, 6]) {
      const rid = `walk-${total}`;
      const created: string[] = [];
      for (let i = 0; i < total; i++) created.push((await enqueue(s, buildReport(), { rid })).id);
      const seen: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const query: string = `original_request_id=${rid}&limit=3${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`;
        const page = await list(s, query);
        assert.ok(page.jobs.length > 0 && page.jobs.length <= 3);
        seen.push(...ids(page.jobs));
        cursor = page.next_cursor;
        pages++;
      } while (cursor !== null && pages < 10);
      assert.equal(cursor, null);
      assert.equal(pages, Math.ceil(total / 3));
      assert.deepEqual(seen, created.reverse(), `${total} jobs, newest first, each once`);
    }
  });

  test("keeps paging stable while new jobs are enqueued between pages", async (t) => {
    const s = await startService(t);
    const created: string[] = [];
    for (let i = 0; i < 4; i++) created.push((await enqueue(s, buildReport())).id);
    const first = await list(s, "limit=2");
    await enqueue(s, buildReport());
    const second = await list(s, `limit=2&cursor=${encodeURIComponent(first.next_cursor ?? "")}`);
    assert.deepEqual([...ids(first.jobs), ...ids(second.jobs)], created.reverse());
  });

  test("returns 400 invalid_request for a cursor this service did not return", async (t) => {
    const s = await startService(t);
    await enqueue(s, buildReport());
    for (const cursor of [
      "garbage",
      "!!!",
      Buffer.from("s-1").toString("base64url"),
      Buffer.from("x12").toString("base64url"),
    ]) {
      assertError(await admin(s, "GET", `/jobs?cursor=${encodeURIComponent(cursor)}`), 400, "invalid_request");
    }
  });

  test("returns 400 invalid_request for an unknown query parameter or status", async (t) => {
    const s = await startService(t);
    for (const query of ["colour=blue", "status=finished", "status=pending&status=nope", "sort=asc", "offset=10"]) {
      assertError(await admin(s, "GET", `/jobs?${query}`), 400, "invalid_request");
    }
  });
});

describe("cancel job", () => {
  test("cancels a pending job: finished_at now and terminal_reason cancelled-by-admin", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail());
    s.clock.advance(2500);
    const res = await admin(s, "POST", `/jobs/${job.id}/cancel`);
    assert.equal(res.statusCode, 200, res.body);
    const cancelled = (res.json() as { job: Job }).job;
    assert.equal(cancelled.id, job.id);
    assert.equal(cancelled.status, "cancelled");
    assert.equal(cancelled.finished_at, iso(s.clock.now()));
    assert.deepEqual(cancelled.result, { error_body: null, terminal_reason: "cancelled-by-admin" });
    assert.equal(cancelled.attempt, 0);
    assert.deepEqual(await getJob(s, job.id), cancelled);
  });

  test("cancels a retrying job, keeping its last attempt's outcome beside the terminal reason", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail());
    await driveTo(s, job.id, "retrying");
    const res = await admin(s, "POST", `/jobs/${job.id}/cancel`);
    assert.equal(res.statusCode, 200, res.body);
    const cancelled = (res.json() as { job: Job }).job;
    assert.equal(cancelled.status, "cancelled");
    assert.equal(cancelled.attempt, 1);
    assert.equal(cancelled.finished_at, iso(s.clock.now()));
    assert.deepEqual(cancelled.result, { ...FAILED, terminal_reason: "cancelled-by-admin" });
  });

  test("frees the dedupe key of the job it cancels", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail({ dedupe_key: "k" }));
    assert.equal((await admin(s, "POST", `/jobs/${job.id}/cancel`)).statusCode, 200);
    assert.notEqual((await enqueue(s, welcomeEmail({ dedupe_key: "k" }))).id, job.id);
  });

  test("returns 409 job_running when cancelling a running job, which goes on running", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail());
    await driveTo(s, job.id, "running");
    const before = await getJob(s, job.id);
    assertError(await admin(s, "POST", `/jobs/${job.id}/cancel`), 409, "job_running");
    assert.deepEqual(await getJob(s, job.id), before);
    assert.equal(before.status, "running");
  });

  test("returns 409 job_not_cancellable when cancelling a succeeded, dead or cancelled job", async (t) => {
    const s = await startService(t);
    const succeeded = await enqueue(s, buildReport());
    await driveTo(s, succeeded.id, "succeeded");
    const dead = await enqueue(s, buildReport());
    await driveTo(s, dead.id, "dead");
    const cancelled = await enqueue(s, buildReport());
    assert.equal((await admin(s, "POST", `/jobs/${cancelled.id}/cancel`)).statusCode, 200);
    for (const job of [succeeded, dead, cancelled]) {
      const before = await getJob(s, job.id);
      assertError(await admin(s, "POST", `/jobs/${job.id}/cancel`), 409, "job_not_cancellable");
      assert.deepEqual(await getJob(s, job.id), before);
    }
  });

  test("returns 404 job_not_found when cancelling an unknown job", async (t) => {
    const s = await startService(t);
    assertError(await admin(s, "POST", "/jobs/nosuchjob1/cancel"), 404, "job_not_found");
  });

  test("accepts an empty application/json body on a body-less admin action", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail());
    const res = await s.inject({
      method: "POST",
      url: `/jobs/${job.id}/cancel`,
      token: await s.adminToken(),
      headers: { "content-type": "application/json" },
      payload: "",
    });
    assert.equal(res.statusCode, 200, res.body);
  });
});

describe("retry job", () => {
  test("re-queues a dead job as pending with attempt 0, no result, no start or finish, run_at now", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail({ delay_ms: 0, priority: 4, dedupe_key: "k" }));
    await driveTo(s, job.id, "dead");
    assert.equal((await getJob(s, job.id)).attempt, 1);
    s.clock.advance(60_000);
    const res = await admin(s, "POST", `/jobs/${job.id}/retry`);
    assert.equal(res.statusCode, 200, res.body);
    const retried = (res.json() as { job: Job }).job;
    assert.equal(retried.id, job.id);
    assert.equal(retried.status, "pending");
    assert.equal(retried.attempt, 0);
    assert.equal(retried.result, null);
    assert.equal(retried.started_at, null);
    assert.equal(retried.finished_at, null);
    assert.equal(retried.run_at, iso(s.clock.now()));
    assert.equal(retried.max_attempts, job.max_attempts);
    assert.equal(retried.priority, 4);
    assert.equal(retried.dedupe_key, "k");
    assert.equal(retried.created_at, job.created_at);
    assert.deepEqual(await getJob(s, job.id), retried);
    // It is claimable again, and holds its dedupe key again.
    assert.equal((await enqueue(s, welcomeEmail({ dedupe_key: "k" }), {}, 200)).id, job.id);
    const claimed = await s.service.store.jobClaimMany({ limit: 10 });
    assert.deepEqual(
      claimed.map((row) => row.id),
      [job.id],
    );
  });

  test("re-queues a cancelled job as pending", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail());
    assert.equal((await admin(s, "POST", `/jobs/${job.id}/cancel`)).statusCode, 200);
    s.clock.advance(1000);
    const res = await admin(s, "POST", `/jobs/${job.id}/retry`);
    assert.equal(res.statusCode, 200, res.body);
    const retried = (res.json() as { job: Job }).job;
    assert.equal(retried.status, "pending");
    assert.equal(retried.result, null);
    assert.equal(retried.finished_at, null);
    assert.equal(retried.run_at, iso(s.clock.now()));
  });

  test("returns 409 job_not_retryable for a pending, retrying, running or succeeded job", async (t) => {
    const s = await startService(t);
    const running = await enqueue(s, buildReport());
    await driveTo(s, running.id, "running");
    const retrying = await enqueue(s, buildReport());
    await driveTo(s, retrying.id, "retrying");
    const succeeded = await enqueue(s, buildReport());
    await driveTo(s, succeeded.id, "succeeded");
    const pending = await enqueue(s, buildReport());
    for (const job of [pending, retrying, running, succeeded]) {
      const before = await getJob(s, job.id);
      assertError(await admin(s, "POST", `/jobs/${job.id}/retry`), 409, "job_not_retryable");
      assert.deepEqual(await getJob(s, job.id), before);
    }
  });

  test("returns 409 dedupe_conflict when another claimable job holds the job's dedupe key", async (t) => {
    const s = await startService(t);
    const dead = await enqueue(s, welcomeEmail({ dedupe_key: "k" }));
    await driveTo(s, dead.id, "dead");
    const holder = await enqueue(s, welcomeEmail({ dedupe_key: "k" }));
    assert.notEqual(holder.id, dead.id);
    const before = await getJob(s, dead.id);
    assertError(await admin(s, "POST", `/jobs/${dead.id}/retry`), 409, "dedupe_conflict");
    assert.deepEqual(await getJob(s, dead.id), before);
    // Once the holder is no longer claimable, the retry goes through.
    await driveTo(s, holder.id, "running");
    assert.equal((await admin(s, "POST", `/jobs/${dead.id}/retry`)).statusCode, 200);
  });

  test("returns 404 job_not_found when retrying an unknown job", async (t) => {
    const s = await startService(t);
    assertError(await admin(s, "POST", "/jobs/nosuchjob1/retry"), 404, "job_not_found");
  });
});

describe("cancel chain", () => {
  test("cancels only the pending and retrying jobs of the chain, with cancelled-by-chain, and returns them", async (t) => {
    const s = await startService(t);
    const running = await enqueue(s, welcomeEmail(), { rid: "req-1" });
    await driveTo(s, running.id, "running");
    const retrying = await enqueue(s, buildReport(), { rid: "req-1" });
    await driveTo(s, retrying.id, "retrying");
    const succeeded = await enqueue(s, buildReport(), { rid: "req-1" });
    await driveTo(s, succeeded.id, "succeeded");
    const pending = await enqueue(s, welcomeEmail(), { rid: "req-1" });
    const child = await enqueue(s, welcomeEmail(), { op: "sendWelcomeEmail", job: running.id });
    const otherChain = await enqueue(s, buildReport(), { rid: "req-2" });
    const untouched = await Promise.all([running, succeeded, otherChain].map((job) => getJob(s, job.id)));

    s.clock.advance(777);
    const res = await admin(s, "POST", "/chains/req-1/cancel");
    assert.equal(res.statusCode, 200, res.body);
    const cancelled = (res.json() as { jobs: Job[] }).jobs;
    assert.deepEqual(ids(cancelled).sort(), [pending.id, retrying.id, child.id].sort());
    for (const job of cancelled) {
      assert.equal(job.status, "cancelled");
      assert.equal(job.finished_at, iso(s.clock.now()));
      assert.equal(job.result?.terminal_reason, "cancelled-by-chain");
      assert.deepEqual(await getJob(s, job.id), job);
    }
    for (const job of untouched) assert.deepEqual(await getJob(s, job.id), job);

    // A second call finds nothing left to cancel.
    assert.deepEqual((await admin(s, "POST", "/chains/req-1/cancel")).json(), { jobs: [] });
  });

  test("lets the running job of a cancelled chain finish, and ends it cancelled if its attempt fails", async (t) => {
    const s = await startService(t);
    const running = await enqueue(s, buildReport(), { rid: "req-1" });
    await driveTo(s, running.id, "running");
    assert.equal((await admin(s, "POST", "/chains/req-1/cancel")).statusCode, 200);
    const written = await s.service.store.jobSetStateIfRunningMany({
      outcomes: [{ id: running.id, attempt: 1, status: "retrying", delayMs: 1000, result: FAILED }],
    });
    assert.deepEqual(written, [true]);
    const after = await getJob(s, running.id);
    assert.equal(after.status, "cancelled");
    assert.equal(after.result?.terminal_reason, "cancelled-by-chain");
  });

  test("returns 200 {jobs: []} for a chain with no jobs, and cancels every later enqueue into it", async (t) => {
    const s = await startService(t);
    const res = await admin(s, "POST", "/chains/never-seen/cancel");
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { jobs: [] });
    const job = await enqueue(s, welcomeEmail(), { rid: "never-seen" });
    assert.equal(job.status, "cancelled");
    assert.equal(job.result?.terminal_reason, "cancelled-by-chain");
    assert.equal(job.finished_at, iso(s.clock.now()));
  });

  test("cancels chains whose id needs URL encoding", async (t) => {
    const s = await startService(t);
    const rid = "cron:nightly:2026-11-21T03:00:00.000Z";
    const job = await enqueue(s, buildReport(), { op: "cron:nightly", sub: "system", rid });
    const res = await admin(s, "POST", `/chains/${encodeURIComponent(rid)}/cancel`);
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(ids((res.json() as { jobs: Job[] }).jobs), [job.id]);
  });
});

describe("run a job now", () => {
  test("makes a delayed job due now (200 with the job), recorded as the admin's", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail({ delay_ms: 3_600_000 }));
    s.clock.advance(1000);
    const res = await s.inject({
      method: "POST",
      url: `/jobs/${job.id}/run-now`,
      token: await s.adminToken({ sub: "alice" }),
    });
    assert.equal(res.statusCode, 200, res.body);
    const moved = (res.json() as { job: Job }).job;
    assert.equal(moved.run_at, iso(s.clock.now()));
    assert.equal(moved.status, "pending");
    assert.deepEqual(
      (await s.service.store.adminActionList({ jobId: job.id })).map((action) => [action.actor, action.action]),
      [["alice", "run-now"]],
    );
  });

  test("returns 409 job_not_waiting for a running or finished job, and 404 job_not_found for no job", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail());
    await driveTo(s, job.id, "running");
    assertError(await admin(s, "POST", `/jobs/${job.id}/run-now`), 409, "job_not_waiting");
    assertError(await admin(s, "POST", "/jobs/no-such-job/run-now"), 404, "job_not_found");
  });
});

describe("job history", () => {
  test("lists the enqueue, every attempt numbered across an admin retry, and every admin action with who did it, oldest first", async (t) => {
    const s = await startService(t);
    const job = await enqueue(s, welcomeEmail());
    s.clock.advance(1000);
    await driveTo(s, job.id, "dead");
    s.clock.advance(1000);
    const retried = await s.inject({
      method: "POST",
      url: `/jobs/${job.id}/retry`,
      token: await s.adminToken({ sub: "carol" }),
    });
    assert.equal(retried.statusCode, 200, retried.body);
    s.clock.advance(1000);
    await driveTo(s, job.id, "succeeded");
    const res = await admin(s, "GET", `/jobs/${job.id}/history`);
    assert.equal(res.statusCode, 200, res.body);
    const { events } = res.json() as { events: Array<Record<string, unknown>> };
    assert.deepEqual(
      events.map((event) => [
        event["type"],
        event["number"] ?? null,
        event["attempt"] ?? null,
        event["outcome"] ?? event["action"] ?? event["by"],
        event["actor"] ?? null,
        event["role"] ?? null,
      ]),
      [
        ["enqueued", null, null, "createUser", null, null],
        ["attempt", 1, 1, "dead", null, null],
        ["admin", null, null, "retry", "carol", "admin"],
        ["attempt", 2, 1, "succeeded", null, null],
      ],
    );
    assert.equal(events[2]?.["at"], iso(Date.parse(job.created_at) + 2000), "the retry is dated when it was made");
    assertError(await admin(s, "GET", "/jobs/no-such-job/history"), 404, "job_not_found");
  });
});

describe("a chain", () => {
  test("of more than 10,000 jobs answers the newest 10,000 in its tree, and counts and settles every job", async (t) => {
    const s = await startService(t, { configure: (raw) => void (raw["limits"] = { spawn_cap: 20_000 }) });
    const token = await s.assertion({ rid: "big" });
    for (let batch = 0; batch < 11; batch++) {
      const jobs = Array.from({ length: batch === 10 ? 2 : 1000 }, (_, i) =>
        buildReport({ request: { body: { n: batch * 1000 + i } } }),
      );
      const res = await s.inject({ method: "POST", url: "/jobs/batch", token, payload: { jobs } });
      assert.equal(res.statusCode, 200, res.body);
    }
    const [first] = (await s.service.store.jobList({ originalRequestId: "big", limit: 20_000 })).slice(-1);
    assert.ok(first, "the chain's oldest job");
    assert.equal((await admin(s, "POST", `/jobs/${first.id}/cancel`)).statusCode, 200);

    const res = await admin(s, "GET", "/chains/big");
    assert.equal(res.statusCode, 200, res.body);
    const chain = (
      res.json() as {
        chain: { truncated: boolean; counts: Record<string, number>; settled: boolean; jobs: Array<{ job: Job }> };
      }
    ).chain;
    assert.equal(chain.truncated, true);
    assert.equal(chain.jobs.length, 10_000, "the newest 10,000, each a root");
    assert.ok(!chain.jobs.some((node) => node.job.id === first.id), "the oldest job is left out of the tree");
    assert.equal(chain.counts["pending"], 10_001, "counted over every job");
    assert.equal(chain.counts["cancelled"], 1, "the oldest job, outside the tree, is counted");
    assert.equal(chain.settled, false);
  });
});

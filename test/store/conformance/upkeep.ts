/**
 * The writes and reads of leases, shutdown, the dispatcher's timer, cron, retention and metrics:
 * jobHeartbeatMany, jobListExpired, jobRequeueMany, jobNextRunAt, cronTickInsert, cronTickDeleteMany,
 * jobDeleteFinishedMany and jobStats (docs/delivery.md, "Leases, heartbeats and rescue"–§9).
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import { JOB_STATUSES, type JobStatus } from "../../../src/job/schemas.js";
import type { JobInsertParams, Store } from "../../../src/store/store.js";
import type { LeaseLimits } from "../../../src/job/job.js";
import type { JobRow } from "../../../src/job/job.js";
import {
  allJobs,
  claimNext,
  insertCreated,
  jobParams,
  makeFinished,
  makeRetrying,
  makeRunning,
  mustGet,
  T0,
  UNAVAILABLE,
  type JobOverrides,
  type Suite,
} from "./harness.js";

const ids = (jobs: JobRow[]): string[] => jobs.map((job) => job.id);

/** A job that is `running` with attempt 2, so attempt 1 is stale; top priority (through the harness helpers). */
async function makeRunningSecondAttempt(store: Store, overrides: JobOverrides = {}): Promise<JobRow> {
  const first = await makeRunning(store, overrides);
  assert.deepEqual(
    await store.jobSetStateIfRunningMany({
      outcomes: [{ id: first.id, attempt: 1, status: "retrying", delayMs: 0, result: UNAVAILABLE }],
    }),
    [true],
  );
  const second = await claimNext(store, first.id);
  assert.equal(second.attempt, 2);
  return second;
}

/** A pending job cancelled by an admin (a terminal `cancelled` job with finishedAt = now). */
async function makeCancelled(store: Store, overrides: JobOverrides = {}): Promise<JobRow> {
  const job = await insertCreated(store, { runAt: T0 + 3_600_000, ...overrides });
  assert.equal((await store.jobCancel({ id: job.id, actor: "admin" })).kind, "cancelled");
  return mustGet(store, job.id);
}

/** Parameters of a cron tick's job, as the scheduler builds them (docs/delivery.md, "Cron"). */
function cronJob(name: string, tickAt: number, overrides: JobOverrides = {}): JobInsertParams {
  return jobParams({
    operationId: `cron:${name}`,
    enqueuedByOperationId: `cron:${name}`,
    originalRequestId: `cron:${name}:${new Date(tickAt).toISOString()}`,
    dedupeKey: `cron:${name}`,
    authority: { kind: "cron", cron_job_name: name, user_id: "system" },
    runAt: tickAt,
    ...overrides,
  });
}

/** One lease for every operation, or per operation where given. */
const lease = (defaultMs: number, byOperation: Record<string, number> = {}): LeaseLimits => ({
  defaultMs,
  byOperation,
});

/** Counts of every status, zero for the absent ones. */
function statusCounts(counts: Partial<Record<JobStatus, number>>): Record<JobStatus, number> {
  return Object.fromEntries(JOB_STATUSES.map((status) => [status, counts[status] ?? 0])) as Record<JobStatus, number>;
}

/** Asserts that every job of `before` is still in the store exactly as it was. */
async function assertUnchanged(store: Store, before: JobRow[], message?: string): Promise<void> {
  for (const job of before)
    assert.deepEqual(await mustGet(store, job.id), job, message ?? `job ${job.id} is untouched`);
}

/** Registers the lease, shutdown, timer, cron, retention and metrics cases. */
export function maintenanceCases(suite: Suite): void {
  describe("jobHeartbeatMany", () => {
    suite.case("sets heartbeatAt = now only on jobs still running with that attempt", async ({ store, clock }) => {
      const live = await makeRunning(store);
      const other = await makeRunning(store);
      const stale = await makeRunningSecondAttempt(store);
      const succeeded = await makeFinished(store, "succeeded");
      const pending = await insertCreated(store, { runAt: T0 + 60_000 });
      clock.advance(500);
      await store.jobHeartbeatMany({
        jobs: [
          { id: live.id, attempt: 1 },
          { id: stale.id, attempt: 1 },
          { id: succeeded.id, attempt: 1 },
          { id: pending.id, attempt: 0 },
          { id: "no-such-job-id", attempt: 1 },
        ],
      });
      assert.deepEqual(await mustGet(store, live.id), { ...live, heartbeatAt: T0 + 500 });
      await assertUnchanged(store, [other, stale, succeeded, pending]);
      assert.equal(stale.heartbeatAt, T0, "the stale attempt keeps the heartbeat of its claim");
    });

    suite.case("renews several leases in one call", async ({ store, clock }) => {
      const a = await makeRunning(store);
      const b = await makeRunningSecondAttempt(store);
      clock.advance(1000);
      await store.jobHeartbeatMany({
        jobs: [
          { id: a.id, attempt: 1 },
          { id: b.id, attempt: 2 },
        ],
      });
      assert.equal((await mustGet(store, a.id)).heartbeatAt, T0 + 1000);
      assert.equal((await mustGet(store, b.id)).heartbeatAt, T0 + 1000);
      clock.advance(1000);
      await store.jobHeartbeatMany({ jobs: [{ id: b.id, attempt: 2 }] });
      assert.equal((await mustGet(store, a.id)).heartbeatAt, T0 + 1000);
      assert.equal((await mustGet(store, b.id)).heartbeatAt, T0 + 2000);
    });

    suite.case("an empty heartbeat batch changes nothing", async ({ store, clock }) => {
      await makeRunning(store);
      const before = await allJobs(store);
      clock.advance(500);
      await store.jobHeartbeatMany({ jobs: [] });
      assert.deepEqual(await allJobs(store), before);
    });
  });

  describe("jobListExpired", () => {
    /** Running jobs with heartbeats a = T0, c = T0 + 200, b = T0 + 300, and jobs in every other status. */
    async function leases(
      store: Store,
      clock: { advance(ms: number): void },
    ): Promise<Record<"a" | "b" | "c", JobRow>> {
      await makeFinished(store, "succeeded");
      await makeFinished(store, "dead");
      await makeCancelled(store);
      const a = await makeRunning(store);
      clock.advance(100);
      const b = await makeRunning(store);
      clock.advance(100);
      const c = await makeRunning(store);
      clock.advance(100);
      await store.jobHeartbeatMany({ jobs: [{ id: b.id, attempt: 1 }] });
      await makeRetrying(store, {}, T0 + 60_000);
      await insertCreated(store, { runAt: T0 + 60_000 });
      return { a: await mustGet(store, a.id), b: await mustGet(store, b.id), c: await mustGet(store, c.id) };
    }

    suite.case(
      "lists running jobs without a heartbeat for longer than their lease, by the store's clock, oldest heartbeat first",
      async ({ store, clock }) => {
        const { a, b, c } = await leases(store, clock);
        assert.deepEqual([a.heartbeatAt, c.heartbeatAt, b.heartbeatAt], [T0, T0 + 200, T0 + 300]);
        clock.set(T0 + 1300);
        // Ages of the heartbeats now: a 1300, c 1100, b 1000.
        assert.deepEqual(await store.jobListExpired({ lease: lease(999), limit: 10 }), [a, c, b]);
        assert.deepEqual(
          ids(await store.jobListExpired({ lease: lease(1000), limit: 10 })),
          ids([a, c]),
          "strictly longer",
        );
        assert.deepEqual(ids(await store.jobListExpired({ lease: lease(1299), limit: 10 })), ids([a]));
        assert.deepEqual(await store.jobListExpired({ lease: lease(1300), limit: 10 }), []);
        clock.advance(1);
        assert.deepEqual(
          ids(await store.jobListExpired({ lease: lease(1300), limit: 10 })),
          ids([a]),
          "one more ms and a's lease has expired",
        );
      },
    );

    suite.case(
      "a per-operation lease holds that operation's jobs to its own limit; other operations use the default",
      async ({ store, clock }) => {
        const quick = await makeRunning(store, { operationId: "quickOp" });
        const plain = await makeRunning(store, { operationId: "sendWelcomeEmail" });
        const slow = await makeRunning(store, { operationId: "slowOp" });
        const limits = lease(2000, { quickOp: 500, slowOp: 10_000 });
        clock.advance(500);
        assert.deepEqual(
          await store.jobListExpired({ lease: limits, limit: 10 }),
          [],
          "500 ms is quickOp's whole lease, not past it",
        );
        clock.advance(1);
        assert.deepEqual(
          ids(await store.jobListExpired({ lease: limits, limit: 10 })),
          ids([quick]),
          "quickOp's shorter lease",
        );
        clock.set(T0 + 2001);
        assert.deepEqual(
          ids(await store.jobListExpired({ lease: limits, limit: 10 })).sort(),
          ids([quick, plain]).sort(),
          "the default lease for an operation the limits do not name",
        );
        clock.set(T0 + 10_000);
        assert.equal(
          (await store.jobListExpired({ lease: limits, limit: 10 })).length,
          2,
          "slowOp's longer lease still holds",
        );
        clock.set(T0 + 10_001);
        assert.deepEqual(
          ids(await store.jobListExpired({ lease: limits, limit: 10 })).sort(),
          ids([quick, plain, slow]).sort(),
        );
        await store.jobHeartbeatMany({ jobs: [{ id: quick.id, attempt: 1 }] });
        clock.advance(499);
        assert.deepEqual(
          ids(await store.jobListExpired({ lease: limits, limit: 10 })).sort(),
          ids([plain, slow]).sort(),
          "a heartbeat renews a lease",
        );
      },
    );

    suite.case(
      "the limit counts expired jobs only: older heartbeats still within a longer lease do not crowd them out",
      async ({ store, clock }) => {
        const slow = [
          await makeRunning(store, { operationId: "slowOp" }),
          await makeRunning(store, { operationId: "slowOp" }),
        ];
        clock.advance(100);
        const plain = await makeRunning(store, { operationId: "sendWelcomeEmail" });
        clock.advance(5000);
        const limits = lease(1000, { slowOp: 60_000 });
        // Oldest heartbeats first are the slowOp jobs (5100 ms), within their lease; the plain job (5000 ms) is past its
        // own. A rescuer asking for a batch must get the expired job, however many unexpired ones are older.
        assert.deepEqual(
          ids(await store.jobListExpired({ lease: limits, limit: 1 })),
          [plain.id],
          "the one expired job, though two older heartbeats come first",
        );
        assert.deepEqual(ids(await store.jobListExpired({ lease: limits, limit: 10 })), [plain.id]);
        clock.set(T0 + 60_001);
        assert.deepEqual(
          ids(await store.jobListExpired({ lease: limits, limit: 2 })).sort(),
          ids(slow).sort(),
          "oldest heartbeats first",
        );
      },
    );

    suite.case("never lists pending, retrying or finished jobs", async ({ store, clock }) => {
      await leases(store, clock);
      clock.advance(3_600_000);
      const listed = await store.jobListExpired({ lease: lease(300), limit: 100 });
      assert.deepEqual(
        listed.map((job) => job.status),
        ["running", "running", "running"],
      );
      const statuses = new Set((await allJobs(store)).map((job) => job.status));
      assert.deepEqual([...statuses].sort(), [...JOB_STATUSES].sort(), "the store has a job in every status");
    });

    suite.case("lists at most limit, keeping the oldest heartbeats", async ({ store, clock }) => {
      const { a, c } = await leases(store, clock);
      clock.set(T0 + 1300);
      assert.deepEqual(ids(await store.jobListExpired({ lease: lease(300), limit: 2 })), ids([a, c]));
      assert.deepEqual(ids(await store.jobListExpired({ lease: lease(300), limit: 1 })), ids([a]));
    });

    suite.case("an empty store has no expired leases", async ({ store, clock }) => {
      clock.advance(1_000_000);
      assert.deepEqual(await store.jobListExpired({ lease: lease(0), limit: 10 }), []);
    });
  });

  describe("jobRequeueMany", () => {
    suite.case(
      "puts a running attempt back to retrying, due delayMs after now, with the error body, clearing the heartbeat and keeping the attempt",
      async ({ store, clock }) => {
        const running = await makeRunning(store, { maxAttempts: 5, dedupeKey: "k" });
        clock.advance(50);
        assert.equal(
          await store.jobRequeueMany({
            jobs: [{ id: running.id, attempt: 1 }],
            delayMs: 950,
            errorBody: "shutdown",
            refund: "if-last",
          }),
          1,
        );
        const { startedAt: _a, ...after } = await mustGet(store, running.id);
        const { startedAt: _b, ...before } = running;
        assert.deepEqual(after, {
          ...before,
          status: "retrying",
          runAt: T0 + 1000,
          heartbeatAt: null,
          result: { error_body: "shutdown", terminal_reason: null },
        });
        clock.set(T0 + 999);
        assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
        clock.set(T0 + 1000);
        const again = await claimNext(store, running.id);
        assert.equal(again.attempt, 2);
      },
    );

    suite.case("an interrupted last attempt is given back: attempt becomes maxAttempts - 1", async ({ store }) => {
      const single = await makeRunning(store, { maxAttempts: 1 });
      const last = await makeRunningSecondAttempt(store, { maxAttempts: 2 });
      const notLast = await makeRunningSecondAttempt(store, { maxAttempts: 3 });
      assert.equal(
        await store.jobRequeueMany({
          jobs: [
            { id: single.id, attempt: 1 },
            { id: last.id, attempt: 2 },
            { id: notLast.id, attempt: 2 },
          ],
          delayMs: 0,
          errorBody: "shutdown",
          refund: "if-last",
        }),
        3,
      );
      const attempts = async (id: string) => {
        const job = await mustGet(store, id);
        return { status: job.status, attempt: job.attempt, maxAttempts: job.maxAttempts };
      };
      assert.deepEqual(await attempts(single.id), { status: "retrying", attempt: 0, maxAttempts: 1 });
      assert.deepEqual(await attempts(last.id), { status: "retrying", attempt: 1, maxAttempts: 2 });
      assert.deepEqual(await attempts(notLast.id), { status: "retrying", attempt: 2, maxAttempts: 3 });
      const claimed = await store.jobClaimMany({ limit: 10 });
      assert.deepEqual(
        claimed.map((job) => [job.id, job.attempt]).sort(),
        [
          [single.id, 1],
          [last.id, 2],
          [notLast.id, 3],
        ].sort(),
        "each job runs again within its attempts",
      );
    });

    suite.case(
      "refund always gives the attempt back: attempt 1 becomes 0, retrying due delayMs after now with the error body",
      async ({ store, clock }) => {
        const running = await makeRunning(store, { maxAttempts: 3, dedupeKey: "k" });
        clock.advance(50);
        const errorBody = "not sent, not counted as an attempt: connect EMFILE";
        assert.equal(
          await store.jobRequeueMany({
            jobs: [{ id: running.id, attempt: 1, startedAt: running.startedAt }],
            delayMs: 200,
            errorBody,
            refund: "always",
          }),
          1,
        );
        const { startedAt: _a, ...after } = await mustGet(store, running.id);
        const { startedAt: _b, ...before } = running;
        assert.deepEqual(after, {
          ...before,
          status: "retrying",
          attempt: 0,
          runAt: T0 + 250,
          heartbeatAt: null,
          result: { error_body: errorBody, terminal_reason: null },
        });
        clock.set(T0 + 249);
        assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
        clock.set(T0 + 250);
        const again = await claimNext(store, running.id);
        assert.equal(again.attempt, 1, "the attempt that was never sent is not counted");
      },
    );

    suite.case(
      "refund always gives back any attempt, a last one too, where if-last gives back only a last one",
      async ({ store }) => {
        const single = await makeRunning(store, { maxAttempts: 1 });
        const last = await makeRunningSecondAttempt(store, { maxAttempts: 2 });
        const notLast = await makeRunningSecondAttempt(store, { maxAttempts: 3 });
        assert.equal(
          await store.jobRequeueMany({
            jobs: [
              { id: single.id, attempt: 1 },
              { id: last.id, attempt: 2 },
              { id: notLast.id, attempt: 2 },
            ],
            delayMs: 0,
            errorBody: "not sent",
            refund: "always",
          }),
          3,
        );
        const attempts = async (id: string) => {
          const job = await mustGet(store, id);
          return { status: job.status, attempt: job.attempt, maxAttempts: job.maxAttempts };
        };
        assert.deepEqual(await attempts(single.id), { status: "retrying", attempt: 0, maxAttempts: 1 });
        assert.deepEqual(await attempts(last.id), { status: "retrying", attempt: 1, maxAttempts: 2 });
        assert.deepEqual(
          await attempts(notLast.id),
          { status: "retrying", attempt: 1, maxAttempts: 3 },
          "unlike if-last",
        );
        const claimed = await store.jobClaimMany({ limit: 10 });
        assert.deepEqual(
          claimed.map((job) => [job.id, job.attempt]).sort(),
          [
            [single.id, 1],
            [last.id, 2],
            [notLast.id, 2],
          ].sort(),
          "each job runs again with the attempt number it had been given",
        );
      },
    );

    suite.case(
      "refund always for a stale attempt or an earlier claim's start, or a job not running, changes nothing",
      async ({ store, clock }) => {
        const stale = await makeRunningSecondAttempt(store);
        // An admin retry restarts attempt numbers: a write for the first claim names attempt 1 and that claim's start.
        const first = await makeFinished(store, "dead");
        assert.equal((await store.jobRetry({ id: first.id, actor: "admin" })).kind, "retried");
        clock.advance(1000);
        const reclaimed = await claimNext(store, first.id);
        assert.equal(reclaimed.attempt, 1);
        assert.notEqual(reclaimed.startedAt, first.startedAt);
        const succeeded = await makeFinished(store, "succeeded");
        const retrying = await makeRetrying(store, {}, T0 + 60_000);
        const pending = await insertCreated(store, { runAt: T0 + 60_000 });
        clock.advance(10);
        assert.equal(
          await store.jobRequeueMany({
            jobs: [
              { id: stale.id, attempt: 1 },
              { id: stale.id, attempt: 3 },
              { id: first.id, attempt: 1, startedAt: first.startedAt },
              { id: succeeded.id, attempt: 1 },
              { id: retrying.id, attempt: 1 },
              { id: pending.id, attempt: 0 },
              { id: "no-such-job-id", attempt: 1 },
            ],
            delayMs: 0,
            errorBody: "not sent",
            refund: "always",
          }),
          0,
        );
        await assertUnchanged(store, [stale, reclaimed, succeeded, retrying, pending]);
        assert.equal(
          await store.jobRequeueMany({
            jobs: [{ id: first.id, attempt: 1, startedAt: reclaimed.startedAt }],
            delayMs: 0,
            errorBody: "not sent",
            refund: "always",
          }),
          1,
          "the current claim's attempt is given back",
        );
        assert.equal((await mustGet(store, first.id)).attempt, 0);
      },
    );

    suite.case(
      "a stale attempt or a job that is not running is untouched and not counted",
      async ({ store, clock }) => {
        const stale = await makeRunningSecondAttempt(store);
        const live = await makeRunning(store);
        const succeeded = await makeFinished(store, "succeeded");
        const dead = await makeFinished(store, "dead");
        const cancelled = await makeCancelled(store);
        const retrying = await makeRetrying(store, {}, T0 + 60_000);
        const pending = await insertCreated(store, { runAt: T0 + 60_000 });
        clock.advance(10);
        assert.equal(
          await store.jobRequeueMany({
            jobs: [
              { id: stale.id, attempt: 1 },
              { id: stale.id, attempt: 3 },
              { id: live.id, attempt: 1 },
              { id: succeeded.id, attempt: 1 },
              { id: dead.id, attempt: 1 },
              { id: cancelled.id, attempt: 0 },
              { id: retrying.id, attempt: 1 },
              { id: pending.id, attempt: 0 },
              { id: "no-such-job-id", attempt: 1 },
            ],
            delayMs: 0,
            errorBody: "shutdown",
            refund: "if-last",
          }),
          1,
        );
        assert.equal((await mustGet(store, live.id)).status, "retrying");
        await assertUnchanged(store, [stale, succeeded, dead, cancelled, retrying, pending]);
      },
    );

    suite.case(
      "a job of a cancelled chain ends cancelled-by-chain instead of going back to the queue",
      async ({ store, clock }) => {
        const doomed = await makeRunning(store, { originalRequestId: "chain-a" });
        const survivor = await makeRunning(store, { originalRequestId: "chain-b" });
        assert.deepEqual(
          await store.chainCancel({ originalRequestId: "chain-a", actor: "admin" }),
          [],
          "a running job is not cancelled",
        );
        clock.advance(30);
        assert.equal(
          await store.jobRequeueMany({
            jobs: [
              { id: doomed.id, attempt: 1 },
              { id: survivor.id, attempt: 1 },
            ],
            delayMs: 970,
            errorBody: "shutdown",
            refund: "if-last",
          }),
          2,
          "both attempts were written",
        );
        const after = await mustGet(store, doomed.id);
        assert.equal(after.status, "cancelled");
        assert.equal(after.finishedAt, T0 + 30);
        assert.equal(after.heartbeatAt, null);
        assert.deepEqual(after.result, { error_body: "shutdown", terminal_reason: "cancelled-by-chain" });
        assert.equal((await mustGet(store, survivor.id)).status, "retrying");
        clock.advance(120_000);
        assert.deepEqual(
          ids(await store.jobClaimMany({ limit: 10 })),
          [survivor.id],
          "the cancelled job never runs again",
        );
      },
    );

    suite.case(
      "a job whose dedupe key was taken meanwhile by a newer pending job is requeued without the key",
      async ({ store }) => {
        const old = await makeRunning(store, { dedupeKey: "k" });
        const newer = await insertCreated(store, { dedupeKey: "k", runAt: T0 + 60_000 });
        assert.equal(
          await store.jobRequeueMany({
            jobs: [{ id: old.id, attempt: 1 }],
            delayMs: 1000,
            errorBody: "shutdown",
            refund: "if-last",
          }),
          1,
        );
        const requeued = await mustGet(store, old.id);
        assert.equal(requeued.status, "retrying");
        assert.equal(requeued.dedupeKey, null);
        assert.equal(requeued.runAt, T0 + 1000);
        assert.deepEqual(await mustGet(store, newer.id), newer, "the newer job keeps the key");
        const upsert = await store.jobInsert(jobParams({ dedupeKey: "k" }));
        assert.equal(upsert.kind, "deduplicated");
        assert.equal((upsert as { job: JobRow }).job.id, newer.id);
      },
    );

    suite.case("an empty requeue batch returns 0 and changes nothing", async ({ store }) => {
      await makeRunning(store);
      const before = await allJobs(store);
      assert.equal(await store.jobRequeueMany({ jobs: [], delayMs: 0, errorBody: "shutdown", refund: "if-last" }), 0);
      assert.equal(await store.jobRequeueMany({ jobs: [], delayMs: 0, errorBody: "not sent", refund: "always" }), 0);
      assert.deepEqual(await allJobs(store), before);
    });
  });

  describe("jobNextRunAt", () => {
    suite.case("is null when no job is claimable", async ({ store }) => {
      assert.equal(await store.jobNextRunAt(), null);
      await makeRunning(store, { runAt: T0 - 5000 });
      await makeFinished(store, "succeeded", { runAt: T0 - 6000 });
      await makeFinished(store, "dead", { runAt: T0 - 7000 });
      await makeCancelled(store, { runAt: T0 - 8000 });
      assert.equal(await store.jobNextRunAt(), null);
    });

    suite.case("is the earliest runAt of pending and retrying jobs, future ones included", async ({ store }) => {
      await makeRunning(store, { runAt: T0 - 5000 });
      await makeFinished(store, "succeeded", { runAt: T0 - 6000 });
      await makeCancelled(store, { runAt: T0 - 8000 });
      await insertCreated(store, { runAt: T0 + 5000 });
      assert.equal(await store.jobNextRunAt(), T0 + 5000);
      const retrying = await makeRetrying(store, {}, T0 + 3000);
      assert.equal(await store.jobNextRunAt(), T0 + 3000);
      const soon = await insertCreated(store, { runAt: T0 + 2000 });
      assert.equal(await store.jobNextRunAt(), T0 + 2000);
      await store.jobCancel({ id: soon.id, actor: "admin" });
      assert.equal(await store.jobNextRunAt(), T0 + 3000);
      await store.jobCancel({ id: retrying.id, actor: "admin" });
      assert.equal(await store.jobNextRunAt(), T0 + 5000);
    });

    suite.case("includes jobs already due", async ({ store, clock }) => {
      await insertCreated(store, { runAt: T0 - 100 });
      await insertCreated(store, { runAt: T0 + 100 });
      clock.advance(1000);
      assert.equal(await store.jobNextRunAt(), T0 - 100);
    });
  });

  describe("cronTickInsert", () => {
    suite.case(
      "the first call for a tick inserts its job; a second call answers already_enqueued and inserts nothing",
      async ({ store }) => {
        const params = cronJob("nightly", T0);
        const first = await store.cronTickInsert({ name: "nightly", tickAt: T0, job: params });
        assert.equal(first.kind, "created");
        const job = (first as { job: JobRow }).job;
        assert.equal(job.id, params.id);
        assert.equal(job.status, "pending");
        assert.equal(job.operationId, "cron:nightly");
        assert.deepEqual(await mustGet(store, job.id), job);
        const before = await allJobs(store);
        const again = cronJob("nightly", T0, { runAt: T0 + 60_000 });
        assert.deepEqual(await store.cronTickInsert({ name: "nightly", tickAt: T0, job: again }), {
          kind: "already_enqueued",
        });
        assert.deepEqual(await allJobs(store), before, "nothing inserted, nothing refreshed");
        assert.equal(await store.jobGet({ id: again.id }), undefined);
      },
    );

    suite.case("the tick is remembered after its job has run", async ({ store }) => {
      const first = await store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) });
      const job = (first as { job: JobRow }).job;
      await store.jobClaimMany({ limit: 10 });
      await store.jobSetStateIfRunningMany({
        outcomes: [
          {
            id: job.id,
            attempt: 1,
            status: "succeeded",
            result: { status_code: 200, error_body: null, terminal_reason: null },
          },
        ],
      });
      assert.deepEqual(await store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) }), {
        kind: "already_enqueued",
      });
      assert.equal((await allJobs(store)).length, 1);
    });

    suite.case("another tick or another name inserts again; a held dedupe key deduplicates", async ({ store }) => {
      const a = await store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) });
      assert.equal(a.kind, "created");
      const first = (a as { job: JobRow }).job;

      // The first tick's job is still pending and holds `cron:nightly`: the next tick refreshes it.
      const b = await store.cronTickInsert({
        name: "nightly",
        tickAt: T0 + 60_000,
        job: cronJob("nightly", T0 + 60_000),
      });
      assert.equal(b.kind, "deduplicated");
      assert.equal((b as { job: JobRow }).job.id, first.id);
      assert.equal((b as { job: JobRow }).job.runAt, T0 + 60_000);
      assert.deepEqual(
        await store.cronTickInsert({ name: "nightly", tickAt: T0 + 60_000, job: cronJob("nightly", T0 + 60_000) }),
        { kind: "already_enqueued" },
        "a deduplicated tick is recorded too",
      );

      const c = await store.cronTickInsert({ name: "hourly", tickAt: T0, job: cronJob("hourly", T0) });
      assert.equal(c.kind, "created", "the same tick time under another name is another tick");

      const d = await store.cronTickInsert({
        name: "nightly",
        tickAt: T0 + 120_000,
        job: cronJob("nightly", T0 + 120_000, { dedupeKey: null }),
      });
      assert.equal(d.kind, "created");
      assert.equal((await allJobs(store)).length, 3);
    });

    suite.case("concurrent calls for one tick produce exactly one job", async ({ store }) => {
      const outcomes = await Promise.all(
        Array.from({ length: 4 }, () =>
          store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0, { dedupeKey: null }) }),
        ),
      );
      assert.deepEqual(outcomes.map((outcome) => outcome.kind).sort(), [
        "already_enqueued",
        "already_enqueued",
        "already_enqueued",
        "created",
      ]);
      const jobs = await allJobs(store);
      assert.equal(jobs.length, 1);
      const created = outcomes.find((outcome) => outcome.kind === "created") as { job: JobRow };
      assert.equal(jobs[0]?.id, created.job.id);
    });

    suite.case(
      "concurrent calls for one tick and the group-committed inserts beside them stay consistent",
      async ({ store }) => {
        const [tick1, plain, tick2] = await Promise.all([
          store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) }),
          store.jobInsert(jobParams()),
          store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) }),
        ]);
        assert.deepEqual([tick1.kind, tick2.kind].sort(), ["already_enqueued", "created"]);
        assert.equal(plain.kind, "created");
        assert.equal((await allJobs(store)).length, 2);
      },
    );
  });

  describe("cronTickDeleteMany", () => {
    suite.case(
      "forgets ticks more than olderThanMs old by the store's clock but each name's newest, keeps later ones, and returns how many",
      async ({ store, clock }) => {
        const tick = (name: string, tickAt: number) =>
          store.cronTickInsert({ name, tickAt, job: cronJob(name, tickAt, { dedupeKey: null }) });
        for (const [name, tickAt] of [
          ["nightly", T0],
          ["hourly", T0 + 500],
          ["nightly", T0 + 1000],
          ["nightly", T0 + 2000],
        ] as const) {
          assert.equal((await tick(name, tickAt)).kind, "created");
        }
        clock.set(T0 + 1_000_000);
        assert.equal(await store.cronTickDeleteMany({ olderThanMs: 1_000_000 }), 0, "a tick exactly that old is kept");
        assert.equal(
          await store.cronTickDeleteMany({ olderThanMs: 999_000 }),
          1,
          "nightly's first; hourly's only tick is its newest",
        );
        assert.equal(await store.cronTickDeleteMany({ olderThanMs: 999_000 }), 0, "already forgotten");
        // A forgotten tick can be inserted again; a remembered one cannot.
        assert.equal((await tick("nightly", T0)).kind, "created");
        assert.deepEqual(
          await tick("hourly", T0 + 500),
          { kind: "already_enqueued" },
          "the newest tick of a name is remembered",
        );
        assert.deepEqual(await tick("nightly", T0 + 1000), { kind: "already_enqueued" });
        assert.deepEqual(await tick("nightly", T0 + 2000), { kind: "already_enqueued" });
        assert.equal(await store.cronTickDeleteMany({ olderThanMs: 0 }), 2);
        assert.deepEqual(
          (await store.cronTickLatestMany({ names: ["nightly", "hourly"] }))
            .map(({ name, tickAt }) => [name, tickAt])
            .sort(),
          [
            ["hourly", T0 + 500],
            ["nightly", T0 + 2000],
          ],
          "each name's newest tick stays, however old",
        );
      },
    );

    suite.case("forgetting ticks deletes no job", async ({ store, clock }) => {
      await store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) });
      await store.cronTickInsert({ name: "nightly", tickAt: T0 + 500, job: cronJob("nightly", T0 + 500) });
      const before = await allJobs(store);
      clock.advance(1000);
      assert.equal(await store.cronTickDeleteMany({ olderThanMs: 999 }), 1);
      assert.deepEqual(await allJobs(store), before);
    });

    suite.case("an empty store forgets nothing", async ({ store, clock }) => {
      clock.advance(1_000_000);
      assert.equal(await store.cronTickDeleteMany({ olderThanMs: 0 }), 0);
    });
  });

  describe("jobDeleteFinishedMany", () => {
    suite.case(
      "deletes only succeeded, dead and cancelled jobs finished more than olderThanMs ago by the store's clock",
      async ({ store, clock }) => {
        const old = [
          await makeFinished(store, "succeeded"),
          await makeFinished(store, "dead"),
          await makeCancelled(store),
        ];
        clock.advance(1000);
        const kept = [
          await makeFinished(store, "succeeded"),
          await makeFinished(store, "dead"),
          await makeCancelled(store),
          await makeRunning(store, { runAt: T0 - 60_000 }),
          await makeRetrying(store, {}, T0 - 60_000),
          await insertCreated(store, { runAt: T0 - 60_000 }),
        ];
        assert.deepEqual(
          kept.map((job) => job.finishedAt),
          [T0 + 1000, T0 + 1000, T0 + 1000, null, null, null],
        );
        clock.advance(3_600_000);
        // Now is T0 + 3_601_000: the kept jobs finished exactly an hour ago, the old ones a second before.
        assert.equal(await store.jobDeleteFinishedMany({ olderThanMs: 3_600_000, limit: 100 }), 3);
        for (const job of old) assert.equal(await store.jobGet({ id: job.id }), undefined, `${job.status} job deleted`);
        await assertUnchanged(store, kept);
        assert.equal(await store.jobDeleteFinishedMany({ olderThanMs: 3_600_000, limit: 100 }), 0);
        assert.deepEqual(ids(await allJobs(store)), ids(kept).reverse());
      },
    );

    suite.case("deletes at most limit per call; calling again deletes the rest", async ({ store, clock }) => {
      for (let i = 0; i < 5; i++) await makeFinished(store, "succeeded");
      const pending = await insertCreated(store, { runAt: T0 + 60_000 });
      clock.advance(1000);
      const counts: number[] = [];
      for (let i = 0; i < 4; i++) counts.push(await store.jobDeleteFinishedMany({ olderThanMs: 0, limit: 2 }));
      assert.deepEqual(counts, [2, 2, 1, 0]);
      assert.deepEqual(ids(await allJobs(store)), [pending.id]);
    });

    suite.case("a chain whose jobs are all deleted forgets its spawn count", async ({ store, clock }) => {
      const chainA = { originalRequestId: "chain-a", spawnCap: 2 };
      await makeFinished(store, "succeeded", chainA);
      await makeCancelled(store, chainA);
      assert.equal((await store.jobInsert(jobParams(chainA))).kind, "spawn_cap_exceeded");
      // chain-b keeps one job, so it keeps counting.
      const chainB = { originalRequestId: "chain-b", spawnCap: 2 };
      await makeFinished(store, "dead", chainB);
      await insertCreated(store, { ...chainB, runAt: T0 + 60_000 });
      clock.advance(1000);
      assert.equal(await store.jobDeleteFinishedMany({ olderThanMs: 0, limit: 100 }), 3);
      await insertCreated(store, { ...chainA, runAt: T0 + 60_000 });
      await insertCreated(store, { ...chainA, runAt: T0 + 60_000 });
      assert.equal((await store.jobInsert(jobParams(chainA))).kind, "spawn_cap_exceeded", "counting started from zero");
      assert.equal(
        (await store.jobInsert(jobParams(chainB))).kind,
        "spawn_cap_exceeded",
        "a chain with jobs left keeps its count",
      );
    });

    suite.case(
      "a cancelled chain is remembered after all its jobs are deleted: new inserts are created cancelled",
      async ({ store, clock }) => {
        const job = await insertCreated(store, { originalRequestId: "chain-a", runAt: T0 + 60_000 });
        assert.equal((await store.chainCancel({ originalRequestId: "chain-a", actor: "admin" })).length, 1);
        clock.advance(1000);
        assert.equal(await store.jobDeleteFinishedMany({ olderThanMs: 0, limit: 100 }), 1);
        assert.equal(await store.jobGet({ id: job.id }), undefined);
        const outcome = await store.jobInsert(jobParams({ originalRequestId: "chain-a", runAt: T0 + 60_000 }));
        assert.equal(outcome.kind, "created");
        const created = (outcome as { job: JobRow }).job;
        assert.equal(created.status, "cancelled");
        assert.equal(created.finishedAt, T0 + 1000);
        assert.equal(created.result?.terminal_reason, "cancelled-by-chain");
        assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
      },
    );

    suite.case("an empty store deletes nothing", async ({ store, clock }) => {
      clock.advance(1_000_000);
      assert.equal(await store.jobDeleteFinishedMany({ olderThanMs: 0, limit: 100 }), 0);
    });
  });

  describe("attemptBuckets", () => {
    suite.case(
      "counts finished attempts by outcome per bucket of whole minutes; retention of jobs leaves the counts, attemptCountDeleteMany forgets them",
      async ({ store, clock }) => {
        await makeFinished(store, "succeeded");
        await makeRetrying(store, {}, T0 + 600_000);
        clock.advance(90_000);
        await makeFinished(store, "dead");
        await makeFinished(store, "succeeded");
        clock.advance(60_000);
        const zero = { succeeded: 0, retrying: 0, dead: 0, cancelled: 0 };
        assert.deepEqual(await store.attemptBuckets({ since: T0, bucketMs: 60_000 }), [
          { ...zero, start: T0, succeeded: 1, retrying: 1 },
          { ...zero, start: T0 + 60_000, succeeded: 1, dead: 1 },
          { ...zero, start: T0 + 120_000 },
        ]);
        assert.deepEqual(await store.attemptBuckets({ since: T0, bucketMs: 120_000 }), [
          { ...zero, start: T0, succeeded: 2, retrying: 1, dead: 1 },
          { ...zero, start: T0 + 120_000 },
        ]);
        assert.deepEqual(await store.attemptBuckets({ since: T0 + 60_000, bucketMs: 60_000 }), [
          { ...zero, start: T0 + 60_000, succeeded: 1, dead: 1 },
          { ...zero, start: T0 + 120_000 },
        ]);

        assert.equal(await store.jobDeleteFinishedMany({ olderThanMs: 0, limit: 100 }), 3, "every finished job");
        assert.deepEqual((await store.attemptBuckets({ since: T0, bucketMs: 180_000 }))[0], {
          ...zero,
          start: T0,
          succeeded: 2,
          retrying: 1,
          dead: 1,
        });

        // Now is T0 + 150_000: the first minute's counts are more than 90 s old, the second minute's are not.
        assert.ok((await store.attemptCountDeleteMany({ olderThanMs: 90_000 })) >= 2, "the first minute's counts");
        assert.deepEqual(await store.attemptBuckets({ since: T0, bucketMs: 60_000 }), [
          { ...zero, start: T0 },
          { ...zero, start: T0 + 60_000, succeeded: 1, dead: 1 },
          { ...zero, start: T0 + 120_000 },
        ]);
      },
    );

    suite.case("refuses buckets that are not whole minutes with a RangeError", async ({ store }) => {
      await assert.rejects(store.attemptBuckets({ since: T0 + 1000, bucketMs: 60_000 }), RangeError);
      await assert.rejects(store.attemptBuckets({ since: T0, bucketMs: 30_000 }), RangeError);
      await assert.rejects(store.attemptBuckets({ since: T0, bucketMs: 0 }), RangeError);
    });
  });

  describe("jobStats", () => {
    suite.case("counts jobs by status, zero for absent statuses", async ({ store }) => {
      assert.deepEqual(await store.jobStats(), {
        byStatus: statusCounts({}),
        byOperation: [],
        oldestDueRunAt: null,
        pausedDue: [],
      });
      await makeFinished(store, "succeeded");
      await makeFinished(store, "succeeded");
      await makeRunning(store);
      await makeCancelled(store);
      await insertCreated(store, { runAt: T0 + 60_000 });
      assert.deepEqual(
        (await store.jobStats()).byStatus,
        statusCounts({ succeeded: 2, running: 1, cancelled: 1, pending: 1 }),
      );
      await makeFinished(store, "dead");
      await makeRetrying(store, {}, T0 + 60_000);
      await insertCreated(store, { runAt: T0 + 60_000 });
      assert.deepEqual(
        (await store.jobStats()).byStatus,
        statusCounts({ pending: 2, running: 1, retrying: 1, succeeded: 2, dead: 1, cancelled: 1 }),
      );
    });

    suite.case(
      "counts by operation and status, sorted; byOperation: false leaves them out and counts the same by status",
      async ({ store }) => {
        await makeFinished(store, "succeeded", { operationId: "sendWelcomeEmail" });
        await makeRunning(store, { operationId: "buildReport" });
        await insertCreated(store, { operationId: "sendWelcomeEmail", runAt: T0 + 60_000 });
        await insertCreated(store, { operationId: "sendWelcomeEmail", runAt: T0 + 60_000 });
        const full = await store.jobStats();
        assert.deepEqual(full.byOperation, [
          { operationId: "buildReport", status: "running", count: 1 },
          { operationId: "sendWelcomeEmail", status: "pending", count: 2 },
          { operationId: "sendWelcomeEmail", status: "succeeded", count: 1 },
        ]);
        const light = await store.jobStats({ byOperation: false });
        assert.deepEqual(light, { ...full, byOperation: [] });
        assert.deepEqual(light.byStatus, statusCounts({ pending: 2, running: 1, succeeded: 1 }));
      },
    );

    suite.case(
      "oldestDueRunAt is the earliest runAt of claimable jobs due now, null when none is due",
      async ({ store, clock }) => {
        await insertCreated(store, { runAt: T0 + 5000 });
        assert.equal((await store.jobStats()).oldestDueRunAt, null, "future jobs are not due");
        await makeRunning(store, { runAt: T0 - 1000 });
        await makeFinished(store, "succeeded", { runAt: T0 - 1500 });
        await makeCancelled(store, { runAt: T0 - 2000 });
        assert.equal((await store.jobStats()).oldestDueRunAt, null, "running and terminal jobs are not due");
        await insertCreated(store, { runAt: T0 });
        assert.equal((await store.jobStats()).oldestDueRunAt, T0, "a job due exactly now is due");
        const retrying = await makeRetrying(store, {}, T0 - 300);
        const pending = await insertCreated(store, { runAt: T0 - 100 });
        assert.equal((await store.jobStats()).oldestDueRunAt, T0 - 300);
        clock.advance(10_000);
        assert.equal((await store.jobStats()).oldestDueRunAt, T0 - 300);
        await store.jobCancel({ id: retrying.id, actor: "admin" });
        assert.equal((await store.jobStats()).oldestDueRunAt, T0 - 100);
        await store.jobCancel({ id: pending.id, actor: "admin" });
        assert.equal((await store.jobStats()).oldestDueRunAt, T0);
      },
    );

    suite.case(
      "oldestDueRunAt leaves out the jobs a paused operation or key holds; pausedDue counts those due, by operation",
      async ({ store }) => {
        await insertCreated(store, { operationId: "buildReport", runAt: T0 - 5000 });
        await insertCreated(store, { operationId: "buildReport", runAt: T0 - 4000 });
        await insertCreated(store, { operationId: "buildReport", runAt: T0 + 60_000 });
        await insertCreated(store, { operationId: "sendWelcomeEmail", concurrencyKey: "tenant-1", runAt: T0 - 3000 });
        await insertCreated(store, { operationId: "sendWelcomeEmail", runAt: T0 - 1000 });
        const before = await store.jobStats();
        assert.equal(before.oldestDueRunAt, T0 - 5000);
        assert.deepEqual(before.pausedDue, [], "nothing is paused");

        await store.operationPause({ operationId: "buildReport", actor: "alice" });
        let stats = await store.jobStats({ byOperation: false });
        assert.equal(stats.oldestDueRunAt, T0 - 3000, "the paused operation's jobs are not claimable");
        assert.deepEqual(
          stats.pausedDue,
          [{ operationId: "buildReport", count: 2 }],
          "the job due later is not counted",
        );

        await store.concurrencyKeyPause({ key: "tenant-1", actor: "alice" });
        stats = await store.jobStats();
        assert.equal(stats.oldestDueRunAt, T0 - 1000, "a paused key's job is not claimable either");
        assert.deepEqual(stats.pausedDue, [
          { operationId: "buildReport", count: 2 },
          { operationId: "sendWelcomeEmail", count: 1 },
        ]);

        await store.operationResume({ operationId: "buildReport" });
        await store.concurrencyKeyResume({ key: "tenant-1" });
        stats = await store.jobStats();
        assert.equal(stats.oldestDueRunAt, T0 - 5000);
        assert.deepEqual(stats.pausedDue, []);
      },
    );
  });
}

/**
 * The writes and reads of leases, shutdown, the dispatcher's timer, cron, retention and metrics:
 * jobHeartbeatMany, jobListExpired, jobRequeueMany, jobNextRunAt, cronTickInsert, cronTickDeleteMany,
 * jobDeleteFinishedMany and jobStats (CONTRACT §7–§9).
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import { JOB_STATUSES, type JobStatus } from "../../../src/job/schemas.js";
import type { JobInsertParams, JobRow, Store } from "../../../src/store/store.js";
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
  type Suite,
} from "./harness.js";

const ids = (jobs: JobRow[]): string[] => jobs.map((job) => job.id);

/** A job that is `running` with attempt 2, so attempt 1 is stale; top priority (through the harness helpers). */
async function makeRunningSecondAttempt(store: Store, overrides: Partial<JobInsertParams> = {}): Promise<JobRow> {
  const first = await makeRunning(store, overrides);
  assert.deepEqual(
    await store.jobCompleteMany({ outcomes: [{ id: first.id, attempt: 1, status: "retrying", runAt: T0, result: UNAVAILABLE }] }),
    [true],
  );
  const second = await claimNext(store, first.id);
  assert.equal(second.attempt, 2);
  return second;
}

/** A pending job cancelled by an admin (a terminal `cancelled` job with finishedAt = now). */
async function makeCancelled(store: Store, overrides: Partial<JobInsertParams> = {}): Promise<JobRow> {
  const job = await insertCreated(store, { runAt: T0 + 3_600_000, ...overrides });
  assert.equal((await store.jobCancel({ id: job.id })).kind, "cancelled");
  return mustGet(store, job.id);
}

/** Parameters of a cron tick's job, as the scheduler builds them (CONTRACT §8). */
function cronJob(name: string, tickAt: number, overrides: Partial<JobInsertParams> = {}): JobInsertParams {
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

/** Counts of every status, zero for the absent ones. */
function statusCounts(counts: Partial<Record<JobStatus, number>>): Record<JobStatus, number> {
  return Object.fromEntries(JOB_STATUSES.map((status) => [status, counts[status] ?? 0])) as Record<JobStatus, number>;
}

/** Asserts that every job of `before` is still in the store exactly as it was. */
async function assertUnchanged(store: Store, before: JobRow[], message?: string): Promise<void> {
  for (const job of before) assert.deepEqual(await mustGet(store, job.id), job, message ?? `job ${job.id} is untouched`);
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
      await store.jobHeartbeatMany({ jobs: [{ id: a.id, attempt: 1 }, { id: b.id, attempt: 2 }] });
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
    async function leases(store: Store, clock: { advance(ms: number): void }): Promise<Record<"a" | "b" | "c", JobRow>> {
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

    suite.case("lists running jobs whose heartbeat is older than heartbeatBefore, oldest heartbeat first", async ({ store, clock }) => {
      const { a, b, c } = await leases(store, clock);
      assert.deepEqual([a.heartbeatAt, c.heartbeatAt, b.heartbeatAt], [T0, T0 + 200, T0 + 300]);
      assert.deepEqual(await store.jobListExpired({ heartbeatBefore: T0 + 301, limit: 10 }), [a, c, b]);
      assert.deepEqual(ids(await store.jobListExpired({ heartbeatBefore: T0 + 300, limit: 10 })), ids([a, c]), "strictly older");
      assert.deepEqual(ids(await store.jobListExpired({ heartbeatBefore: T0 + 1, limit: 10 })), ids([a]));
      assert.deepEqual(await store.jobListExpired({ heartbeatBefore: T0, limit: 10 }), []);
    });

    suite.case("never lists pending, retrying or finished jobs", async ({ store, clock }) => {
      await leases(store, clock);
      clock.advance(3_600_000);
      const listed = await store.jobListExpired({ heartbeatBefore: T0 + 3_600_000, limit: 100 });
      assert.deepEqual(listed.map((job) => job.status), ["running", "running", "running"]);
      const statuses = new Set((await allJobs(store)).map((job) => job.status));
      assert.deepEqual([...statuses].sort(), [...JOB_STATUSES].sort(), "the store has a job in every status");
    });

    suite.case("lists at most limit, keeping the oldest heartbeats", async ({ store, clock }) => {
      const { a, c } = await leases(store, clock);
      assert.deepEqual(ids(await store.jobListExpired({ heartbeatBefore: T0 + 1000, limit: 2 })), ids([a, c]));
      assert.deepEqual(ids(await store.jobListExpired({ heartbeatBefore: T0 + 1000, limit: 1 })), ids([a]));
    });

    suite.case("an empty store has no expired leases", async ({ store }) => {
      assert.deepEqual(await store.jobListExpired({ heartbeatBefore: T0 + 1_000_000, limit: 10 }), []);
    });
  });

  describe("jobRequeueMany", () => {
    suite.case("puts a running attempt back to retrying at runAt with the error body, clearing the heartbeat and keeping the attempt", async ({ store, clock }) => {
      const running = await makeRunning(store, { maxAttempts: 5, dedupeKey: "k" });
      clock.advance(50);
      assert.equal(await store.jobRequeueMany({ jobs: [{ id: running.id, attempt: 1 }], runAt: T0 + 1000, errorBody: "shutdown" }), 1);
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
    });

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
          runAt: T0,
          errorBody: "shutdown",
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

    suite.case("a stale attempt or a job that is not running is untouched and not counted", async ({ store, clock }) => {
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
          runAt: T0,
          errorBody: "shutdown",
        }),
        1,
      );
      assert.equal((await mustGet(store, live.id)).status, "retrying");
      await assertUnchanged(store, [stale, succeeded, dead, cancelled, retrying, pending]);
    });

    suite.case("a job of a cancelled chain ends cancelled-by-chain instead of going back to the queue", async ({ store, clock }) => {
      const doomed = await makeRunning(store, { originalRequestId: "chain-a" });
      const survivor = await makeRunning(store, { originalRequestId: "chain-b" });
      assert.deepEqual(await store.chainCancel({ originalRequestId: "chain-a" }), [], "a running job is not cancelled");
      clock.advance(30);
      assert.equal(
        await store.jobRequeueMany({
          jobs: [
            { id: doomed.id, attempt: 1 },
            { id: survivor.id, attempt: 1 },
          ],
          runAt: T0 + 1000,
          errorBody: "shutdown",
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
      assert.deepEqual(ids(await store.jobClaimMany({ limit: 10 })), [survivor.id], "the cancelled job never runs again");
    });

    suite.case("a job whose dedupe key was taken meanwhile by a newer pending job is requeued without the key", async ({ store }) => {
      const old = await makeRunning(store, { dedupeKey: "k" });
      const newer = await insertCreated(store, { dedupeKey: "k", runAt: T0 + 60_000 });
      assert.equal(await store.jobRequeueMany({ jobs: [{ id: old.id, attempt: 1 }], runAt: T0 + 1000, errorBody: "shutdown" }), 1);
      const requeued = await mustGet(store, old.id);
      assert.equal(requeued.status, "retrying");
      assert.equal(requeued.dedupeKey, null);
      assert.equal(requeued.runAt, T0 + 1000);
      assert.deepEqual(await mustGet(store, newer.id), newer, "the newer job keeps the key");
      const upsert = await store.jobInsert(jobParams({ dedupeKey: "k" }));
      assert.equal(upsert.kind, "deduplicated");
      assert.equal((upsert as { job: JobRow }).job.id, newer.id);
    });

    suite.case("an empty requeue batch returns 0 and changes nothing", async ({ store }) => {
      await makeRunning(store);
      const before = await allJobs(store);
      assert.equal(await store.jobRequeueMany({ jobs: [], runAt: T0, errorBody: "shutdown" }), 0);
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
      await store.jobCancel({ id: soon.id });
      assert.equal(await store.jobNextRunAt(), T0 + 3000);
      await store.jobCancel({ id: retrying.id });
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
    suite.case("the first call for a tick inserts its job; a second call answers already_enqueued and inserts nothing", async ({ store }) => {
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
      assert.deepEqual(await store.cronTickInsert({ name: "nightly", tickAt: T0, job: again }), { kind: "already_enqueued" });
      assert.deepEqual(await allJobs(store), before, "nothing inserted, nothing refreshed");
      assert.equal(await store.jobGet({ id: again.id }), undefined);
    });

    suite.case("the tick is remembered after its job has run", async ({ store }) => {
      const first = await store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) });
      const job = (first as { job: JobRow }).job;
      await store.jobClaimMany({ limit: 10 });
      await store.jobCompleteMany({
        outcomes: [{ id: job.id, attempt: 1, status: "succeeded", result: { status_code: 200, error_body: null, terminal_reason: null } }],
      });
      assert.deepEqual(
        await store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) }),
        { kind: "already_enqueued" },
      );
      assert.equal((await allJobs(store)).length, 1);
    });

    suite.case("another tick or another name inserts again; a held dedupe key deduplicates", async ({ store }) => {
      const a = await store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) });
      assert.equal(a.kind, "created");
      const first = (a as { job: JobRow }).job;

      // The first tick's job is still pending and holds `cron:nightly`: the next tick refreshes it.
      const b = await store.cronTickInsert({ name: "nightly", tickAt: T0 + 60_000, job: cronJob("nightly", T0 + 60_000) });
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
        Array.from({ length: 4 }, () => store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0, { dedupeKey: null }) })),
      );
      assert.deepEqual(
        outcomes.map((outcome) => outcome.kind).sort(),
        ["already_enqueued", "already_enqueued", "already_enqueued", "created"],
      );
      const jobs = await allJobs(store);
      assert.equal(jobs.length, 1);
      const created = outcomes.find((outcome) => outcome.kind === "created") as { job: JobRow };
      assert.equal(jobs[0]?.id, created.job.id);
    });

    suite.case("concurrent calls for one tick and the group-committed inserts beside them stay consistent", async ({ store }) => {
      const [tick1, plain, tick2] = await Promise.all([
        store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) }),
        store.jobInsert(jobParams()),
        store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) }),
      ]);
      assert.deepEqual([tick1.kind, tick2.kind].sort(), ["already_enqueued", "created"]);
      assert.equal(plain.kind, "created");
      assert.equal((await allJobs(store)).length, 2);
    });
  });

  describe("cronTickDeleteMany", () => {
    suite.case("forgets ticks before `before`, keeps later ones, and returns how many", async ({ store }) => {
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
      assert.equal(await store.cronTickDeleteMany({ before: T0 }), 0);
      assert.equal(await store.cronTickDeleteMany({ before: T0 + 1000 }), 2);
      assert.equal(await store.cronTickDeleteMany({ before: T0 + 1000 }), 0, "already forgotten");
      // A forgotten tick can be inserted again; a remembered one cannot.
      assert.equal((await tick("nightly", T0)).kind, "created");
      assert.equal((await tick("hourly", T0 + 500)).kind, "created");
      assert.deepEqual(await tick("nightly", T0 + 1000), { kind: "already_enqueued" });
      assert.deepEqual(await tick("nightly", T0 + 2000), { kind: "already_enqueued" });
      assert.equal(await store.cronTickDeleteMany({ before: T0 + 1_000_000 }), 4);
    });

    suite.case("forgetting ticks deletes no job", async ({ store }) => {
      await store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) });
      const before = await allJobs(store);
      assert.equal(await store.cronTickDeleteMany({ before: T0 + 1 }), 1);
      assert.deepEqual(await allJobs(store), before);
    });

    suite.case("an empty store forgets nothing", async ({ store }) => {
      assert.equal(await store.cronTickDeleteMany({ before: T0 + 1_000_000 }), 0);
    });
  });

  describe("jobDeleteFinishedMany", () => {
    suite.case("deletes only succeeded, dead and cancelled jobs finished before finishedBefore", async ({ store, clock }) => {
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
      assert.deepEqual(kept.map((job) => job.finishedAt), [T0 + 1000, T0 + 1000, T0 + 1000, null, null, null]);
      clock.advance(3_600_000);
      assert.equal(await store.jobDeleteFinishedMany({ finishedBefore: T0 + 1000, limit: 100 }), 3);
      for (const job of old) assert.equal(await store.jobGet({ id: job.id }), undefined, `${job.status} job deleted`);
      await assertUnchanged(store, kept);
      assert.equal(await store.jobDeleteFinishedMany({ finishedBefore: T0 + 1000, limit: 100 }), 0);
      assert.deepEqual(ids(await allJobs(store)), ids(kept).reverse());
    });

    suite.case("deletes at most limit per call; calling again deletes the rest", async ({ store, clock }) => {
      for (let i = 0; i < 5; i++) await makeFinished(store, "succeeded");
      const pending = await insertCreated(store, { runAt: T0 + 60_000 });
      clock.advance(1000);
      const counts: number[] = [];
      for (let i = 0; i < 4; i++) counts.push(await store.jobDeleteFinishedMany({ finishedBefore: T0 + 1000, limit: 2 }));
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
      assert.equal(await store.jobDeleteFinishedMany({ finishedBefore: T0 + 1000, limit: 100 }), 3);
      await insertCreated(store, { ...chainA, runAt: T0 + 60_000 });
      await insertCreated(store, { ...chainA, runAt: T0 + 60_000 });
      assert.equal((await store.jobInsert(jobParams(chainA))).kind, "spawn_cap_exceeded", "counting started from zero");
      assert.equal((await store.jobInsert(jobParams(chainB))).kind, "spawn_cap_exceeded", "a chain with jobs left keeps its count");
    });

    suite.case("a cancelled chain is remembered after all its jobs are deleted: new inserts are created cancelled", async ({ store, clock }) => {
      const job = await insertCreated(store, { originalRequestId: "chain-a", runAt: T0 + 60_000 });
      assert.equal((await store.chainCancel({ originalRequestId: "chain-a" })).length, 1);
      clock.advance(1000);
      assert.equal(await store.jobDeleteFinishedMany({ finishedBefore: T0 + 1000, limit: 100 }), 1);
      assert.equal(await store.jobGet({ id: job.id }), undefined);
      const outcome = await store.jobInsert(jobParams({ originalRequestId: "chain-a", runAt: T0 + 60_000 }));
      assert.equal(outcome.kind, "created");
      const created = (outcome as { job: JobRow }).job;
      assert.equal(created.status, "cancelled");
      assert.equal(created.finishedAt, T0 + 1000);
      assert.equal(created.result?.terminal_reason, "cancelled-by-chain");
      assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
    });

    suite.case("an empty store deletes nothing", async ({ store }) => {
      assert.equal(await store.jobDeleteFinishedMany({ finishedBefore: T0 + 1_000_000, limit: 100 }), 0);
    });
  });

  describe("attemptBuckets", () => {
    suite.case("counts finished attempts by outcome per bucket of whole minutes; retention of jobs leaves the counts, attemptCountDeleteMany forgets them", async ({ store, clock }) => {
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

      assert.equal(await store.jobDeleteFinishedMany({ finishedBefore: T0 + 600_000, limit: 100 }), 3);
      assert.deepEqual((await store.attemptBuckets({ since: T0, bucketMs: 180_000 }))[0], { ...zero, start: T0, succeeded: 2, retrying: 1, dead: 1 });

      assert.ok((await store.attemptCountDeleteMany({ before: T0 + 60_000 })) >= 2, "the first minute's counts");
      assert.deepEqual(await store.attemptBuckets({ since: T0, bucketMs: 60_000 }), [
        { ...zero, start: T0 },
        { ...zero, start: T0 + 60_000, succeeded: 1, dead: 1 },
        { ...zero, start: T0 + 120_000 },
      ]);
    });

    suite.case("refuses buckets that are not whole minutes with a RangeError", async ({ store }) => {
      await assert.rejects(store.attemptBuckets({ since: T0 + 1000, bucketMs: 60_000 }), RangeError);
      await assert.rejects(store.attemptBuckets({ since: T0, bucketMs: 30_000 }), RangeError);
      await assert.rejects(store.attemptBuckets({ since: T0, bucketMs: 0 }), RangeError);
    });
  });

  describe("jobStats", () => {
    suite.case("counts jobs by status, zero for absent statuses", async ({ store }) => {
      assert.deepEqual(await store.jobStats(), { byStatus: statusCounts({}), byOperation: [], oldestDueRunAt: null });
      await makeFinished(store, "succeeded");
      await makeFinished(store, "succeeded");
      await makeRunning(store);
      await makeCancelled(store);
      await insertCreated(store, { runAt: T0 + 60_000 });
      assert.deepEqual((await store.jobStats()).byStatus, statusCounts({ succeeded: 2, running: 1, cancelled: 1, pending: 1 }));
      await makeFinished(store, "dead");
      await makeRetrying(store, {}, T0 + 60_000);
      await insertCreated(store, { runAt: T0 + 60_000 });
      assert.deepEqual(
        (await store.jobStats()).byStatus,
        statusCounts({ pending: 2, running: 1, retrying: 1, succeeded: 2, dead: 1, cancelled: 1 }),
      );
    });

    suite.case("counts by operation and status, sorted; byOperation: false leaves them out and counts the same by status", async ({ store }) => {
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
    });

    suite.case("oldestDueRunAt is the earliest runAt of claimable jobs due now, null when none is due", async ({ store, clock }) => {
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
      await store.jobCancel({ id: retrying.id });
      assert.equal((await store.jobStats()).oldestDueRunAt, T0 - 100);
      await store.jobCancel({ id: pending.id });
      assert.equal((await store.jobStats()).oldestDueRunAt, T0);
    });
  });
}

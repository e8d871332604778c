/**
 * JobReadStore (src/store/roles/job-reads.ts): jobGet, jobList (filters, newest first, cursor paging), the attempts of
 * several jobs at once (jobAttemptListMany), the metrics' reads (jobStats, attemptBuckets) and who made each
 * administrative change (adminActionList).
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import { JOB_STATUSES, type JobStatus } from "../../../src/job/schemas.js";
import type { Store } from "../../../src/store/store.js";
import type { JobRow } from "../../../src/job/job.js";
import {
  allJobs,
  finishNext as finish,
  insertCreated,
  makeCancelled,
  makeFinished,
  makeRetrying,
  makeRunning,
  T0,
  type Suite,
} from "./harness.js";

const ids = (jobs: JobRow[]): string[] => jobs.map((job) => job.id);

/** Builds a small mixed population; returns it in creation order. */
async function population(store: Store): Promise<JobRow[]> {
  const jobs: JobRow[] = [];
  jobs.push(
    await insertCreated(store, { operationId: "opA", originalRequestId: "r1", userId: "u1", runAt: T0 + 60_000 }),
  );
  jobs.push(
    await insertCreated(store, {
      operationId: "opB",
      originalRequestId: "r1",
      userId: "u2",
      parentJobId: jobs[0]?.id ?? null,
      runAt: T0 + 60_000,
    }),
  );
  jobs.push(await makeRunning(store, { operationId: "opA", originalRequestId: "r2", userId: "u1" }));
  jobs.push(
    await makeFinished(store, "succeeded", {
      operationId: "opB",
      originalRequestId: "r2",
      userId: "u2",
      parentJobId: jobs[0]?.id ?? null,
    }),
  );
  jobs.push(await makeFinished(store, "dead", { operationId: "opA", originalRequestId: "r1", userId: "u2" }));
  jobs.push(await makeRetrying(store, { operationId: "opA", originalRequestId: "r3", userId: "u1" }, T0 + 60_000));
  const cancelled = await insertCreated(store, {
    operationId: "opC",
    originalRequestId: "r3",
    userId: "u3",
    runAt: T0 + 60_000,
  });
  await store.jobCancel({ id: cancelled.id, actor: "admin", role: "admin" });
  jobs.push(cancelled);
  return jobs;
}

/** Counts of every status, zero for the absent ones. */
function statusCounts(counts: Partial<Record<JobStatus, number>>): Record<JobStatus, number> {
  return Object.fromEntries(JOB_STATUSES.map((status) => [status, counts[status] ?? 0])) as Record<JobStatus, number>;
}

/** Registers the cases of the job reads. */
export function jobReadCases(suite: Suite): void {
  describe("JobReadStore: jobs, attempts, stats and the audit trail", () => {
    describe("jobGet", () => {
      suite.case("returns undefined from jobGet for an unknown id", async ({ store }) => {
        assert.equal(await store.jobGet({ id: "no-such-job-id" }), undefined);
      });
    });

    describe("jobList", () => {
      suite.case("lists jobs newest first", async ({ store }) => {
        const jobs = await population(store);
        const listed = await allJobs(store);
        assert.deepEqual(ids(listed), ids(jobs).reverse());
        for (let i = 1; i < listed.length; i++) assert.ok((listed[i - 1] as JobRow).seq > (listed[i] as JobRow).seq);
      });

      suite.case("an empty store lists nothing", async ({ store }) => {
        assert.deepEqual(await allJobs(store), []);
      });

      suite.case("filters by each field, and by several at once", async ({ store }) => {
        const jobs = await population(store);
        const expect = async (filter: Parameters<Store["jobList"]>[0], keep: (job: JobRow) => boolean) => {
          const current = await allJobs(store);
          const expected = ids(current.filter(keep));
          assert.ok(expected.length > 0, `the population has jobs for ${JSON.stringify(filter)}`);
          assert.ok(expected.length < current.length, `the population has jobs outside ${JSON.stringify(filter)}`);
          assert.deepEqual(ids(await store.jobList(filter)), expected, JSON.stringify(filter));
        };
        const limit = 1000;
        await expect({ limit, operationId: "opA" }, (job) => job.operationId === "opA");
        await expect({ limit, originalRequestId: "r1" }, (job) => job.originalRequestId === "r1");
        await expect({ limit, userId: "u2" }, (job) => job.userId === "u2");
        await expect({ limit, parentJobId: jobs[0]?.id }, (job) => job.parentJobId === jobs[0]?.id);
        await expect({ limit, statuses: ["pending"] }, (job) => job.status === "pending");
        await expect({ limit, statuses: ["running"] }, (job) => job.status === "running");
        await expect({ limit, statuses: ["cancelled"] }, (job) => job.status === "cancelled");
        await expect(
          { limit, statuses: ["succeeded", "dead"] },
          (job) => job.status === "succeeded" || job.status === "dead",
        );
        await expect({ limit, statuses: ["pending", "retrying", "running"] }, (job) =>
          ["pending", "retrying", "running"].includes(job.status),
        );
        await expect(
          { limit, operationId: "opA", userId: "u1", statuses: ["running", "retrying"] },
          (job) => job.operationId === "opA" && job.userId === "u1" && ["running", "retrying"].includes(job.status),
        );
        assert.deepEqual(await store.jobList({ limit, operationId: "opA", originalRequestId: "r2", userId: "u2" }), []);
        assert.deepEqual(await store.jobList({ limit, operationId: "nope" }), []);
      });

      suite.case(
        "filters by dedupe key, whatever the job's status, and together with other filters",
        async ({ store }) => {
          // A finished job keeps its key, so the key's history (dead, then a new waiting holder) lists newest first.
          const dead = await makeFinished(store, "dead", { dedupeKey: "welcome:42", userId: "u1" });
          const other = await insertCreated(store, { dedupeKey: "welcome:43", userId: "u1" });
          const waiting = await insertCreated(store, { dedupeKey: "welcome:42", userId: "u2" });
          await insertCreated(store, { dedupeKey: null, userId: "u1" });
          assert.deepEqual(ids(await store.jobList({ limit: 10, dedupeKey: "welcome:42" })), [waiting.id, dead.id]);
          assert.deepEqual(ids(await store.jobList({ limit: 10, dedupeKey: "welcome:43" })), [other.id]);
          assert.deepEqual(ids(await store.jobList({ limit: 10, dedupeKey: "welcome:42", statuses: ["dead"] })), [
            dead.id,
          ]);
          assert.deepEqual(ids(await store.jobList({ limit: 10, dedupeKey: "welcome:42", userId: "u2" })), [
            waiting.id,
          ]);
          assert.deepEqual(ids(await store.jobList({ limit: 1, dedupeKey: "welcome:42" })), [waiting.id]);
          assert.deepEqual(ids(await store.jobList({ limit: 10, dedupeKey: "welcome:42", beforeSeq: waiting.seq })), [
            dead.id,
          ]);
          assert.deepEqual(await store.jobList({ limit: 10, dedupeKey: "welcome" }), []);
          assert.deepEqual(await store.jobList({ limit: 10, dedupeKey: "" }), []);
        },
      );

      suite.case("respects the limit, keeping the newest", async ({ store }) => {
        const jobs = await population(store);
        assert.deepEqual(ids(await store.jobList({ limit: 3 })), ids(jobs).reverse().slice(0, 3));
        assert.deepEqual(ids(await store.jobList({ limit: 1 })), [jobs[jobs.length - 1]?.id]);
      });

      suite.case("pages with beforeSeq without gaps or repeats", async ({ store }) => {
        const created: JobRow[] = [];
        for (let i = 0; i < 7; i++) created.push(await insertCreated(store, { userId: i % 2 === 0 ? "even" : "odd" }));
        const pages: string[][] = [];
        let beforeSeq: number | undefined;
        for (;;) {
          const page = await store.jobList({ limit: 3, beforeSeq });
          if (page.length === 0) break;
          pages.push(ids(page));
          beforeSeq = page[page.length - 1]?.seq;
        }
        assert.deepEqual(
          pages.map((page) => page.length),
          [3, 3, 1],
        );
        assert.deepEqual(pages.flat(), ids(created).reverse());
        // The cursor combines with filters.
        const even = created.filter((job) => job.userId === "even").reverse();
        const first = await store.jobList({ limit: 2, userId: "even" });
        assert.deepEqual(ids(first), ids(even.slice(0, 2)));
        const second = await store.jobList({ limit: 2, userId: "even", beforeSeq: first[1]?.seq });
        assert.deepEqual(ids(second), ids(even.slice(2, 4)));
      });
    });

    describe("jobAttemptListMany", () => {
      suite.case("the attempts of several jobs are read at once, each job's oldest first", async ({ store }) => {
        const one = await insertCreated(store);
        const two = await insertCreated(store);
        await finish(store, one.id);
        await finish(store, two.id, "dead");
        const attempts = await store.jobAttemptListMany({ ids: [one.id, two.id, "missing1"] });
        assert.deepEqual([...attempts.keys()], [one.id, two.id, "missing1"]);
        assert.equal(attempts.get(one.id)?.[0]?.outcome, "succeeded");
        assert.equal(attempts.get(two.id)?.[0]?.outcome, "dead");
        assert.deepEqual(attempts.get("missing1"), []);
        assert.equal(await store.chainGet({ originalRequestId: "no-such-chain" }), undefined);
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
          await store.jobCancel({ id: retrying.id, actor: "admin", role: "admin" });
          assert.equal((await store.jobStats()).oldestDueRunAt, T0 - 100);
          await store.jobCancel({ id: pending.id, actor: "admin", role: "admin" });
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

    describe("adminActionList", () => {
      suite.case(
        "records who cancelled, retried, bulk-retried, ran now and cancelled the chain of a job, with which role, and when, oldest first",
        async ({ store, clock }) => {
          const job = await insertCreated(store, { originalRequestId: "chain-audit", runAt: T0 + 60_000 });
          assert.equal((await store.jobRunNow({ id: job.id, actor: "alice", role: "operator" })).kind, "moved");
          clock.advance(10);
          assert.equal((await store.jobCancel({ id: job.id, actor: "bob", role: "admin" })).kind, "cancelled");
          clock.advance(10);
          assert.equal((await store.jobRetry({ id: job.id, actor: "carol", role: "operator" })).kind, "retried");
          clock.advance(10);
          assert.equal(
            (await store.chainCancel({ originalRequestId: "chain-audit", actor: "dave", role: "admin" })).length,
            1,
          );
          clock.advance(10);
          const dead = await makeFinished(store, "dead", { originalRequestId: "chain-dead" });
          assert.deepEqual(
            (
              await store.jobRetryDeadMany({
                filter: { originalRequestId: "chain-dead" },
                limit: 10,
                actor: "erin",
                role: "operator",
              })
            ).map((row) => row.id),
            [dead.id],
          );
          assert.deepEqual(await store.adminActionList({ jobId: job.id }), [
            { at: T0, actor: "alice", role: "operator", action: "run-now" },
            { at: T0 + 10, actor: "bob", role: "admin", action: "cancel" },
            { at: T0 + 20, actor: "carol", role: "operator", action: "retry" },
            { at: T0 + 30, actor: "dave", role: "admin", action: "cancel-chain" },
          ]);
          assert.deepEqual(await store.adminActionList({ jobId: dead.id }), [
            { at: T0 + 40, actor: "erin", role: "operator", action: "retry-dead" },
          ]);
        },
      );

      suite.case("a refused action records nothing", async ({ store }) => {
        const running = await makeRunning(store);
        assert.equal((await store.jobCancel({ id: running.id, actor: "bob", role: "admin" })).kind, "running");
        assert.equal((await store.jobRetry({ id: running.id, actor: "carol", role: "admin" })).kind, "not_retryable");
        assert.deepEqual(await store.adminActionList({ jobId: running.id }), []);
        assert.deepEqual(await store.adminActionList({ jobId: "no-such-job-id" }), []);
      });

      suite.case("retention deletes a job's recorded actions with the job", async ({ store, clock }) => {
        const job = await insertCreated(store, { runAt: T0 + 60_000 });
        await store.jobCancel({ id: job.id, actor: "bob", role: "admin" });
        clock.advance(2000);
        assert.equal(await store.jobDeleteFinishedMany({ olderThanMs: 1000, limit: 10 }), 1);
        assert.deepEqual(await store.adminActionList({ jobId: job.id }), []);
      });
    });
  });
}

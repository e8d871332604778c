/**
 * AdminStore (src/store/roles/admin.ts): the administrative writes (docs/api.md, admin operations): jobCancel
 * (cancelling a running job too: docs/flow-control.md), jobCancelMany (docs/flow-control.md, "Cancelling many jobs"),
 * jobRetry, chainCancel and jobRunNow. Who made each is read by adminActionList, in job-reads.ts.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import type { JobRow } from "../../../src/job/job.js";
import { ABORTED_ATTEMPT } from "../../../src/store/aborted.js";
import {
  allJobs,
  claimNext,
  insertCreated,
  jobParams,
  makeFinished,
  makeRetrying,
  makeRunning,
  mustGet,
  SUCCESS,
  T0,
  UNAVAILABLE,
  type Suite,
} from "./harness.js";

/** Registers the cases of the administrative writes. */
export function adminCases(suite: Suite): void {
  describe("AdminStore: cancels, retries and run-now", () => {
    describe("jobCancel", () => {
      suite.case(
        "cancels a pending job: finishedAt = now, terminal_reason cancelled-by-admin",
        async ({ store, clock }) => {
          const job = await insertCreated(store, { runAt: T0 + 60_000 });
          clock.advance(700);
          const outcome = await store.jobCancel({ id: job.id, actor: "admin", role: "admin" });
          assert.equal(outcome.kind, "cancelled");
          const cancelled = (outcome as { job: JobRow }).job;
          assert.deepEqual(cancelled, {
            ...job,
            status: "cancelled",
            finishedAt: T0 + 700,
            result: { error_body: null, terminal_reason: "cancelled-by-admin" },
          });
          assert.deepEqual(await mustGet(store, job.id), cancelled);
        },
      );

      suite.case(
        "cancels a retrying job, keeping the status_code and error_body of its last attempt",
        async ({ store, clock }) => {
          const retrying = await makeRetrying(store, {}, T0 + 60_000);
          clock.advance(100);
          const outcome = await store.jobCancel({ id: retrying.id, actor: "admin", role: "admin" });
          assert.equal(outcome.kind, "cancelled");
          const cancelled = (outcome as { job: JobRow }).job;
          assert.equal(cancelled.status, "cancelled");
          assert.equal(cancelled.finishedAt, T0 + 100);
          assert.equal(cancelled.attempt, 1);
          assert.deepEqual(cancelled.result, { ...UNAVAILABLE, terminal_reason: "cancelled-by-admin" });
          assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
        },
      );

      suite.case("does not interrupt a running job: outcome running, nothing changes", async ({ store }) => {
        const running = await makeRunning(store);
        const outcome = await store.jobCancel({ id: running.id, actor: "admin", role: "admin" });
        assert.deepEqual(outcome, { kind: "running", job: running });
        assert.deepEqual(await mustGet(store, running.id), running);
      });

      suite.case("refuses terminal jobs with not_cancellable, changing nothing", async ({ store }) => {
        const succeeded = await makeFinished(store, "succeeded");
        const dead = await makeFinished(store, "dead");
        const cancelled = await insertCreated(store);
        await store.jobCancel({ id: cancelled.id, actor: "admin", role: "admin" });
        for (const job of [succeeded, dead, await mustGet(store, cancelled.id)]) {
          const outcome = await store.jobCancel({ id: job.id, actor: "admin", role: "admin" });
          assert.deepEqual(outcome, { kind: "not_cancellable", job });
          assert.deepEqual(await mustGet(store, job.id), job);
        }
      });

      suite.case("cancel answers not_found for an unknown id", async ({ store }) => {
        assert.deepEqual(await store.jobCancel({ id: "no-such-job-id", actor: "admin", role: "admin" }), {
          kind: "not_found",
        });
      });

      suite.case("a cancelled job releases its dedupe key", async ({ store }) => {
        const job = await insertCreated(store, { dedupeKey: "k" });
        await store.jobCancel({ id: job.id, actor: "admin", role: "admin" });
        const next = await insertCreated(store, { dedupeKey: "k" });
        assert.notEqual(next.id, job.id);
      });

      suite.case(
        "jobCancel with abortRunning ends a running job cancelled with its attempt recorded; its late outcome writes nothing",
        async ({ store }) => {
          const running = await makeRunning(store);
          assert.equal(
            (await store.jobCancel({ id: running.id, actor: "frank", role: "admin" })).kind,
            "running",
            "without abortRunning, the contract's 409",
          );
          const outcome = await store.jobCancel({ id: running.id, actor: "frank", role: "admin", abortRunning: true });
          assert.equal(outcome.kind, "cancelled");
          assert.ok(outcome.kind === "cancelled" && outcome.wasRunning);
          const attempts = await store.jobAttemptList({ id: running.id });
          assert.deepEqual(
            attempts.map((attempt) => [attempt.attempt, attempt.outcome, attempt.errorBody]),
            [[1, "cancelled", ABORTED_ATTEMPT]],
          );
          assert.deepEqual(
            await store.jobSetStateIfRunningMany({
              outcomes: [{ id: running.id, attempt: running.attempt, status: "succeeded", result: SUCCESS }],
            }),
            [false],
          );
          const after = await mustGet(store, running.id);
          assert.deepEqual([after.status, after.result?.terminal_reason], ["cancelled", "cancelled-by-admin"]);
        },
      );
    });

    describe("jobCancelMany", () => {
      suite.case(
        "jobCancelMany cancels the matching jobs newest first up to its limit, running ones aborted, each recorded as cancel-many",
        async ({ store, clock }) => {
          const old = await insertCreated(store, { userId: "u1" });
          clock.advance(1000);
          const running = await makeRunning(store, { userId: "u1" });
          const mine = await insertCreated(store, { userId: "u1" });
          const theirs = await insertCreated(store, { userId: "u2" });
          const waitingOnly = await store.jobCancelMany({
            filter: { statuses: ["pending", "retrying"], userId: "u1", createdFrom: T0 + 1000 },
            limit: 10,
            actor: "erin",
            role: "admin",
          });
          assert.deepEqual(
            waitingOnly.map(({ job, wasRunning }) => [job.id, job.status, wasRunning]),
            [[mine.id, "cancelled", false]],
          );
          const withRunning = await store.jobCancelMany({
            filter: { statuses: ["pending", "running"], userId: "u1" },
            limit: 1,
            actor: "erin",
            role: "operator",
          });
          assert.deepEqual(
            withRunning.map(({ job, wasRunning }) => [job.id, wasRunning]),
            [[running.id, true]],
            "newest first, one per limit",
          );
          assert.equal((await mustGet(store, running.id)).result?.terminal_reason, "cancelled-by-admin");
          assert.deepEqual(
            (await store.adminActionList({ jobId: running.id })).map((a) => [a.action, a.actor, a.role]),
            [["cancel-many", "erin", "operator"]],
          );
          assert.equal((await mustGet(store, old.id)).status, "pending");
          assert.equal((await mustGet(store, theirs.id)).status, "pending");
        },
      );
    });

    describe("jobRetry", () => {
      suite.case(
        "re-queues a dead job: pending, attempt 0, result/startedAt/finishedAt null, runAt = now",
        async ({ store, clock }) => {
          const dead = await makeFinished(store, "dead", { runAt: T0 - 5000 });
          clock.advance(3000);
          const outcome = await store.jobRetry({ id: dead.id, actor: "admin", role: "admin" });
          assert.equal(outcome.kind, "retried");
          const retried = (outcome as { job: JobRow }).job;
          assert.deepEqual(retried, {
            ...dead,
            status: "pending",
            attempt: 0,
            result: null,
            startedAt: null,
            finishedAt: null,
            heartbeatAt: null,
            runAt: T0 + 3000,
          });
          assert.deepEqual(await mustGet(store, dead.id), retried);
          const again = await claimNext(store, dead.id);
          assert.equal(again.attempt, 1, "attempt counting starts over");
        },
      );

      suite.case("re-queues a cancelled job", async ({ store, clock }) => {
        const job = await insertCreated(store, { runAt: T0 + 60_000 });
        await store.jobCancel({ id: job.id, actor: "admin", role: "admin" });
        clock.advance(10);
        const outcome = await store.jobRetry({ id: job.id, actor: "admin", role: "admin" });
        assert.equal(outcome.kind, "retried");
        const retried = (outcome as { job: JobRow }).job;
        assert.equal(retried.status, "pending");
        assert.equal(retried.runAt, T0 + 10);
        assert.equal(retried.result, null);
        assert.equal(retried.finishedAt, null);
      });

      suite.case(
        "refuses pending, retrying, running and succeeded jobs with not_retryable, changing nothing",
        async ({ store }) => {
          const succeeded = await makeFinished(store, "succeeded");
          const retrying = await makeRetrying(store, {}, T0 + 60_000);
          const running = await makeRunning(store);
          const pending = await insertCreated(store, { runAt: T0 + 60_000 });
          for (const job of [pending, retrying, running, succeeded]) {
            const outcome = await store.jobRetry({ id: job.id, actor: "admin", role: "admin" });
            assert.deepEqual(outcome, { kind: "not_retryable", job });
            assert.deepEqual(await mustGet(store, job.id), job);
          }
        },
      );

      suite.case(
        "refuses with dedupe_conflict when a claimable job holds the dedupe key, changing nothing",
        async ({ store }) => {
          const dead = await makeFinished(store, "dead", { dedupeKey: "k" });
          const holder = await insertCreated(store, { dedupeKey: "k", runAt: T0 + 60_000 });
          const before = await allJobs(store);
          const outcome = await store.jobRetry({ id: dead.id, actor: "admin", role: "admin" });
          assert.deepEqual(outcome, { kind: "dedupe_conflict", holder });
          assert.deepEqual(await allJobs(store), before);
        },
      );

      suite.case("a running job does not block a retry of a job with the same dedupe key", async ({ store }) => {
        const dead = await makeFinished(store, "dead", { dedupeKey: "k" });
        await makeRunning(store, { dedupeKey: "k" });
        const outcome = await store.jobRetry({ id: dead.id, actor: "admin", role: "admin" });
        assert.equal(outcome.kind, "retried");
        assert.equal((outcome as { job: JobRow }).job.dedupeKey, "k", "the retried job holds its key again");
        const upsert = await store.jobInsert(jobParams({ dedupeKey: "k" }));
        assert.equal(upsert.kind, "deduplicated");
        assert.equal((upsert as { job: JobRow }).job.id, dead.id);
      });

      suite.case("retry answers not_found for an unknown id", async ({ store }) => {
        assert.deepEqual(await store.jobRetry({ id: "no-such-job-id", actor: "admin", role: "admin" }), {
          kind: "not_found",
        });
      });
    });

    describe("chainCancel", () => {
      suite.case("cancels the chain's pending and retrying jobs, returning exactly those", async ({ store, clock }) => {
        const chain = { originalRequestId: "chain-a" };
        const succeeded = await makeFinished(store, "succeeded", chain);
        const dead = await makeFinished(store, "dead", chain);
        const running = await makeRunning(store, chain);
        const retrying = await makeRetrying(store, chain, T0 + 60_000);
        const adminCancelled = await insertCreated(store, chain);
        await store.jobCancel({ id: adminCancelled.id, actor: "admin", role: "admin" });
        const pending1 = await insertCreated(store, { ...chain, runAt: T0 + 60_000 });
        const pending2 = await insertCreated(store, { ...chain, runAt: T0 + 60_000 });
        const otherChain = await insertCreated(store, { originalRequestId: "chain-b", runAt: T0 + 60_000 });
        const before = new Map((await allJobs(store)).map((job) => [job.id, job]));
        clock.advance(250);

        const returned = await store.chainCancel({ ...chain, actor: "admin", role: "admin" });
        assert.deepEqual(returned.map((job) => job.id).sort(), [retrying.id, pending1.id, pending2.id].sort());
        for (const job of returned) {
          assert.equal(job.status, "cancelled");
          assert.equal(job.finishedAt, T0 + 250);
          assert.equal(job.result?.terminal_reason, "cancelled-by-chain");
          assert.deepEqual(await mustGet(store, job.id), job);
        }
        const retryingAfter = returned.find((job) => job.id === retrying.id);
        assert.equal(
          retryingAfter?.result?.status_code,
          UNAVAILABLE.status_code,
          "a retrying job keeps its last status code",
        );
        assert.equal(retryingAfter?.result?.error_body, UNAVAILABLE.error_body);
        for (const job of [succeeded, dead, running, otherChain]) {
          assert.deepEqual(
            await mustGet(store, job.id),
            before.get(job.id),
            `${job.status} job ${job.id} is untouched`,
          );
        }
        assert.equal((await mustGet(store, adminCancelled.id)).result?.terminal_reason, "cancelled-by-admin");
      });

      suite.case("cancelling a chain twice returns nothing the second time", async ({ store }) => {
        await insertCreated(store, { originalRequestId: "chain-a", runAt: T0 + 60_000 });
        assert.equal(
          (await store.chainCancel({ originalRequestId: "chain-a", actor: "admin", role: "admin" })).length,
          1,
        );
        assert.deepEqual(await store.chainCancel({ originalRequestId: "chain-a", actor: "admin", role: "admin" }), []);
      });

      suite.case("an admin retry re-queues a job of a cancelled chain", async ({ store }) => {
        const job = await insertCreated(store, { originalRequestId: "chain-a", runAt: T0 + 60_000 });
        await store.chainCancel({ originalRequestId: "chain-a", actor: "admin", role: "admin" });
        const outcome = await store.jobRetry({ id: job.id, actor: "admin", role: "admin" });
        assert.equal(outcome.kind, "retried");
        assert.equal((outcome as { job: JobRow }).job.status, "pending");
      });
    });

    describe("jobRunNow", () => {
      suite.case(
        "moves a delayed pending job's run time to now, and a retrying one's, and they are claimable at once",
        async ({ store, clock }) => {
          clock.set(T0 + 1000);
          const delayed = await insertCreated(store, { runAt: T0 + 3_600_000 });
          const moved = await store.jobRunNow({ id: delayed.id, actor: "alice", role: "admin" });
          assert.equal(moved.kind, "moved");
          assert.equal((moved as { job: JobRow }).job.runAt, T0 + 1000);
          assert.equal((await mustGet(store, delayed.id)).runAt, T0 + 1000);
          const retrying = await makeRetrying(store, {}, T0 + 600_000);
          assert.equal((await store.jobRunNow({ id: retrying.id, actor: "alice", role: "admin" })).kind, "moved");
          const claimed = (await store.jobClaimMany({ limit: 10 })).map((job) => job.id).sort();
          assert.deepEqual(claimed, [delayed.id, retrying.id].sort());
        },
      );

      suite.case("keeps the earlier run time of a job that is due already", async ({ store, clock }) => {
        const due = await insertCreated(store, { runAt: T0 - 5000 });
        clock.advance(1000);
        const moved = await store.jobRunNow({ id: due.id, actor: "alice", role: "admin" });
        assert.equal((moved as { job: JobRow }).job.runAt, T0 - 5000);
      });

      suite.case(
        "answers not_waiting for a running or finished job, and not_found for no job, changing nothing",
        async ({ store }) => {
          const running = await makeRunning(store);
          const dead = await makeFinished(store, "dead");
          for (const job of [running, dead]) {
            const outcome = await store.jobRunNow({ id: job.id, actor: "alice", role: "admin" });
            assert.equal(outcome.kind, "not_waiting");
            assert.deepEqual(await mustGet(store, job.id), job);
            assert.deepEqual(await store.adminActionList({ jobId: job.id }), []);
          }
          assert.deepEqual(await store.jobRunNow({ id: "no-such-job-id", actor: "alice", role: "admin" }), {
            kind: "not_found",
          });
        },
      );
    });
  });
}

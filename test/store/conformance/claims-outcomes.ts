/**
 * jobSetStateIfRunningMany: outcomes are written only while the job is still `running` with the same attempt
 * (docs/delivery.md, "How an attempt ends"), and a retry after a chain cancel ends the job (docs/api.md, cancel chain).
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import type { JobResult } from "../../../src/job/schemas.js";
import type { Store } from "../../../src/store/store.js";
import type { JobRow } from "../../../src/job/job.js";
import {
  allJobs,
  claimNext,
  insertCreated,
  jobParams,
  makeRunning,
  mustGet,
  PERMANENT,
  SUCCESS,
  T0,
  UNAVAILABLE,
  type Suite,
} from "./harness.js";

const EXHAUSTED: JobResult = { ...UNAVAILABLE, terminal_reason: "exhausted" };

/** Registers the completion cases. */
export function completeCases(suite: Suite): void {
  describe("jobSetStateIfRunningMany", () => {
    suite.case("succeeded sets the status, finishedAt = now and the result", async ({ store, clock }) => {
      const running = await makeRunning(store);
      clock.advance(80);
      assert.deepEqual(
        await store.jobSetStateIfRunningMany({
          outcomes: [{ id: running.id, attempt: 1, status: "succeeded", result: SUCCESS }],
        }),
        [true],
      );
      const { heartbeatAt: _a, ...after } = await mustGet(store, running.id);
      const { heartbeatAt: _b, ...before } = running;
      assert.deepEqual(after, { ...before, status: "succeeded", finishedAt: T0 + 80, result: SUCCESS });
    });

    suite.case("dead sets the status, finishedAt = now and the result", async ({ store, clock }) => {
      const running = await makeRunning(store, { maxAttempts: 1 });
      clock.advance(80);
      assert.deepEqual(
        await store.jobSetStateIfRunningMany({
          outcomes: [{ id: running.id, attempt: 1, status: "dead", result: EXHAUSTED }],
        }),
        [true],
      );
      const after = await mustGet(store, running.id);
      assert.equal(after.status, "dead");
      assert.equal(after.finishedAt, T0 + 80);
      assert.equal(after.attempt, 1);
      assert.deepEqual(after.result, EXHAUSTED);
      assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
    });

    suite.case(
      "retrying sets runAt = now + delayMs and the result, and the job is claimable again from runAt",
      async ({ store, clock }) => {
        const running = await makeRunning(store, { dedupeKey: "k" });
        clock.advance(10);
        assert.deepEqual(
          await store.jobSetStateIfRunningMany({
            outcomes: [{ id: running.id, attempt: 1, status: "retrying", delayMs: 4990, result: UNAVAILABLE }],
          }),
          [true],
        );
        const retrying = await mustGet(store, running.id);
        assert.equal(retrying.status, "retrying");
        assert.equal(retrying.runAt, T0 + 5000);
        assert.deepEqual(retrying.result, UNAVAILABLE);
        assert.equal(retrying.finishedAt, null);
        assert.equal(retrying.attempt, 1);
        assert.equal(retrying.dedupeKey, "k", "with no other holder the job keeps its dedupe key");
        const upsert = await store.jobInsert(jobParams({ dedupeKey: "k", runAt: T0 + 6000 }));
        assert.equal(upsert.kind, "deduplicated", "a retrying job holds its key");
        assert.equal((upsert as { job: JobRow }).job.id, running.id);
        clock.set(T0 + 5999);
        assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
        clock.set(T0 + 6000);
        const again = await claimNext(store, running.id);
        assert.equal(again.attempt, 2);
        assert.equal(again.startedAt, T0 + 6000);
      },
    );

    suite.case("answers each outcome of a batch in order", async ({ store }) => {
      const a = await makeRunning(store);
      const b = await makeRunning(store);
      const c = await makeRunning(store);
      assert.deepEqual(
        await store.jobSetStateIfRunningMany({
          outcomes: [
            { id: a.id, attempt: 1, status: "succeeded", result: SUCCESS },
            { id: b.id, attempt: 2, status: "succeeded", result: SUCCESS },
            { id: c.id, attempt: 1, status: "dead", result: PERMANENT },
            { id: "no-such-job-id", attempt: 1, status: "dead", result: PERMANENT },
          ],
        }),
        [true, false, true, false],
      );
      assert.equal((await mustGet(store, a.id)).status, "succeeded");
      assert.deepEqual(await mustGet(store, b.id), b);
      assert.equal((await mustGet(store, c.id)).status, "dead");
    });

    suite.case("a write with a stale attempt returns false and changes nothing", async ({ store, clock }) => {
      const job = await makeRunning(store);
      assert.deepEqual(
        await store.jobSetStateIfRunningMany({
          outcomes: [{ id: job.id, attempt: 1, status: "retrying", delayMs: 0, result: UNAVAILABLE }],
        }),
        [true],
      );
      const second = await claimNext(store, job.id);
      assert.equal(second.attempt, 2);
      clock.advance(5);
      for (const outcome of [
        { id: job.id, attempt: 1, status: "succeeded", result: SUCCESS } as const,
        { id: job.id, attempt: 1, status: "dead", result: PERMANENT } as const,
        { id: job.id, attempt: 1, status: "retrying", delayMs: 4, result: UNAVAILABLE } as const,
        { id: job.id, attempt: 3, status: "succeeded", result: SUCCESS } as const,
      ]) {
        assert.deepEqual(await store.jobSetStateIfRunningMany({ outcomes: [outcome] }), [false]);
        assert.deepEqual(await mustGet(store, job.id), second);
      }
    });

    suite.case("a write for an already completed job returns false and changes nothing", async ({ store, clock }) => {
      const job = await makeRunning(store);
      await store.jobSetStateIfRunningMany({
        outcomes: [{ id: job.id, attempt: 1, status: "succeeded", result: SUCCESS }],
      });
      const done = await mustGet(store, job.id);
      clock.advance(5);
      for (const outcome of [
        { id: job.id, attempt: 1, status: "succeeded", result: SUCCESS } as const,
        { id: job.id, attempt: 1, status: "dead", result: PERMANENT } as const,
        { id: job.id, attempt: 1, status: "retrying", delayMs: 4, result: UNAVAILABLE } as const,
      ]) {
        assert.deepEqual(await store.jobSetStateIfRunningMany({ outcomes: [outcome] }), [false]);
        assert.deepEqual(await mustGet(store, job.id), done);
      }
    });

    suite.case(
      "a late write for a job cancelled meanwhile returns false and changes nothing",
      async ({ store, clock }) => {
        // Attempt 1 was written back to the queue (e.g. by the lease rescuer), then the chain was cancelled;
        // the original deliverer's outcome arrives afterwards.
        const job = await makeRunning(store, { originalRequestId: "chain-a" });
        await store.jobSetStateIfRunningMany({
          outcomes: [{ id: job.id, attempt: 1, status: "retrying", delayMs: 60_000, result: UNAVAILABLE }],
        });
        assert.equal((await store.chainCancel({ originalRequestId: "chain-a", actor: "admin" })).length, 1);
        const cancelled = await mustGet(store, job.id);
        clock.advance(5);
        for (const outcome of [
          { id: job.id, attempt: 1, status: "succeeded", result: SUCCESS } as const,
          { id: job.id, attempt: 1, status: "retrying", delayMs: 4, result: UNAVAILABLE } as const,
        ]) {
          assert.deepEqual(await store.jobSetStateIfRunningMany({ outcomes: [outcome] }), [false]);
          assert.deepEqual(await mustGet(store, job.id), cancelled);
        }
      },
    );

    suite.case(
      "a retrying outcome after the chain was cancelled ends the job cancelled-by-chain, keeping the status code",
      async ({ store, clock }) => {
        const job = await makeRunning(store, { originalRequestId: "chain-a" });
        assert.deepEqual(
          await store.chainCancel({ originalRequestId: "chain-a", actor: "admin" }),
          [],
          "a running job is not cancelled",
        );
        assert.equal((await mustGet(store, job.id)).status, "running");
        clock.advance(30);
        assert.deepEqual(
          await store.jobSetStateIfRunningMany({
            outcomes: [{ id: job.id, attempt: 1, status: "retrying", delayMs: 59_970, result: UNAVAILABLE }],
          }),
          [true],
        );
        const after = await mustGet(store, job.id);
        assert.equal(after.status, "cancelled");
        assert.equal(after.finishedAt, T0 + 30);
        assert.deepEqual(after.result, { ...UNAVAILABLE, terminal_reason: "cancelled-by-chain" });
        clock.advance(120_000);
        assert.deepEqual(await store.jobClaimMany({ limit: 10 }), [], "it is never retried");
      },
    );

    // docs/api.md: after a chain cancel, running jobs finish their attempt, and "a failure then ends
    // cancelled/cancelled-by-chain": a permanent failure and a last attempt's failure as much as a retryable one.
    suite.case(
      "after the chain was cancelled, a succeeded outcome is written as is and a dead one ends cancelled-by-chain",
      async ({ store }) => {
        const a = await makeRunning(store, { originalRequestId: "chain-a" });
        const b = await makeRunning(store, { originalRequestId: "chain-a" });
        await store.chainCancel({ originalRequestId: "chain-a", actor: "admin" });
        assert.deepEqual(
          await store.jobSetStateIfRunningMany({
            outcomes: [
              { id: a.id, attempt: 1, status: "succeeded", result: SUCCESS },
              { id: b.id, attempt: 1, status: "dead", result: PERMANENT },
            ],
          }),
          [true, true],
        );
        assert.deepEqual((await mustGet(store, a.id)).result, SUCCESS);
        assert.equal((await mustGet(store, a.id)).status, "succeeded");
        assert.deepEqual((await mustGet(store, b.id)).result, { ...PERMANENT, terminal_reason: "cancelled-by-chain" });
        assert.equal((await mustGet(store, b.id)).status, "cancelled");
        assert.deepEqual(
          (await store.jobAttemptList({ id: b.id })).map((attempt) => attempt.outcome),
          ["cancelled"],
          "the attempt is logged with the status it left the job in",
        );
      },
    );

    suite.case(
      "a dead outcome of a job whose chain was not cancelled stays dead beside one whose chain was",
      async ({ store }) => {
        const kept = await makeRunning(store, { originalRequestId: "chain-kept" });
        const cut = await makeRunning(store, { originalRequestId: "chain-cut" });
        await store.chainCancel({ originalRequestId: "chain-cut", actor: "admin" });
        const exhausted: JobResult = { status_code: 500, error_body: "boom", terminal_reason: "exhausted" };
        assert.deepEqual(
          await store.jobSetStateIfRunningMany({
            outcomes: [
              { id: kept.id, attempt: 1, status: "dead", result: exhausted },
              { id: cut.id, attempt: 1, status: "dead", result: exhausted },
            ],
          }),
          [true, true],
        );
        assert.equal((await mustGet(store, kept.id)).status, "dead");
        assert.deepEqual((await mustGet(store, kept.id)).result, exhausted);
        assert.equal((await mustGet(store, cut.id)).status, "cancelled");
        assert.deepEqual((await mustGet(store, cut.id)).result, {
          ...exhausted,
          terminal_reason: "cancelled-by-chain",
        });
      },
    );

    suite.case(
      "a job re-queued while a newer claimable job holds its dedupe key is re-queued without the key",
      async ({ store }) => {
        const old = await makeRunning(store, { dedupeKey: "k" });
        const newer = await insertCreated(store, { dedupeKey: "k", runAt: T0 + 60_000 });
        assert.deepEqual(
          await store.jobSetStateIfRunningMany({
            outcomes: [{ id: old.id, attempt: 1, status: "retrying", delayMs: 1000, result: UNAVAILABLE }],
          }),
          [true],
        );
        const requeued = await mustGet(store, old.id);
        assert.equal(requeued.status, "retrying");
        assert.equal(requeued.dedupeKey, null);
        assert.equal(requeued.runAt, T0 + 1000);
        assert.deepEqual(await mustGet(store, newer.id), newer, "the newer job keeps the key");
        const upsert = await store.jobInsert(jobParams({ dedupeKey: "k" }));
        assert.equal((upsert as { job: JobRow }).job.id, newer.id);
        const claimable = (await allJobs(store)).filter(
          (job) => job.dedupeKey === "k" && (job.status === "pending" || job.status === "retrying"),
        );
        assert.equal(claimable.length, 1, "still one claimable job per dedupe key");
      },
    );

    // attempt starts again at 0 after an admin retry: an outcome held back by a node cut off from the database must
    // not land on a later claim's attempt of the same number.
    suite.case(
      "an outcome naming an earlier claim's start changes nothing, though the attempt number matches",
      async ({ store, clock }) => {
        const first = await makeRunning(store);
        const stale = { id: first.id, attempt: 1, startedAt: first.startedAt };
        assert.deepEqual(
          await store.jobSetStateIfRunningMany({ outcomes: [{ ...stale, status: "dead", result: PERMANENT }] }),
          [true],
        );
        assert.equal((await store.jobRetry({ id: first.id, actor: "admin" })).kind, "retried");
        clock.advance(1000);
        const second = await claimNext(store, first.id);
        assert.equal(second.attempt, 1);
        assert.notEqual(second.startedAt, first.startedAt);
        assert.deepEqual(
          await store.jobSetStateIfRunningMany({
            outcomes: [
              { ...stale, status: "succeeded", result: SUCCESS },
              { ...stale, status: "retrying", delayMs: 59_000, result: UNAVAILABLE },
            ],
          }),
          [false, false],
        );
        for (const refund of ["if-last", "always"] as const) {
          assert.equal(
            await store.jobRequeueMany({ jobs: [stale], delayMs: 0, errorBody: "shutdown", refund }),
            0,
            refund,
          );
        }
        assert.deepEqual(await mustGet(store, first.id), second, "the second claim's attempt is untouched");
        const current = { id: first.id, attempt: 1, startedAt: second.startedAt };
        assert.deepEqual(
          await store.jobSetStateIfRunningMany({ outcomes: [{ ...current, status: "succeeded", result: SUCCESS }] }),
          [true],
        );
        assert.equal((await mustGet(store, first.id)).status, "succeeded");
      },
    );

    suite.case("an empty batch writes nothing", async ({ store }) => {
      assert.deepEqual(await store.jobSetStateIfRunningMany({ outcomes: [] }), []);
    });
  });

  // A running job holds no dedupe key, so a newer job may take it and run too (a cron's default key, say). When
  // both go back to the queue in one write, only one of them may hold it again: the key's index allows one.
  describe("jobs of one dedupe key going back to the queue together", () => {
    const twoRunningWithOneKey = async (store: Store) => {
      const first = await makeRunning(store, { dedupeKey: "cron:nightly" });
      const second = await makeRunning(store, { dedupeKey: "cron:nightly" });
      assert.notEqual(first.id, second.id, "the running job did not hold its key");
      return [first, second] as const;
    };
    const holders = async (store: Store, ids: string[]) => {
      const jobs = await Promise.all(ids.map((id) => mustGet(store, id)));
      return jobs.filter((job) => job.dedupeKey === "cron:nightly").map((job) => job.id);
    };

    suite.case("retrying outcomes in one batch: both go back, one of them with the key", async ({ store }) => {
      const [first, second] = await twoRunningWithOneKey(store);
      assert.deepEqual(
        await store.jobSetStateIfRunningMany({
          outcomes: [first, second].map((job) => ({
            id: job.id,
            attempt: 1,
            status: "retrying" as const,
            delayMs: 1000,
            result: UNAVAILABLE,
          })),
        }),
        [true, true],
      );
      assert.deepEqual(
        [(await mustGet(store, first.id)).status, (await mustGet(store, second.id)).status],
        ["retrying", "retrying"],
      );
      assert.equal((await holders(store, [first.id, second.id])).length, 1);
    });

    suite.case("a shutdown's requeue of both: both go back, one of them with the key", async ({ store }) => {
      const [first, second] = await twoRunningWithOneKey(store);
      const jobs = [first, second].map((job) => ({ id: job.id, attempt: 1 }));
      assert.equal(await store.jobRequeueMany({ jobs, delayMs: 0, errorBody: "shutdown", refund: "if-last" }), 2);
      assert.equal((await holders(store, [first.id, second.id])).length, 1);
    });

    suite.case(
      "a bulk retry of two dead jobs with one key retries the newer and leaves the older dead",
      async ({ store }) => {
        const [first, second] = await twoRunningWithOneKey(store);
        await store.jobSetStateIfRunningMany({
          outcomes: [first, second].map((job) => ({
            id: job.id,
            attempt: 1,
            status: "dead" as const,
            result: PERMANENT,
          })),
        });
        const retried = await store.jobRetryDeadMany({ filter: {}, limit: 10, actor: "admin" });
        assert.deepEqual(
          retried.map((job) => job.id),
          [second.id],
        );
        assert.equal((await mustGet(store, second.id)).status, "pending");
        assert.equal((await mustGet(store, second.id)).dedupeKey, "cron:nightly");
        assert.equal((await mustGet(store, first.id)).status, "dead");
      },
    );
  });
}

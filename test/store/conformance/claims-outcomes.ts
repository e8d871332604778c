/**
 * ClaimStore (src/store/roles/claims.ts), ending attempts: jobSetStateIfRunningMany writes an outcome only while the
 * job is still `running` with the same attempt (docs/delivery.md, "How an attempt ends"), a retry after a chain cancel
 * ends the job (docs/api.md, cancel chain), and jobRequeueMany gives running attempts back at shutdown
 * (docs/delivery.md, "Leases, heartbeats and rescue"). Taking jobs is in claims.ts.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import type { JobResult } from "../../../src/job/schemas.js";
import type { Store } from "../../../src/store/store.js";
import type { JobRow } from "../../../src/job/job.js";
import {
  allJobs,
  assertUnchanged,
  claimNext,
  insertCreated,
  jobParams,
  makeCancelled,
  makeFinished,
  makeRetrying,
  makeRunning,
  makeRunningSecondAttempt,
  mustGet,
  PERMANENT,
  SUCCESS,
  T0,
  UNAVAILABLE,
  type Suite,
} from "./harness.js";

const ids = (jobs: JobRow[]): string[] => jobs.map((job) => job.id);

const EXHAUSTED: JobResult = { ...UNAVAILABLE, terminal_reason: "exhausted" };

/** Registers the cases of ending attempts. */
export function claimOutcomeCases(suite: Suite): void {
  describe("ClaimStore: outcomes and requeues", () => {
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
          assert.equal(
            (await store.chainCancel({ originalRequestId: "chain-a", actor: "admin", role: "admin" })).length,
            1,
          );
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
            await store.chainCancel({ originalRequestId: "chain-a", actor: "admin", role: "admin" }),
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
          await store.chainCancel({ originalRequestId: "chain-a", actor: "admin", role: "admin" });
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
          assert.deepEqual((await mustGet(store, b.id)).result, {
            ...PERMANENT,
            terminal_reason: "cancelled-by-chain",
          });
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
          await store.chainCancel({ originalRequestId: "chain-cut", actor: "admin", role: "admin" });
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
          assert.equal((await store.jobRetry({ id: first.id, actor: "admin", role: "admin" })).kind, "retried");
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
          // An admin retry restarts attempt numbers:
          // a write for the first claim names attempt 1 and that claim's start.
          const first = await makeFinished(store, "dead");
          assert.equal((await store.jobRetry({ id: first.id, actor: "admin", role: "admin" })).kind, "retried");
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
            await store.chainCancel({ originalRequestId: "chain-a", actor: "admin", role: "admin" }),
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
          const retried = await store.jobRetryDeadMany({ filter: {}, limit: 10, actor: "admin", role: "admin" });
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
  });
}

/**
 * AsyncAttemptStore (src/store/roles/async-attempts.ts): what a target that took an attempt asynchronously sends
 * (docs/delivery.md, "Long jobs"): jobHeartbeatExternal, jobSetStateExternal, and the record jobAsyncStateGet reads.
 * Every call is conditional on the job still running that attempt, and once an attempt is taken asynchronously, on the
 * very token it was sent with. Marking an attempt asynchronous (jobMarkAsyncIfRunning) is in claims.ts, its
 * asynchronous lease (jobListExpired) in upkeep.ts.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import type { AttemptToken } from "../../../src/job/job.js";
import type { JobResult } from "../../../src/job/schemas.js";
import {
  claimNext,
  insertCreated,
  makeAsync,
  makeFinished,
  makeRunning,
  mustGet,
  SUCCESS,
  T0,
  TOKEN_A,
  TOKEN_A_EXPIRED,
  TOKEN_B,
  UNAVAILABLE,
  type Suite,
} from "./harness.js";

const FAILED: JobResult = { status_code: 503, error_body: "the encoder crashed", terminal_reason: null };

/** Registers the cases of asynchronous attempts. */
export function asyncAttemptCases(suite: Suite): void {
  describe("AsyncAttemptStore: attempts a target takes asynchronously", () => {
    describe("jobHeartbeatExternal", () => {
      suite.case(
        "a token of an earlier claim of the same attempt number is refused, at the same instant (claimCount)",
        async ({ store }) => {
          // Attempt 1 taken asynchronously, failed for good, retried by an administrator and claimed again in the same
          // millisecond: every claim of the token but clm is the same, and only the current claim's token acts.
          const first = await makeAsync(store);
          assert.equal(first.claimCount, 1);
          const failed = await store.jobSetStateExternal({
            outcome: { id: first.id, attempt: 1, startedAt: first.startedAt, status: "dead", result: FAILED },
            token: TOKEN_A,
          });
          assert.equal(failed.kind, "written");
          assert.equal((await store.jobRetry({ id: first.id, actor: "admin", role: "admin" })).kind, "retried");
          const second = await claimNext(store, first.id);
          assert.deepEqual([second.attempt, second.startedAt, second.claimCount], [1, first.startedAt, 2]);
          const earlier: AttemptToken = { hash: "digest-of-token-c", expired: false, claim: 1 };
          const legacy: AttemptToken = { hash: "digest-of-token-d", expired: false, claim: null };
          assert.equal(
            (await store.jobHeartbeatExternal({ id: first.id, attempt: 1, token: earlier })).kind,
            "not_running",
          );
          assert.equal(
            (await store.jobHeartbeatExternal({ id: first.id, attempt: 1, token: legacy })).kind,
            "not_running",
          );
          const outcome = {
            id: first.id,
            attempt: 1,
            startedAt: second.startedAt,
            status: "succeeded" as const,
            result: SUCCESS,
          };
          assert.equal((await store.jobSetStateExternal({ outcome, token: earlier })).kind, "not_running");
          const current: AttemptToken = { hash: "digest-of-token-e", expired: false, claim: 2 };
          assert.equal(
            (await store.jobHeartbeatExternal({ id: first.id, attempt: 1, token: current })).kind,
            "renewed",
          );
          assert.equal((await store.jobSetStateExternal({ outcome, token: current })).kind, "written");
        },
      );

      suite.case(
        "renews the lease of the running attempt, and keeps the progress with its attempt and time",
        async ({ store, clock }) => {
          const job = await makeAsync(store);
          clock.advance(1000);
          const progress = { done: 40, of: 100, stage: "encoding «720p» 😀" };
          assert.deepEqual(
            await store.jobHeartbeatExternal({
              id: job.id,
              attempt: 1,
              token: TOKEN_A,
              progressJson: JSON.stringify(progress),
            }),
            { kind: "renewed", heartbeatAt: T0 + 1000, async: true },
          );
          assert.equal((await mustGet(store, job.id)).heartbeatAt, T0 + 1000);
          assert.deepEqual((await store.jobAsyncStateGet({ id: job.id }))?.progress, {
            attempt: 1,
            value: progress,
            at: T0 + 1000,
          });

          clock.advance(1000);
          const renewed = await store.jobHeartbeatExternal({ id: job.id, attempt: 1, token: TOKEN_A });
          assert.deepEqual(renewed, { kind: "renewed", heartbeatAt: T0 + 2000, async: true });
          assert.deepEqual(
            (await store.jobAsyncStateGet({ id: job.id }))?.progress,
            { attempt: 1, value: progress, at: T0 + 1000 },
            "a heartbeat without progress keeps the last one",
          );
          for (const value of [null, 7, "half", [1, [2, { three: true }]]]) {
            clock.advance(1);
            await store.jobHeartbeatExternal({
              id: job.id,
              attempt: 1,
              token: TOKEN_A,
              progressJson: JSON.stringify(value),
            });
            assert.deepEqual((await store.jobAsyncStateGet({ id: job.id }))?.progress, {
              attempt: 1,
              value,
              at: clock.now(),
            });
          }
        },
      );

      suite.case("before the mark, an unexpired token acts and an expired one is refused", async ({ store, clock }) => {
        const running = await makeRunning(store);
        clock.advance(50);
        assert.deepEqual(await store.jobHeartbeatExternal({ id: running.id, attempt: 1, token: TOKEN_B }), {
          kind: "renewed",
          heartbeatAt: T0 + 50,
          async: false,
        });
        const refused = await store.jobHeartbeatExternal({
          id: running.id,
          attempt: 1,
          token: TOKEN_A_EXPIRED,
          progressJson: "1",
        });
        assert.equal(refused.kind, "token_refused");
        assert.equal(refused.kind === "token_refused" && refused.reason, "expired");
        assert.equal((await mustGet(store, running.id)).heartbeatAt, T0 + 50, "the refused call changed nothing");
        assert.equal((await store.jobAsyncStateGet({ id: running.id }))?.progress, null);
      });

      suite.case("once marked, only the attempt's own token acts on it, expired or not", async ({ store, clock }) => {
        const job = await makeAsync(store);
        clock.advance(50);
        const other = await store.jobHeartbeatExternal({ id: job.id, attempt: 1, token: TOKEN_B, progressJson: "1" });
        assert.equal(other.kind, "token_refused");
        assert.equal(other.kind === "token_refused" && other.reason, "other_token");
        assert.deepEqual(await mustGet(store, job.id), job, "the refused call changed nothing");
        assert.deepEqual(await store.jobHeartbeatExternal({ id: job.id, attempt: 1, token: TOKEN_A_EXPIRED }), {
          kind: "renewed",
          heartbeatAt: T0 + 50,
          async: true,
        });
      });

      suite.case(
        "is refused not_running for another attempt, an ended job, and not_found for an unknown id",
        async ({ store, clock }) => {
          const job = await makeAsync(store);
          const finished = await makeFinished(store, "succeeded");
          clock.advance(50);
          const stale = await store.jobHeartbeatExternal({ id: job.id, attempt: 2, token: TOKEN_A });
          assert.equal(stale.kind, "not_running");
          assert.equal(stale.kind === "not_running" && stale.job.id, job.id, "the refusal shows the job as it is");
          assert.equal(
            (await store.jobHeartbeatExternal({ id: finished.id, attempt: 1, token: TOKEN_A })).kind,
            "not_running",
          );
          assert.deepEqual(await store.jobHeartbeatExternal({ id: "no-such-job-id", attempt: 1, token: TOKEN_A }), {
            kind: "not_found",
          });
          assert.deepEqual(await mustGet(store, job.id), job);
        },
      );

      suite.case(
        "ends with the attempt: refused after a cancel with abort, and after a rescue",
        async ({ store, clock }) => {
          const cancelled = await makeAsync(store);
          const rescued = await makeAsync(store);
          assert.equal(
            (await store.jobCancel({ id: cancelled.id, actor: "admin", role: "admin", abortRunning: true })).kind,
            "cancelled",
          );
          clock.advance(10);
          assert.equal(
            (await store.jobHeartbeatExternal({ id: cancelled.id, attempt: 1, token: TOKEN_A })).kind,
            "not_running",
          );
          const [expired] = await store.jobListExpired({ lease: { defaultMs: 5, byOperation: {} }, limit: 1 });
          assert.equal(expired?.id, rescued.id);
          const written = await store.jobSetStateIfRunningMany({
            outcomes: [
              {
                id: rescued.id,
                attempt: 1,
                startedAt: rescued.startedAt,
                status: "retrying",
                delayMs: 1000,
                result: UNAVAILABLE,
              },
            ],
          });
          assert.deepEqual(written, [true]);
          assert.equal(
            (await store.jobHeartbeatExternal({ id: rescued.id, attempt: 1, token: TOKEN_A })).kind,
            "not_running",
          );
        },
      );

      suite.case(
        "a lease that expired still counts until a rescue settles it: the first writer wins",
        async ({ store, clock }) => {
          const job = await makeAsync(store);
          clock.advance(10_000);
          assert.equal(
            (await store.jobListExpired({ lease: { defaultMs: 1000, byOperation: {} }, limit: 10 })).length,
            1,
          );
          assert.equal((await store.jobHeartbeatExternal({ id: job.id, attempt: 1, token: TOKEN_A })).kind, "renewed");
          assert.deepEqual(await store.jobListExpired({ lease: { defaultMs: 1000, byOperation: {} }, limit: 10 }), []);
        },
      );
    });

    describe("jobSetStateExternal", () => {
      suite.case(
        "writes succeeded as a 2xx would: finishedAt, the result, the attempt's history, durably",
        async ({ store, clock }) => {
          const job = await makeAsync(store);
          clock.advance(5000);
          const outcome = await store.jobSetStateExternal({
            outcome: { id: job.id, attempt: 1, startedAt: job.startedAt, status: "succeeded", result: SUCCESS },
            token: TOKEN_A_EXPIRED,
          });
          assert.equal(outcome.kind, "written");
          const after = await mustGet(store, job.id);
          assert.deepEqual(outcome.kind === "written" && outcome.job, after);
          assert.equal(after.status, "succeeded");
          assert.equal(after.finishedAt, T0 + 5000);
          assert.deepEqual(after.result, SUCCESS);
          assert.deepEqual(
            (await store.jobAttemptList({ id: job.id })).map(({ attempt, outcome: ended, statusCode }) => ({
              attempt,
              ended,
              statusCode,
            })),
            [{ attempt: 1, ended: "succeeded", statusCode: 200 }],
          );
          assert.equal(
            (await store.jobAsyncStateGet({ id: job.id }))?.accepted?.attempt,
            1,
            "the mark stays for the record",
          );
        },
      );

      suite.case("writes a retry with its backoff, and the next claim starts unmarked", async ({ store, clock }) => {
        const job = await makeAsync(store);
        clock.advance(100);
        const outcome = await store.jobSetStateExternal({
          outcome: {
            id: job.id,
            attempt: 1,
            startedAt: job.startedAt,
            status: "retrying",
            delayMs: 900,
            result: FAILED,
          },
          token: TOKEN_A,
        });
        assert.equal(outcome.kind === "written" && outcome.job.status, "retrying");
        const retrying = await mustGet(store, job.id);
        assert.equal(retrying.runAt, T0 + 1000);
        assert.deepEqual(retrying.result, FAILED);
        clock.set(T0 + 1000);
        const second = await claimNext(store, job.id);
        assert.equal(second.attempt, 2);
        // Attempt 2 was not taken asynchronously: an expired token is refused, its lease is the ordinary one.
        const refused = await store.jobHeartbeatExternal({
          id: job.id,
          attempt: 2,
          token: { ...TOKEN_A_EXPIRED, claim: 2 },
        });
        assert.equal(refused.kind === "token_refused" && refused.reason, "expired");
        const lease = { defaultMs: 100, byOperation: {}, asyncByOperation: { [job.operationId]: 1_000_000 } };
        clock.advance(101);
        assert.deepEqual(
          (await store.jobListExpired({ lease, limit: 10 })).map((row) => row.id),
          [job.id],
        );
      });

      suite.case(
        "a failure of a job whose chain was cancelled ends it cancelled-by-chain",
        async ({ store, clock }) => {
          const job = await makeAsync(store, { originalRequestId: "chain-x" });
          await store.chainCancel({ originalRequestId: "chain-x", actor: "admin", role: "admin" });
          clock.advance(10);
          const outcome = await store.jobSetStateExternal({
            outcome: {
              id: job.id,
              attempt: 1,
              startedAt: job.startedAt,
              status: "retrying",
              delayMs: 900,
              result: FAILED,
            },
            token: TOKEN_A,
          });
          assert.equal(outcome.kind, "written");
          const after = await mustGet(store, job.id);
          assert.equal(after.status, "cancelled");
          assert.deepEqual(after.result, { ...FAILED, terminal_reason: "cancelled-by-chain" });
        },
      );

      suite.case(
        "refuses another claim, another token, an ended job, and changes nothing",
        async ({ store, clock }) => {
          const job = await makeAsync(store);
          clock.advance(10);
          const succeeded = (token: AttemptToken, startedAt: number | null, attempt = 1) =>
            store.jobSetStateExternal({
              outcome: { id: job.id, attempt, startedAt, status: "succeeded", result: SUCCESS },
              token,
            });
          assert.equal((await succeeded(TOKEN_A, T0 - 1)).kind, "not_running");
          assert.equal((await succeeded(TOKEN_A, T0, 2)).kind, "not_running");
          const other = await succeeded(TOKEN_B, T0);
          assert.equal(other.kind === "token_refused" && other.reason, "other_token");
          assert.deepEqual(await mustGet(store, job.id), job);
          assert.deepEqual(await store.jobAttemptList({ id: job.id }), []);
          assert.equal((await succeeded(TOKEN_A, T0)).kind, "written");
          assert.equal((await succeeded(TOKEN_A, T0)).kind, "not_running", "a repeated complete finds the job ended");
          const unknown = await store.jobSetStateExternal({
            outcome: {
              id: "no-such-job-id",
              attempt: 1,
              status: "dead",
              result: { ...FAILED, terminal_reason: "permanent-status" },
            },
            token: TOKEN_A,
          });
          assert.deepEqual(unknown, { kind: "not_found" });
        },
      );
    });

    describe("claims after an administrator's retry", () => {
      suite.case(
        "the old mark is left behind: the new attempt 1 binds its own token, and the old one is refused",
        async ({ store, clock }) => {
          const job = await makeAsync(store);
          assert.equal(
            (await store.jobCancel({ id: job.id, actor: "admin", role: "admin", abortRunning: true })).kind,
            "cancelled",
          );
          clock.advance(10);
          assert.equal((await store.jobRetry({ id: job.id, actor: "admin", role: "admin" })).kind, "retried");
          clock.advance(10);
          const again = await claimNext(store, job.id);
          assert.equal(again.attempt, 1, "the administrator's retry starts the count again");
          assert.equal(again.claimCount, 2, "but not the count of claims");
          const current = (token: AttemptToken): AttemptToken => ({ ...token, claim: 2 });
          assert.equal(
            (await store.jobHeartbeatExternal({ id: job.id, attempt: 1, token: current(TOKEN_A_EXPIRED) })).kind,
            "token_refused",
            "the old mark does not make the new claim asynchronous",
          );
          assert.equal(
            await store.jobMarkAsyncIfRunning({
              job: { id: job.id, attempt: 1, startedAt: again.startedAt },
              tokenHash: TOKEN_B.hash,
            }),
            true,
          );
          assert.equal(
            (await store.jobHeartbeatExternal({ id: job.id, attempt: 1, token: TOKEN_A })).kind,
            "not_running",
            "the old claim's token",
          );
          const refused = await store.jobHeartbeatExternal({ id: job.id, attempt: 1, token: current(TOKEN_A) });
          assert.equal(refused.kind === "token_refused" && refused.reason, "other_token");
          assert.equal(
            (await store.jobHeartbeatExternal({ id: job.id, attempt: 1, token: current(TOKEN_B) })).kind,
            "renewed",
          );
        },
      );
    });

    describe("jobAsyncStateGet", () => {
      suite.case(
        "is undefined for an unknown job and empty for a job never taken asynchronously",
        async ({ store }) => {
          const pending = await insertCreated(store);
          assert.equal(await store.jobAsyncStateGet({ id: "no-such-job-id" }), undefined);
          assert.deepEqual(await store.jobAsyncStateGet({ id: pending.id }), { accepted: null, progress: null });
        },
      );
    });
  });
}

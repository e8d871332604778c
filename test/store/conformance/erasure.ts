/**
 * AdminStore's `userErase` (src/store/roles/admin.ts): erasure of one user's data (docs/api.md, "Erasing a user's
 * data"): what it removes of a finished job and its attempts, what it leaves (other users, waiting and running jobs
 * unless asked to cancel), its bound per call, and that a call with nothing to do does nothing.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import type { Store } from "../../../src/store/store.js";
import { insertCreated, makeFinished, makeRunning, mustGet, SUCCESS, T0, type Suite } from "./harness.js";

const SECRET = { path_params: { userId: "42" }, body: { email: "ada@example.com" } };

function erase(store: Store, userId: string, options: { cancelWaiting?: boolean; limit?: number } = {}) {
  return store.userErase({
    userId,
    cancelWaiting: options.cancelWaiting ?? false,
    limit: options.limit ?? 100,
    actor: "dpo",
    role: "admin",
    subject: `digest-of-${userId}`,
  });
}

/** Registers the erasure cases. */
export function erasureCases(suite: Suite): void {
  describe("AdminStore: userErase", () => {
    suite.case(
      "a finished job keeps its status, times and reasons, and loses its request, error bodies and attempts' bodies",
      async ({ store }) => {
        const dead = await makeFinished(store, "dead", { userId: "ada", request: SECRET });
        const done = await makeFinished(store, "succeeded", { userId: "ada", request: SECRET });
        const other = await makeFinished(store, "dead", { userId: "bob", request: SECRET });
        const outcome = await erase(store, "ada");
        assert.deepEqual(outcome, { erased: 2, cancelled: 0, waiting: 0, running: 0, more: false });
        const after = await mustGet(store, dead.id);
        assert.deepEqual(after.request, {});
        assert.deepEqual(after.result, { status_code: 400, error_body: null, terminal_reason: "permanent-status" });
        assert.equal(after.status, "dead");
        assert.equal(after.finishedAt, dead.finishedAt);
        assert.deepEqual((await mustGet(store, done.id)).request, {});
        const attempts = await store.jobAttemptListMany({ ids: [dead.id, other.id] });
        assert.deepEqual(
          attempts.get(dead.id)?.map((attempt) => attempt.errorBody),
          [null],
        );
        assert.deepEqual(
          attempts.get(other.id)?.map((attempt) => attempt.errorBody),
          ["bad request"],
          "another user's attempts keep theirs",
        );
        assert.deepEqual((await mustGet(store, other.id)).request, SECRET, "another user's jobs are untouched");
      },
    );

    suite.case(
      "waiting and running jobs are left unless asked; with cancelWaiting the waiting ones are cancelled and erased",
      async ({ store }) => {
        const waiting = await insertCreated(store, { userId: "ada", request: SECRET, runAt: T0 + 60_000 });
        const running = await makeRunning(store, { userId: "ada", request: SECRET });
        assert.deepEqual(await erase(store, "ada"), { erased: 0, cancelled: 0, waiting: 1, running: 1, more: false });
        assert.deepEqual((await mustGet(store, waiting.id)).request, SECRET);
        assert.deepEqual(await erase(store, "ada", { cancelWaiting: true }), {
          erased: 1,
          cancelled: 1,
          waiting: 0,
          running: 1,
          more: false,
        });
        const cancelled = await mustGet(store, waiting.id);
        assert.equal(cancelled.status, "cancelled");
        assert.deepEqual(cancelled.request, {});
        assert.deepEqual((await mustGet(store, running.id)).request, SECRET, "a running job is left to finish");
        const actions = await store.adminActionList({ jobId: waiting.id });
        assert.deepEqual(
          actions.map((action) => [action.actor, action.role, action.action]),
          [["dpo", "admin", "cancel-many"]],
        );
      },
    );

    suite.case(
      "each call looks at the user's next limit jobs after the last call's, and comes back to a job that finished behind them",
      async ({ store }) => {
        const others = await makeFinished(store, "dead", { userId: "bob", request: SECRET });
        const first = await makeFinished(store, "succeeded", { userId: "ada", request: SECRET });
        const running = await makeRunning(store, { userId: "ada", request: SECRET });
        const third = await makeFinished(store, "dead", { userId: "ada", request: SECRET });
        const fourth = await makeFinished(store, "succeeded", { userId: "ada", request: SECRET });
        await insertCreated(store, { userId: "ada", request: SECRET, runAt: T0 + 60_000 });
        const calls = async (count: number) => {
          const outcomes = [];
          for (let i = 0; i < count; i++) outcomes.push(await erase(store, "ada", { limit: 2 }));
          return outcomes;
        };
        assert.deepEqual(await calls(3), [
          { erased: 1, cancelled: 0, waiting: 0, running: 1, more: true },
          { erased: 2, cancelled: 0, waiting: 0, running: 1, more: true },
          { erased: 0, cancelled: 0, waiting: 1, running: 1, more: false },
        ]);
        assert.deepEqual((await mustGet(store, first.id)).request, {});
        assert.deepEqual((await mustGet(store, third.id)).request, {});
        assert.deepEqual((await mustGet(store, fourth.id)).request, {});
        assert.deepEqual((await mustGet(store, running.id)).request, SECRET, "a running job is left to finish");
        assert.deepEqual((await mustGet(store, others.id)).request, SECRET, "another user's job is not in the pages");

        assert.deepEqual(
          await store.jobSetStateIfRunningMany({
            outcomes: [{ id: running.id, attempt: running.attempt, status: "succeeded", result: SUCCESS }],
          }),
          [true],
        );
        // Nothing after the last call's page: the next call goes back to the job that finished, and on from there.
        assert.deepEqual(await calls(3), [
          { erased: 1, cancelled: 0, waiting: 0, running: 0, more: true },
          { erased: 0, cancelled: 0, waiting: 1, running: 0, more: true },
          { erased: 0, cancelled: 0, waiting: 1, running: 0, more: false },
        ]);
        assert.deepEqual((await mustGet(store, running.id)).request, {});
        assert.deepEqual(await erase(store, "bob", { limit: 2 }), {
          erased: 1,
          cancelled: 0,
          waiting: 0,
          running: 0,
          more: false,
        });
      },
    );

    suite.case(
      "each call erases at most limit jobs, oldest first, says whether more are left, and a call with nothing to do does nothing",
      async ({ store }) => {
        const jobs = [];
        for (let i = 0; i < 3; i++)
          jobs.push(await makeFinished(store, "succeeded", { userId: "ada", request: SECRET }));
        assert.deepEqual(await erase(store, "ada", { limit: 2 }), {
          erased: 2,
          cancelled: 0,
          waiting: 0,
          running: 0,
          more: true,
        });
        assert.deepEqual((await mustGet(store, jobs[2]!.id)).request, SECRET);
        assert.deepEqual(await erase(store, "ada", { limit: 2 }), {
          erased: 1,
          cancelled: 0,
          waiting: 0,
          running: 0,
          more: false,
        });
        assert.deepEqual(await erase(store, "ada", { limit: 2 }), {
          erased: 0,
          cancelled: 0,
          waiting: 0,
          running: 0,
          more: false,
        });
        assert.deepEqual(await erase(store, "nobody"), {
          erased: 0,
          cancelled: 0,
          waiting: 0,
          running: 0,
          more: false,
        });
        assert.deepEqual(await erase(store, "a\u0000b"), {
          erased: 0,
          cancelled: 0,
          waiting: 0,
          running: 0,
          more: false,
        });
      },
    );
  });
}

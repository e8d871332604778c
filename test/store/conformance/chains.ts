/**
 * ChainStore (src/store/roles/chains.ts): chains as a unit (docs/chains.md): a job's callbacks enqueued once per
 * terminal state, a chain's on_settled once, the chains that settled reported once per settling, and the reads of a
 * chain, on the store's clock.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import type { JobRow } from "../../../src/job/job.js";
import type { JobInsertOutcome } from "../../../src/store/store.js";
import {
  allJobs,
  finishNext as finish,
  insertCreated,
  jobParams,
  mustGet,
  T0,
  type JobOverrides,
  type Suite,
} from "./harness.js";

const ON_COMPLETE = { on_complete: { operation_id: "recordEmailSent", request: { path_params: { emailId: "7" } } } };

/** A callback job's insert for `job`, as the sweeper builds it. */
function callbackOf(job: JobRow, overrides: JobOverrides = {}) {
  return jobParams({
    operationId: "recordEmailSent",
    parentJobId: job.id,
    originalRequestId: job.originalRequestId,
    enqueuedByOperationId: job.operationId,
    request: { path_params: { emailId: "7" }, body: { status: job.status } },
    ...overrides,
  });
}

function jobOf(outcome: JobInsertOutcome | { kind: string }): JobRow {
  assert.ok("job" in outcome, `expected a job, got ${outcome.kind}`);
  return (outcome as { job: JobRow }).job;
}

/** Registers the chain cases. */
export function chainCases(suite: Suite): void {
  describe("ChainStore: callbacks, on_settled and settling", () => {
    describe("jobCallbackDueList and jobCallbackEnqueue", () => {
      suite.case(
        "a job's callbacks are kept; once it succeeds its on_complete is due, and enqueued exactly once",
        async ({ store }) => {
          const job = await insertCreated(store, { callbacks: ON_COMPLETE });
          assert.deepEqual((await mustGet(store, job.id)).callbacks, ON_COMPLETE);
          assert.deepEqual(await store.jobCallbackDueList({ limit: 10 }), [], "not due while it waits");
          const done = await finish(store, job.id);
          assert.deepEqual(
            (await store.jobCallbackDueList({ limit: 10 })).map((row) => row.id),
            [job.id],
          );
          const [first, second] = await Promise.all([
            store.jobCallbackEnqueue({ jobId: job.id, status: "succeeded", insert: callbackOf(done) }),
            store.jobCallbackEnqueue({ jobId: job.id, status: "succeeded", insert: callbackOf(done) }),
          ]);
          const kinds = [first.kind, second.kind].sort();
          assert.deepEqual(kinds, ["created", "skipped"], "two sweepers at once: one callback");
          const callback = jobOf(first.kind === "created" ? first : second);
          assert.equal(callback.parentJobId, job.id);
          assert.equal(callback.originalRequestId, job.originalRequestId);
          assert.deepEqual(await store.jobCallbackDueList({ limit: 10 }), []);
          assert.equal((await allJobs(store)).length, 2);
        },
      );

      suite.case(
        "a job without a callback for the state it ended in is only cleared; an admin retry makes its callback due again",
        async ({ store }) => {
          const job = await insertCreated(store, { callbacks: ON_COMPLETE });
          await finish(store, job.id, "dead");
          assert.deepEqual(
            (await store.jobCallbackDueList({ limit: 10 })).map((row) => row.id),
            [job.id],
            "pending, for no callback",
          );
          assert.deepEqual(await store.jobCallbackEnqueue({ jobId: job.id, status: "dead", insert: null }), {
            kind: "cleared",
          });
          assert.deepEqual(await store.jobCallbackDueList({ limit: 10 }), []);
          assert.equal((await store.jobRetry({ id: job.id, actor: "admin", role: "admin" })).kind, "retried");
          const done = await finish(store, job.id);
          assert.deepEqual(
            (await store.jobCallbackDueList({ limit: 10 })).map((row) => row.id),
            [job.id],
          );
          assert.equal(
            (await store.jobCallbackEnqueue({ jobId: job.id, status: "succeeded", insert: callbackOf(done) })).kind,
            "created",
          );
          assert.deepEqual(
            await store.jobCallbackEnqueue({ jobId: job.id, status: "dead", insert: null }),
            { kind: "skipped" },
            "a write for another state than the job's changes nothing",
          );
        },
      );

      suite.case(
        "a callback counts against the spawn cap: a chain at its cap gets none, and the callback is no longer due",
        async ({ store }) => {
          const job = await insertCreated(store, { callbacks: ON_COMPLETE, originalRequestId: "capped", spawnCap: 1 });
          const done = await finish(store, job.id);
          const refused = await store.jobCallbackEnqueue({
            jobId: job.id,
            status: "succeeded",
            insert: callbackOf(done, { spawnCap: 1 }),
          });
          assert.equal(refused.kind, "spawn_cap_exceeded");
          assert.deepEqual(await store.jobCallbackDueList({ limit: 10 }), []);
        },
      );
    });

    describe("chainSettledDueList, chainOnSettledEnqueue and chainGet", () => {
      suite.case(
        "on_settled comes with a chain's first job; it is due once no job of the chain waits or runs, and fires once",
        async ({ store }) => {
          const onSettled = { operation_id: "buildReport" };
          const root = await insertCreated(store, { originalRequestId: "c1", onSettled });
          assert.equal((await store.jobInsert(jobParams({ originalRequestId: "c1", onSettled }))).kind, "chain_exists");
          const child = await insertCreated(store, { originalRequestId: "c1", parentJobId: root.id });
          const chain = await store.chainGet({ originalRequestId: "c1" });
          assert.deepEqual(chain?.onSettled, { ...onSettled, job_id: root.id });
          assert.equal(chain?.jobsCreated, 2);
          assert.equal(chain?.createdAt, T0);
          await finish(store, root.id);
          assert.deepEqual(await store.chainSettledDueList({ limit: 10 }), [], "a job of the chain still waits");
          assert.equal(
            (
              await store.chainOnSettledEnqueue({
                originalRequestId: "c1",
                insert: jobParams({ originalRequestId: "c1", operationId: "buildReport" }),
              })
            ).kind,
            "skipped",
          );
          await finish(store, child.id, "dead");
          assert.deepEqual(
            (await store.chainSettledDueList({ limit: 10 })).map((row) => row.originalRequestId),
            ["c1"],
          );
          const insert = jobParams({ originalRequestId: "c1", operationId: "buildReport", parentJobId: root.id });
          const [a, b] = await Promise.all([
            store.chainOnSettledEnqueue({ originalRequestId: "c1", insert }),
            store.chainOnSettledEnqueue({ originalRequestId: "c1", insert: { ...insert, id: `${insert.id}x` } }),
          ]);
          assert.deepEqual([a.kind, b.kind].sort(), ["created", "skipped"]);
          assert.deepEqual(await store.chainSettledDueList({ limit: 10 }), []);
          const fired = await store.chainGet({ originalRequestId: "c1" });
          assert.equal(fired?.onSettledFiredAt, T0);
          assert.equal(fired?.jobsCreated, 3, "the callback counts in the chain");
        },
      );

      suite.case(
        "on_settled with no insert is recorded fired (cleared) once the chain settles, and is never due again",
        async ({ store }) => {
          const root = await insertCreated(store, {
            originalRequestId: "c2",
            onSettled: { operation_id: "buildReport" },
          });
          assert.equal(
            (await store.chainOnSettledEnqueue({ originalRequestId: "c2", insert: null })).kind,
            "skipped",
            "the chain still waits",
          );
          await finish(store, root.id);
          const [a, b] = await Promise.all([
            store.chainOnSettledEnqueue({ originalRequestId: "c2", insert: null }),
            store.chainOnSettledEnqueue({ originalRequestId: "c2", insert: null }),
          ]);
          assert.deepEqual([a.kind, b.kind].sort(), ["cleared", "skipped"]);
          assert.deepEqual(await store.chainSettledDueList({ limit: 10 }), []);
          assert.equal((await store.chainGet({ originalRequestId: "c2" }))?.jobsCreated, 1, "no job was inserted");
        },
      );
    });

    describe("chainJobCounts", () => {
      suite.case(
        "a chain's jobs are counted by status, with its first creation and last finish; a chain without jobs counts none",
        async ({ store, clock }) => {
          assert.deepEqual(await store.chainJobCounts({ originalRequestId: "c3" }), {
            jobs: 0,
            byStatus: {},
            firstCreatedAt: null,
            lastFinishedAt: null,
          });
          const first = await insertCreated(store, { originalRequestId: "c3" });
          clock.advance(10);
          const second = await insertCreated(store, { originalRequestId: "c3", runAt: T0 + 10 });
          await insertCreated(store, { originalRequestId: "c3", runAt: T0 + 60_000 });
          await insertCreated(store, { originalRequestId: "other", runAt: T0 + 60_000 });
          clock.advance(5);
          await finish(store, first.id);
          clock.advance(5);
          await finish(store, second.id, "dead");
          assert.deepEqual(await store.chainJobCounts({ originalRequestId: "c3" }), {
            jobs: 3,
            byStatus: { succeeded: 1, dead: 1, pending: 1 },
            firstCreatedAt: T0,
            lastFinishedAt: T0 + 20,
          });
        },
      );
    });

    describe("chainSettledSince", () => {
      suite.case(
        "chains that settled are reported once per settling, from the cursor on; a job joining a chain reopens it",
        async ({ store, clock }) => {
          assert.deepEqual(await store.chainSettledSince({ cursor: "t", limit: 100 }), [], "the first read starts now");
          const solo = await insertCreated(store, { originalRequestId: "solo" });
          const a = await insertCreated(store, { originalRequestId: "pair", runAt: T0 + 1 });
          const b = await insertCreated(store, { originalRequestId: "pair", runAt: T0 + 2 });
          clock.advance(100);
          await finish(store, solo.id);
          await finish(store, a.id);
          // PostgreSQL reads a few seconds behind now (outcomes still committing may carry earlier times).
          clock.advance(5000);
          assert.deepEqual(await store.chainSettledSince({ cursor: "t", limit: 100 }), [
            { originalRequestId: "solo", startedAt: T0, settledAt: T0 + 100 },
          ]);
          await finish(store, b.id);
          clock.advance(5000);
          assert.deepEqual(await store.chainSettledSince({ cursor: "t", limit: 100 }), [
            { originalRequestId: "pair", startedAt: T0, settledAt: T0 + 5100 },
          ]);
          assert.deepEqual(await store.chainSettledSince({ cursor: "t", limit: 100 }), [], "each settling once");
          const late = await insertCreated(store, { originalRequestId: "pair" });
          clock.advance(1);
          await finish(store, late.id);
          clock.advance(5000);
          assert.deepEqual(
            (await store.chainSettledSince({ cursor: "t", limit: 100 })).map((chain) => chain.originalRequestId),
            ["pair"],
          );
        },
      );
    });
  });
}

/**
 * jobInsert: defaults, dedupe upserts and conflicts, the spawn cap, inserts into cancelled chains and
 * group commit (docs/api.md enqueueJob steps 5–7).
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
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
  type Suite,
} from "./harness.js";

/** Registers the insert cases. */
export function insertCases(suite: Suite): void {
  describe("jobInsert", () => {
    suite.case(
      "creates a pending job with attempt 0, createdAt = now and every given field",
      async ({ store, clock }) => {
        clock.advance(1234);
        const params = jobParams({
          priority: 7,
          runAt: T0 + 60_000,
          maxAttempts: 3,
          dedupeKey: "welcome:42",
          concurrencyKey: "user:42",
          rateKey: null,
          parentJobId: "parentjob1",
          originalRequestId: "req-9",
          userId: "u9",
          authority: { kind: "resource", resource_id: "r1", resource_kind: "doc", user_id: "u9", assertion: "a.b.c" },
          request: { body: [1, "two", { three: null }], path_params: { userId: "42" }, query: { page: 2 } },
        });
        const outcome = await store.jobInsert(params);
        assert.equal(outcome.kind, "created");
        const job = (outcome as { job: JobRow }).job;
        const expected: Omit<JobRow, "seq"> = {
          id: params.id,
          operationId: params.operationId,
          status: "pending",
          attempt: 0,
          maxAttempts: 3,
          priority: 7,
          runAt: T0 + 60_000,
          createdAt: T0 + 1234,
          startedAt: null,
          finishedAt: null,
          heartbeatAt: null,
          dedupeKey: "welcome:42",
          concurrencyKey: "user:42",
          rateKey: null,
          enqueuedByOperationId: params.enqueuedByOperationId,
          parentJobId: "parentjob1",
          originalRequestId: "req-9",
          userId: "u9",
          authority: params.authority,
          request: params.request,
          result: null,
          traceparent: null,
          expiresAt: null,
          callbacks: null,
          claimCount: 0,
        };
        const { seq, ...rest } = job;
        assert.equal(typeof seq, "number");
        assert.deepEqual(rest, expected);
        assert.deepEqual(await store.jobGet({ id: params.id }), job, "jobGet reads back what jobInsert returned");
      },
    );

    suite.case(
      "a run time given as a delay is due that long after the store's now, created now",
      async ({ store, clock }) => {
        clock.advance(1234);
        const params = jobParams({ runTime: { delayMs: 5000 } });
        const outcome = await store.jobInsert(params);
        assert.equal(outcome.kind, "created");
        const job = (outcome as { job: JobRow }).job;
        assert.equal(job.runAt, T0 + 1234 + 5000);
        assert.equal(job.createdAt, T0 + 1234);
        assert.deepEqual(await mustGet(store, params.id), job, "jobGet reads back the times jobInsert returned");
        clock.advance(4999);
        assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
        clock.advance(1);
        assert.equal((await claimNext(store, params.id)).startedAt, T0 + 1234 + 5000);
      },
    );

    suite.case("a run time given as a delay of zero is due at once", async ({ store, clock }) => {
      clock.advance(700);
      const job = await insertCreated(store, { runTime: { delayMs: 0 } });
      assert.equal(job.runAt, T0 + 700);
      await claimNext(store, job.id);
    });

    suite.case("numbers jobs in creation order with an increasing seq", async ({ store, clock }) => {
      const created: JobRow[] = [];
      for (let i = 0; i < 5; i++) {
        created.push(await insertCreated(store));
        clock.advance(10);
      }
      for (let i = 1; i < created.length; i++) {
        assert.ok((created[i] as JobRow).seq > (created[i - 1] as JobRow).seq, "seq follows creation order");
      }
      assert.deepEqual(
        created.map((job) => job.createdAt),
        [T0, T0 + 10, T0 + 20, T0 + 30, T0 + 40],
      );
    });

    suite.case("returns undefined from jobGet for an unknown id", async ({ store }) => {
      assert.equal(await store.jobGet({ id: "no-such-job-id" }), undefined);
    });

    suite.case(
      "dedupe upsert refreshes only runAt and request, keeping id, status, priority and attempt",
      async ({ store, clock }) => {
        const first = await insertCreated(store, { dedupeKey: "k", priority: 1, runAt: T0 + 1000, maxAttempts: 5 });
        clock.advance(500);
        const second = jobParams({
          dedupeKey: "k",
          priority: 9,
          runAt: T0 + 5000,
          maxAttempts: 2,
          concurrencyKey: "other",
          rateKey: null,
          request: { body: { refreshed: true } },
        });
        const outcome = await store.jobInsert(second);
        assert.equal(outcome.kind, "deduplicated");
        const job = (outcome as { job: JobRow }).job;
        assert.deepEqual(job, { ...first, runAt: T0 + 5000, request: { body: { refreshed: true } } });
        assert.deepEqual(await mustGet(store, first.id), job);
        assert.equal(await store.jobGet({ id: second.id }), undefined, "no second job is created");
        assert.equal((await allJobs(store)).length, 1);
      },
    );

    suite.case(
      "a dedupe upsert with a delay moves the held job's runAt to the store's now plus the delay",
      async ({ store, clock }) => {
        const first = await insertCreated(store, { dedupeKey: "k", runAt: T0 + 60_000 });
        clock.advance(2000);
        const outcome = await store.jobInsert(
          jobParams({ dedupeKey: "k", runTime: { delayMs: 3000 }, request: { body: 2 } }),
        );
        assert.equal(outcome.kind, "deduplicated");
        const job = (outcome as { job: JobRow }).job;
        assert.deepEqual(job, { ...first, runAt: T0 + 5000, request: { body: 2 } });
        assert.deepEqual(await mustGet(store, first.id), job);
        assert.equal(job.createdAt, T0, "the held job keeps its creation time");
      },
    );

    suite.case("dedupe upsert onto a retrying job keeps its status, attempt and result", async ({ store }) => {
      const retrying = await makeRetrying(store, { dedupeKey: "k" }, T0 + 10_000);
      const outcome = await store.jobInsert(jobParams({ dedupeKey: "k", runAt: T0 + 20, request: { body: 2 } }));
      assert.equal(outcome.kind, "deduplicated");
      assert.deepEqual((outcome as { job: JobRow }).job, { ...retrying, runAt: T0 + 20, request: { body: 2 } });
      assert.equal(retrying.status, "retrying");
      assert.equal(retrying.attempt, 1);
      assert.deepEqual(retrying.result, UNAVAILABLE);
    });

    suite.case("dedupe_conflict for a key held by another operation changes nothing", async ({ store }) => {
      const holder = await insertCreated(store, { dedupeKey: "k", operationId: "sendWelcomeEmail" });
      const before = await allJobs(store);
      const params = jobParams({ dedupeKey: "k", operationId: "buildReport", runAt: T0 + 99 });
      const outcome = await store.jobInsert(params);
      assert.equal(outcome.kind, "dedupe_conflict");
      assert.deepEqual((outcome as { holder: JobRow }).holder, holder);
      assert.deepEqual(await allJobs(store), before);
      assert.equal(await store.jobGet({ id: params.id }), undefined);
    });

    suite.case(
      "dedupe_conflict for a key held under another user or another kind of authority changes nothing",
      async ({ store }) => {
        const holder = await insertCreated(store, {
          dedupeKey: "k",
          userId: "u1",
          authority: { kind: "request", request_id: "req-1", user_id: "u1", assertion: "a.b.c" },
          runAt: T0 + 60_000,
          request: { body: { from: "u1" } },
        });
        const before = await allJobs(store);
        const otherUser = jobParams({
          dedupeKey: "k",
          userId: "u2",
          authority: { kind: "request", request_id: "req-2", user_id: "u2", assertion: "d.e.f" },
          runAt: T0 + 5,
          request: { body: { from: "u2" } },
        });
        const otherKind = jobParams({
          dedupeKey: "k",
          userId: "u1",
          authority: { kind: "resource", resource_id: "r1", resource_kind: "doc", user_id: "u1", assertion: "g.h.i" },
          runAt: T0 + 6,
          request: { body: { from: "u1 as resource" } },
        });
        for (const params of [otherUser, otherKind]) {
          assert.deepEqual(await store.jobInsert(params), { kind: "dedupe_conflict", holder });
          assert.equal(await store.jobGet({ id: params.id }), undefined);
        }
        assert.deepEqual(await allJobs(store), before, "the held job keeps its request and run time");
        // The same user under the same kind of authority still deduplicates.
        const same = await store.jobInsert(
          jobParams({
            dedupeKey: "k",
            userId: "u1",
            authority: { kind: "request", request_id: "req-3", user_id: "u1", assertion: "j.k.l" },
            runAt: T0 + 7,
            request: { body: { from: "u1 again" } },
          }),
        );
        assert.equal(same.kind, "deduplicated");
        assert.deepEqual((same as { job: JobRow }).job, {
          ...holder,
          runAt: T0 + 7,
          request: { body: { from: "u1 again" } },
        });
      },
    );

    suite.case("a running job does not hold its dedupe key: a new job is created beside it", async ({ store }) => {
      const running = await makeRunning(store, { dedupeKey: "k" });
      const created = await insertCreated(store, { dedupeKey: "k" });
      assert.notEqual(created.id, running.id);
      assert.equal(created.status, "pending");
      assert.equal((await mustGet(store, running.id)).status, "running");
      // The new job now holds the key.
      const again = await store.jobInsert(jobParams({ dedupeKey: "k" }));
      assert.equal(again.kind, "deduplicated");
      assert.equal((again as { job: JobRow }).job.id, created.id);
    });

    suite.case("terminal jobs do not hold their dedupe key", async ({ store }) => {
      await makeFinished(store, "succeeded", { dedupeKey: "a" });
      await makeFinished(store, "dead", { dedupeKey: "b" });
      const cancelled = await insertCreated(store, { dedupeKey: "c" });
      assert.equal((await store.jobCancel({ id: cancelled.id, actor: "admin" })).kind, "cancelled");
      for (const key of ["a", "b", "c"]) {
        await insertCreated(store, { dedupeKey: key });
      }
    });

    suite.case("a spawn_cap_exceeded insert changes nothing", async ({ store }) => {
      await insertCreated(store, { spawnCap: 1 });
      const before = await allJobs(store);
      const params = jobParams({ spawnCap: 1 });
      assert.deepEqual(await store.jobInsert(params), { kind: "spawn_cap_exceeded" });
      assert.deepEqual(await allJobs(store), before);
      assert.equal(await store.jobGet({ id: params.id }), undefined);
    });

    suite.case(
      "the spawn cap counts every job the chain created, whatever its status, cancelled-by-chain ones too",
      async ({ store }) => {
        const spawnCap = 5;
        await makeFinished(store, "succeeded", { spawnCap });
        await makeFinished(store, "dead", { spawnCap });
        const cancelledByAdmin = await insertCreated(store, { spawnCap });
        assert.equal((await store.jobCancel({ id: cancelledByAdmin.id, actor: "admin" })).kind, "cancelled");
        await store.chainCancel({ originalRequestId: "req-1", actor: "admin" });
        const byChain1 = await insertCreated(store, { spawnCap });
        const byChain2 = await insertCreated(store, { spawnCap });
        assert.equal(byChain1.status, "cancelled");
        assert.equal(byChain2.status, "cancelled");
        assert.deepEqual(await store.jobInsert(jobParams({ spawnCap })), { kind: "spawn_cap_exceeded" });
      },
    );

    suite.case("a dedupe upsert is not charged to the spawn cap, and succeeds on a full chain", async ({ store }) => {
      const spawnCap = 2;
      const holder = await insertCreated(store, { spawnCap, dedupeKey: "k" });
      for (let i = 0; i < 3; i++) {
        const outcome = await store.jobInsert(jobParams({ spawnCap, dedupeKey: "k" }));
        assert.equal(outcome.kind, "deduplicated");
      }
      await insertCreated(store, { spawnCap });
      assert.deepEqual(await store.jobInsert(jobParams({ spawnCap })), { kind: "spawn_cap_exceeded" });
      const upsert = await store.jobInsert(jobParams({ spawnCap, dedupeKey: "k", runAt: T0 + 7 }));
      assert.equal(upsert.kind, "deduplicated", "the dedupe step comes before the spawn cap");
      assert.equal((upsert as { job: JobRow }).job.id, holder.id);
    });

    suite.case("the spawn cap is counted per chain", async ({ store }) => {
      const spawnCap = 2;
      await insertCreated(store, { spawnCap, originalRequestId: "chain-a" });
      await insertCreated(store, { spawnCap, originalRequestId: "chain-a" });
      assert.deepEqual(await store.jobInsert(jobParams({ spawnCap, originalRequestId: "chain-a" })), {
        kind: "spawn_cap_exceeded",
      });
      await insertCreated(store, { spawnCap, originalRequestId: "chain-b" });
      await insertCreated(store, { spawnCap, originalRequestId: "chain-b" });
      assert.deepEqual(await store.jobInsert(jobParams({ spawnCap, originalRequestId: "chain-b" })), {
        kind: "spawn_cap_exceeded",
      });
    });

    suite.case(
      "after chainCancel, later inserts into the chain are created cancelled-by-chain",
      async ({ store, clock }) => {
        await insertCreated(store, { originalRequestId: "chain-a" });
        await store.chainCancel({ originalRequestId: "chain-a", actor: "admin" });
        clock.advance(5000);
        const job = await insertCreated(store, { originalRequestId: "chain-a", dedupeKey: "k", concurrencyKey: "c" });
        assert.equal(job.status, "cancelled");
        assert.equal(job.attempt, 0);
        assert.equal(job.finishedAt, T0 + 5000);
        assert.equal(job.startedAt, null);
        assert.deepEqual(job.result, { error_body: null, terminal_reason: "cancelled-by-chain" });
        assert.deepEqual(await mustGet(store, job.id), job);
        assert.deepEqual(await store.jobClaimMany({ limit: 10 }), [], "a cancelled job is never claimed");
        // A cancelled job holds no dedupe key: another chain creates its own job with that key.
        const other = await insertCreated(store, { originalRequestId: "chain-b", dedupeKey: "k" });
        assert.equal(other.status, "pending");
      },
    );

    suite.case("chainCancel on a chain with no jobs yet still cancels its later inserts", async ({ store }) => {
      assert.deepEqual(await store.chainCancel({ originalRequestId: "future", actor: "admin" }), []);
      const job = await insertCreated(store, { originalRequestId: "future" });
      assert.equal(job.status, "cancelled");
      assert.deepEqual(job.result, { error_body: null, terminal_reason: "cancelled-by-chain" });
      const elsewhere = await insertCreated(store, { originalRequestId: "present" });
      assert.equal(elsewhere.status, "pending");
    });

    suite.case(
      "group commit: 200 inserts started in one tick all resolve with distinct ids and all exist",
      async ({ store }) => {
        const params = Array.from({ length: 200 }, (_, i) => jobParams({ request: { body: i } }));
        const outcomes = await Promise.all(params.map((p) => store.jobInsert(p)));
        const ids = new Set<string>();
        outcomes.forEach((outcome, i) => {
          assert.equal(outcome.kind, "created");
          const job = (outcome as { job: JobRow }).job;
          assert.equal(job.id, params[i]?.id, "each promise answers its own insert");
          assert.deepEqual(job.request, { body: i });
          ids.add(job.id);
        });
        assert.equal(ids.size, 200);
        const stored = await allJobs(store);
        assert.equal(stored.length, 200);
        assert.deepEqual(new Set(stored.map((job) => job.id)), ids);
        assert.equal(new Set(stored.map((job) => job.seq)).size, 200, "every job has its own seq");
      },
    );

    suite.case(
      "group commit: inserts of one dedupe key in one batch yield one created and the rest deduplicated",
      async ({ store }) => {
        const params = Array.from({ length: 6 }, (_, i) => jobParams({ dedupeKey: "k", request: { body: i } }));
        const outcomes = await Promise.all(params.map((p) => store.jobInsert(p)));
        const created = outcomes.filter((outcome) => outcome.kind === "created");
        const deduplicated = outcomes.filter((outcome) => outcome.kind === "deduplicated");
        assert.equal(created.length, 1);
        assert.equal(deduplicated.length, 5);
        const holderId = (created[0] as { job: JobRow }).job.id;
        for (const outcome of deduplicated) assert.equal((outcome as { job: JobRow }).job.id, holderId);
        const stored = await allJobs(store);
        assert.equal(stored.length, 1);
        assert.equal(stored[0]?.id, holderId);
        assert.ok(
          params.some((p) => JSON.stringify(p.request) === JSON.stringify(stored[0]?.request)),
          "the stored request is one of the batch's",
        );
      },
    );

    suite.case(
      "group commit: a failing insert fails alone, the others of its batch are committed",
      async ({ store }) => {
        const taken = await insertCreated(store);
        const good = Array.from({ length: 5 }, () => jobParams());
        const settled = await Promise.allSettled([
          store.jobInsert(good[0]!),
          store.jobInsert(good[1]!),
          store.jobInsert(jobParams({ id: taken.id })),
          store.jobInsert(good[2]!),
          store.jobInsert(good[3]!),
          store.jobInsert(good[4]!),
        ]);
        assert.equal(settled[2]?.status, "rejected", "an insert reusing an existing id fails");
        settled
          .filter((_, i) => i !== 2)
          .forEach((result) => {
            assert.equal(result.status, "fulfilled");
            assert.equal((result as PromiseFulfilledResult<{ kind: string }>).value.kind, "created");
          });
        for (const p of good) assert.ok(await store.jobGet({ id: p.id }), "the good inserts are stored");
        assert.deepEqual(await mustGet(store, taken.id), taken, "the existing job is untouched");
      },
    );
  });
}

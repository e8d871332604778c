/**
 * EnqueueStore (src/store/roles/enqueue.ts): jobInsert (defaults, dedupe upserts and conflicts, the spawn cap, inserts
 * into cancelled chains, group commit: docs/api.md enqueueJob steps 5–7; the expiry and trace context a job is enqueued
 * with: docs/api.md, "Expiry", docs/tracing.md), jobInsertMany (docs/api.md, "Batch enqueue") and idempotency keys
 * (docs/api.md, "Idempotency"), on the store's clock.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import type { JobRow } from "../../../src/job/job.js";
import type { JobInsertOutcome } from "../../../src/store/store.js";
import {
  allJobs,
  claimNext,
  HOUR_MS,
  idempotencyKey as key,
  insertCreated,
  insertKeyed,
  jobOf,
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

/** Registers the enqueue cases. */
export function enqueueCases(suite: Suite): void {
  describe("EnqueueStore: inserts, batches and idempotency keys", () => {
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
        assert.equal((await store.jobCancel({ id: cancelled.id, actor: "admin", role: "admin" })).kind, "cancelled");
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
          assert.equal(
            (await store.jobCancel({ id: cancelledByAdmin.id, actor: "admin", role: "admin" })).kind,
            "cancelled",
          );
          await store.chainCancel({ originalRequestId: "req-1", actor: "admin", role: "admin" });
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
          await store.chainCancel({ originalRequestId: "chain-a", actor: "admin", role: "admin" });
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
        assert.deepEqual(await store.chainCancel({ originalRequestId: "future", actor: "admin", role: "admin" }), []);
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

      suite.case(
        "a dedupe upsert gives the job the new call's expiry; an administrator's retry takes it away",
        async ({ store, clock }) => {
          const holder = await insertCreated(store, { dedupeKey: "dk", expiry: { at: T0 + 1000 } });
          const upsert = await store.jobInsert(jobParams({ dedupeKey: "dk", expiry: { at: T0 + 9000 } }));
          assert.equal(upsert.kind, "deduplicated");
          assert.equal(jobOf(upsert).expiresAt, T0 + 9000);
          clock.advance(9000);
          await store.jobExpireMany({ limit: 10 });
          assert.equal((await mustGet(store, holder.id)).result?.terminal_reason, "expired");
          const retried = await store.jobRetry({ id: holder.id, actor: "admin", role: "admin" });
          assert.equal(retried.kind, "retried");
          assert.equal((await mustGet(store, holder.id)).expiresAt, null);
          assert.deepEqual(
            (await store.jobClaimMany({ limit: 1 })).map((job) => job.id),
            [holder.id],
          );
        },
      );

      suite.case(
        "a job keeps the trace context it was enqueued with; claims, reads and dedupe upserts carry it",
        async ({ store }) => {
          const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
          const job = await insertCreated(store, { traceparent });
          assert.equal(job.traceparent, traceparent);
          assert.equal((await mustGet(store, job.id)).traceparent, traceparent);
          assert.equal((await claimNext(store, job.id)).traceparent, traceparent);
          const plain = await insertCreated(store);
          assert.equal((await mustGet(store, plain.id)).traceparent, null);
        },
      );
    });

    describe("jobInsertMany", () => {
      suite.case(
        "a batch insert answers each item in order, as single inserts would, and commits them together",
        async ({ store }) => {
          const holder = await insertCreated(store, { dedupeKey: "dk", operationId: "sendWelcomeEmail" });
          await store.chainCancel({ originalRequestId: "gone", actor: "admin", role: "admin" });
          const settled = await store.jobInsertMany({
            jobs: [
              jobParams({ originalRequestId: "capped", spawnCap: 2 }),
              jobParams({ dedupeKey: "dk", request: { path_params: { userId: "42" }, body: { v: 2 } } }),
              jobParams({ dedupeKey: "dk", operationId: "recordEmailSent" }),
              jobParams({ originalRequestId: "capped", spawnCap: 2 }),
              jobParams({ originalRequestId: "capped", spawnCap: 2 }),
              jobParams({ originalRequestId: "gone" }),
            ],
          });
          const kinds = settled.map((item) => (item.ok ? item.value.kind : "error"));
          assert.deepEqual(kinds, [
            "created",
            "deduplicated",
            "dedupe_conflict",
            "created",
            "spawn_cap_exceeded",
            "created",
          ]);
          const [first, deduped, , , , cancelled] = settled.map((item) => (item.ok ? item.value : undefined));
          assert.equal(jobOf(deduped as JobInsertOutcome).id, holder.id);
          assert.deepEqual(
            (await mustGet(store, holder.id)).request.body,
            { v: 2 },
            "the upsert refreshed the request",
          );
          assert.equal(
            jobOf(cancelled as JobInsertOutcome).status,
            "cancelled",
            "a job of a cancelled chain is created cancelled",
          );
          const created = jobOf(first as JobInsertOutcome);
          assert.deepEqual(await mustGet(store, created.id), created, "the created row is what the store holds");
          assert.equal((await allJobs(store)).length, 4);
          assert.deepEqual(await store.jobInsertMany({ jobs: [] }), []);
        },
      );

      suite.case(
        "a batch's jobs are numbered in the items' order, whether an item is plain or has a dedupe key, and a chain is charged for each created job",
        async ({ store }) => {
          await store.chainCancel({ originalRequestId: "gone", actor: "admin", role: "admin" });
          // Callbacks and a request whose key order is kept as written, on a plain item and on one after a dedupe key.
          const callbacks = {
            on_complete: {
              operation_id: "recordEmailSent",
              request: { query: { z: "1", a: "é" }, path_params: { emailId: "7" } },
            },
          };
          const request = { path_params: { userId: "42" }, body: { zeta: 1, ab: { y: null, b: "\u2028" } } };
          const items = [
            jobParams({ originalRequestId: "three", spawnCap: 3, callbacks, request }),
            jobParams({ originalRequestId: "other", rateKey: "tenant-1", priority: 5 }),
            jobParams({ originalRequestId: "three", spawnCap: 3 }),
            jobParams({ dedupeKey: "dk-order" }),
            jobParams({ originalRequestId: "three", spawnCap: 3, callbacks, request }),
            jobParams({ originalRequestId: "gone" }),
          ];
          const settled = await store.jobInsertMany({ jobs: items });
          const jobs = settled.map((item) => (item.ok ? jobOf(item.value) : assert.fail(String(item.error))));
          assert.deepEqual(
            jobs.map((job) => job.id),
            items.map((item) => item.id),
          );
          const seqs = jobs.map((job) => job.seq);
          assert.deepEqual(
            seqs,
            [...seqs].sort((a, b) => a - b),
            "seqs increase in the items' order",
          );
          assert.deepEqual(
            jobs.map((job) => job.status),
            ["pending", "pending", "pending", "pending", "pending", "cancelled"],
          );
          for (const job of jobs) assert.deepEqual(await mustGet(store, job.id), job, "answered as stored");
          for (const index of [0, 4]) {
            const stored = await mustGet(store, items[index]?.id as string);
            assert.deepEqual(stored.callbacks, callbacks);
            assert.equal(JSON.stringify(stored.request), JSON.stringify(request), "the request's keys in their order");
          }
          assert.deepEqual(
            await store.jobInsert(jobParams({ originalRequestId: "three", spawnCap: 3 })),
            { kind: "spawn_cap_exceeded" },
            "the batch's three jobs charged their chain",
          );
        },
      );

      suite.case(
        "a batch of plain jobs whose chain has room for only some of them: created up to the cap in order, the rest refused, the other chains' jobs created",
        async ({ store }) => {
          const before = await insertCreated(store, { originalRequestId: "tight", spawnCap: 3 });
          const items = [
            jobParams({ originalRequestId: "tight", spawnCap: 3 }),
            jobParams({ originalRequestId: "roomy", spawnCap: 3 }),
            jobParams({ originalRequestId: "tight", spawnCap: 3 }),
            jobParams({ originalRequestId: "tight", spawnCap: 3 }),
            jobParams({ originalRequestId: "roomy", spawnCap: 3 }),
          ];
          const settled = await store.jobInsertMany({ jobs: items });
          const outcomes = settled.map((item) => (item.ok ? item.value : assert.fail(String(item.error))));
          assert.deepEqual(
            outcomes.map((outcome) => outcome.kind),
            ["created", "created", "created", "spawn_cap_exceeded", "created"],
          );
          const seqs = outcomes.filter((outcome) => outcome.kind === "created").map((outcome) => jobOf(outcome).seq);
          assert.ok(before.seq < (seqs[0] as number));
          assert.deepEqual(
            seqs,
            [...seqs].sort((a, b) => a - b),
            "seqs increase in the items' order",
          );
          assert.equal((await allJobs(store)).length, 5, "nothing of a refused item stays");
          assert.equal((await store.jobInsert(jobParams({ originalRequestId: "roomy", spawnCap: 3 }))).kind, "created");
          assert.deepEqual(await store.jobInsert(jobParams({ originalRequestId: "roomy", spawnCap: 3 })), {
            kind: "spawn_cap_exceeded",
          });
        },
      );

      suite.case(
        "a batch item the database refuses fails alone: the items before and after it are committed",
        async ({ store }) => {
          const first = jobParams();
          const settled = await store.jobInsertMany({ jobs: [first, jobParams({ id: first.id }), jobParams()] });
          // Two jobs of one id: either may be the one refused
          // (PostgreSQL retries a failed batch item by item, at once).
          assert.deepEqual(settled.map((item) => item.ok).sort(), [false, true, true]);
          assert.equal((await allJobs(store)).length, 2);
        },
      );
    });

    describe("idempotency keys", () => {
      suite.case(
        "an idempotency key answers with the job it created, as the job is now, even after it ran",
        async ({ store, clock }) => {
          const created = jobOf(await insertKeyed(store, key("k1")));
          clock.advance(HOUR_MS);
          const replay = await insertKeyed(store, key("k1"));
          assert.equal(replay.kind, "idempotent_replay");
          assert.equal(jobOf(replay).id, created.id);
          await claimNext(store, created.id);
          const running = await mustGet(store, created.id);
          await store.jobSetStateIfRunningMany({
            outcomes: [{ id: created.id, attempt: running.attempt, status: "succeeded", result: SUCCESS }],
          });
          const afterRun = await insertKeyed(store, key("k1"));
          assert.equal(afterRun.kind, "idempotent_replay");
          assert.equal(jobOf(afterRun).status, "succeeded");
          assert.equal((await allJobs(store)).length, 1, "no second job");
        },
      );

      suite.case(
        "the same key with another body is a conflict; another caller's or another key is a new job",
        async ({ store }) => {
          const first = jobOf(await insertKeyed(store, key("k1", "body-1")));
          const conflict = await insertKeyed(store, key("k1", "body-2"));
          assert.equal(conflict.kind, "idempotency_conflict");
          assert.equal(jobOf(conflict).id, first.id);
          const otherCaller = await insertKeyed(store, {
            ...key("k1", "body-2"),
            scope: JSON.stringify(["createUser", "u2"]),
          });
          assert.equal(otherCaller.kind, "created");
          assert.equal((await insertKeyed(store, key("k2", "body-2"))).kind, "created");
          assert.equal((await allJobs(store)).length, 3);
        },
      );

      suite.case(
        "a key is remembered for its window only: past it, the same key makes a new job",
        async ({ store, clock }) => {
          const first = jobOf(await insertKeyed(store, key("k1", "body-1", HOUR_MS)));
          clock.advance(HOUR_MS - 1);
          assert.equal((await insertKeyed(store, key("k1", "body-1", HOUR_MS))).kind, "idempotent_replay");
          clock.advance(1);
          const again = await insertKeyed(store, key("k1", "body-2", HOUR_MS));
          assert.equal(again.kind, "created", "the window has passed: the key is free, whatever the body");
          assert.notEqual(jobOf(again).id, first.id);
          assert.equal(
            (await insertKeyed(store, key("k1", "body-2", HOUR_MS))).kind,
            "idempotent_replay",
            "and now answers for the new job",
          );
        },
      );

      suite.case(
        "a refused insert does not use its key up; a dedupe upsert's key answers with the job it refreshed",
        async ({ store }) => {
          await insertCreated(store, { originalRequestId: "full", spawnCap: 1 });
          const refused = await insertKeyed(store, key("k1"), { originalRequestId: "full", spawnCap: 1 });
          assert.equal(refused.kind, "spawn_cap_exceeded");
          assert.equal(
            (await insertKeyed(store, key("k1"), { originalRequestId: "free" })).kind,
            "created",
            "the key was free",
          );

          const holder = await insertCreated(store, { dedupeKey: "dk" });
          const upsert = await insertKeyed(store, key("k2"), { dedupeKey: "dk" });
          assert.equal(upsert.kind, "deduplicated");
          const replay = await insertKeyed(store, key("k2"), { dedupeKey: "dk" });
          assert.equal(replay.kind, "idempotent_replay");
          assert.equal(jobOf(replay).id, holder.id);
        },
      );
    });
  });
}

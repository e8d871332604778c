/**
 * What producers send beyond the contract (docs/api.md, "Batch enqueue", "Idempotency", "Expiry"; docs/tracing.md):
 * batches of inserts, idempotency keys that outlive their jobs, expiries, and the trace context kept with a job, on the
 * store's clock.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import type { JobRow } from "../../../src/job/job.js";
import type { IdempotencyParams, JobInsertOutcome, Store } from "../../../src/store/store.js";
import {
  allJobs,
  claimNext,
  insertCreated,
  jobParams,
  makeFinished,
  makeRetrying,
  mustGet,
  SUCCESS,
  T0,
  type JobOverrides,
  type Suite,
} from "./harness.js";

const HOUR_MS = 3600 * 1000;
const DAY_MS = 24 * HOUR_MS;

/** An idempotency key of caller "createUser"/"u1", with a fingerprint standing for the body. */
function key(name: string, fingerprint = "body-1", windowMs = DAY_MS): IdempotencyParams {
  return { scope: JSON.stringify(["createUser", "u1"]), key: name, fingerprint, windowMs };
}

/** Inserts with an idempotency key; returns the outcome. */
function insertKeyed(
  store: Store,
  idempotency: IdempotencyParams,
  overrides: JobOverrides = {},
): Promise<JobInsertOutcome> {
  return store.jobInsert(jobParams({ ...overrides, idempotency }));
}

function jobOf(outcome: JobInsertOutcome): JobRow {
  assert.ok("job" in outcome, `expected an outcome with a job, got ${outcome.kind}`);
  return outcome.job;
}

/** Registers the producer cases. */
export function producerCases(suite: Suite): void {
  describe("producers: batches, idempotency keys, expiry, trace context", () => {
    suite.case(
      "a batch insert answers each item in order, as single inserts would, and commits them together",
      async ({ store }) => {
        const holder = await insertCreated(store, { dedupeKey: "dk", operationId: "sendWelcomeEmail" });
        await store.chainCancel({ originalRequestId: "gone", actor: "admin" });
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
        assert.deepEqual((await mustGet(store, holder.id)).request.body, { v: 2 }, "the upsert refreshed the request");
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
      "a batch item the database refuses fails alone: the items before and after it are committed",
      async ({ store }) => {
        const first = jobParams();
        const settled = await store.jobInsertMany({ jobs: [first, jobParams({ id: first.id }), jobParams()] });
        // Two jobs of one id: either may be the one refused (PostgreSQL retries a failed batch item by item, at once).
        assert.deepEqual(settled.map((item) => item.ok).sort(), [false, true, true]);
        assert.equal((await allJobs(store)).length, 2);
      },
    );

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

    suite.case(
      "retention keeps a job a live key answers with, and deletes it with its key once the window has passed",
      async ({ store, clock }) => {
        const keyed = jobOf(await insertKeyed(store, key("k1", "body-1", 40 * DAY_MS), { priority: 10 }));
        const plain = await makeFinished(store, "succeeded");
        await claimNext(store, keyed.id);
        const running = await mustGet(store, keyed.id);
        await store.jobSetStateIfRunningMany({
          outcomes: [{ id: keyed.id, attempt: running.attempt, status: "succeeded", result: SUCCESS }],
        });
        clock.advance(31 * DAY_MS);
        assert.equal(await store.jobDeleteFinishedMany({ olderThanMs: 30 * DAY_MS, limit: 100 }), 1);
        assert.equal(await store.jobGet({ id: plain.id }), undefined);
        assert.equal(
          (await insertKeyed(store, key("k1", "body-1", 40 * DAY_MS))).kind,
          "idempotent_replay",
          "the key still answers",
        );
        assert.equal(await store.idempotencyKeyDeleteMany({ limit: 100 }), 0, "a live key stays");
        clock.advance(10 * DAY_MS);
        assert.equal(await store.idempotencyKeyDeleteMany({ limit: 100 }), 1);
        assert.equal(await store.jobDeleteFinishedMany({ olderThanMs: 30 * DAY_MS, limit: 100 }), 1);
        assert.equal(
          (await insertKeyed(store, key("k1", "body-1", 40 * DAY_MS))).kind,
          "created",
          "after retention, a new job",
        );
      },
    );

    suite.case(
      "a job is never claimed past its expiry, and the expirer ends it cancelled/expired, its dedupe key free",
      async ({ store, clock }) => {
        const soon = await insertCreated(store, { expiry: { delayMs: 1000 }, dedupeKey: "dk" });
        const late = await insertCreated(store, { expiry: { at: T0 + 5000 } });
        const never = await insertCreated(store);
        assert.equal(soon.expiresAt, T0 + 1000, "a relative expiry runs from the store's now");
        assert.equal((await mustGet(store, late.id)).expiresAt, T0 + 5000);
        assert.equal(never.expiresAt, null);
        clock.advance(1000);
        assert.deepEqual(await store.jobExpireMany({ limit: 10 }).then((jobs) => jobs.map((job) => job.id)), [soon.id]);
        const claimed = await store.jobClaimMany({ limit: 10 });
        assert.deepEqual(
          claimed.map((job) => job.id).sort(),
          [late.id, never.id].sort(),
          "an expired job is not claimed",
        );
        const expired = await mustGet(store, soon.id);
        assert.equal(expired.status, "cancelled");
        assert.deepEqual(expired.result, { error_body: null, terminal_reason: "expired" });
        assert.equal(expired.finishedAt, T0 + 1000);
        assert.equal((await store.jobInsert(jobParams({ dedupeKey: "dk" }))).kind, "created", "the dedupe key is free");
        assert.deepEqual(await store.jobExpireMany({ limit: 10 }), [], "a running job does not expire");
      },
    );

    suite.case(
      "claims skip a job whose expiry has passed even before the expirer ran; jobNextRunAt leaves it out",
      async ({ store, clock }) => {
        const job = await insertCreated(store, { runAt: T0 + 10_000, expiry: { at: T0 + 20_000 } });
        assert.equal(await store.jobNextRunAt(), T0 + 10_000);
        clock.advance(25_000);
        assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
        assert.equal(await store.jobNextRunAt(), null, "an expired job is nothing a claim could take");
        assert.equal((await mustGet(store, job.id)).status, "pending", "until the expirer ends it");
      },
    );

    suite.case(
      "a retrying job past its expiry ends expired, keeping its last attempt's result",
      async ({ store, clock }) => {
        const job = await makeRetrying(store, { expiry: { at: T0 + 30_000 } }, T0 + 60_000);
        clock.advance(30_000);
        const [expired] = await store.jobExpireMany({ limit: 10 });
        assert.equal(expired?.id, job.id);
        assert.deepEqual(expired?.result, {
          status_code: 503,
          error_body: "upstream busy",
          terminal_reason: "expired",
        });
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
        const retried = await store.jobRetry({ id: holder.id, actor: "admin" });
        assert.equal(retried.kind, "retried");
        assert.equal((await mustGet(store, holder.id)).expiresAt, null);
        assert.deepEqual(
          (await store.jobClaimMany({ limit: 1 })).map((job) => job.id),
          [holder.id],
        );
      },
    );

    suite.case("an expiry racing a claim: exactly one of them wins, whichever runs first", async ({ store, clock }) => {
      const jobs = await Promise.all(
        Array.from({ length: 20 }, () => insertCreated(store, { expiry: { at: T0 + 1000 } })),
      );
      // The claim is asked with the clock before the expiry, the expirer after it, both on their way at once.
      clock.set(T0 + 999);
      const claim = store.jobClaimMany({ limit: 10 });
      clock.set(T0 + 1000);
      const expire = store.jobExpireMany({ limit: 100 });
      const [claimed, expired] = await Promise.all([claim, expire]);
      // On PostgreSQL the expirer skips the rows the claim holds locked (its candidates, more than it takes): the next
      // pass ends those it left.
      const later = await store.jobExpireMany({ limit: 100 });
      const claimedIds = new Set(claimed.map((job) => job.id));
      for (const job of [...expired, ...later])
        assert.ok(!claimedIds.has(job.id), `job ${job.id} was both claimed and expired`);
      for (const job of jobs) {
        const now = await mustGet(store, job.id);
        if (claimedIds.has(job.id)) assert.equal(now.status, "running");
        else assert.equal(now.status, "cancelled");
      }
      assert.equal(claimed.length + expired.length + later.length, jobs.length);
    });

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
}

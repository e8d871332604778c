/**
 * jobList (filters, newest first, cursor paging) and the store's life cycle: its clock, ping, and a closed store
 * refusing every call with `StoreUnavailableError`.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import type { Store } from "../../../src/store/store.js";
import type { JobRow } from "../../../src/job/job.js";
import { StoreUnavailableError } from "../../../src/store/store.js";
import { NO_LIMITS } from "../../../src/flow/limits.js";
import {
  allJobs,
  insertCreated,
  jobParams,
  makeFinished,
  makeRetrying,
  makeRunning,
  scheduleFields,
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
  await store.jobCancel({ id: cancelled.id, actor: "admin" });
  jobs.push(cancelled);
  return jobs;
}

/** Registers the list and life-cycle cases. */
export function listCases(suite: Suite): void {
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
        assert.deepEqual(ids(await store.jobList({ limit: 10, dedupeKey: "welcome:42", userId: "u2" })), [waiting.id]);
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

  describe("life cycle", () => {
    suite.case("ping resolves on an open store", async ({ store }) => {
      await store.ping();
    });

    suite.case(
      "a store driven by a test clock reads it for now() and measures no clock offset",
      async ({ store, clock }) => {
        assert.equal(store.now(), T0);
        assert.equal(await store.clockOffset(), 0);
        clock.advance(90_000);
        assert.equal(store.now(), T0 + 90_000, "now() follows the clock it was opened with");
        assert.equal(await store.clockOffset(), 0);
        assert.equal(store.now(), T0 + 90_000, "measuring the offset leaves now() on that clock");
      },
    );

    suite.case("ping rejects with StoreUnavailableError once the store is closed", async ({ store }) => {
      await store.close();
      await assert.rejects(() => store.ping(), StoreUnavailableError);
    });

    suite.case("every method of a closed store rejects with StoreUnavailableError", async ({ store }) => {
      const job = await insertCreated(store);
      await store.close();
      // Typed over every method of Store, so a method added to the interface must be added here too. `now` reads a
      // clock, not the database, and `clockOffset` of a store driven by a test clock asks the database nothing.
      const calls: { [K in Exclude<keyof Store, "engine" | "close" | "now" | "clockOffset">]: () => Promise<unknown> } =
        {
          ping: () => store.ping(),
          jobInsert: () => store.jobInsert(jobParams()),
          jobInsertMany: () => store.jobInsertMany({ jobs: [jobParams()] }),
          jobExpireMany: () => store.jobExpireMany({ limit: 10 }),
          idempotencyKeyDeleteMany: () => store.idempotencyKeyDeleteMany({ limit: 10 }),
          jobAttemptListMany: () => store.jobAttemptListMany({ ids: [job.id] }),
          jobCallbackDueList: () => store.jobCallbackDueList({ limit: 10 }),
          jobCallbackEnqueue: () => store.jobCallbackEnqueue({ jobId: job.id, status: "succeeded", insert: null }),
          chainSettledDueList: () => store.chainSettledDueList({ limit: 10 }),
          chainOnSettledEnqueue: () => store.chainOnSettledEnqueue({ originalRequestId: "req-1", insert: jobParams() }),
          chainSettledSince: () => store.chainSettledSince({ cursor: "test", limit: 10 }),
          chainGet: () => store.chainGet({ originalRequestId: "req-1" }),
          chainJobCounts: () => store.chainJobCounts({ originalRequestId: job.originalRequestId }),
          jobGet: () => store.jobGet({ id: job.id }),
          jobList: () => store.jobList({ limit: 10 }),
          jobCancel: () => store.jobCancel({ id: job.id, actor: "admin" }),
          jobRetry: () => store.jobRetry({ id: job.id, actor: "admin" }),
          chainCancel: () => store.chainCancel({ originalRequestId: "req-1", actor: "admin" }),
          jobRunNow: () => store.jobRunNow({ id: job.id, actor: "admin" }),
          adminActionList: () => store.adminActionList({ jobId: job.id }),
          jobClaimMany: () => store.jobClaimMany({ limit: 10 }),
          jobSetStateIfRunningMany: () =>
            store.jobSetStateIfRunningMany({
              outcomes: [
                { id: job.id, attempt: 1, status: "succeeded", result: { error_body: null, terminal_reason: null } },
              ],
            }),
          jobHeartbeatMany: () => store.jobHeartbeatMany({ jobs: [{ id: job.id, attempt: 1 }] }),
          jobListExpired: () => store.jobListExpired({ lease: { defaultMs: 0, byOperation: {} }, limit: 10 }),
          jobMarkAsyncIfRunning: () => store.jobMarkAsyncIfRunning({ job: { id: job.id, attempt: 1 }, tokenHash: "h" }),
          jobHeartbeatExternal: () =>
            store.jobHeartbeatExternal({
              id: job.id,
              attempt: 1,
              token: { hash: "h", expired: false, claim: 1 },
              progressJson: "1",
            }),
          jobSetStateExternal: () =>
            store.jobSetStateExternal({
              outcome: {
                id: job.id,
                attempt: 1,
                status: "succeeded",
                result: { error_body: null, terminal_reason: null },
              },
              token: { hash: "h", expired: false, claim: 1 },
            }),
          jobAsyncStateGet: () => store.jobAsyncStateGet({ id: job.id }),
          jobRequeueMany: () =>
            store.jobRequeueMany({
              jobs: [{ id: job.id, attempt: 1 }],
              delayMs: 0,
              errorBody: "shutdown",
              refund: "if-last",
            }),
          jobNextRunAt: () => store.jobNextRunAt(),
          cronTickInsert: () => store.cronTickInsert({ name: "nightly", tickAt: T0, job: jobParams() }),
          jobDeleteFinishedMany: () => store.jobDeleteFinishedMany({ olderThanMs: 0, limit: 10 }),
          cronTickDeleteMany: () => store.cronTickDeleteMany({ olderThanMs: 0 }),
          jobStats: () => store.jobStats(),
          jobAvailableListen: () => store.jobAvailableListen(() => undefined),
          jobAttemptList: () => store.jobAttemptList({ id: job.id }),
          attemptBuckets: () => store.attemptBuckets({ since: T0, bucketMs: 60_000 }),
          attemptCountDeleteMany: () => store.attemptCountDeleteMany({ olderThanMs: 0 }),
          jobRetryDeadMany: () => store.jobRetryDeadMany({ filter: {}, limit: 10, actor: "admin" }),
          jobCancelMany: () =>
            store.jobCancelMany({ filter: { statuses: ["pending"], userId: "u" }, limit: 10, actor: "admin" }),
          operationLimitsConfigure: () => store.operationLimitsConfigure({ limits: [] }),
          operationControlList: () => store.operationControlList(),
          operationPause: () => store.operationPause({ operationId: "op", actor: "admin" }),
          operationResume: () => store.operationResume({ operationId: "op" }),
          operationLimitsSet: () =>
            store.operationLimitsSet({ operationId: "op", limits: { ...NO_LIMITS }, source: "admin", actor: "admin" }),
          concurrencyKeyPause: () => store.concurrencyKeyPause({ key: "k", actor: "admin" }),
          concurrencyKeyResume: () => store.concurrencyKeyResume({ key: "k" }),
          pausedKeyList: () => store.pausedKeyList(),
          rateBucketDeleteMany: () => store.rateBucketDeleteMany(),
          cronTickLatestMany: () => store.cronTickLatestMany({ names: ["nightly"] }),
          scheduleCreate: () =>
            store.scheduleCreate({
              schedule: scheduleFields("hourly"),
              revision: "r1",
              actor: "admin",
              maxSchedules: 10,
            }),
          scheduleGet: () => store.scheduleGet({ name: "hourly" }),
          scheduleList: () => store.scheduleList(),
          scheduleUpdate: () =>
            store.scheduleUpdate({
              schedule: scheduleFields("hourly"),
              ifRevision: "r1",
              revision: "r2",
              actor: "admin",
            }),
          schedulePause: () => store.schedulePause({ name: "hourly", actor: "admin" }),
          scheduleResume: () => store.scheduleResume({ name: "hourly" }),
          scheduleDelete: () => store.scheduleDelete({ name: "hourly" }),
          scheduleChangeListen: () => store.scheduleChangeListen(() => undefined),
        };
      for (const [name, call] of Object.entries(calls)) {
        await assert.rejects(call, StoreUnavailableError, `${name} on a closed store`);
      }
    });

    suite.case("inserts waiting for their group commit are committed by close", async ({ store }) => {
      const params = Array.from({ length: 3 }, () => jobParams());
      const pending = params.map((p) => store.jobInsert(p));
      await store.close();
      for (const outcome of await Promise.all(pending)) assert.equal(outcome.kind, "created");
    });
  });
}

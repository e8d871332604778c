/**
 * StoreLifecycle (src/store/roles/lifecycle.ts): the store's clock (now, clockOffset), ping, and close: a closed store
 * refuses every call with `StoreUnavailableError`, after committing the inserts it had accepted.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import type { Store } from "../../../src/store/store.js";
import { StoreUnavailableError } from "../../../src/store/store.js";
import { NO_LIMITS } from "../../../src/flow/limits.js";
import { insertCreated, jobParams, scheduleFields, T0, type Suite } from "./harness.js";

/** Registers the life-cycle cases. */
export function lifecycleCases(suite: Suite): void {
  describe("StoreLifecycle: the clock, ping and close", () => {
    describe("now and clockOffset", () => {
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
    });

    describe("ping", () => {
      suite.case("ping resolves on an open store", async ({ store }) => {
        await store.ping();
      });

      suite.case("ping rejects with StoreUnavailableError once the store is closed", async ({ store }) => {
        await store.close();
        await assert.rejects(() => store.ping(), StoreUnavailableError);
      });
    });

    describe("close", () => {
      suite.case("every method of a closed store rejects with StoreUnavailableError", async ({ store }) => {
        const job = await insertCreated(store);
        await store.close();
        // Typed over every method of Store, so a method added to the interface must be added here too. `now` reads a
        // clock, not the database, and `clockOffset` of a store driven by a test clock asks the database nothing.
        const calls: {
          [K in Exclude<keyof Store, "engine" | "close" | "now" | "clockOffset">]: () => Promise<unknown>;
        } = {
          ping: () => store.ping(),
          jobInsert: () => store.jobInsert(jobParams()),
          jobInsertMany: () => store.jobInsertMany({ jobs: [jobParams()] }),
          jobExpireMany: () => store.jobExpireMany({ limit: 10 }),
          statisticsRefresh: () => store.statisticsRefresh(),
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
          jobCancel: () => store.jobCancel({ id: job.id, actor: "admin", role: "admin" }),
          jobRetry: () => store.jobRetry({ id: job.id, actor: "admin", role: "admin" }),
          chainCancel: () => store.chainCancel({ originalRequestId: "req-1", actor: "admin", role: "admin" }),
          jobRunNow: () => store.jobRunNow({ id: job.id, actor: "admin", role: "admin" }),
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
          jobRetryDeadMany: () => store.jobRetryDeadMany({ filter: {}, limit: 10, actor: "admin", role: "admin" }),
          jobCancelMany: () =>
            store.jobCancelMany({
              filter: { statuses: ["pending"], userId: "u" },
              limit: 10,
              actor: "admin",
              role: "admin",
            }),
          operationLimitsConfigure: () => store.operationLimitsConfigure({ limits: [] }),
          operationControlList: () => store.operationControlList(),
          operationPause: () => store.operationPause({ operationId: "op", actor: "admin" }),
          operationResume: () => store.operationResume({ operationId: "op" }),
          operationLimitsSet: () =>
            store.operationLimitsSet({ operationId: "op", limits: { ...NO_LIMITS }, source: "admin", actor: "admin" }),
          concurrencyKeyPause: () => store.concurrencyKeyPause({ key: "k", actor: "admin" }),
          concurrencyKeyResume: () => store.concurrencyKeyResume({ key: "k" }),
          pausedKeyList: () => store.pausedKeyList(),
          userErase: () =>
            store.userErase({ userId: "u", cancelWaiting: false, limit: 1, actor: "a", role: "admin", subject: "s" }),
          payloadPage: () => store.payloadPage({ table: "jobs", after: null, limit: 1 }),
          payloadRewrite: () =>
            store.payloadRewrite({ table: "jobs", changes: [{ key: "1", column: "request", from: "a", to: "b" }] }),
          adminTokenRevoke: () => store.adminTokenRevoke({ jti: "j", actor: "a" }),
          adminTokenCutoffRaise: () => store.adminTokenCutoffRaise({ issuedBefore: 1, actor: "a" }),
          adminTokenIsRevoked: () => store.adminTokenIsRevoked({ jti: "j", issuedAt: 1 }),
          adminRevocationList: () => store.adminRevocationList({ limit: 1 }),
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
  });
}

/**
 * UpkeepStore (src/store/roles/upkeep.ts): what the periodic services do (docs/delivery.md, "Leases, heartbeats and
 * rescue"–§9): find the running jobs past their lease (jobListExpired, the asynchronous lease too), end the jobs past
 * their expiry (jobExpireMany: docs/api.md, "Expiry"), and retention: jobDeleteFinishedMany, idempotencyKeyDeleteMany,
 * cronTickDeleteMany and rateBucketDeleteMany, each on the store's clock.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import { JOB_STATUSES } from "../../../src/job/schemas.js";
import type { Store } from "../../../src/store/store.js";
import type { LeaseLimits } from "../../../src/job/job.js";
import type { JobRow } from "../../../src/job/job.js";
import {
  allJobs,
  assertUnchanged,
  claimNext,
  cronJob,
  DAY_MS,
  idempotencyKey as key,
  insertAll,
  insertCreated,
  insertKeyed,
  jobOf,
  jobParams,
  makeAsync,
  makeCancelled,
  makeFinished,
  makeRetrying,
  makeRunning,
  mustGet,
  setOperationLimits as limit,
  SUCCESS,
  T0,
  type Suite,
} from "./harness.js";

const ids = (jobs: JobRow[]): string[] => jobs.map((job) => job.id);

/** One lease for every operation, or per operation where given. */
const lease = (defaultMs: number, byOperation: Record<string, number> = {}): LeaseLimits => ({
  defaultMs,
  byOperation,
});

/** Registers the upkeep cases. */
export function upkeepCases(suite: Suite): void {
  describe("UpkeepStore: lease rescue, expiry and retention", () => {
    describe("jobListExpired", () => {
      /** Running jobs with heartbeats a = T0, c = T0 + 200, b = T0 + 300, and jobs in every other status. */
      async function leases(
        store: Store,
        clock: { advance(ms: number): void },
      ): Promise<Record<"a" | "b" | "c", JobRow>> {
        await makeFinished(store, "succeeded");
        await makeFinished(store, "dead");
        await makeCancelled(store);
        const a = await makeRunning(store);
        clock.advance(100);
        const b = await makeRunning(store);
        clock.advance(100);
        const c = await makeRunning(store);
        clock.advance(100);
        await store.jobHeartbeatMany({ jobs: [{ id: b.id, attempt: 1 }] });
        await makeRetrying(store, {}, T0 + 60_000);
        await insertCreated(store, { runAt: T0 + 60_000 });
        return { a: await mustGet(store, a.id), b: await mustGet(store, b.id), c: await mustGet(store, c.id) };
      }

      suite.case(
        "lists running jobs without a heartbeat for longer than their lease, by the store's clock, oldest heartbeat first",
        async ({ store, clock }) => {
          const { a, b, c } = await leases(store, clock);
          assert.deepEqual([a.heartbeatAt, c.heartbeatAt, b.heartbeatAt], [T0, T0 + 200, T0 + 300]);
          clock.set(T0 + 1300);
          // Ages of the heartbeats now: a 1300, c 1100, b 1000.
          assert.deepEqual(await store.jobListExpired({ lease: lease(999), limit: 10 }), [a, c, b]);
          assert.deepEqual(
            ids(await store.jobListExpired({ lease: lease(1000), limit: 10 })),
            ids([a, c]),
            "strictly longer",
          );
          assert.deepEqual(ids(await store.jobListExpired({ lease: lease(1299), limit: 10 })), ids([a]));
          assert.deepEqual(await store.jobListExpired({ lease: lease(1300), limit: 10 }), []);
          clock.advance(1);
          assert.deepEqual(
            ids(await store.jobListExpired({ lease: lease(1300), limit: 10 })),
            ids([a]),
            "one more ms and a's lease has expired",
          );
        },
      );

      suite.case(
        "a per-operation lease holds that operation's jobs to its own limit; other operations use the default",
        async ({ store, clock }) => {
          const quick = await makeRunning(store, { operationId: "quickOp" });
          const plain = await makeRunning(store, { operationId: "sendWelcomeEmail" });
          const slow = await makeRunning(store, { operationId: "slowOp" });
          const limits = lease(2000, { quickOp: 500, slowOp: 10_000 });
          clock.advance(500);
          assert.deepEqual(
            await store.jobListExpired({ lease: limits, limit: 10 }),
            [],
            "500 ms is quickOp's whole lease, not past it",
          );
          clock.advance(1);
          assert.deepEqual(
            ids(await store.jobListExpired({ lease: limits, limit: 10 })),
            ids([quick]),
            "quickOp's shorter lease",
          );
          clock.set(T0 + 2001);
          assert.deepEqual(
            ids(await store.jobListExpired({ lease: limits, limit: 10 })).sort(),
            ids([quick, plain]).sort(),
            "the default lease for an operation the limits do not name",
          );
          clock.set(T0 + 10_000);
          assert.equal(
            (await store.jobListExpired({ lease: limits, limit: 10 })).length,
            2,
            "slowOp's longer lease still holds",
          );
          clock.set(T0 + 10_001);
          assert.deepEqual(
            ids(await store.jobListExpired({ lease: limits, limit: 10 })).sort(),
            ids([quick, plain, slow]).sort(),
          );
          await store.jobHeartbeatMany({ jobs: [{ id: quick.id, attempt: 1 }] });
          clock.advance(499);
          assert.deepEqual(
            ids(await store.jobListExpired({ lease: limits, limit: 10 })).sort(),
            ids([plain, slow]).sort(),
            "a heartbeat renews a lease",
          );
        },
      );

      suite.case(
        "the limit counts expired jobs only: older heartbeats still within a longer lease do not crowd them out",
        async ({ store, clock }) => {
          const slow = [
            await makeRunning(store, { operationId: "slowOp" }),
            await makeRunning(store, { operationId: "slowOp" }),
          ];
          clock.advance(100);
          const plain = await makeRunning(store, { operationId: "sendWelcomeEmail" });
          clock.advance(5000);
          const limits = lease(1000, { slowOp: 60_000 });
          // Oldest heartbeats first are the slowOp jobs (5100 ms), within their lease; the plain job (5000 ms) is past
          // its own. A rescuer asking for a batch must get the expired job, however many unexpired ones are older.
          assert.deepEqual(
            ids(await store.jobListExpired({ lease: limits, limit: 1 })),
            [plain.id],
            "the one expired job, though two older heartbeats come first",
          );
          assert.deepEqual(ids(await store.jobListExpired({ lease: limits, limit: 10 })), [plain.id]);
          clock.set(T0 + 60_001);
          assert.deepEqual(
            ids(await store.jobListExpired({ lease: limits, limit: 2 })).sort(),
            ids(slow).sort(),
            "oldest heartbeats first",
          );
        },
      );

      suite.case("never lists pending, retrying or finished jobs", async ({ store, clock }) => {
        await leases(store, clock);
        clock.advance(3_600_000);
        const listed = await store.jobListExpired({ lease: lease(300), limit: 100 });
        assert.deepEqual(
          listed.map((job) => job.status),
          ["running", "running", "running"],
        );
        const statuses = new Set((await allJobs(store)).map((job) => job.status));
        assert.deepEqual([...statuses].sort(), [...JOB_STATUSES].sort(), "the store has a job in every status");
      });

      suite.case("lists at most limit, keeping the oldest heartbeats", async ({ store, clock }) => {
        const { a, c } = await leases(store, clock);
        clock.set(T0 + 1300);
        assert.deepEqual(ids(await store.jobListExpired({ lease: lease(300), limit: 2 })), ids([a, c]));
        assert.deepEqual(ids(await store.jobListExpired({ lease: lease(300), limit: 1 })), ids([a]));
      });

      suite.case("an empty store has no expired leases", async ({ store, clock }) => {
        clock.advance(1_000_000);
        assert.deepEqual(await store.jobListExpired({ lease: lease(0), limit: 10 }), []);
      });
    });

    describe("jobListExpired and asynchronous attempts", () => {
      suite.case(
        "an attempt taken asynchronously is held to its operation's asynchronous lease, others to theirs",
        async ({ store, clock }) => {
          const longAsync = await makeAsync(store, { operationId: "transcodeVideo" });
          const longSync = await makeRunning(store, { operationId: "transcodeVideo" });
          const plainAsync = await makeAsync(store, { operationId: "sendWelcomeEmail" });
          const lease = {
            defaultMs: 1000,
            byOperation: { transcodeVideo: 2000 },
            asyncByOperation: { transcodeVideo: 60_000 },
          };
          const expiredIds = async () => (await store.jobListExpired({ lease, limit: 10 })).map((row) => row.id).sort();
          clock.advance(1001);
          assert.deepEqual(
            await expiredIds(),
            [plainAsync.id],
            "an operation without an asynchronous lease keeps its own",
          );
          clock.advance(1000);
          assert.deepEqual(await expiredIds(), [longSync.id, plainAsync.id].sort());
          clock.set(T0 + 60_000);
          assert.deepEqual(
            await expiredIds(),
            [longSync.id, plainAsync.id].sort(),
            "60 s is the whole asynchronous lease, not past it",
          );
          clock.advance(1);
          assert.deepEqual(await expiredIds(), [longAsync.id, longSync.id, plainAsync.id].sort());
        },
      );
    });

    describe("jobExpireMany", () => {
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
          assert.deepEqual(await store.jobExpireMany({ limit: 10 }).then((jobs) => jobs.map((job) => job.id)), [
            soon.id,
          ]);
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
          assert.equal(
            (await store.jobInsert(jobParams({ dedupeKey: "dk" }))).kind,
            "created",
            "the dedupe key is free",
          );
          assert.deepEqual(await store.jobExpireMany({ limit: 10 }), [], "a running job does not expire");
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
        "an expiry racing a claim: exactly one of them wins, whichever runs first",
        async ({ store, clock }) => {
          const jobs = await Promise.all(
            Array.from({ length: 20 }, () => insertCreated(store, { expiry: { at: T0 + 1000 } })),
          );
          // The claim is asked with the clock before the expiry, the expirer after it, both on their way at once.
          clock.set(T0 + 999);
          const claim = store.jobClaimMany({ limit: 10 });
          clock.set(T0 + 1000);
          const expire = store.jobExpireMany({ limit: 100 });
          const [claimed, expired] = await Promise.all([claim, expire]);
          // On PostgreSQL the expirer skips the rows the claim holds locked (its candidates, more than it takes): the
          // next pass ends those it left.
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
        },
      );
    });

    describe("jobDeleteFinishedMany", () => {
      suite.case(
        "deletes only succeeded, dead and cancelled jobs finished more than olderThanMs ago by the store's clock",
        async ({ store, clock }) => {
          const old = [
            await makeFinished(store, "succeeded"),
            await makeFinished(store, "dead"),
            await makeCancelled(store),
          ];
          clock.advance(1000);
          const kept = [
            await makeFinished(store, "succeeded"),
            await makeFinished(store, "dead"),
            await makeCancelled(store),
            await makeRunning(store, { runAt: T0 - 60_000 }),
            await makeRetrying(store, {}, T0 - 60_000),
            await insertCreated(store, { runAt: T0 - 60_000 }),
          ];
          assert.deepEqual(
            kept.map((job) => job.finishedAt),
            [T0 + 1000, T0 + 1000, T0 + 1000, null, null, null],
          );
          clock.advance(3_600_000);
          // Now is T0 + 3_601_000: the kept jobs finished exactly an hour ago, the old ones a second before.
          assert.equal(await store.jobDeleteFinishedMany({ olderThanMs: 3_600_000, limit: 100 }), 3);
          for (const job of old)
            assert.equal(await store.jobGet({ id: job.id }), undefined, `${job.status} job deleted`);
          await assertUnchanged(store, kept);
          assert.equal(await store.jobDeleteFinishedMany({ olderThanMs: 3_600_000, limit: 100 }), 0);
          assert.deepEqual(ids(await allJobs(store)), ids(kept).reverse());
        },
      );

      suite.case("deletes at most limit per call; calling again deletes the rest", async ({ store, clock }) => {
        for (let i = 0; i < 5; i++) await makeFinished(store, "succeeded");
        const pending = await insertCreated(store, { runAt: T0 + 60_000 });
        clock.advance(1000);
        const counts: number[] = [];
        for (let i = 0; i < 4; i++) counts.push(await store.jobDeleteFinishedMany({ olderThanMs: 0, limit: 2 }));
        assert.deepEqual(counts, [2, 2, 1, 0]);
        assert.deepEqual(ids(await allJobs(store)), [pending.id]);
      });

      suite.case("a chain whose jobs are all deleted forgets its spawn count", async ({ store, clock }) => {
        const chainA = { originalRequestId: "chain-a", spawnCap: 2 };
        await makeFinished(store, "succeeded", chainA);
        await makeCancelled(store, chainA);
        assert.equal((await store.jobInsert(jobParams(chainA))).kind, "spawn_cap_exceeded");
        // chain-b keeps one job, so it keeps counting.
        const chainB = { originalRequestId: "chain-b", spawnCap: 2 };
        await makeFinished(store, "dead", chainB);
        await insertCreated(store, { ...chainB, runAt: T0 + 60_000 });
        clock.advance(1000);
        assert.equal(await store.jobDeleteFinishedMany({ olderThanMs: 0, limit: 100 }), 3);
        await insertCreated(store, { ...chainA, runAt: T0 + 60_000 });
        await insertCreated(store, { ...chainA, runAt: T0 + 60_000 });
        assert.equal(
          (await store.jobInsert(jobParams(chainA))).kind,
          "spawn_cap_exceeded",
          "counting started from zero",
        );
        assert.equal(
          (await store.jobInsert(jobParams(chainB))).kind,
          "spawn_cap_exceeded",
          "a chain with jobs left keeps its count",
        );
      });

      suite.case(
        "a cancelled chain is remembered after all its jobs are deleted: new inserts are created cancelled",
        async ({ store, clock }) => {
          const job = await insertCreated(store, { originalRequestId: "chain-a", runAt: T0 + 60_000 });
          assert.equal(
            (await store.chainCancel({ originalRequestId: "chain-a", actor: "admin", role: "admin" })).length,
            1,
          );
          clock.advance(1000);
          assert.equal(await store.jobDeleteFinishedMany({ olderThanMs: 0, limit: 100 }), 1);
          assert.equal(await store.jobGet({ id: job.id }), undefined);
          const outcome = await store.jobInsert(jobParams({ originalRequestId: "chain-a", runAt: T0 + 60_000 }));
          assert.equal(outcome.kind, "created");
          const created = (outcome as { job: JobRow }).job;
          assert.equal(created.status, "cancelled");
          assert.equal(created.finishedAt, T0 + 1000);
          assert.equal(created.result?.terminal_reason, "cancelled-by-chain");
          assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
        },
      );

      suite.case("an empty store deletes nothing", async ({ store, clock }) => {
        clock.advance(1_000_000);
        assert.equal(await store.jobDeleteFinishedMany({ olderThanMs: 0, limit: 100 }), 0);
      });
    });

    describe("idempotencyKeyDeleteMany", () => {
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
    });

    describe("cronTickDeleteMany", () => {
      suite.case(
        "forgets ticks more than olderThanMs old by the store's clock but each name's newest, keeps later ones, and returns how many",
        async ({ store, clock }) => {
          const tick = (name: string, tickAt: number) =>
            store.cronTickInsert({ name, tickAt, job: cronJob(name, tickAt, { dedupeKey: null }) });
          for (const [name, tickAt] of [
            ["nightly", T0],
            ["hourly", T0 + 500],
            ["nightly", T0 + 1000],
            ["nightly", T0 + 2000],
          ] as const) {
            assert.equal((await tick(name, tickAt)).kind, "created");
          }
          clock.set(T0 + 1_000_000);
          assert.equal(
            await store.cronTickDeleteMany({ olderThanMs: 1_000_000 }),
            0,
            "a tick exactly that old is kept",
          );
          assert.equal(
            await store.cronTickDeleteMany({ olderThanMs: 999_000 }),
            1,
            "nightly's first; hourly's only tick is its newest",
          );
          assert.equal(await store.cronTickDeleteMany({ olderThanMs: 999_000 }), 0, "already forgotten");
          // A forgotten tick can be inserted again; a remembered one cannot.
          assert.equal((await tick("nightly", T0)).kind, "created");
          assert.deepEqual(
            await tick("hourly", T0 + 500),
            { kind: "already_enqueued" },
            "the newest tick of a name is remembered",
          );
          assert.deepEqual(await tick("nightly", T0 + 1000), { kind: "already_enqueued" });
          assert.deepEqual(await tick("nightly", T0 + 2000), { kind: "already_enqueued" });
          assert.equal(await store.cronTickDeleteMany({ olderThanMs: 0 }), 2);
          assert.deepEqual(
            (await store.cronTickLatestMany({ names: ["nightly", "hourly"] }))
              .map(({ name, tickAt }) => [name, tickAt])
              .sort(),
            [
              ["hourly", T0 + 500],
              ["nightly", T0 + 2000],
            ],
            "each name's newest tick stays, however old",
          );
        },
      );

      suite.case("forgetting ticks deletes no job", async ({ store, clock }) => {
        await store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) });
        await store.cronTickInsert({ name: "nightly", tickAt: T0 + 500, job: cronJob("nightly", T0 + 500) });
        const before = await allJobs(store);
        clock.advance(1000);
        assert.equal(await store.cronTickDeleteMany({ olderThanMs: 999 }), 1);
        assert.deepEqual(await allJobs(store), before);
      });

      suite.case("an empty store forgets nothing", async ({ store, clock }) => {
        clock.advance(1_000_000);
        assert.equal(await store.cronTickDeleteMany({ olderThanMs: 0 }), 0);
      });
    });

    describe("rateBucketDeleteMany", () => {
      suite.case(
        "rateBucketDeleteMany deletes the buckets whose time has passed, which change no claim",
        async ({ store, clock }) => {
          await limit(store, "rated", { rate: { limit: 1, periodMs: 1000, burst: 1 } });
          await insertCreated(store, { operationId: "rated" });
          await insertCreated(store, { operationId: "rated" });
          assert.equal((await store.jobClaimMany({ limit: 5 })).length, 1);
          assert.equal(await store.rateBucketDeleteMany(), 0, "its time has not passed");
          clock.advance(2000);
          assert.equal(await store.rateBucketDeleteMany(), 1);
          assert.equal((await store.jobClaimMany({ limit: 5 })).length, 1);
        },
      );
    });

    describe("statisticsRefresh", () => {
      suite.case(
        "statisticsRefresh leaves tables that have not grown past their statistics as they are, and answers false",
        async ({ store }) => {
          await insertAll(store, [{}, {}, {}]);
          assert.equal(await store.statisticsRefresh(), false);
          assert.equal(await store.statisticsRefresh(), false, "asked again");
          assert.equal((await store.jobClaimMany({ limit: 5 })).length, 3, "the jobs are there to claim");
        },
      );
    });
  });
}

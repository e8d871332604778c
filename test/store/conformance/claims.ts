/**
 * ClaimStore (src/store/roles/claims.ts), taking jobs: jobClaimMany (claim order, run times, limits, concurrency keys,
 * fair turns between users: docs/delivery.md, "Dispatch"; docs/flow-control.md, "Fairness"), jobNextRunAt (the
 * dispatcher's timer), the leases of running attempts (jobHeartbeatMany) and an attempt marked asynchronous
 * (jobMarkAsyncIfRunning: docs/delivery.md, "Long jobs"). How attempts end is in claims-outcomes.ts.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import type { Store } from "../../../src/store/store.js";
import type { JobRow } from "../../../src/job/job.js";
import {
  allJobs,
  assertUnchanged,
  insertAll,
  insertCreated,
  jobParams,
  makeCancelled,
  makeFinished,
  makeRetrying,
  makeRunning,
  makeRunningSecondAttempt,
  mustGet,
  SUCCESS,
  T0,
  TOKEN_A,
  UNAVAILABLE,
  type Suite,
} from "./harness.js";

const ids = (jobs: JobRow[]) => jobs.map((job) => job.id);

/** Claims one job at a time until none is left, returning their ids in claim order. */
async function drainOneByOne(store: Store): Promise<string[]> {
  const order: string[] = [];
  for (;;) {
    const claimed = await store.jobClaimMany({ limit: 1 });
    assert.ok(claimed.length <= 1, "a claim never takes more than its limit");
    if (claimed.length === 0) return order;
    order.push((claimed[0] as JobRow).id);
  }
}

/** Registers the cases of taking jobs. */
export function claimCases(suite: Suite): void {
  describe("ClaimStore: claims, the timer and leases", () => {
    describe("jobClaimMany", () => {
      suite.case("claims in order priority DESC, runAt ASC, then creation order", async ({ store, clock }) => {
        clock.advance(1000);
        const [a, b, c, d, e, f] = await insertAll(store, [
          { priority: 0, runAt: T0 + 500 },
          { priority: 5, runAt: T0 + 900 },
          { priority: 0, runAt: T0 + 100 },
          { priority: 5, runAt: T0 + 100 },
          { priority: 0, runAt: T0 + 500 },
          { priority: -3, runAt: T0 },
        ]);
        assert.deepEqual(
          await drainOneByOne(store),
          [d, b, c, a, e, f].map((job) => job?.id),
        );
      });

      suite.case("a batch claim takes the first jobs in claim order", async ({ store }) => {
        const jobs = await insertAll(store, [
          { priority: 1 },
          { priority: 3 },
          { priority: 2 },
          { priority: 0 },
          { priority: 3 },
        ]);
        const claimed = await store.jobClaimMany({ limit: 3 });
        assert.deepEqual(claimed.map((job) => job.id).sort(), [jobs[1], jobs[4], jobs[2]].map((job) => job?.id).sort());
      });

      suite.case("claims a retrying job in the same order as pending ones", async ({ store, clock }) => {
        const retrying = await makeRetrying(store, { priority: 0 }, T0 + 100);
        const later = await insertCreated(store, { priority: 0, runAt: T0 + 200 });
        const earlier = await insertCreated(store, { priority: 0, runAt: T0 + 50 });
        clock.advance(1000);
        assert.deepEqual(await drainOneByOne(store), [earlier.id, retrying.id, later.id]);
      });

      suite.case("does not claim a job before its runAt", async ({ store, clock }) => {
        const job = await insertCreated(store, { runAt: T0 + 1000 });
        assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
        clock.advance(999);
        assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
        clock.advance(1);
        const claimed = await store.jobClaimMany({ limit: 10 });
        assert.deepEqual(
          claimed.map((row) => row.id),
          [job.id],
          "a job is due when runAt <= now",
        );
      });

      suite.case(
        "claiming sets running, attempt + 1, startedAt = now and claimCount + 1, and nothing else",
        async ({ store, clock }) => {
          const job = await insertCreated(store, { priority: 4, concurrencyKey: "c", dedupeKey: "d" });
          clock.advance(42);
          const [claimed] = await store.jobClaimMany({ limit: 1 });
          assert.ok(claimed);
          const { heartbeatAt: _heartbeatAt, ...rest } = claimed;
          const { heartbeatAt: _before, ...expected } = job;
          assert.deepEqual(rest, { ...expected, status: "running", attempt: 1, startedAt: T0 + 42, claimCount: 1 });
          assert.deepEqual(await mustGet(store, job.id), claimed);
        },
      );

      suite.case("respects the limit", async ({ store }) => {
        await insertAll(
          store,
          Array.from({ length: 5 }, () => ({})),
        );
        assert.equal((await store.jobClaimMany({ limit: 2 })).length, 2);
        assert.equal((await store.jobClaimMany({ limit: 10 })).length, 3);
        assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
      });

      suite.case("never claims two jobs with one concurrency key in one claim", async ({ store }) => {
        const [k1, , , j1, free] = await insertAll(store, [
          { concurrencyKey: "k" },
          { concurrencyKey: "k" },
          { concurrencyKey: "k" },
          { concurrencyKey: "j" },
          {},
        ]);
        const claimed = await store.jobClaimMany({ limit: 10 });
        assert.deepEqual(
          claimed.map((job) => job.id).sort(),
          [k1, j1, free].map((job) => job?.id).sort(),
          "the first job of each key in claim order, and the keyless one",
        );
      });

      suite.case(
        "never claims a job whose concurrency key is already running, but claims other keys",
        async ({ store }) => {
          const [k1, k2, j1] = await insertAll(store, [
            { concurrencyKey: "k", priority: 10 },
            { concurrencyKey: "k", priority: 10 },
            { concurrencyKey: "j" },
          ]);
          assert.deepEqual(
            (await store.jobClaimMany({ limit: 1 })).map((job) => job.id),
            [k1?.id],
          );
          const claimed = await store.jobClaimMany({ limit: 10 });
          assert.deepEqual(
            claimed.map((job) => job.id),
            [j1?.id],
          );
          assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
          assert.equal((await mustGet(store, k2?.id ?? "")).status, "pending");
        },
      );

      suite.case("a concurrency key freed by completion is claimable again", async ({ store }) => {
        const [k1, k2, k3] = await insertAll(store, [
          { concurrencyKey: "k" },
          { concurrencyKey: "k" },
          { concurrencyKey: "k" },
        ]);
        const [first] = await store.jobClaimMany({ limit: 10 });
        assert.equal(first?.id, k1?.id);
        assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
        assert.deepEqual(
          await store.jobSetStateIfRunningMany({
            outcomes: [{ id: k1?.id ?? "", attempt: 1, status: "succeeded", result: SUCCESS }],
          }),
          [true],
        );
        const [second] = await store.jobClaimMany({ limit: 10 });
        assert.equal(second?.id, k2?.id);
        // Going back to the queue frees the key as well.
        assert.deepEqual(
          await store.jobSetStateIfRunningMany({
            outcomes: [{ id: k2?.id ?? "", attempt: 1, status: "retrying", delayMs: 60_000, result: UNAVAILABLE }],
          }),
          [true],
        );
        const [third] = await store.jobClaimMany({ limit: 10 });
        assert.equal(third?.id, k3?.id);
      });

      suite.case("a long run of jobs of a busy concurrency key does not starve other jobs", async ({ store }) => {
        const running = await insertCreated(store, { concurrencyKey: "busy", priority: 1, spawnCap: 10_000 });
        assert.equal((await store.jobClaimMany({ limit: 1 }))[0]?.id, running.id);
        const blocked = Array.from({ length: 1500 }, () =>
          jobParams({ concurrencyKey: "busy", priority: 1, spawnCap: 10_000 }),
        );
        for (const outcome of await Promise.all(blocked.map((params) => store.jobInsert(params)))) {
          assert.equal(outcome.kind, "created");
        }
        const free = await insertCreated(store, { concurrencyKey: "idle", priority: 0, spawnCap: 10_000 });
        assert.deepEqual(
          (await store.jobClaimMany({ limit: 1 })).map((job) => job.id),
          [free.id],
          "the only claimable job is claimed, however many blocked jobs come before it",
        );
      });

      suite.case(
        "a claim whose head is held back by a concurrency key still takes higher priorities before other users' lower ones",
        async ({ store }) => {
          const keyed = await insertAll(
            store,
            Array.from({ length: 4 }, () => ({ concurrencyKey: "k", priority: 5, spawnCap: 10_000 })),
          );
          const keyless = await insertAll(
            store,
            Array.from({ length: 16 }, () => ({ priority: 5, spawnCap: 10_000 })),
          );
          await insertAll(
            store,
            ["b", "c", "d", "e", "f"].map((userId) => ({ userId, priority: 0, spawnCap: 10_000 })),
          );
          const claimed = await store.jobClaimMany({ limit: 16 });
          assert.deepEqual(
            claimed.map((job) => job.priority),
            Array.from({ length: 16 }, () => 5),
            "priorities are never crossed",
          );
          assert.deepEqual(
            claimed.map((job) => job.id).sort(),
            [keyed[0]?.id, ...keyless.slice(0, 15).map((job) => job.id)].sort(),
          );
        },
      );

      suite.case("two users' backlogs of one priority share a claim by turns", async ({ store }) => {
        await insertAll(
          store,
          Array.from({ length: 16 }, () => ({ userId: "a", spawnCap: 10_000 })),
        );
        await insertAll(
          store,
          Array.from({ length: 15 }, () => ({ userId: "b", spawnCap: 10_000 })),
        );
        const claimed = await store.jobClaimMany({ limit: 16 });
        assert.deepEqual(
          [claimed.filter((job) => job.userId === "a").length, claimed.filter((job) => job.userId === "b").length],
          [8, 8],
        );
      });

      suite.case(
        "a claim of many jobs whose first page is mostly one concurrency key takes the keyless jobs behind it",
        async ({ store }) => {
          // 20 jobs of key k first in claim order, then 20 without a key: a claim of 20 takes one of k and 19 others.
          const keyed = await insertAll(
            store,
            Array.from({ length: 20 }, () => ({ concurrencyKey: "k", priority: 1, spawnCap: 10_000 })),
          );
          const free = await insertAll(
            store,
            Array.from({ length: 20 }, () => ({ spawnCap: 10_000 })),
          );
          const claimed = (await store.jobClaimMany({ limit: 20 })).map((job) => job.id);
          assert.deepEqual(claimed.sort(), [keyed[0]?.id, ...free.slice(0, 19).map((job) => job.id)].sort());
        },
      );

      // A claim looks at a bounded number of candidates: past that many due jobs it walks claim order, below it takes
      // every due one. Either way the order is the same, and future jobs ahead in claim order (higher priority) wait.
      suite.case(
        "claims in claim order whether more or fewer jobs are due than a claim looks at",
        async ({ store, clock }) => {
          const future = await insertAll(
            store,
            Array.from({ length: 30 }, (_, i) => ({ priority: 9, runAt: T0 + 60_000 + i, spawnCap: 10_000 })),
          );
          const due = await insertAll(
            store,
            Array.from({ length: 40 }, (_, i) => ({ priority: i % 4, runAt: T0 - ((i * 37) % 11), spawnCap: 10_000 })),
          );
          const expected = [...due]
            .sort((a, b) => b.priority - a.priority || a.runAt - b.runAt || a.seq - b.seq)
            .map((job) => job.id);
          const claimedInBatches: string[][] = [];
          for (;;) {
            const batch = await store.jobClaimMany({ limit: 3 });
            if (batch.length === 0) break;
            claimedInBatches.push(batch.map((job) => job.id));
          }
          assert.deepEqual(
            claimedInBatches.map((batch) => [...batch].sort()),
            claimedInBatches.map((_, i) => expected.slice(i * 3, i * 3 + 3).sort()),
            "each batch takes the next jobs in claim order",
          );
          assert.equal(claimedInBatches.flat().length, due.length);
          clock.advance(60_000 + 30);
          assert.deepEqual(
            await drainOneByOne(store),
            future.map((job) => job.id),
          );
        },
      );

      suite.case("a limit of zero claims nothing", async ({ store }) => {
        await insertCreated(store);
        assert.deepEqual(await store.jobClaimMany({ limit: 0 }), []);
        assert.equal((await store.jobList({ limit: 10, statuses: ["pending"] })).length, 1);
      });

      suite.case(
        "fair claims: a user's lone job is claimed in the first claim, ahead of another user's backlog of 300",
        async ({ store }) => {
          await Promise.all(Array.from({ length: 300 }, () => insertCreated(store, { userId: "big" })));
          const lone = await insertCreated(store, { userId: "small" });
          const first = await store.jobClaimMany({ limit: 4 });
          assert.equal(first.length, 4);
          assert.ok(
            ids(first).includes(lone.id),
            `the lone job among ${JSON.stringify(first.map((job) => job.userId))}`,
          );
        },
      );

      suite.case(
        "fair claims find a lane's due job behind that lane's later jobs of higher priorities",
        async ({ store }) => {
          await Promise.all(Array.from({ length: 300 }, () => insertCreated(store, { userId: "big" })));
          for (const priority of [9, 5, 5])
            await insertCreated(store, { userId: "small", priority, runAt: T0 + 3_600_000 });
          const due = await insertCreated(store, { userId: "small", priority: 0 });
          const first = await store.jobClaimMany({ limit: 4 });
          assert.deepEqual(first.map((job) => [job.userId, job.priority]).sort(), [
            ["big", 0],
            ["big", 0],
            ["big", 0],
            ["small", 0],
          ]);
          assert.ok(ids(first).includes(due.id));
        },
      );

      suite.case(
        "fair claims never cross priorities: a higher priority's jobs go first whatever their lane",
        async ({ store }) => {
          const high = await Promise.all(
            Array.from({ length: 5 }, () => insertCreated(store, { userId: "big", priority: 5 })),
          );
          const low = await insertCreated(store, { userId: "small", priority: 0 });
          const claimed = await store.jobClaimMany({ limit: 5 });
          assert.deepEqual(ids(claimed).sort(), ids(high).sort());
          assert.deepEqual(ids(await store.jobClaimMany({ limit: 5 })), [low.id]);
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
    });

    describe("jobNextRunAt", () => {
      suite.case("is null when no job is claimable", async ({ store }) => {
        assert.equal(await store.jobNextRunAt(), null);
        await makeRunning(store, { runAt: T0 - 5000 });
        await makeFinished(store, "succeeded", { runAt: T0 - 6000 });
        await makeFinished(store, "dead", { runAt: T0 - 7000 });
        await makeCancelled(store, { runAt: T0 - 8000 });
        assert.equal(await store.jobNextRunAt(), null);
      });

      suite.case("is the earliest runAt of pending and retrying jobs, future ones included", async ({ store }) => {
        await makeRunning(store, { runAt: T0 - 5000 });
        await makeFinished(store, "succeeded", { runAt: T0 - 6000 });
        await makeCancelled(store, { runAt: T0 - 8000 });
        await insertCreated(store, { runAt: T0 + 5000 });
        assert.equal(await store.jobNextRunAt(), T0 + 5000);
        const retrying = await makeRetrying(store, {}, T0 + 3000);
        assert.equal(await store.jobNextRunAt(), T0 + 3000);
        const soon = await insertCreated(store, { runAt: T0 + 2000 });
        assert.equal(await store.jobNextRunAt(), T0 + 2000);
        await store.jobCancel({ id: soon.id, actor: "admin", role: "admin" });
        assert.equal(await store.jobNextRunAt(), T0 + 3000);
        await store.jobCancel({ id: retrying.id, actor: "admin", role: "admin" });
        assert.equal(await store.jobNextRunAt(), T0 + 5000);
      });

      suite.case("includes jobs already due", async ({ store, clock }) => {
        await insertCreated(store, { runAt: T0 - 100 });
        await insertCreated(store, { runAt: T0 + 100 });
        clock.advance(1000);
        assert.equal(await store.jobNextRunAt(), T0 - 100);
      });
    });

    describe("jobHeartbeatMany", () => {
      suite.case("sets heartbeatAt = now only on jobs still running with that attempt", async ({ store, clock }) => {
        const live = await makeRunning(store);
        const other = await makeRunning(store);
        const stale = await makeRunningSecondAttempt(store);
        const succeeded = await makeFinished(store, "succeeded");
        const pending = await insertCreated(store, { runAt: T0 + 60_000 });
        clock.advance(500);
        await store.jobHeartbeatMany({
          jobs: [
            { id: live.id, attempt: 1 },
            { id: stale.id, attempt: 1 },
            { id: succeeded.id, attempt: 1 },
            { id: pending.id, attempt: 0 },
            { id: "no-such-job-id", attempt: 1 },
          ],
        });
        assert.deepEqual(await mustGet(store, live.id), { ...live, heartbeatAt: T0 + 500 });
        await assertUnchanged(store, [other, stale, succeeded, pending]);
        assert.equal(stale.heartbeatAt, T0, "the stale attempt keeps the heartbeat of its claim");
      });

      suite.case("renews several leases in one call", async ({ store, clock }) => {
        const a = await makeRunning(store);
        const b = await makeRunningSecondAttempt(store);
        clock.advance(1000);
        await store.jobHeartbeatMany({
          jobs: [
            { id: a.id, attempt: 1 },
            { id: b.id, attempt: 2 },
          ],
        });
        assert.equal((await mustGet(store, a.id)).heartbeatAt, T0 + 1000);
        assert.equal((await mustGet(store, b.id)).heartbeatAt, T0 + 1000);
        clock.advance(1000);
        await store.jobHeartbeatMany({ jobs: [{ id: b.id, attempt: 2 }] });
        assert.equal((await mustGet(store, a.id)).heartbeatAt, T0 + 1000);
        assert.equal((await mustGet(store, b.id)).heartbeatAt, T0 + 2000);
      });

      suite.case("an empty heartbeat batch changes nothing", async ({ store, clock }) => {
        await makeRunning(store);
        const before = await allJobs(store);
        clock.advance(500);
        await store.jobHeartbeatMany({ jobs: [] });
        assert.deepEqual(await allJobs(store), before);
      });
    });

    describe("jobMarkAsyncIfRunning", () => {
      suite.case("marks the running attempt of its claim, starting its lease now", async ({ store, clock }) => {
        const running = await makeRunning(store);
        clock.advance(120);
        assert.equal(
          await store.jobMarkAsyncIfRunning({
            job: { id: running.id, attempt: 1, startedAt: T0 },
            tokenHash: TOKEN_A.hash,
          }),
          true,
        );
        const after = await mustGet(store, running.id);
        assert.deepEqual(after, { ...running, heartbeatAt: T0 + 120 }, "only the lease moves among the job's fields");
        assert.deepEqual(await store.jobAsyncStateGet({ id: running.id }), {
          accepted: { attempt: 1, startedAt: T0, at: T0 + 120 },
          progress: null,
        });
      });

      suite.case(
        "writes nothing for another attempt, another claim, an ended job or an unknown id",
        async ({ store, clock }) => {
          const running = await makeRunning(store);
          const finished = await makeFinished(store, "succeeded");
          clock.advance(10);
          const tokenHash = TOKEN_A.hash;
          assert.equal(await store.jobMarkAsyncIfRunning({ job: { id: running.id, attempt: 2 }, tokenHash }), false);
          assert.equal(
            await store.jobMarkAsyncIfRunning({ job: { id: running.id, attempt: 1, startedAt: T0 - 1 }, tokenHash }),
            false,
          );
          assert.equal(await store.jobMarkAsyncIfRunning({ job: { id: finished.id, attempt: 1 }, tokenHash }), false);
          assert.equal(
            await store.jobMarkAsyncIfRunning({ job: { id: "no-such-job-id", attempt: 1 }, tokenHash }),
            false,
          );
          assert.deepEqual(await mustGet(store, running.id), running);
          assert.deepEqual(await store.jobAsyncStateGet({ id: running.id }), { accepted: null, progress: null });
        },
      );
    });
  });
}

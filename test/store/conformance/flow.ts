/**
 * FlowStore (src/store/roles/flow.ts): flow control (docs/flow-control.md): the gates of a claim (pauses of operations
 * and keys, max_concurrency, concurrency_limit, rate limits per operation and per key), the configuration's limits and
 * an administrator's, on the store's clock. Fair turns between users are in claims.ts, bulk cancel and cancelling a
 * running job in admin.ts, deleting spent rate buckets in upkeep.ts.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import { NO_LIMITS } from "../../../src/flow/limits.js";
import type { JobRow } from "../../../src/job/job.js";
import type { Store } from "../../../src/store/store.js";
import {
  insertAll,
  insertCreated,
  jobParams,
  mustGet,
  setOperationLimits as limit,
  SUCCESS,
  T0,
  type Suite,
} from "./harness.js";

const ids = (jobs: JobRow[]) => jobs.map((job) => job.id);

/** Ends a running job succeeded. */
async function finish(store: Store, job: JobRow): Promise<void> {
  assert.deepEqual(
    await store.jobSetStateIfRunningMany({
      outcomes: [{ id: job.id, attempt: job.attempt, status: "succeeded", result: SUCCESS }],
    }),
    [true],
  );
}

/** Registers the flow control cases. */
export function flowCases(suite: Suite): void {
  describe("FlowStore: pauses and limits", () => {
    describe("operationPause and operationResume", () => {
      suite.case(
        "a paused operation's jobs are left pending and out of jobNextRunAt; others go on; a resume frees them",
        async ({ store }) => {
          const paused = await store.operationPause({ operationId: "slow", actor: "alice" });
          assert.deepEqual(paused.paused, { at: T0, by: "alice" });
          const held = await insertCreated(store, { operationId: "slow" });
          const free = await insertCreated(store, { operationId: "fast" });
          assert.deepEqual(ids(await store.jobClaimMany({ limit: 10 })), [free.id]);
          assert.equal(await store.jobNextRunAt(), null, "nothing another claim could take");
          assert.equal((await mustGet(store, held.id)).status, "pending");
          const again = await store.operationPause({ operationId: "slow", actor: "bob" });
          assert.deepEqual(again.paused, { at: T0, by: "alice" }, "a second pause keeps the first");
          assert.deepEqual(
            (await store.operationControlList()).map((control) => control.operationId),
            ["slow"],
          );

          const resumed = await store.operationResume({ operationId: "slow" });
          assert.equal(resumed.paused, null);
          assert.equal(await store.jobNextRunAt(), T0);
          assert.deepEqual(ids(await store.jobClaimMany({ limit: 10 })), [held.id]);
          assert.deepEqual(await store.operationControlList(), [], "a row that says nothing is gone");
        },
      );
    });

    describe("concurrencyKeyPause, concurrencyKeyResume and pausedKeyList", () => {
      suite.case(
        "a paused concurrency key holds its jobs of every operation until it is resumed",
        async ({ store }) => {
          await store.concurrencyKeyPause({ key: "tenant-1", actor: "carol" });
          const a = await insertCreated(store, { operationId: "opA", concurrencyKey: "tenant-1" });
          const b = await insertCreated(store, { operationId: "opB", concurrencyKey: "tenant-1" });
          const other = await insertCreated(store, { operationId: "opA", concurrencyKey: "tenant-2" });
          assert.deepEqual(ids(await store.jobClaimMany({ limit: 10 })), [other.id]);
          assert.deepEqual(
            (await store.pausedKeyList()).map((key) => [key.concurrencyKey, key.paused.by, key.paused.at]),
            [["tenant-1", "carol", T0]],
          );
          assert.equal(await store.concurrencyKeyResume({ key: "tenant-1" }), true);
          assert.equal(await store.concurrencyKeyResume({ key: "tenant-1" }), false);
          const claimed = await store.jobClaimMany({ limit: 10 });
          assert.equal(claimed.length, 1, "one running job per key, as before");
          assert.ok([a.id, b.id].includes((claimed[0] as JobRow).id));
        },
      );
    });

    describe("operationLimitsSet", () => {
      suite.case(
        "max_concurrency caps an operation's running jobs across claims; a finished job frees its slot",
        async ({ store }) => {
          await limit(store, "capped", { maxConcurrency: 2 });
          for (let n = 0; n < 5; n++) await insertCreated(store, { operationId: "capped" });
          const other = await insertCreated(store, { operationId: "free" });
          const first = await store.jobClaimMany({ limit: 10 });
          assert.equal(first.filter((job) => job.operationId === "capped").length, 2);
          assert.ok(ids(first).includes(other.id), "another operation is not held back");
          assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
          assert.equal(
            await store.jobNextRunAt(),
            null,
            "a full operation's jobs wait for a job's end, not for a time",
          );
          await finish(store, first.find((job) => job.operationId === "capped") as JobRow);
          assert.equal((await store.jobClaimMany({ limit: 10 })).length, 1);
        },
      );

      suite.case(
        "concurrency_limit lets that many jobs of a key run for the operation; another operation keeps one per key",
        async ({ store }) => {
          await limit(store, "wide", { concurrencyLimit: 3 });
          for (let n = 0; n < 5; n++) await insertCreated(store, { operationId: "wide", concurrencyKey: "k" });
          const claimed = await store.jobClaimMany({ limit: 10 });
          assert.equal(claimed.length, 3);
          const narrow = await insertCreated(store, { operationId: "narrow", concurrencyKey: "k" });
          assert.deepEqual(
            await store.jobClaimMany({ limit: 10 }),
            [],
            "the key runs 3: the narrow operation's limit of 1 is passed",
          );
          for (const job of claimed) await finish(store, job);
          const next = await store.jobClaimMany({ limit: 10 });
          assert.ok(next.length >= 1 && next.length <= 3);
          assert.ok(next.filter((job) => job.id === narrow.id).length <= 1);
        },
      );

      suite.case(
        "a rate limit lets its burst start at once, then one job per spacing; jobNextRunAt names the next opening",
        async ({ store, clock }) => {
          // 2 a second: spacing 500 ms, burst 2.
          await limit(store, "rated", { rate: { limit: 2, periodMs: 1000, burst: 2 } });
          for (let n = 0; n < 6; n++) await insertCreated(store, { operationId: "rated" });
          assert.equal((await store.jobClaimMany({ limit: 10 })).length, 2);
          assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
          assert.equal(await store.jobNextRunAt(), T0 + 500);
          clock.advance(499);
          assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
          clock.advance(1);
          assert.equal((await store.jobClaimMany({ limit: 10 })).length, 1);
          clock.advance(1500);
          // A quiet spell refills the bucket up to the burst, no further.
          assert.equal((await store.jobClaimMany({ limit: 10 })).length, 2);
          const waiting = (await store.jobList({ limit: 10, statuses: ["pending"] })).map((job) => job.attempt);
          assert.deepEqual(waiting, [0], "a throttled job stays pending and uses no attempt");
        },
      );

      suite.case(
        "rate_per_key limits each rate key alone: a key out of rate holds back neither other keys nor jobs without one",
        async ({ store, clock }) => {
          await limit(store, "send", { ratePerKey: { limit: 1, periodMs: 1000, burst: 1 } });
          const busy = [];
          for (let n = 0; n < 20; n++) busy.push(await insertCreated(store, { operationId: "send", rateKey: "busy" }));
          const quiet = await insertCreated(store, { operationId: "send", rateKey: "quiet" });
          const keyless = await insertCreated(store, { operationId: "send" });
          const claimed = ids(await store.jobClaimMany({ limit: 10 }));
          assert.deepEqual(claimed.sort(), [busy[0]?.id, quiet.id, keyless.id].sort());
          assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
          assert.equal(await store.jobNextRunAt(), T0 + 1000);
          clock.advance(1000);
          assert.deepEqual(ids(await store.jobClaimMany({ limit: 10 })), [busy[1]?.id]);
        },
      );

      suite.case(
        "a rate key's first job, refused for a concurrency key the same claim took, does not hide the key's next job",
        async ({ store }) => {
          // Found by the random sequences of properties.ts: the lane was read only as deep as its rate's room (1), so
          // its first job, refused in the pick, left the claim a job short while the key's second job could run.
          await limit(store, "send", { ratePerKey: { limit: 1, periodMs: 1000, burst: 1 } });
          const keyed = await insertCreated(store, { operationId: "send", rateKey: "r0", concurrencyKey: "c0" });
          const next = await insertCreated(store, { operationId: "send", rateKey: "r0" });
          const urgent = await insertCreated(store, { operationId: "other", concurrencyKey: "c0", priority: 1 });
          const claimed = ids(await store.jobClaimMany({ limit: 3 }));
          assert.deepEqual(claimed.sort(), [urgent.id, next.id].sort());
          assert.equal((await mustGet(store, keyed.id)).status, "pending");
        },
      );

      suite.case(
        "lanes out of their rate are held: one claim reaches an open lane behind 400 of them, and their jobs go when their rate opens",
        async ({ store, clock }) => {
          const HOUR = 3_600_000;
          await limit(store, "send", { ratePerKey: { limit: 1, periodMs: HOUR, burst: 1 } });
          const keys = Array.from({ length: 400 }, (_, n) => `key-${String(n).padStart(3, "0")}`);
          const inserted = await store.jobInsertMany({
            jobs: keys.flatMap((rateKey) => [
              jobParams({ operationId: "send", rateKey }),
              jobParams({ operationId: "send", rateKey }),
            ]),
          });
          assert.ok(inserted.every((item) => item.ok && item.value.kind === "created"));
          let first = 0;
          for (
            let claimed = await store.jobClaimMany({ limit: 100 });
            claimed.length > 0;
            claimed = await store.jobClaimMany({ limit: 100 })
          ) {
            first += claimed.length;
          }
          assert.equal(first, 400, "each key's first job, none of its second");
          // Every key is out of its rate now: before holds, a claim visited a page of them in turn and found nothing.
          const unrelated = await insertCreated(store, { operationId: "other" });
          const fresh = await insertCreated(store, { operationId: "send", rateKey: "fresh" });
          assert.deepEqual(ids(await store.jobClaimMany({ limit: 2 })).sort(), [unrelated.id, fresh.id].sort());
          assert.deepEqual(await store.jobClaimMany({ limit: 10 }), []);
          assert.equal(await store.jobNextRunAt(), T0 + HOUR, "the held lanes' instant");
          clock.advance(HOUR);
          let second = 0;
          for (
            let claimed = await store.jobClaimMany({ limit: 100 });
            claimed.length > 0;
            claimed = await store.jobClaimMany({ limit: 100 })
          ) {
            second += claimed.length;
          }
          assert.equal(second, 400, "each key's second job, once its rate opens");
        },
      );

      suite.case("a change of an operation's limits lets its held lanes go at once", async ({ store }) => {
        const slow = { ratePerKey: { limit: 1, periodMs: 3_600_000, burst: 1 } };
        await limit(store, "send", slow);
        await limit(store, "other", slow);
        const [a1, a2] = await insertAll(store, [
          { operationId: "send", rateKey: "a" },
          { operationId: "send", rateKey: "a" },
        ]);
        assert.deepEqual(ids(await store.jobClaimMany({ limit: 5 })), [a1?.id]);
        assert.deepEqual(await store.jobClaimMany({ limit: 5 }), [], "the lane is out of rate, and held");
        await limit(store, "send", {});
        assert.deepEqual(ids(await store.jobClaimMany({ limit: 5 })), [a2?.id]);
      });

      suite.case(
        "claims lane by lane (a per-key rate set) find a lane's due jobs behind its later jobs of higher priorities",
        async ({ store }) => {
          await limit(store, "send", { ratePerKey: { limit: 100, periodMs: 1000, burst: 100 } });
          await Promise.all(
            Array.from({ length: 50 }, () => insertCreated(store, { operationId: "send", rateKey: "busy" })),
          );
          for (const priority of [7, 3])
            await insertCreated(store, { operationId: "send", rateKey: "quiet", priority, runAt: T0 + 3_600_000 });
          const due = [
            await insertCreated(store, { operationId: "send", rateKey: "quiet", priority: 3 }),
            await insertCreated(store, { operationId: "send", rateKey: "quiet", priority: 0 }),
          ];
          const claimed = ids(await store.jobClaimMany({ limit: 8 }));
          assert.equal(claimed.length, 8);
          for (const job of due)
            assert.ok(claimed.includes(job.id), `${job.id} (priority ${job.priority}) among the claimed`);
        },
      );
    });

    describe("operationLimitsConfigure", () => {
      suite.case(
        "the configuration's limits are written at start; an administrator's are kept; operations no longer listed lose the configuration's",
        async ({ store }) => {
          const rate = { limit: 10, periodMs: 1000, burst: 10 };
          await store.operationLimitsConfigure({
            limits: [
              { operationId: "a", limits: { ...NO_LIMITS, rate } },
              { operationId: "b", limits: { ...NO_LIMITS, maxConcurrency: 4 } },
            ],
          });
          await store.operationLimitsSet({
            operationId: "b",
            limits: { ...NO_LIMITS, maxConcurrency: 1 },
            source: "admin",
            actor: "dave",
          });
          await store.operationPause({ operationId: "c", actor: "dave" });
          // The next start: the configuration now limits only b, differently.
          await store.operationLimitsConfigure({
            limits: [{ operationId: "b", limits: { ...NO_LIMITS, maxConcurrency: 8 } }],
          });
          const controls = await store.operationControlList();
          assert.deepEqual(
            controls.map((control) => [
              control.operationId,
              control.limits.rate,
              control.limits.maxConcurrency,
              control.limitsSource,
              control.paused?.by ?? null,
            ]),
            [
              ["b", null, 1, "admin", null],
              ["c", null, null, "config", "dave"],
            ],
            "a's configuration limits are gone, b's administrator's stay, c's pause stays",
          );
          assert.deepEqual(controls[0]?.limitsSet, { at: T0, by: "dave" });
          // A reset puts the configuration's back.
          const reset = await store.operationLimitsSet({
            operationId: "b",
            limits: { ...NO_LIMITS, maxConcurrency: 8 },
            source: "config",
            actor: "dave",
          });
          assert.deepEqual([reset.limits.maxConcurrency, reset.limitsSource, reset.limitsSet], [8, "config", null]);
        },
      );
    });
  });
}

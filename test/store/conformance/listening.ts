/**
 * ListenStore (src/store/roles/listening.ts): the listener told of every committed change of the schedules
 * (scheduleChangeListen). jobAvailableListen is engine-specific (SQLite's listens to nothing: its one node wakes its
 * dispatcher in process) and tested in test/store/postgres.test.ts.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import { createSchedule as create, scheduleFields, type Suite } from "./harness.js";

/** Waits (without a deadline of its own: the test's timeout is the bound) for `count` calls of a change listener. */
function changeCounter(): { onChange: () => void; reached: (count: number) => Promise<void>; count: () => number } {
  let calls = 0;
  const waiting: Array<{ count: number; resolve: () => void }> = [];
  return {
    onChange: () => {
      calls++;
      for (const wait of waiting.filter((candidate) => candidate.count <= calls)) {
        waiting.splice(waiting.indexOf(wait), 1);
        wait.resolve();
      }
    },
    reached: (count) =>
      calls >= count ? Promise.resolve() : new Promise((resolve) => waiting.push({ count, resolve })),
    count: () => calls,
  };
}

/** Registers the listening cases. */
export function listenCases(suite: Suite): void {
  describe("ListenStore: change notifications", () => {
    describe("scheduleChangeListen", () => {
      suite.case(
        "scheduleChangeListen tells of every committed change of the schedules until it is stopped",
        async ({ store }) => {
          const counter = changeCounter();
          const stop = await store.scheduleChangeListen(counter.onChange);
          await create(store, "nightly");
          await counter.reached(1);
          await store.scheduleUpdate({
            schedule: scheduleFields("nightly", { priority: 2 }),
            ifRevision: "r1",
            revision: "r2",
            actor: "bob",
          });
          await counter.reached(2);
          await store.schedulePause({ name: "nightly", actor: "bob" });
          await counter.reached(3);
          await store.scheduleResume({ name: "nightly" });
          await counter.reached(4);
          await store.scheduleDelete({ name: "nightly" });
          await counter.reached(5);
          await stop();
          const stoppedAt = counter.count();
          await create(store, "weekly");
          // Something later than the create's notification (had one been sent) must be heard first:
          // a second listener's.
          const after = changeCounter();
          const stopAfter = await store.scheduleChangeListen(after.onChange);
          await store.scheduleDelete({ name: "weekly" });
          await after.reached(1);
          await stopAfter();
          assert.equal(counter.count(), stoppedAt, "a stopped listener hears nothing more");
        },
      );
    });
  });
}

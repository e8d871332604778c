/**
 * ScheduleStore (src/store/roles/schedules.ts): schedules (docs/schedules.md): scheduleCreate, scheduleGet,
 * scheduleList, scheduleUpdate (from the revision in force only), schedulePause, scheduleResume, scheduleDelete; the
 * ticks: cronTickInsert (exactly one job per tick, docs/delivery.md, "Cron"; for a schedule, on the condition of its
 * revision) and each name's last tick (cronTickLatestMany). Forgetting old ticks is in upkeep.ts, the listener told of
 * every change in listening.ts.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import type { JobRow } from "../../../src/job/job.js";
import type { ScheduleRow } from "../../../src/schedules/schedule.js";
import type { JobInsertParams } from "../../../src/store/store.js";
import {
  allJobs,
  createSchedule as create,
  cronJob,
  insertCreated,
  jobParams,
  mustGet,
  scheduleFields,
  T0,
  type Suite,
} from "./harness.js";

/** The job of schedule `name`'s tick at `tickAt`, as the scheduler builds it, without a dedupe key. */
function tickJob(name: string, tickAt: number): JobInsertParams {
  return jobParams({
    operationId: "buildReport",
    enqueuedByOperationId: `cron:${name}`,
    originalRequestId: `cron:${name}:${new Date(tickAt).toISOString()}`,
    authority: { kind: "cron", cron_job_name: name, user_id: "system" },
    dedupeKey: null,
    runAt: tickAt,
  });
}

/** Registers the schedules' cases. */
export function scheduleCases(suite: Suite): void {
  describe("ScheduleStore: schedules and their ticks", () => {
    describe("scheduleCreate, scheduleGet and scheduleList", () => {
      suite.case(
        "a created schedule reads back whole, stamped with who created it and when; creating its name again answers exists and changes nothing",
        async ({ store, clock }) => {
          const fields = scheduleFields("nightly", {
            schedule: "30 0 3 * * 1-5",
            timezone: "Europe/Paris",
            operationId: "sendWelcomeEmail",
            userId: "u-é",
            request: {
              path_params: { userId: "42" },
              query: { tags: ["a", "b"], n: 1 },
              body: { nested: { deep: [1, null, "ü"] } },
            },
            priority: -7,
            dedupeKey: null,
            concurrencyKey: "reports",
          });
          const created = await store.scheduleCreate({
            schedule: fields,
            revision: "rev-1",
            actor: "alice",
            maxSchedules: 100,
          });
          const expected: ScheduleRow = {
            ...fields,
            revision: "rev-1",
            created: { at: T0, by: "alice" },
            updated: { at: T0, by: "alice" },
            paused: null,
          };
          assert.deepEqual(created, { kind: "created", schedule: expected });
          assert.deepEqual(await store.scheduleGet({ name: "nightly" }), expected);

          clock.advance(1000);
          const again = await store.scheduleCreate({
            schedule: scheduleFields("nightly"),
            revision: "rev-2",
            actor: "bob",
            maxSchedules: 1,
          });
          assert.deepEqual(again, { kind: "exists", schedule: expected });
          assert.deepEqual(await store.scheduleList(), [expected]);
          assert.equal(await store.scheduleGet({ name: "weekly" }), undefined);
        },
      );

      suite.case(
        "a create past maxSchedules answers limit_reached and stores nothing; a name that exists still answers exists; a delete makes room",
        async ({ store }) => {
          await create(store, "a");
          await create(store, "b");
          const refused = await store.scheduleCreate({
            schedule: scheduleFields("c"),
            revision: "r1",
            actor: "alice",
            maxSchedules: 2,
          });
          assert.deepEqual(refused, { kind: "limit_reached", maxSchedules: 2 });
          assert.equal(
            (
              await store.scheduleCreate({
                schedule: scheduleFields("a"),
                revision: "r2",
                actor: "bob",
                maxSchedules: 2,
              })
            ).kind,
            "exists",
          );
          assert.deepEqual(
            (await store.scheduleList()).map((schedule) => schedule.name),
            ["a", "b"],
          );
          await store.scheduleDelete({ name: "a" });
          assert.equal(
            (
              await store.scheduleCreate({
                schedule: scheduleFields("c"),
                revision: "r1",
                actor: "alice",
                maxSchedules: 2,
              })
            ).kind,
            "created",
          );
        },
      );

      suite.case("schedules are listed by name, in byte order", async ({ store }) => {
        for (const name of ["b", "a.1", "B", "a", "a-2", "_x"]) await create(store, name);
        assert.deepEqual(
          (await store.scheduleList()).map((schedule) => schedule.name),
          ["B", "_x", "a", "a-2", "a.1", "b"],
        );
      });
    });

    describe("scheduleUpdate, schedulePause, scheduleResume and scheduleDelete", () => {
      suite.case(
        "an update from the revision in force replaces the fields and stamps who changed them; one from another revision is refused; an unknown name is not_found",
        async ({ store, clock }) => {
          const created = await create(store, "nightly", "r1", "alice");
          clock.advance(60_000);
          const fields = scheduleFields("nightly", {
            schedule: "0 4 * * *",
            timezone: "Asia/Kolkata",
            priority: 3,
            dedupeKey: "nightly-key",
            concurrencyKey: "k",
          });
          const updated = await store.scheduleUpdate({
            schedule: fields,
            ifRevision: "r1",
            revision: "r2",
            actor: "bob",
          });
          const expected: ScheduleRow = {
            ...fields,
            revision: "r2",
            created: created.created,
            updated: { at: T0 + 60_000, by: "bob" },
            paused: null,
          };
          assert.deepEqual(updated, { kind: "updated", schedule: expected });

          const stale = await store.scheduleUpdate({
            schedule: scheduleFields("nightly"),
            ifRevision: "r1",
            revision: "r3",
            actor: "carol",
          });
          assert.deepEqual(
            stale,
            { kind: "revision_changed", schedule: expected },
            "made from what bob's change replaced",
          );
          assert.deepEqual(await store.scheduleGet({ name: "nightly" }), expected);
          assert.deepEqual(
            await store.scheduleUpdate({
              schedule: scheduleFields("weekly"),
              ifRevision: "r1",
              revision: "r9",
              actor: "bob",
            }),
            { kind: "not_found" },
          );
          assert.equal(await store.scheduleGet({ name: "weekly" }), undefined, "an update creates nothing");
        },
      );

      suite.case(
        "a pause stamps who and when, a second keeps the first, an update keeps it; a resume clears it; unknown names are not_found",
        async ({ store, clock }) => {
          await create(store, "nightly");
          clock.advance(1000);
          const paused = await store.schedulePause({ name: "nightly", actor: "alice" });
          assert.equal(paused.kind, "paused");
          assert.deepEqual(paused.kind === "paused" && paused.schedule.paused, { at: T0 + 1000, by: "alice" });
          clock.advance(1000);
          const again = await store.schedulePause({ name: "nightly", actor: "bob" });
          assert.deepEqual(again.kind === "paused" && again.schedule.paused, { at: T0 + 1000, by: "alice" });
          const updated = await store.scheduleUpdate({
            schedule: scheduleFields("nightly", { priority: 1 }),
            ifRevision: "r1",
            revision: "r2",
            actor: "bob",
          });
          assert.deepEqual(
            updated.kind === "updated" && updated.schedule.paused,
            { at: T0 + 1000, by: "alice" },
            "a change of the fields leaves the pause",
          );

          const resumed = await store.scheduleResume({ name: "nightly" });
          assert.equal(resumed.kind, "resumed");
          assert.equal(resumed.kind === "resumed" && resumed.schedule.paused, null);
          const resumedAgain = await store.scheduleResume({ name: "nightly" });
          assert.equal(
            resumedAgain.kind === "resumed" && resumedAgain.schedule.paused,
            null,
            "resuming a running schedule changes nothing",
          );
          assert.equal(
            (await store.scheduleGet({ name: "nightly" }))?.revision,
            "r2",
            "pauses and resumes keep the revision",
          );

          assert.deepEqual(await store.schedulePause({ name: "weekly", actor: "alice" }), { kind: "not_found" });
          assert.deepEqual(await store.scheduleResume({ name: "weekly" }), { kind: "not_found" });
        },
      );

      suite.case(
        "a delete answers the schedule as it was and forgets its ticks; its name can be created again; an unknown name is not_found",
        async ({ store }) => {
          const created = await create(store, "nightly");
          assert.equal(
            (
              await store.cronTickInsert({
                name: "nightly",
                tickAt: T0,
                job: tickJob("nightly", T0),
                scheduleRevision: "r1",
              })
            ).kind,
            "created",
          );
          const job = (await allJobs(store))[0] as JobRow;
          assert.deepEqual(await store.scheduleDelete({ name: "nightly" }), { kind: "deleted", schedule: created });
          assert.equal(await store.scheduleGet({ name: "nightly" }), undefined);
          assert.deepEqual(await store.cronTickLatestMany({ names: ["nightly"] }), [], "its ticks are gone with it");
          assert.deepEqual(await allJobs(store), [job], "its jobs stay");
          assert.deepEqual(await store.scheduleDelete({ name: "nightly" }), { kind: "not_found" });
          await create(store, "nightly", "r7");
          assert.equal((await store.scheduleGet({ name: "nightly" }))?.revision, "r7");
        },
      );
    });

    describe("cronTickInsert", () => {
      suite.case(
        "the first call for a tick inserts its job; a second call answers already_enqueued and inserts nothing",
        async ({ store }) => {
          const params = cronJob("nightly", T0);
          const first = await store.cronTickInsert({ name: "nightly", tickAt: T0, job: params });
          assert.equal(first.kind, "created");
          const job = (first as { job: JobRow }).job;
          assert.equal(job.id, params.id);
          assert.equal(job.status, "pending");
          assert.equal(job.operationId, "cron:nightly");
          assert.deepEqual(await mustGet(store, job.id), job);
          const before = await allJobs(store);
          const again = cronJob("nightly", T0, { runAt: T0 + 60_000 });
          assert.deepEqual(await store.cronTickInsert({ name: "nightly", tickAt: T0, job: again }), {
            kind: "already_enqueued",
          });
          assert.deepEqual(await allJobs(store), before, "nothing inserted, nothing refreshed");
          assert.equal(await store.jobGet({ id: again.id }), undefined);
        },
      );

      suite.case("the tick is remembered after its job has run", async ({ store }) => {
        const first = await store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) });
        const job = (first as { job: JobRow }).job;
        await store.jobClaimMany({ limit: 10 });
        await store.jobSetStateIfRunningMany({
          outcomes: [
            {
              id: job.id,
              attempt: 1,
              status: "succeeded",
              result: { status_code: 200, error_body: null, terminal_reason: null },
            },
          ],
        });
        assert.deepEqual(await store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) }), {
          kind: "already_enqueued",
        });
        assert.equal((await allJobs(store)).length, 1);
      });

      suite.case("another tick or another name inserts again; a held dedupe key deduplicates", async ({ store }) => {
        const a = await store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) });
        assert.equal(a.kind, "created");
        const first = (a as { job: JobRow }).job;

        // The first tick's job is still pending and holds `cron:nightly`: the next tick refreshes it.
        const b = await store.cronTickInsert({
          name: "nightly",
          tickAt: T0 + 60_000,
          job: cronJob("nightly", T0 + 60_000),
        });
        assert.equal(b.kind, "deduplicated");
        assert.equal((b as { job: JobRow }).job.id, first.id);
        assert.equal((b as { job: JobRow }).job.runAt, T0 + 60_000);
        assert.deepEqual(
          await store.cronTickInsert({ name: "nightly", tickAt: T0 + 60_000, job: cronJob("nightly", T0 + 60_000) }),
          { kind: "already_enqueued" },
          "a deduplicated tick is recorded too",
        );

        const c = await store.cronTickInsert({ name: "hourly", tickAt: T0, job: cronJob("hourly", T0) });
        assert.equal(c.kind, "created", "the same tick time under another name is another tick");

        const d = await store.cronTickInsert({
          name: "nightly",
          tickAt: T0 + 120_000,
          job: cronJob("nightly", T0 + 120_000, { dedupeKey: null }),
        });
        assert.equal(d.kind, "created");
        assert.equal((await allJobs(store)).length, 3);
      });

      suite.case("concurrent calls for one tick produce exactly one job", async ({ store }) => {
        const outcomes = await Promise.all(
          Array.from({ length: 4 }, () =>
            store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0, { dedupeKey: null }) }),
          ),
        );
        assert.deepEqual(outcomes.map((outcome) => outcome.kind).sort(), [
          "already_enqueued",
          "already_enqueued",
          "already_enqueued",
          "created",
        ]);
        const jobs = await allJobs(store);
        assert.equal(jobs.length, 1);
        const created = outcomes.find((outcome) => outcome.kind === "created") as { job: JobRow };
        assert.equal(jobs[0]?.id, created.job.id);
      });

      suite.case(
        "concurrent calls for one tick and the group-committed inserts beside them stay consistent",
        async ({ store }) => {
          const [tick1, plain, tick2] = await Promise.all([
            store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) }),
            store.jobInsert(jobParams()),
            store.cronTickInsert({ name: "nightly", tickAt: T0, job: cronJob("nightly", T0) }),
          ]);
          assert.deepEqual([tick1.kind, tick2.kind].sort(), ["already_enqueued", "created"]);
          assert.equal(plain.kind, "created");
          assert.equal((await allJobs(store)).length, 2);
        },
      );

      suite.case(
        "a schedule's tick is recorded for the revision in force while it runs; another revision, a pause or a delete answer schedule_changed and write nothing",
        async ({ store }) => {
          await create(store, "nightly", "r1");
          const tick = (tickAt: number, revision: string) =>
            store.cronTickInsert({
              name: "nightly",
              tickAt,
              job: tickJob("nightly", tickAt),
              scheduleRevision: revision,
            });
          assert.equal((await tick(T0, "r1")).kind, "created");
          assert.deepEqual(await tick(T0, "r1"), { kind: "already_enqueued" });
          assert.deepEqual(await tick(T0 + 60_000, "r0"), { kind: "schedule_changed" }, "fired for another revision");

          await store.schedulePause({ name: "nightly", actor: "alice" });
          assert.deepEqual(await tick(T0 + 60_000, "r1"), { kind: "schedule_changed" }, "paused");
          await store.scheduleResume({ name: "nightly" });
          assert.equal(
            (await tick(T0 + 60_000, "r1")).kind,
            "created",
            "a refused tick was not recorded: it may be taken once the schedule runs",
          );

          await store.scheduleUpdate({
            schedule: scheduleFields("nightly", { priority: 5 }),
            ifRevision: "r1",
            revision: "r2",
            actor: "bob",
          });
          assert.deepEqual(
            await tick(T0 + 120_000, "r1"),
            { kind: "schedule_changed" },
            "the revision the change replaced",
          );
          assert.equal((await tick(T0 + 120_000, "r2")).kind, "created");

          await store.scheduleDelete({ name: "nightly" });
          assert.deepEqual(await tick(T0 + 180_000, "r2"), { kind: "schedule_changed" }, "deleted");
          assert.equal((await allJobs(store)).length, 3);

          // A config entry's tick names no revision:
          // no schedule row is asked about, even under a deleted schedule's name.
          const config = await store.cronTickInsert({
            name: "nightly",
            tickAt: T0 + 240_000,
            job: tickJob("nightly", T0 + 240_000),
          });
          assert.equal(config.kind, "created");
        },
      );
    });

    describe("cronTickLatestMany", () => {
      suite.case(
        "cronTickLatestMany answers each name's newest tick and its job, null for a tick whose job was refused, and leaves out names without ticks",
        async ({ store }) => {
          const first = await store.cronTickInsert({ name: "nightly", tickAt: T0, job: tickJob("nightly", T0) });
          const second = await store.cronTickInsert({
            name: "nightly",
            tickAt: T0 + 60_000,
            job: tickJob("nightly", T0 + 60_000),
          });
          assert.equal(first.kind, "created");
          assert.equal(second.kind, "created");
          // Another operation's job holds the dedupe key: the tick is recorded, its job refused.
          await insertCreated(store, { operationId: "sendWelcomeEmail", dedupeKey: "held" });
          const refused = await store.cronTickInsert({
            name: "hourly",
            tickAt: T0 + 5000,
            job: { ...tickJob("hourly", T0 + 5000), dedupeKey: "held" },
          });
          assert.equal(refused.kind, "dedupe_conflict");

          const latest = await store.cronTickLatestMany({ names: ["nightly", "hourly", "weekly", "nightly"] });
          assert.deepEqual(
            latest.sort((a, b) => a.name.localeCompare(b.name)),
            [
              { name: "hourly", tickAt: T0 + 5000, jobId: null },
              { name: "nightly", tickAt: T0 + 60_000, jobId: second.kind === "created" ? second.job.id : "" },
            ],
          );
          assert.deepEqual(await store.cronTickLatestMany({ names: [] }), []);
        },
      );
    });
  });
}

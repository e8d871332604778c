/**
 * PayloadStore (src/store/roles/payloads.ts): payload columns read a page at a time as stored, and rewritten only
 * where they still hold the text read (what `opqueue rewrap` is built on, docs/encryption.md).
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import { insertCreated, makeAsync, makeFinished, mustGet, scheduleFields, TOKEN_A, type Suite } from "./harness.js";

/** Registers the payload column cases. */
export function payloadCases(suite: Suite): void {
  describe("PayloadStore: payload columns as stored", () => {
    suite.case("pages go by key through every table, each column's text as stored", async ({ store }) => {
      const a = await insertCreated(store, { request: { body: { n: 1 } } });
      await insertCreated(store, { request: { body: { n: 2 } } });
      await makeFinished(store, "dead");
      const first = await store.payloadPage({ table: "jobs", after: null, limit: 2 });
      assert.equal(first.rows.length, 2);
      assert.equal(first.next, first.rows[1]?.key);
      assert.equal(first.rows[0]?.key, String(a.seq), "a job's key is its seq, the first job first");
      const request = first.rows[0]?.columns.find((entry) => entry.column === "request")?.text;
      assert.deepEqual(JSON.parse(request ?? "null"), { body: { n: 1 } });
      assert.deepEqual(
        first.rows[0]?.columns.map((entry) => entry.column),
        ["request", "result", "callbacks", "progress"],
      );
      const second = await store.payloadPage({ table: "jobs", after: first.next, limit: 2 });
      assert.equal(second.rows.length, 1);
      assert.equal(second.next, null, "a short page is the last");
      const attempts = await store.payloadPage({ table: "attempts", after: null, limit: 10 });
      assert.deepEqual(
        attempts.rows.map((row) => row.columns),
        [[{ column: "error_body", text: "bad request" }]],
      );
      await store.scheduleCreate({
        schedule: scheduleFields("nightly", { request: { body: { x: 1 } } }),
        revision: "r1",
        actor: "a",
        maxSchedules: 10,
      });
      const schedules = await store.payloadPage({ table: "schedules", after: null, limit: 10 });
      assert.deepEqual(
        schedules.rows.map((row) => row.key),
        ["nightly"],
      );
      assert.deepEqual((await store.payloadPage({ table: "chains", after: null, limit: 10 })).next, null);
    });

    suite.case("a column is rewritten only where it still holds the text read", async ({ store }) => {
      const job = await insertCreated(store, { request: { body: { n: 1 } } });
      const page = await store.payloadPage({ table: "jobs", after: null, limit: 10 });
      const row = page.rows[0];
      const text = row?.columns.find((entry) => entry.column === "request")?.text as string;
      const to = JSON.stringify({ body: { n: 2 } });
      const stale = { key: row?.key as string, column: "request", from: `${text} `, to };
      assert.equal(await store.payloadRewrite({ table: "jobs", changes: [stale] }), 0, "another text: left");
      assert.deepEqual((await mustGet(store, job.id)).request, { body: { n: 1 } });
      const fresh = { key: row?.key as string, column: "request", from: text, to };
      assert.equal(await store.payloadRewrite({ table: "jobs", changes: [fresh] }), 1);
      assert.deepEqual((await mustGet(store, job.id)).request, { body: { n: 2 } });
      assert.equal(await store.payloadRewrite({ table: "jobs", changes: [] }), 0);
    });

    suite.case("a heartbeat's progress is a payload column of its job, paged and rewritten", async ({ store }) => {
      const job = await makeAsync(store);
      const progressJson = JSON.stringify({ done: 3 });
      await store.jobHeartbeatExternal({ id: job.id, attempt: 1, token: TOKEN_A, progressJson });
      const page = await store.payloadPage({ table: "jobs", after: null, limit: 10 });
      const text = page.rows[0]?.columns.find((entry) => entry.column === "progress")?.text as string;
      assert.deepEqual(JSON.parse(text), { done: 3 });
      const to = JSON.stringify({ done: 4 });
      const change = { key: page.rows[0]?.key as string, column: "progress", from: text, to };
      assert.equal(await store.payloadRewrite({ table: "jobs", changes: [change] }), 1);
      const progress = (await store.jobAsyncStateGet({ id: job.id }))?.progress;
      assert.deepEqual(progress?.value, { done: 4 });
      assert.equal(progress?.attempt, 1, "its attempt and time stay");
    });
  });
}

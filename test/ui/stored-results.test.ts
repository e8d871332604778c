/**
 * A job's stored result on its page, in Chromium (docs/chains.md, "Stored results"): `result.body` is shown as text when
 * it is a string and indented when it is any other JSON value, and never as markup: a body holding HTML shows its tags
 * and runs nothing. Each test builds its own service and browser (test/ui/harness.ts).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Page } from "playwright-core";
import { mintToken } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import type { Job } from "../../src/job/schemas.js";
import { reply } from "../helpers/target.js";
import { SKIP, shot, startDashboard, type Dashboard } from "./harness.js";

/** A body that would run a script if it were ever taken as HTML. */
const MARKUP = `<img src="x" onerror="window.bodyRan = true"><b>not bold</b>`;

/** The body as the page shows it, its kind ("(text)" or "(JSON)"), and whether anything in it became an element. */
async function shownBody(page: Page): Promise<{ text: string; kind: string; elements: number }> {
  const body = page.locator("#result-body");
  await body.waitFor();
  return {
    text: await body.evaluate((pre) => pre.textContent ?? ""),
    kind: await page.locator(".body-kind").innerText(),
    elements: await body.locator("*").count(),
  };
}

/** Enqueues buildReport with `body` and waits (GET ?wait_ms) until it has finished; the job as the API answers it. */
async function delivered(dash: Dashboard, body: Record<string, unknown>): Promise<Job> {
  const assertion = await mintToken({
    auth: dash.config.auth,
    clock: systemClock,
    sub: "ops",
    op: "createUser",
    rid: `report-${String(body["kind"])}`,
  });
  const created = await fetch(`${dash.base}/jobs`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${assertion}` },
    body: JSON.stringify({ operation_id: "buildReport", request: { body } }),
  });
  assert.equal(created.status, 201, await created.clone().text());
  const { job } = (await created.json()) as { job: Job };
  const admin = { authorization: `Bearer ${await dash.adminToken()}` };
  for (;;) {
    const answer = await fetch(`${dash.base}/jobs/${job.id}?wait_ms=10000`, { headers: admin });
    const finished = ((await answer.json()) as { job: Job }).job;
    if (finished.status === "succeeded") return finished;
    assert.ok(finished.status === "pending" || finished.status === "running", `job ${job.id} is ${finished.status}`);
  }
}

describe("a job's stored result on its page", { skip: SKIP, timeout: 60_000 }, () => {
  test("shows the body the target answered: JSON indented, text as text, markup as its tags", async (t) => {
    const dash = await startDashboard(t, {
      worker: true,
      configure: (raw) => {
        raw["operations"] = { buildReport: { store_result: true } };
      },
      handler: (request, res) => {
        if (request.body.includes('"kind":"json"')) {
          return reply(res, 200, {
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ report: { rows: 3, note: "<b>x</b>" } }),
          });
        }
        return reply(res, 200, { headers: { "content-type": "text/plain" }, body: MARKUP });
      },
    });
    const page = await dash.open({ width: 1280, height: 800 });

    const json = await delivered(dash, { kind: "json" });
    await page.goto(`${dash.base}/ui/#/jobs/${json.id}`);
    const stored = (json.result as { body?: unknown }).body;
    // The API gives a JSON answer as its value (or, from a service that keeps every body as text, as its text).
    const expected =
      typeof stored === "string"
        ? { text: stored, kind: "(text)" }
        : { text: JSON.stringify(stored, null, 2), kind: "(JSON)" };
    assert.deepEqual(await shownBody(page), { ...expected, elements: 0 });
    assert.match(expected.text, /"rows": ?3/);
    await shot(page, "stored-json-1280.png");

    const text = await delivered(dash, { kind: "text" });
    assert.equal((text.result as { body?: unknown }).body, MARKUP);
    await page.goto(`${dash.base}/ui/#/jobs/${text.id}`);
    await page.locator(".head-status .badge-succeeded").waitFor();
    assert.deepEqual(await shownBody(page), { text: MARKUP, kind: "(text)", elements: 0 });
    assert.equal(await page.evaluate<unknown>("window.bodyRan"), undefined, "nothing in the body ran");
    assert.deepEqual(dash.problems, [], "no script error, no CSP violation");
  });

  test("indents any JSON value the API gives as result.body, and shows a string that looks like JSON as it is", async (t) => {
    const dash = await startDashboard(t, {
      worker: true,
      configure: (raw) => {
        raw["operations"] = { buildReport: { store_result: true } };
      },
      handler: (_request, res) => reply(res, 200, { headers: { "content-type": "text/plain" }, body: "done" }),
    });
    const job = await delivered(dash, { kind: "any" });
    const page = await dash.open({ width: 375, height: 812, mobile: true });
    // The page is given each form of result.body the API may answer, in place of the one stored.
    let body: unknown = null;
    await page.route(`${dash.base}/jobs/${job.id}`, async (route) => {
      const answer = await route.fetch();
      const wire = (await answer.json()) as { job: Job };
      await route.fulfill({ response: answer, json: { job: { ...wire.job, result: { ...wire.job.result, body } } } });
    });
    const cases: Array<{ body: unknown; text: string; kind: string }> = [
      {
        body: { rows: [1, 2], note: MARKUP },
        text: JSON.stringify({ rows: [1, 2], note: MARKUP }, null, 2),
        kind: "(JSON)",
      },
      { body: [true, null, 1.5], text: "[\n  true,\n  null,\n  1.5\n]", kind: "(JSON)" },
      { body: 42, text: "42", kind: "(JSON)" },
      { body: null, text: "null", kind: "(JSON)" },
      { body: '{"already":"text"}', text: '{"already":"text"}', kind: "(text)" },
      { body: "", text: "", kind: "(text)" },
    ];
    for (const example of cases) {
      body = example.body;
      if (example === cases[0]) await page.goto(`${dash.base}/ui/#/jobs/${job.id}`);
      else await page.reload();
      await page.getByRole("heading", { level: 1, name: `Job ${job.id}` }).waitFor();
      assert.deepEqual(
        await shownBody(page),
        { text: example.text, kind: example.kind, elements: 0 },
        JSON.stringify(example.body),
      );
      if (example === cases[0]) await shot(page, "stored-json-375.png");
    }
    assert.equal(await page.evaluate<unknown>("window.bodyRan"), undefined, "nothing in the body ran");
    assert.deepEqual(dash.problems, [], "no script error, no CSP violation");
  });
});

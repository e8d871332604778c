/**
 * The dashboard signed in as each role (docs/api.md, "Roles"), in Chromium: the session line names the role, and each
 * page shows only what the role may do. A viewer sees no action anywhere; an operator acts on jobs and flow control
 * and pauses or runs schedules but neither creates nor deletes them; an operator limited to one operation acts only
 * on its jobs; an admin sees everything. Each test builds its own service and browser (test/ui/harness.ts).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Page } from "playwright-core";
import { mintToken, type AdminRole } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import type { JobRow } from "../../src/job/job.js";
import { insertChain, SKIP, shot, startDashboard, type Dashboard } from "./harness.js";

/** A dashboard with a chain of two jobs waiting an hour (one per operation) and a schedule, signed in as `role`. */
async function signedInAs(
  t: Parameters<typeof startDashboard>[0],
  role: AdminRole,
  operations?: string[],
): Promise<{ d: Dashboard; page: Page; mail: JobRow; report: JobRow }> {
  const d = await startDashboard(t, {
    configure: (raw) => {
      (raw["triggers"] as Record<string, string[]>)["cron:*"] = ["buildReport"];
    },
  });
  const [mail, report] = await insertChain(d.service, "req-roles", [
    { parent: null, operationId: "sendWelcomeEmail" },
    { parent: 0, operationId: "buildReport" },
  ]);
  assert.ok(mail && report);
  const admin = await d.adminToken();
  const created = await fetch(`${d.base}/schedules`, {
    method: "POST",
    headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
    body: JSON.stringify({ name: "hourly", schedule: "0 * * * *", operation_id: "buildReport", user_id: "system" }),
  });
  assert.equal(created.status, 201, await created.text());
  const token = await mintToken({
    auth: d.config.auth,
    clock: systemClock,
    sub: `${role}@example.com`,
    role,
    ...(operations ? { operations } : {}),
  });
  const page = await d.open({ width: 1280, height: 900, token });
  return { d, page, mail, report };
}

/** The buttons of a job's page, by their text. */
async function jobActions(d: Dashboard, page: Page, job: JobRow): Promise<string[]> {
  await page.goto(`${d.base}/ui/#/jobs/${job.id}`);
  // The actions are drawn with the job's status.
  await page.locator(".head-status .badge").waitFor();
  return (await page.locator('[role="group"][aria-label="Actions"] button').allInnerTexts()).map((text) => text.trim());
}

/** The schedules page's buttons on the schedule's row, and whether the create form is there. */
async function scheduleControls(d: Dashboard, page: Page): Promise<{ buttons: string[]; form: boolean }> {
  await page.goto(`${d.base}/ui/#/schedules`);
  const row = page.locator("tr", { hasText: "hourly" });
  await row.waitFor();
  const buttons = (await row.locator("button").allInnerTexts()).map((text) => text.trim());
  return { buttons, form: (await page.locator("#schedule-save").count()) > 0 };
}

/** The flow page: whether the limits form, the key form and the first operation's actions are there. */
async function flowControls(d: Dashboard, page: Page): Promise<{ limits: boolean; keys: boolean; rows: string[] }> {
  await page.goto(`${d.base}/ui/#/flow`);
  await page.getByRole("heading", { level: 2, name: "Operations" }).waitFor();
  await page.locator("tr[data-operation-id]").first().waitFor();
  const rows = await page
    .locator('[role="group"][aria-label^="Actions on "]')
    .evaluateAll((groups) => groups.map((group) => group.getAttribute("aria-label") ?? ""));
  return {
    limits: (await page.locator("#limits-save").count()) > 0,
    keys: (await page.locator("#pause-key-button").count()) > 0,
    rows,
  };
}

describe("the dashboard by role", { skip: SKIP }, () => {
  test("a viewer reads every page and is offered no action", async (t) => {
    const { d, page, mail, report } = await signedInAs(t, "viewer");
    assert.match(await page.locator("#session").innerText(), /Signed in as viewer@example\.com · viewer/);
    assert.equal(await page.getByRole("button", { name: "Retry all dead jobs…" }).count(), 0);
    for (const job of [mail, report]) assert.deepEqual(await jobActions(d, page, job), []);
    assert.deepEqual(await scheduleControls(d, page), { buttons: [], form: false });
    assert.deepEqual(await flowControls(d, page), { limits: false, keys: false, rows: [] });
    await shot(page, "role-viewer.png");
    assert.deepEqual(d.problems, []);
  });

  test("an operator acts on jobs and flow control and pauses or runs schedules, but does not edit them", async (t) => {
    const { d, page, report } = await signedInAs(t, "operator");
    assert.match(await page.locator("#session").innerText(), /· operator/);
    const actions = await jobActions(d, page, report);
    assert.ok(actions.includes("Run now…") && actions.includes("Cancel job…"), actions.join(", "));
    assert.ok(actions.includes("Cancel chain…"));
    const schedules = await scheduleControls(d, page);
    assert.deepEqual(schedules, { buttons: ["Pause…", "Run now"], form: false });
    const flow = await flowControls(d, page);
    assert.equal(flow.limits, true);
    assert.equal(flow.keys, true);
    assert.ok(flow.rows.includes("Actions on buildReport"), flow.rows.join(", "));
    assert.deepEqual(d.problems, []);
  });

  test("an operator limited to one operation acts only on its jobs, and on no chain or key", async (t) => {
    const { d, page, mail, report } = await signedInAs(t, "operator", ["sendWelcomeEmail"]);
    assert.match(await page.locator("#session").innerText(), /· operator of sendWelcomeEmail/);
    const mine = await jobActions(d, page, mail);
    assert.ok(mine.includes("Cancel job…"), mine.join(", "));
    assert.ok(!mine.includes("Cancel chain…"));
    assert.deepEqual(await jobActions(d, page, report), []);
    assert.deepEqual((await scheduleControls(d, page)).buttons, [], "the schedule runs buildReport");
    const flow = await flowControls(d, page);
    assert.deepEqual(flow.rows, ["Actions on sendWelcomeEmail"]);
    assert.equal(flow.keys, false);
    assert.deepEqual(d.problems, []);
  });

  test("an admin is offered everything", async (t) => {
    const { d, page, report } = await signedInAs(t, "admin");
    assert.match(await page.locator("#session").innerText(), /· admin/);
    assert.ok((await jobActions(d, page, report)).includes("Cancel chain…"));
    const schedules = await scheduleControls(d, page);
    assert.deepEqual(schedules, { buttons: ["Edit", "Pause…", "Run now", "Delete…"], form: true });
    assert.deepEqual(d.problems, []);
  });
});

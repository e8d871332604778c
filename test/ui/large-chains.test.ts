/**
 * The dashboard with a chain of 1,000 jobs, in Chromium: a job's page draws a bounded slice of the chain around the job
 * (the root and its nearest ancestors, its nearest siblings, two generations of descendants), each part left out
 * counted, and links to the chain's page, which pages its waterfall and opens on the job's row. The navigation stays
 * on one line at a phone's 375 px. Each test builds its own service, chain and browser (test/ui/harness.ts).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Page } from "playwright-core";
import type { JobRow } from "../../src/job/job.js";
import { insertChain, SKIP, shot, startDashboard, type ChainJobSpec, type Dashboard } from "./harness.js";

const RID = "import-2026-11-30-tenant-42";

/**
 * 1,000 jobs: a line of 120 from the root (job 100 of it is the job looked at, "the job"), 300 other children of the
 * job's parent (150 created before the job, 150 after), 300 more children of the job after the line's next one, and
 * 280 children under the second of those. So the job has 100 ancestors, 300 siblings and 599 descendants.
 */
function bigChainSpecs(): { specs: ChainJobSpec[]; theJob: number; parent: number } {
  const specs: ChainJobSpec[] = [];
  const add = (parent: number | null, operationId?: string): number =>
    specs.push({ parent, ...(operationId ? { operationId } : {}) }) - 1;
  const line: number[] = [];
  for (let i = 0; i < 100; i++) line.push(add(line.at(-1) ?? null, i === 0 ? "importUsers" : "sendWelcomeEmail"));
  const parent = line.at(-1) as number;
  for (let i = 0; i < 150; i++) add(parent, "recordEmailSent");
  const theJob = add(parent, "sendWelcomeEmail");
  line.push(theJob);
  for (let i = 0; i < 19; i++) line.push(add(line.at(-1) as number, "sendWelcomeEmail"));
  for (let i = 0; i < 150; i++) add(parent, "recordEmailSent");
  const extra: number[] = [];
  for (let i = 0; i < 300; i++) extra.push(add(theJob));
  for (let i = 0; i < 280; i++) add(extra[0] as number);
  assert.equal(specs.length, 1000);
  return { specs, theJob, parent };
}

/** A dashboard with the big chain; the chain's jobs and the job looked at. */
async function withBigChain(
  t: Parameters<typeof startDashboard>[0],
): Promise<{ dash: Dashboard; jobs: JobRow[]; job: JobRow }> {
  const dash = await startDashboard(t);
  const { specs, theJob } = bigChainSpecs();
  const jobs = await insertChain(dash.service, RID, specs);
  return { dash, jobs, job: jobs[theJob] as JobRow };
}

/** The lines of the chain's tree on a job's page, each squeezed to one line of text. */
async function treeLines(page: Page): Promise<string[]> {
  const texts = await page
    .locator("ul.tree li")
    .evaluateAll((items) =>
      items.map((li) =>
        (li.querySelector(":scope > .node")?.textContent ?? li.textContent ?? "").replace(/\s+/g, " ").trim(),
      ),
    );
  return texts;
}

/** How high the whole page is, in CSS pixels. */
function pageHeightOf(page: Page): Promise<number> {
  return page.evaluate<number>("document.scrollingElement.scrollHeight");
}

/** The page is no wider than its window. */
async function assertFits(page: Page, what: string): Promise<void> {
  const { scrollWidth, innerWidth } = await page.evaluate<{ scrollWidth: number; innerWidth: number }>(
    "({ scrollWidth: document.scrollingElement.scrollWidth, innerWidth: window.innerWidth })",
  );
  assert.ok(scrollWidth <= innerWidth, `${what}: ${scrollWidth} px wide in a ${innerWidth} px window`);
}

describe("the dashboard with a chain of 1,000 jobs", { skip: SKIP, timeout: 120_000 }, () => {
  test("draws on a job's page a bounded slice of the chain, each part left out counted, with a link to the chain's page", async (t) => {
    const { dash, jobs, job } = await withBigChain(t);
    const page = await dash.open({ width: 1280, height: 800 });
    await page.goto(`${dash.base}/ui/#/jobs/${job.id}`);
    const tree = page.locator("ul.tree");
    await tree.locator("[aria-current]").waitFor();

    const lines = await treeLines(page);
    assert.ok(lines.length <= 40, `${lines.length} lines drawn`);
    const root = jobs[0] as JobRow;
    assert.equal(lines[0], `pending importUsers ${root.id} · root`);
    assert.deepEqual(
      lines.filter((line) => line.startsWith("…")),
      [
        "… 97 more ancestors not shown",
        "… 147 earlier siblings not shown",
        "… 276 more children not shown",
        "… 297 more children not shown",
        "… 147 later siblings not shown",
      ],
    );
    // The parent and the grandparent, then three siblings on each side of the job, then its first children.
    const ancestors = [jobs[98], jobs[99]] as JobRow[];
    for (const ancestor of ancestors)
      assert.ok(
        lines.some((line) => line.startsWith(`pending sendWelcomeEmail ${ancestor.id}`)),
        `ancestor ${ancestor.id}`,
      );
    assert.equal(
      lines.filter((line) => line.startsWith("pending recordEmailSent")).length,
      6,
      "three siblings on each side",
    );
    const here = lines.findIndex((line) => line.includes("(this job)"));
    assert.ok(here > 0, "the job is drawn");
    assert.match(
      lines[here + 1] ?? "",
      new RegExp(`^pending sendWelcomeEmail ${jobs[251]?.id}$`),
      "its first child, the line's next job",
    );
    assert.match(
      lines[here + 2] ?? "",
      new RegExp(`^pending sendWelcomeEmail ${jobs[252]?.id} · 17 jobs below not shown$`),
    );
    const drawn = await page.locator("#chain-drawn").innerText();
    assert.match(drawn, /^\d+ of the chain's 1,000 jobs drawn/);
    assert.equal(
      Number(/^(\d+)/.exec(drawn)?.[1]),
      await tree.locator("li:not(.gap)").count(),
      "the count is of the jobs drawn",
    );
    // Bounded: the chain's panel is a few screens at most, not 27,000 px.
    const panel = await page.locator("section[aria-labelledby=chain-title]").boundingBox();
    assert.ok(panel && panel.height < 1400, `the chain panel is ${panel?.height} px high`);
    await shot(page, "job-in-big-chain-1280.png");
    const pageHeight = await pageHeightOf(page);
    assert.ok(pageHeight < 2500, `the page is ${pageHeight} px high`);

    // The chain's page opens on the page of rows holding the job, its row marked.
    const link = page.locator("#chain-page");
    assert.equal(await link.innerText(), "The chain's page (1,000 jobs, waterfall)");
    await link.click();
    const marked = page.locator("#waterfall tr.waterfall-row[aria-current]");
    await marked.waitFor();
    assert.equal(await marked.getAttribute("data-job"), job.id);
    assert.equal(page.url(), `${dash.base}/ui/#/chains/${RID}?job=${job.id}`);
    assert.equal(await page.locator("#waterfall tr.waterfall-row").count(), 100);
    assert.equal(
      await page.locator(".rows-pager .rows-shown").first().innerText(),
      "Rows 201–300 of 1,000 · page 3 of 10",
    );
    assert.deepEqual(dash.problems, [], "no script error, no CSP violation");
  });

  test("pages the chain's waterfall, a hundred rows at a time, parents before children", async (t) => {
    const { dash, jobs } = await withBigChain(t);
    const page = await dash.open({ width: 1280, height: 800 });
    await page.goto(`${dash.base}/ui/#/chains/${RID}`);
    const rows = page.locator("#waterfall tr.waterfall-row");
    await rows.first().waitFor();
    assert.equal(await rows.count(), 100);
    // The first page is the line from the root, oldest first.
    assert.deepEqual(
      await rows.evaluateAll((trs) => trs.slice(0, 3).map((tr) => tr.getAttribute("data-job"))),
      jobs.slice(0, 3).map((job) => job.id),
    );
    assert.match(await page.locator("#chain-summary-title + div table").innerText(), /pending\s+1,000/);
    await shot(page, "chain-big-1280.png");
    const pageHeight = await pageHeightOf(page);
    assert.ok(pageHeight < 5000, `the chain's page is ${pageHeight} px high`);

    const pager = page.getByRole("navigation", { name: "Pages of the waterfall", exact: true });
    await pager.getByRole("link", { name: "Next ›" }).click();
    await page.locator(".rows-shown", { hasText: "Rows 101–200 of 1,000 · page 2 of 10" }).first().waitFor();
    assert.match(page.url(), /\?page=2$/);
    assert.equal(
      await rows.first().getAttribute("data-job"),
      jobs[100]?.id,
      "row 101: the first of the parent's other children",
    );
    await pager.getByRole("link", { name: "Last »" }).click();
    await page.locator(".rows-shown", { hasText: "Rows 901–1,000 of 1,000 · page 10 of 10" }).first().waitFor();
    assert.equal(await rows.count(), 100);
    assert.equal(await pager.getByRole("link", { name: "Next ›" }).count(), 0);
    await pager.getByRole("link", { name: "« First" }).click();
    await page.locator(".rows-shown", { hasText: "Rows 1–100" }).first().waitFor();

    // At a phone's width too, no sideways scrolling.
    const phone = await dash.open({ width: 375, height: 812, mobile: true });
    await phone.goto(`${dash.base}/ui/#/chains/${RID}`);
    await phone.locator("#waterfall tr.waterfall-row").first().waitFor();
    await assertFits(phone, "the chain's page");
    await shot(phone, "chain-big-375.png");
    assert.deepEqual(dash.problems, [], "no script error, no CSP violation");
  });

  test("keeps the navigation on one line at 375 px, and a job of the big chain fits the phone's width", async (t) => {
    const { dash, job } = await withBigChain(t);
    const page = await dash.open({ width: 375, height: 812, mobile: true });
    await shot(page, "overview-375.png");
    const nav = page.getByRole("navigation", { name: "Dashboard" });
    const links = nav.getByRole("link");
    assert.equal(await links.count(), 4);
    // One line: every link's words on one line, every link at the same height, the navigation no taller than a link.
    const boxes = await page.evaluate<
      Array<{ text: string; lines: number; top: number; bottom: number; left: number; right: number }>
    >(`
      [...document.querySelectorAll("#nav a")].map((a) => {
        const range = document.createRange();
        range.selectNodeContents(a);
        const lines = new Set([...range.getClientRects()].map((rect) => Math.round(rect.top))).size;
        const { top, bottom, left, right } = a.getBoundingClientRect();
        return { text: a.textContent, lines, top, bottom, left, right };
      })
    `);
    for (const box of boxes) {
      assert.equal(box.lines, 1, `"${box.text}" on ${box.lines} lines`);
      assert.ok(box.left >= 0 && box.right <= 375, `"${box.text}" at ${box.left}–${box.right} px`);
    }
    assert.equal(new Set(boxes.map((box) => Math.round(box.top))).size, 1, "the links on one line");
    const navBox = await nav.boundingBox();
    const linkHeight = Math.max(...boxes.map((box) => box.bottom - box.top));
    assert.ok(
      navBox && navBox.height <= linkHeight + 1,
      `the navigation is ${navBox?.height} px high, a link ${linkHeight} px`,
    );
    await assertFits(page, "the overview");

    await page.goto(`${dash.base}/ui/#/jobs`);
    await page.locator("table.jobs-table tbody tr").first().waitFor();
    await assertFits(page, "the job list");
    await shot(page, "jobs-375.png");

    await page.goto(`${dash.base}/ui/#/jobs/${job.id}`);
    await page.locator("ul.tree [aria-current]").waitFor();
    await assertFits(page, "the job's page");
    const panel = await page.locator("section[aria-labelledby=chain-title]").boundingBox();
    assert.ok(panel && panel.height < 2400, `the chain panel is ${panel?.height} px high at 375 px`);
    await shot(page, "job-in-big-chain-375.png");

    const wide = await dash.open({ width: 1280, height: 800 });
    await wide.goto(`${dash.base}/ui/#/jobs`);
    await wide.locator("table.jobs-table tbody tr").first().waitFor();
    await shot(wide, "jobs-1280.png");
    assert.deepEqual(dash.problems, [], "no script error, no CSP violation");
  });
});

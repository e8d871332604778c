/**
 * The dashboard in a real browser (Debian's Chromium driven by playwright-core): a service with its worker,
 * listening on 127.0.0.1 with the system clock, delivering to a small product where `recordEmailSent` answers 400
 * until the test flips a flag. The browser signs in through a `#token=` link, reads the overview, filters the list
 * (operations from GET /operations), opens the dead job, retries it and sees the retry in its history between two
 * numbered attempts, runs a delayed job now, cancels a running job (aborting its delivery), cancels a chain, pauses and
 * resumes an operation (its waiting job counted and the operation shown throttled while paused) and a concurrency key
 * and changes and resets an operation's limits in the Flow control view, creates, edits, pauses, resumes, runs now and
 * deletes a schedule in the Schedules view (its last run linking to its job), cancels the jobs matching a filter, lays every
 * page out at a phone's width, and is refused politely with a token that is not a site administrator's. The page runs
 * under the service's Content-Security-Policy: any violation, like any script error, fails the run. (The routes that
 * serve it are tested without a browser in test/http/ui.test.ts.)
 *
 * Screenshots for the README (docs/screenshots/) are written only with OPQUEUE_UPDATE_SCREENSHOTS=1.
 */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { chromium, type Browser, type Page } from "playwright-core";
import { mintToken } from "../../src/auth/tokens.js";
import type { Clock } from "../../src/clock.js";
import { parseConfig, type Config } from "../../src/config.js";
import { dashboardUrl, signInLink } from "../../src/http/routes/ui.js";
import type { Job } from "../../src/job/schemas.js";
import { createService, type Service } from "../../src/service.js";
import type { JobRow } from "../../src/job/job.js";
import { cronEntryOf } from "../../src/schedules/schedule.js";
import { rawTestConfig } from "../helpers/service.js";
import type { ServerResponse } from "node:http";
import { deferred, reply, startTarget, type Target, type TargetRequest } from "../helpers/target.js";

const CHROMIUM = "/usr/bin/chromium";
const SKIP = existsSync(CHROMIUM)
  ? false
  : `no Chromium at ${CHROMIUM}: install Debian's (apt-get install -y chromium; .ci/run does it when missing)`;
const UPDATE_SCREENSHOTS = process.env["OPQUEUE_UPDATE_SCREENSHOTS"] === "1";
const SCREENSHOTS = fileURLToPath(new URL("../../docs/screenshots/", import.meta.url));
/** Bound of every wait in the browser: far above what a passing run needs (the job page refreshes every 2 s). */
const WAIT_MS = 15_000;
const NOT_ADMIN = "This token carries no administrator's role (role: viewer, operator or admin; or site_admin: true).";
/** Who the browser signs in as. */
const OPERATOR = "oncall@example.com";
/** A chain id as a product's request ids often are: long, so the dashboard must show it whole. */
const LONG_CHAIN_ID = "web-checkout-3c9a1f6e-8b2d-4f3e-9a1c-7d5e2b8c4f10";
/** The background operations of the test product, as GET /operations sorts them. */
const OPERATIONS = ["buildReport", "recordEmailSent", "sendWelcomeEmail"];

/** An operation's flow control as GET /operations answers it. */
interface OperationControlWire {
  paused: { at: string; by: string } | null;
  limits: unknown;
  limits_source: "config" | "admin";
  limits_set: { at: string; by: string } | null;
}

/** Everything the cases share: one service, one product, one browser. */
interface World {
  service: Service;
  config: Config;
  clock: Clock & { shift(ms: number): void };
  target: Target;
  base: string;
  browser: Browser;
  page: Page;
  /** recordEmailSent answers 400 while true. */
  product: { recordsBroken: boolean };
  /** The recordEmailSent job that went dead, for the retry case. */
  deadRecord: JobRow;
  /** A chain of three pending delayed jobs (root, child, grandchild). */
  chain: Job[];
  /** A job held running by the product until the end, or until the dashboard aborts it. */
  running: Job;
  /** Two welcome emails delayed by an hour: one to run now (in chain LONG_CHAIN_ID), one cancelled meanwhile. */
  delayed: Job;
  delayedToCancel: Job;
  /** Browser console errors and CSP violations. */
  problems: string[];
  cleanups: Array<() => Promise<void>>;
}

/** Polls `check` until it returns a value other than undefined/false; fails after WAIT_MS with `what`. */
async function until<T>(check: () => Promise<T | undefined | false>, what: string): Promise<T> {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(20);
  }
}

/** The system clock, which the test may set forward (never back) to record an hour of history in seconds. */
function shiftableClock(start: number): World["clock"] {
  let offset = start;
  return {
    now: () => Date.now() + offset,
    shift(ms: number) {
      offset += ms;
    },
  };
}

/**
 * The product: `sendWelcomeEmail` answers 204 and chains `recordEmailSent` (503 for users named busy-*),
 * `recordEmailSent` answers 400 while `recordsBroken`, else 204 and chains `buildReport`; `buildReport` answers 204,
 * or holds its answer when the body asks to.
 */
function productHandler(world: () => World, release: Promise<void>) {
  return async (request: TargetRequest, res: ServerResponse): Promise<void> => {
    const w = world();
    const jobId = String(request.headers["x-job-id"]);
    const welcome = /^\/users\/([^/]+)\/welcome-email$/.exec(request.path);
    if (welcome) {
      const userId = decodeURIComponent(welcome[1] ?? "");
      if (userId.startsWith("busy-")) return reply(res, 503, { body: "mail provider busy, try later" });
      await enqueue(
        w,
        { operation_id: "recordEmailSent", request: { path_params: { emailId: `welcome-${userId}` } } },
        { sub: userId, op: "sendWelcomeEmail", job: jobId },
      );
      return reply(res, 204);
    }
    const record = /^\/emails\/([^/]+)\/record$/.exec(request.path);
    if (record) {
      const parent = await w.service.store.jobGet({ id: jobId });
      if (w.product.recordsBroken) {
        return reply(res, 400, {
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            code: "mailbox_unknown",
            message: `no mailbox for ${decodeURIComponent(record[1] ?? "")} yet`,
          }),
        });
      }
      await enqueue(
        w,
        { operation_id: "buildReport", request: { body: { kind: "welcome-emails" } } },
        { sub: parent?.userId ?? "", op: "recordEmailSent", job: jobId },
      );
      return reply(res, 204);
    }
    if (request.path === "/reports") {
      if (request.body.includes('"hold":true')) await release;
      // A long report: taken asynchronously, the test then reports its progress with the delivery's token.
      if (request.body.includes('"async":true')) return reply(res, 202, { headers: { "x-job-async": "1" } });
      return reply(res, 204);
    }
    return reply(res, 404, { body: "no such operation" });
  };
}

/** `POST /jobs` with a fresh assertion; the job. */
async function enqueue(
  w: World,
  body: Record<string, unknown>,
  claims: { sub: string; op: string; rid?: string; job?: string },
): Promise<Job> {
  const assertion = await mintToken({ auth: w.config.auth, clock: w.clock, ...claims });
  const response = await fetch(`${w.base}/jobs`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${assertion}` },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  assert.ok(response.status === 201 || response.status === 200, `enqueue answered ${response.status}: ${text}`);
  return (JSON.parse(text) as { job: Job }).job;
}

/** A user signs up: `createUser` enqueues the welcome email as the root of chain `signup-{user}`. */
function signUp(w: World, user: string, extra: Record<string, unknown> = {}): Promise<Job> {
  return enqueue(
    w,
    {
      operation_id: "sendWelcomeEmail",
      request: { path_params: { userId: user }, body: { email: `${user}@example.com` } },
      ...extra,
    },
    { sub: user, op: "createUser", rid: `signup-${user}` },
  );
}

/** Waits until nothing is running and no job is due: the worker has caught up with the clock. */
async function settle(w: World): Promise<void> {
  await until(async () => {
    const stats = await w.service.store.jobStats();
    return stats.byStatus.running === 0 && stats.oldestDueRunAt === null;
  }, "the worker to catch up");
}

/**
 * Forty minutes of traffic recorded in about two seconds: the clock starts 45 minutes back and moves forward
 * between batches of sign-ups, so the chart and the list look like a service that has been running. Some users
 * are busy (503, retried later), and for a while recordEmailSent is broken (400, dead).
 */
async function recordHistory(w: World): Promise<void> {
  const names = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "niaj"];
  for (let step = 0; step < 12; step++) {
    w.product.recordsBroken = step === 5 || step === 6;
    const batch = 1 + ((step * 7) % 4);
    for (let i = 0; i < batch; i++) {
      const name = `${names[(step + i) % names.length]}-${step}${i}`;
      await signUp(w, step % 4 === 2 && i === 0 ? `busy-${name}` : name);
    }
    if (step === 8) {
      const cancelled = await signUp(w, `oscar-${step}`, { delay_ms: 3_600_000 });
      const res = await fetch(`${w.base}/jobs/${cancelled.id}/cancel`, {
        method: "POST",
        headers: { authorization: `Bearer ${await adminToken(w)}` },
      });
      assert.equal(res.status, 200);
    }
    await settle(w);
    w.clock.shift(step === 11 ? 45 * 60_000 - 11 * 220_000 : 220_000);
  }
  w.product.recordsBroken = false;
  await settle(w);
}

function adminToken(w: World, siteAdmin = true, sub = OPERATOR): Promise<string> {
  return mintToken({ auth: w.config.auth, clock: w.clock, sub, ...(siteAdmin ? { siteAdmin: true } : {}) });
}

async function screenshot(page: Page, name: string, fullPage = false): Promise<void> {
  if (!UPDATE_SCREENSHOTS) return;
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, name), fullPage });
}

/** The text of the dashboard's status line once it says something matching `pattern`. */
async function announced(page: Page, pattern: RegExp): Promise<string> {
  return until(async () => {
    const text = (await page.locator("#announcer").textContent()) ?? "";
    return pattern.test(text) ? text : undefined;
  }, `the status line to say ${pattern}`);
}

describe("the dashboard in Chromium", { skip: SKIP, timeout: 90_000 }, () => {
  const w = {} as World;

  before(async () => {
    w.cleanups = [];
    w.problems = [];
    w.product = { recordsBroken: false };
    const hold = deferred();
    w.cleanups.push(async () => hold.resolve());
    w.target = await startTarget(
      { after: (fn) => void w.cleanups.push(fn) },
      productHandler(() => w, hold.promise),
    );

    const dir = mkdtempSync(join(tmpdir(), "opqueue-ui-"));
    w.cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
    const raw = rawTestConfig(dir);
    raw["target"] = { base_url: w.target.url, audience: "product" };
    raw["cron"] = [];
    // Schedules created in the Schedules view may enqueue buildReport.
    raw["triggers"] = { ...(raw["triggers"] as Record<string, string[]>), "cron:*": ["buildReport"] };
    raw["worker"] = { concurrency: 8, poll_ms: 50 };
    raw["retry"] = { base_ms: 600_000, factor: 2, max_ms: 3_600_000 };
    raw["shutdown"] = { grace_ms: 200 };
    raw["operations"] = { sendWelcomeEmail: { max_attempts: 8 }, buildReport: { timeout_ms: 120_000 } };
    w.config = parseConfig({ raw, baseDir: dir, env: {} });
    w.clock = shiftableClock(-45 * 60_000);
    w.service = await createService({ config: w.config, clock: w.clock });
    await w.service.app.listen({ host: "127.0.0.1", port: 0 });
    w.service.start();
    // No tick on a timer: the schedules the Schedules view creates are hourly, on a clock that follows the real one, and
    // a real tick falling inside that case would change the last run it checks. The case fires its tick itself.
    await w.service.worker?.cron.stop();
    // Closed before the product, so that the held delivery is given back rather than failed.
    w.cleanups.unshift(() => w.service.close({ graceMs: 200 }));
    w.base = `http://127.0.0.1:${(w.service.app.server.address() as AddressInfo).port}`;

    await recordHistory(w);

    // Now: the job to retry (recordEmailSent dead with 400), a chain of three waiting jobs, a running report with
    // a second one waiting for its concurrency key (queue lag), and a busy user retrying.
    w.product.recordsBroken = true;
    await signUp(w, "dora");
    w.deadRecord = await until(async () => {
      const [job] = await w.service.store.jobList({
        limit: 1,
        originalRequestId: "signup-dora",
        operationId: "recordEmailSent",
        statuses: ["dead"],
      });
      return job;
    }, "dora's recordEmailSent to go dead");
    const root = await signUp(w, "eve", { delay_ms: 3_600_000 });
    const child = await enqueue(
      w,
      { operation_id: "recordEmailSent", request: { path_params: { emailId: "welcome-eve" } }, delay_ms: 3_600_000 },
      { sub: "eve", op: "sendWelcomeEmail", job: root.id },
    );
    const grandchild = await enqueue(
      w,
      { operation_id: "buildReport", request: { body: {} }, delay_ms: 3_600_000 },
      { sub: "eve", op: "recordEmailSent", job: child.id },
    );
    w.chain = [root, child, grandchild];
    w.running = await enqueue(
      w,
      { operation_id: "buildReport", request: { body: { hold: true } }, concurrency_key: "reports" },
      { sub: "ops", op: "createUser", rid: "weekly-report" },
    );
    await until(
      async () => (await w.service.store.jobGet({ id: w.running.id }))?.status === "running",
      "the held report to run",
    );
    await enqueue(
      w,
      { operation_id: "buildReport", request: { body: {} }, concurrency_key: "reports" },
      { sub: "ops", op: "createUser", rid: "daily-report" },
    );
    await signUp(w, "busy-peggy");
    w.delayed = await enqueue(
      w,
      {
        operation_id: "sendWelcomeEmail",
        request: { path_params: { userId: "trent" }, body: { email: "trent@example.com" } },
        delay_ms: 3_600_000,
      },
      { sub: "trent", op: "createUser", rid: LONG_CHAIN_ID },
    );
    w.delayedToCancel = await signUp(w, "uma", { delay_ms: 3_600_000 });

    w.browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
    });
    w.cleanups.unshift(() => w.browser.close());
    const context = await w.browser.newContext({
      viewport: { width: 1280, height: 800 },
      timezoneId: "UTC",
      locale: "en-US",
    });
    w.page = await context.newPage();
    w.page.setDefaultTimeout(WAIT_MS);
    w.page.on("pageerror", (error) => w.problems.push(`page error: ${error.message}`));
    w.page.on("console", (message) => {
      // A refused API call (403, 409) is logged by Chromium as a failed resource load: expected in these cases.
      if (message.type() === "error" && !message.text().startsWith("Failed to load resource"))
        w.problems.push(message.text());
    });
  });

  after(async () => {
    for (const cleanup of w.cleanups ?? []) await cleanup().catch(() => undefined);
  });

  test("says plainly that a token without site_admin cannot sign in", async () => {
    const { page } = w;
    await page.goto(
      signInLink(
        dashboardUrl({ host: "127.0.0.1", port: Number(new URL(w.base).port) }),
        await adminToken(w, false, "mallory"),
      ),
    );
    await page.getByText(NOT_ADMIN).waitFor();
    assert.ok(!page.url().includes("token="), `the token left the address bar: ${page.url()}`);
    assert.equal(await page.evaluate<number>("sessionStorage.length"), 0);
    assert.equal(await page.getByRole("link", { name: "Jobs" }).count(), 0, "no navigation without a site admin");
  });

  test("signs in through a #token= link and shows the overview", async () => {
    const { page } = w;
    await page.goto(`${w.base}/ui/#token=${await adminToken(w)}`);
    // The session line itself: a bare getByText("Signed in as") also finds the screen-reader announcement of the
    // sign-in once it lands, and a locator matching two elements fails.
    const session = page.locator("#session");
    await session.waitFor();
    assert.match(await session.innerText(), /Signed in as oncall@example\.com/);
    // This browser runs in UTC; the phone case below runs in another zone.
    assert.equal(await page.locator("#time-zone").innerText(), "Times in UTC (UTC+00:00)");
    assert.ok(page.url().endsWith("/ui/#/"), `the token left the address bar: ${page.url()}`);
    await page.getByRole("heading", { level: 1, name: "Overview" }).waitFor();

    // The cards show what /stats says. A busy user's retry may fall due while the test reads them (its job
    // passes through running, and the page refreshes every 5 s), so the two are compared until they agree.
    await page.locator(".card-dead .card-count").waitFor();
    const statuses = ["succeeded", "dead", "pending"];
    const cards = async (): Promise<string> => {
      const shown = await Promise.all(
        statuses.map((status) => page.locator(`.card-${status} .card-count`).innerText()),
      );
      return shown.map((text) => text.replace(/,/g, "")).join(" ");
    };
    let stats: { by_status: Record<string, number> } = { by_status: {} };
    await until(async () => {
      stats = (await (
        await fetch(`${w.base}/stats`, { headers: { authorization: `Bearer ${await adminToken(w)}` } })
      ).json()) as typeof stats;
      return (await cards()) === statuses.map((status) => stats.by_status[status] ?? 0).join(" ");
    }, "the succeeded, dead and pending cards to show /stats's counts");
    assert.ok((stats.by_status["dead"] ?? 0) > 1, "the history left dead jobs");
    // An hour of history: bars in several minutes, each series present.
    const bars = page.locator("svg.chart-svg rect.bar");
    assert.ok((await bars.count()) >= 12, `bars drawn: ${await bars.count()}`);
    for (const series of ["succeeded", "retrying", "dead"])
      assert.ok((await page.locator(`rect.bar-${series}`).count()) > 0, series);
    // Counts on the value axis are whole numbers from 0, whatever the busiest minute: the chart's own axis, and the
    // module's rule for every small and large count (a peak of 5 once drew 0, 1.25, 2.5, ...).
    const ticks = (await page.locator("svg.chart-svg text.tick-y").allTextContents()).map((text) =>
      Number(text.replace(/,/g, "")),
    );
    assert.ok(ticks.length >= 2 && ticks[0] === 0 && ticks.every(Number.isInteger), `value ticks ${ticks.join(", ")}`);
    const badAxes = await page.evaluate(async (module) => {
      const { countTicks } = (await import(module)) as { countTicks: (peak: number) => number[] };
      const bad: string[] = [];
      for (let peak = 0; peak <= 2000; peak++) {
        const axis = countTicks(peak);
        const step = axis[1]! - axis[0]!;
        const even = axis.every((value, i) => Number.isInteger(value) && value === i * step);
        if (!even || axis.at(-1)! < peak || axis.length < 3 || axis.length > 5) bad.push(`${peak}: ${axis.join(" ")}`);
      }
      return bad;
    }, "/ui/overview.js");
    assert.deepEqual(badAxes, [], "every peak gets 3 to 5 evenly spaced whole-number ticks reaching it");
    await page.getByRole("rowheader", { name: "recordEmailSent" }).waitFor();
    assert.match(
      await page.locator(".panel-metric .metric").innerText(),
      /^(\d+(\.\d)? (ms|s)|\d+ min \d+ s)$/,
      "queue lag behind the held report",
    );
    assert.match(await page.locator(".panel-attention").innerText(), /Retry all dead jobs/);
    await screenshot(page, "overview.png", true);
  });

  test("lists jobs newest first and filters them by status", async () => {
    const { page } = w;
    await page.getByRole("navigation", { name: "Dashboard" }).getByRole("link", { name: "Jobs" }).click();
    await page.getByRole("heading", { level: 1, name: "Jobs" }).waitFor();
    const rows = page.locator("table.jobs-table tbody tr");
    await rows.first().waitFor();
    assert.equal(await rows.count(), 50, "a full first page");
    assert.equal(
      await rows.first().getAttribute("data-job-id"),
      (await w.service.store.jobList({ limit: 1 }))[0]?.id,
      "newest first",
    );
    await page.getByRole("link", { name: "Next page »" }).waitFor();

    // The last error has its own column, on the row's one line: the start of the body, the whole in its tooltip.
    const deadError = page.locator(`tr[data-job-id="${w.deadRecord.id}"] .error-line`);
    const fullError = w.deadRecord.result?.error_body ?? "";
    assert.match(fullError, /mailbox_unknown/);
    assert.match(await deadError.innerText(), /^400\s*\{"code":"mailbox_unknown"/);
    assert.equal(await deadError.getAttribute("title"), `permanent-status · HTTP 400\n${fullError}`);
    const heights = await rows.evaluateAll((trs) => trs.map((tr) => tr.getBoundingClientRect().height));
    assert.ok(
      Math.max(...heights) - Math.min(...heights) <= 1,
      `every row one line high: ${[...new Set(heights)].join(", ")} px`,
    );
    const firstLine = await page.evaluate<number>(
      'parseFloat(getComputedStyle(document.querySelector("table.jobs-table tbody td")).lineHeight)',
    );
    assert.ok(
      (heights[0] ?? 0) < firstLine * 2 + 4,
      `a row (${heights[0]} px) is shorter than two lines (${firstLine} px each)`,
    );
    // A chain's id, cut to the column, is whole in its tooltip; the link lists the chain.
    const chainLink = page.locator(`tr[data-job-id="${w.delayed.id}"] .chain-cell a`);
    assert.equal(await chainLink.getAttribute("title"), LONG_CHAIN_ID);
    assert.equal(await chainLink.getAttribute("href"), `#/jobs?original_request_id=${LONG_CHAIN_ID}`);
    // The operation filter offers the service's background operations, and any.
    const operation = page.getByLabel("Operation");
    await until(
      async () =>
        (await operation.locator("option").allInnerTexts()).join() === ["any operation", ...OPERATIONS].join(),
      "the operations from GET /operations",
    );
    assert.equal(await operation.inputValue(), "");
    await screenshot(page, "jobs.png");

    await page.getByRole("checkbox", { name: "dead" }).check();
    await page.getByRole("button", { name: "Apply filters" }).click();
    await page.getByRole("heading", { level: 1, name: "Jobs: dead" }).waitFor();
    assert.match(page.url(), /#\/jobs\?status=dead$/);
    const dead = await w.service.store.jobList({ limit: 100, statuses: ["dead"] });
    await until(async () => (await rows.count()) === dead.length, `${dead.length} dead rows`);
    for (const text of await page.locator("table.jobs-table tbody .badge").allInnerTexts()) assert.equal(text, "dead");
    assert.equal(await page.locator(`tr[data-job-id="${w.deadRecord.id}"]`).count(), 1);

    // The other filters, through the form too: operation and dedupe key narrow the same list.
    await page.getByLabel("Operation").selectOption("recordEmailSent");
    await page.getByRole("button", { name: "Apply filters" }).click();
    await until(async () => page.url().includes("operation_id=recordEmailSent"), "the operation filter");
    await until(
      async () => (await rows.count()) === dead.filter((job) => job.operationId === "recordEmailSent").length,
      "dead recordEmailSent rows",
    );
    assert.equal(await page.getByLabel("Operation").inputValue(), "recordEmailSent", "the filter stays chosen");
  });

  test("opens the dead job, retries it and sees it succeed", async () => {
    const { page } = w;
    await page.locator(`tr[data-job-id="${w.deadRecord.id}"] th a`).click();
    await page.getByRole("heading", { level: 1, name: `Job ${w.deadRecord.id}` }).waitFor();
    await page.locator(".head-status .badge-dead").waitFor();
    assert.match(await page.locator("pre.error-body").innerText(), /mailbox_unknown/);
    const timeline = page.locator("ol.timeline");
    await until(async () => /#1\s+dead\s+HTTP 400/.test(await timeline.innerText()), "the dead attempt in the history");
    // Every field of the wire form is shown by name.
    const fieldNames = await page.locator("table.fields th").allInnerTexts();
    for (const name of [
      "id",
      "operation_id",
      "status",
      "attempt",
      "max_attempts",
      "priority",
      "run_at",
      "created_at",
      "started_at",
      "finished_at",
      "dedupe_key",
      "concurrency_key",
      "enqueued_by_operation_id",
      "parent_job_id",
      "original_request_id",
      "user_id",
      "status_code",
      "terminal_reason",
    ]) {
      assert.ok(fieldNames.includes(name), `field ${name}`);
    }
    assert.match(await page.locator(".payloads").innerText(), /welcome-dora/);
    // The chain: the welcome email (root, succeeded) above this job.
    const tree = page.locator("ul.tree");
    assert.match(await tree.innerText(), /succeeded\s+sendWelcomeEmail/);
    assert.equal(await tree.locator("[aria-current]").count(), 1);

    w.product.recordsBroken = false;
    await page.getByRole("button", { name: "Retry job…" }).click();
    const dialog = page.getByRole("dialog");
    await dialog.waitFor();
    assert.match(await dialog.innerText(), /goes back to the queue as pending/);
    await dialog.getByRole("button", { name: "Retry job" }).click();
    await announced(page, /re-queued/);
    await page.locator(".head-status .badge-succeeded").waitFor();
    // One timeline: the creation, attempt #1, the retry marked with who did it and with which role, attempt #2 (the
    // job's counter said 1).
    const events = timeline.locator(":scope > li");
    await until(async () => (await events.count()) === 4, "four events in the history");
    const lines = (await events.allInnerTexts()).map((text) => text.replace(/\s+/g, " ").trim());
    assert.match(lines[0] ?? "", /^● Created by sendWelcomeEmail/);
    assert.match(lines[1] ?? "", /^#1 dead HTTP 400 · took .*mailbox_unknown/);
    assert.match(
      lines[2] ?? "",
      /^↻ Retried by oncall@example\.com \(admin\) · back to pending, attempts counted from 1 again/,
    );
    assert.match(lines[3] ?? "", /^#2 succeeded HTTP 204 · took .* · job attempt 1/);
    assert.equal(
      await timeline.locator("li.event-band").count(),
      1,
      "the retry is drawn as a band between the attempts",
    );
    // Its success chained buildReport, which shows up under it once delivered.
    await until(async () => /buildReport/.test(await tree.innerText()), "the chained report in the tree");
    await until(async () => (await tree.locator(".badge-succeeded").count()) === 3, "the whole chain succeeded");
    assert.equal((await w.service.store.jobGet({ id: w.deadRecord.id }))?.status, "succeeded");
    await screenshot(page, "job.png", true);

    // The chain id in full; its page draws the chain as a waterfall, settled, a row per job.
    assert.equal(await page.locator("#chain-id").innerText(), "signup-dora");
    await page.locator("#chain-page").click();
    await page.locator("#waterfall").waitFor();
    assert.match(page.url(), new RegExp(`#/chains/signup-dora\\?job=${w.deadRecord.id}$`));
    await until(async () => (await page.locator("#chain-settled").innerText()) === "yes", "the chain settled");
    assert.equal(await page.locator("#waterfall tr.waterfall-row").count(), 3, "a row per job");
    assert.ok((await page.locator("#waterfall rect.bar-dead").count()) >= 1, "the dead attempt drawn");
    await screenshot(page, "chain.png", true);
    await page.goBack();
    // And its link lists the chain.
    await page.locator("#chain-list").click();
    await page.locator(".chain-line .chain-id").waitFor();
    assert.match(page.url(), /#\/jobs\?original_request_id=signup-dora$/);
    const rows = page.locator("table.jobs-table tbody tr");
    await until(async () => (await rows.count()) === 3, "the three jobs of the chain");
    for (const text of await rows.locator(".chain-cell").allInnerTexts()) assert.equal(text, "signup-dora");
  });

  test("runs a delayed job now, and shows the service's refusal once the job no longer waits", async () => {
    const { page } = w;
    await page.goto(`${w.base}/ui/#/jobs/${w.delayed.id}`);
    await page.locator(".head-status .badge-pending").waitFor();
    // The long chain id is whole on the page: nothing of it is cut or hidden.
    const chainId = page.locator("#chain-id");
    assert.equal(await chainId.innerText(), LONG_CHAIN_ID);
    assert.ok(await chainId.evaluate((code) => code.scrollWidth <= code.clientWidth), "the chain id fits its box");
    assert.match(await page.locator("ol.timeline").innerText(), /next attempt runs in 5\d min/);

    await page.getByRole("button", { name: "Run now…" }).click();
    const dialog = page.getByRole("dialog");
    assert.match(await dialog.innerText(), /would run in 5\d min .* becomes due now/);
    await dialog.getByRole("button", { name: "Run now" }).click();
    await announced(page, /is due now/);
    await page.locator(".head-status .badge-succeeded").waitFor();
    const timeline = page.locator("ol.timeline");
    await until(
      async () => /Run now by oncall@example\.com.*\n?.*#1\s+succeeded\s+HTTP 204/s.test(await timeline.innerText()),
      "run now, then the attempt, in the history",
    );
    assert.equal(await page.getByRole("button", { name: "Run now…" }).count(), 0, "no run now for a finished job");

    // A job cancelled (by another administrator) while the confirmation is open: the service's 409, in its words.
    await page.goto(`${w.base}/ui/#/jobs/${w.delayedToCancel.id}`);
    await page.getByRole("button", { name: "Run now…" }).click();
    await dialog.waitFor();
    const cancelled = await fetch(`${w.base}/jobs/${w.delayedToCancel.id}/cancel`, {
      method: "POST",
      headers: { authorization: `Bearer ${await adminToken(w, true, "bob@example.com")}` },
    });
    assert.equal(cancelled.status, 200);
    await dialog.getByRole("button", { name: "Run now" }).click();
    const alert = page.locator("#alert");
    await alert.waitFor();
    assert.match(
      await alert.innerText(),
      /^Not run now: the job is cancelled; only pending or retrying jobs wait to run \(job_not_waiting\)$/,
    );
    await page.locator(".head-status .badge-cancelled").waitFor();
    await until(
      async () => /Cancelled by bob@example\.com/.test(await timeline.innerText()),
      "the cancel in the history",
    );
    assert.equal(await page.getByRole("button", { name: "Run now…" }).count(), 0);
  });

  test("cancels a running job after a confirmation saying its delivery is aborted, and Escape cancels a confirmation", async () => {
    const { page } = w;
    await page.goto(`${w.base}/ui/#/jobs/${w.running.id}`);
    await page.locator(".head-status .badge-running").waitFor();
    await page.getByRole("button", { name: "Cancel job…" }).focus();
    await page.keyboard.press("Enter");
    await page.getByRole("dialog").waitFor();
    await page.keyboard.press("Escape");
    await page.getByRole("dialog").waitFor({ state: "hidden" });
    assert.equal(
      await page.evaluate<string | undefined>("document.activeElement?.textContent"),
      "Cancel job…",
      "focus back on the button",
    );
    assert.equal((await w.service.store.jobGet({ id: w.running.id }))?.status, "running");

    await page.getByRole("button", { name: "Cancel job…" }).click();
    const dialog = page.getByRole("dialog");
    assert.match(await dialog.innerText(), /is being delivered now\. Its delivery is aborted/);
    await dialog.getByRole("button", { name: "Abort and cancel" }).click();
    assert.match(await announced(page, /is cancelled/), /its delivery was aborted/);
    await page.locator(".head-status .badge-cancelled").waitFor();
    await until(
      async () => /Cancelled by oncall@example\.com/.test(await page.locator("ol.timeline").innerText()),
      "the cancel in the history",
    );
    const row = await w.service.store.jobGet({ id: w.running.id });
    assert.equal(row?.status, "cancelled");
    assert.equal(row?.result?.terminal_reason, "cancelled-by-admin");
  });

  test("cancels a whole chain from a job's page", async () => {
    const { page } = w;
    const [root, child, grandchild] = w.chain;
    assert.ok(root && child && grandchild);
    await page.goto(`${w.base}/ui/#/jobs/${child.id}`);
    const tree = page.locator("ul.tree");
    await until(async () => (await tree.locator(".badge-pending").count()) === 3, "the pending chain");
    await page.getByRole("button", { name: "Cancel chain…" }).click();
    const dialog = page.getByRole("dialog");
    assert.match(await dialog.innerText(), /signup-eve/);
    await dialog.getByRole("button", { name: "Cancel chain" }).click();
    assert.match(await announced(page, /Chain .* cancelled/), /Chain signup-eve cancelled: 3 jobs cancelled\./);
    await until(async () => (await tree.locator(".badge-cancelled").count()) === 3, "the cancelled chain");
    await page.locator(".head-status .badge-cancelled").waitFor();
    await until(
      async () => /Chain cancelled by oncall@example\.com/.test(await page.locator("ol.timeline").innerText()),
      "the chain's cancel in the history",
    );
    for (const job of w.chain) {
      const row = await w.service.store.jobGet({ id: job.id });
      assert.equal(row?.status, "cancelled");
      assert.equal(row?.result?.terminal_reason, "cancelled-by-chain");
    }
  });

  test("pauses and resumes an operation, shows its waiting job and a throttled badge while paused, changes and resets its limits, and pauses and resumes a key in the Flow control view", async () => {
    const { page } = w;
    /** buildReport's flow control as the service answers it. */
    const control = async () => {
      const answer = await fetch(`${w.base}/operations`, {
        headers: { authorization: `Bearer ${await adminToken(w)}` },
      });
      const { operations } = (await answer.json()) as {
        operations: Array<{ operation_id: string; control: OperationControlWire }>;
      };
      return operations.find((operation) => operation.operation_id === "buildReport")?.control;
    };
    /** buildReport's jobs waiting (pending or retrying), as the service counts them. */
    const waiting = async () =>
      (await w.service.store.jobStats()).byOperation
        .filter(
          (entry) => entry.operationId === "buildReport" && (entry.status === "pending" || entry.status === "retrying"),
        )
        .reduce((sum, entry) => sum + entry.count, 0);
    await page.getByRole("navigation", { name: "Dashboard" }).getByRole("link", { name: "Flow control" }).click();
    await page.getByRole("heading", { level: 1, name: "Flow control" }).waitFor();
    assert.match(page.url(), /#\/flow$/);
    const rows = page.locator("table.flow-table tbody tr");
    await until(async () => (await rows.count()) === OPERATIONS.length, "a row per background operation");
    assert.deepEqual(
      await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-operation-id"))),
      OPERATIONS,
    );
    const row = page.locator('tr[data-operation-id="buildReport"]');
    assert.match(await row.innerText(), /active/);
    assert.match(await row.innerText(), /configuration/);
    // Without a pause or a limit that may hold its jobs, an operation is never throttled.
    assert.match(await row.locator("td.jobs-cell").innerText(), /^\d+ waiting\n\d+ running$/);
    assert.equal(await row.locator(".badge-throttled").count(), 0);

    // Pause, after a confirmation; the row says who paused it, and so does the service.
    await row.getByRole("button", { name: "Pause…" }).click();
    const dialog = page.getByRole("dialog");
    assert.match(await dialog.innerText(), /No node starts a job of buildReport until it is resumed/);
    await dialog.getByRole("button", { name: "Pause operation" }).click();
    await announced(page, /buildReport is paused/);
    await row.locator(".badge-paused").waitFor();
    assert.match(await row.innerText(), /paused\s+by oncall@example\.com, \d{4}-\d\d-\d\d \d\d:\d\d:\d\d/);
    assert.equal((await control())?.paused?.by, OPERATOR);
    const report = await enqueue(
      w,
      { operation_id: "buildReport", request: { body: {} } },
      { sub: "ops", op: "createUser", rid: "paused-report" },
    );
    assert.equal((await w.service.store.jobGet({ id: report.id }))?.status, "pending");

    // Paused with a job waiting: the row counts it (at its next refresh) and says the operation is throttled.
    const held = await waiting();
    assert.ok(held >= 1, "the paused report waits");
    const jobsCell = row.locator("td.jobs-cell");
    await until(async () => (await jobsCell.innerText()).startsWith(`${held} waiting\n`), `${held} waiting in the row`);
    assert.equal(await row.locator(".badge-throttled").innerText(), "throttled");
    assert.equal(
      await jobsCell.getByRole("link", { name: `${held} waiting` }).getAttribute("href"),
      "#/jobs?operation_id=buildReport&status=pending&status=retrying",
    );
    await screenshot(page, "flow.png", true);

    // Resume: the report waiting meanwhile runs.
    await row.getByRole("button", { name: "Resume" }).click();
    await announced(page, /buildReport is resumed/);
    await row.locator(".badge-active").waitFor();
    assert.equal(await row.locator(".badge-throttled").count(), 0, "no longer throttled once resumed, without limits");
    assert.equal((await control())?.paused, null);
    await until(
      async () => (await w.service.store.jobGet({ id: report.id }))?.status === "succeeded",
      "the waiting report to run once resumed",
    );

    // Change its limits through the form, then put the configuration's back.
    await row.getByRole("button", { name: "Change limits" }).click();
    assert.equal(await page.getByLabel("Operation", { exact: true }).inputValue(), "buildReport");
    const rate = page.getByRole("group", { name: /^Rate \(/ });
    await rate.getByLabel("Jobs").fill("5");
    await rate.getByLabel("Per (ms)").fill("60000");
    await page.getByLabel("Max concurrency").fill("2");
    await page.getByRole("button", { name: "Save limits" }).click();
    await announced(page, /limits of buildReport are saved/);
    await until(async () => /administrator/.test(await row.innerText()), "the administrator's limits in the row");
    const limitsText = await row.locator("ul.limits").innerText();
    assert.match(limitsText, /rate: 5 per 1 min/);
    assert.match(limitsText, /max concurrency: 2/);
    assert.match(limitsText, /per concurrency key: 1/);
    const set = await control();
    assert.deepEqual(set?.limits, {
      rate: { limit: 5, period_ms: 60_000, burst: 5 },
      rate_per_key: null,
      max_concurrency: 2,
      concurrency_limit: 1,
    });
    assert.equal(set?.limits_source, "admin");
    assert.equal(set?.limits_set?.by, OPERATOR);

    await row.getByRole("button", { name: "Reset to config…" }).click();
    assert.match(await dialog.innerText(), /configuration's apply again/);
    await dialog.getByRole("button", { name: "Reset to config" }).click();
    await announced(page, /configuration's again/);
    await until(async () => /configuration/.test(await row.innerText()), "the configuration's limits in the row");
    assert.equal(await row.getByRole("button", { name: "Reset to config…" }).count(), 0, "nothing to reset");
    const reset = await control();
    assert.equal(reset?.limits_source, "config");
    assert.deepEqual(reset?.limits, { rate: null, rate_per_key: null, max_concurrency: null, concurrency_limit: 1 });

    // A concurrency key: paused through the field, listed with who paused it, resumed from its row.
    await page.getByText("No concurrency key is paused.").waitFor();
    await page.getByLabel("Concurrency key", { exact: true }).fill("tenant/7");
    await page.getByRole("button", { name: "Pause key" }).click();
    await announced(page, /tenant\/7 is paused/);
    const keyRow = page.locator('tr[data-key="tenant/7"]');
    await keyRow.waitFor();
    assert.match(await keyRow.innerText(), /by oncall@example\.com/);
    await keyRow.getByRole("button", { name: "Resume key tenant/7" }).click();
    await announced(page, /tenant\/7 is resumed/);
    await page.getByText("No concurrency key is paused.").waitFor();
    const paused = await fetch(`${w.base}/concurrency-keys/paused`, {
      headers: { authorization: `Bearer ${await adminToken(w)}` },
    });
    assert.deepEqual(await paused.json(), { keys: [] });
  });

  test("creates, edits, pauses, resumes, runs now and deletes a schedule in the Schedules view, with its next run and its last run's job", async () => {
    const { page } = w;
    /** A schedule as the service answers it; undefined once gone. */
    const stored = async (name: string) => {
      const answer = await fetch(`${w.base}/schedules/${name}`, {
        headers: { authorization: `Bearer ${await adminToken(w)}` },
      });
      return answer.status === 404
        ? undefined
        : ((await answer.json()) as { schedule: Record<string, unknown> & { next_run_at: string | null } }).schedule;
    };
    await page.getByRole("navigation", { name: "Dashboard" }).getByRole("link", { name: "Schedules" }).click();
    await page.getByRole("heading", { level: 1, name: "Schedules" }).waitFor();
    assert.match(page.url(), /#\/schedules$/);
    await page.getByText("No schedule yet").waitFor();

    // Create, through the form.
    await page.getByLabel("Name", { exact: true }).fill("hourly-report");
    await page.getByLabel("Cron expression").fill("0 * * * *");
    await page.getByLabel("Time zone").fill("Europe/Paris");
    await page.getByLabel("Operation", { exact: true }).selectOption("buildReport");
    await page.getByLabel("Runs as user").fill("ops");
    await page.getByLabel(/^Request/).fill('{"body": {"kind": "hourly"}}');
    await page.getByRole("button", { name: "Create schedule" }).click();
    await announced(page, /Schedule hourly-report is created/);
    const row = page.locator('tr[data-schedule="hourly-report"]');
    await row.waitFor();
    assert.match(await row.innerText(), /0 \* \* \* \*\s+Europe\/Paris/);
    assert.match(await row.innerText(), /buildReport\s+as ops/);
    assert.match(await row.locator(".badge-active").innerText(), /active/);
    const created = await stored("hourly-report");
    assert.deepEqual(
      [created?.["request"], (created?.["created"] as { by: string }).by, created?.["dedupe_key"]],
      [{ body: { kind: "hourly" } }, OPERATOR, "cron:hourly-report"],
    );
    assert.equal(await row.locator("td.next-run time").getAttribute("datetime"), created?.next_run_at);
    assert.equal(await page.getByLabel("Name", { exact: true }).inputValue(), "", "the form is empty again");

    // Edit: the form shows the definition; the name cannot change.
    await row.getByRole("button", { name: "Edit hourly-report" }).click();
    await page.getByRole("heading", { level: 2, name: "Edit schedule hourly-report" }).waitFor();
    assert.equal(await page.getByLabel("Name", { exact: true }).isDisabled(), true);
    assert.equal(await page.getByLabel("Time zone").inputValue(), "Europe/Paris");
    await page.getByLabel("Cron expression").fill("30 * * * *");
    await page.getByLabel(/^No dedupe key/).check();
    await page.getByRole("button", { name: "Save changes" }).click();
    await announced(page, /Schedule hourly-report is changed/);
    await until(async () => /30 \* \* \* \*/.test(await row.innerText()), "the new expression in the row");
    const changed = await stored("hourly-report");
    assert.deepEqual(
      [changed?.["schedule"], changed?.["dedupe_key"], (changed?.["updated"] as { by: string }).by],
      ["30 * * * *", null, OPERATOR],
    );
    assert.deepEqual(changed?.["request"], { body: { kind: "hourly" } }, "what the form showed is kept");

    // Pause after a confirmation, then resume.
    await row.getByRole("button", { name: "Pause hourly-report" }).click();
    const dialog = page.getByRole("dialog");
    assert.match(await dialog.innerText(), /No tick of hourly-report enqueues a job until it is resumed/);
    await dialog.getByRole("button", { name: "Pause schedule" }).click();
    await announced(page, /hourly-report is paused/);
    await row.locator(".badge-paused").waitFor();
    assert.match(await row.innerText(), /paused\s+by oncall@example\.com, \d{4}-\d\d-\d\d \d\d:\d\d:\d\d/);
    assert.equal(await row.locator("td.next-run").innerText(), "—", "no next run while paused");
    await row.getByRole("button", { name: "Resume hourly-report" }).click();
    await announced(page, /hourly-report is resumed/);
    await row.locator(".badge-active").waitFor();

    // A tick: the row shows the last run and links to its job.
    const schedule = await w.service.store.scheduleGet({ name: "hourly-report" });
    assert.ok(schedule && w.service.worker);
    const tickAt = Date.parse(String((await stored("hourly-report"))?.next_run_at)) - 3_600_000;
    await w.service.worker.cron.fire(cronEntryOf(schedule), tickAt, { revision: schedule.revision });
    const jobLink = row.locator("td.last-run a.last-job");
    await jobLink.waitFor();
    assert.equal(await row.locator("td.last-run time").getAttribute("datetime"), new Date(tickAt).toISOString());
    const tickJob = await jobLink.innerText();
    await jobLink.click();
    await page.waitForURL(new RegExp(`#/jobs/${tickJob}$`));
    await page.locator("ol.timeline li").first().waitFor();
    await page.goBack();
    await row.waitFor();

    // Run now: a job of its own, announced.
    await row.getByRole("button", { name: "Run hourly-report now" }).click();
    const ran = await announced(page, /of hourly-report is enqueued to run now/);
    const ranId = /^Job (\S+) of/.exec(ran)?.[1] ?? "";
    assert.match((await w.service.store.jobGet({ id: ranId }))?.originalRequestId ?? "", /^cron:hourly-report:manual:/);

    // Delete after a confirmation.
    await row.getByRole("button", { name: "Delete hourly-report" }).click();
    assert.match(await dialog.innerText(), /stops on every node at once/);
    await dialog.getByRole("button", { name: "Delete schedule" }).click();
    await announced(page, /hourly-report is deleted/);
    await page.getByText("No schedule yet").waitFor();
    assert.equal(await stored("hourly-report"), undefined);

    // One left for the phone's layout.
    const left = await fetch(`${w.base}/schedules`, {
      method: "POST",
      headers: { authorization: `Bearer ${await adminToken(w)}`, "content-type": "application/json" },
      body: JSON.stringify({
        name: "nightly-digest-for-every-team-in-the-company",
        schedule: "0 3 * * *",
        operation_id: "buildReport",
        user_id: "ops",
      }),
    });
    assert.equal(left.status, 201);
    await page.locator('tr[data-schedule="nightly-digest-for-every-team-in-the-company"]').waitFor();
    await screenshot(page, "schedules.png", true);
  });

  test("cancels the waiting jobs matching a filter in bulk", async () => {
    const { page } = w;
    const waiting = [await signUp(w, "zed", { delay_ms: 3_600_000 }), await signUp(w, "zed", { delay_ms: 3_600_000 })];
    await page.goto(`${w.base}/ui/#/jobs?user_id=zed`);
    const rows = page.locator("table.jobs-table tbody tr");
    await until(async () => (await rows.count()) === 2, "zed's two jobs");
    await page.getByRole("button", { name: "Cancel matching…" }).click();
    const dialog = page.getByRole("dialog");
    assert.match(await dialog.innerText(), /Cancel the pending and retrying jobs of user zed/);
    await dialog.getByRole("button", { name: "Cancel jobs" }).click();
    assert.equal(await announced(page, /Cancelled/), "Cancelled 2 jobs.");
    await until(async () => (await rows.locator(".badge-cancelled").count()) === 2, "both rows cancelled");
    for (const job of waiting) {
      const row = await w.service.store.jobGet({ id: job.id });
      assert.equal(row?.status, "cancelled");
      assert.equal(row?.result?.terminal_reason, "cancelled-by-admin");
    }
    // No bulk cancel without a filter besides status: the service would refuse it.
    await page.goto(`${w.base}/ui/#/jobs?status=pending`);
    await page.getByRole("heading", { level: 1, name: "Jobs: pending" }).waitFor();
    await page.locator(".toolbar .updated time").waitFor();
    assert.equal(await page.getByRole("button", { name: "Cancel matching…" }).count(), 0);
  });

  test("retries the dead jobs matching a filter in bulk", async () => {
    const { page } = w;
    const dead = await w.service.store.jobList({ limit: 100, statuses: ["dead"], operationId: "recordEmailSent" });
    assert.ok(dead.length > 0);
    await page.goto(`${w.base}/ui/#/jobs?status=dead&operation_id=recordEmailSent`);
    await page.locator("table.jobs-table tbody tr").first().waitFor();
    await page.getByRole("button", { name: "Retry the dead jobs matching this filter…" }).click();
    const dialog = page.getByRole("dialog");
    assert.match(await dialog.innerText(), /operation recordEmailSent/);
    await dialog.getByRole("button", { name: "Retry dead jobs" }).click();
    assert.equal(
      await announced(page, /Re-queued/),
      `Re-queued ${dead.length} dead job${dead.length === 1 ? "" : "s"}.`,
    );
    await page.getByText("No job matches these filters.").waitFor();
    for (const job of dead) {
      await until(
        async () => (await w.service.store.jobGet({ id: job.id }))?.status === "succeeded",
        `job ${job.id} to succeed`,
      );
    }
  });

  test("fits a phone's width: no sideways scroll, wrapped header and filters, jobs as cards, times in the phone's zone", async () => {
    // A phone in India: its zone has no summer time, so its offset is known whatever the date.
    const context = await w.browser.newContext({
      viewport: { width: 375, height: 812 },
      deviceScaleFactor: 2,
      isMobile: true,
      hasTouch: true,
      timezoneId: "Asia/Kolkata",
      locale: "en-US",
    });
    w.cleanups.unshift(() => context.close());
    const page = await context.newPage();
    page.setDefaultTimeout(WAIT_MS);
    page.on("pageerror", (error) => w.problems.push(`phone page error: ${error.message}`));
    page.on("console", (message) => {
      if (message.type() === "error") w.problems.push(`phone: ${message.text()}`);
    });
    /** The page is exactly the phone's width and nothing sticks out of it. */
    const assertFits = async (what: string): Promise<void> => {
      const { scrollWidth, innerWidth } = await page.evaluate<{ scrollWidth: number; innerWidth: number }>(
        "({ scrollWidth: document.scrollingElement.scrollWidth, innerWidth: window.innerWidth })",
      );
      assert.equal(innerWidth, 375, `${what}: the layout viewport is the phone's`);
      assert.ok(scrollWidth <= innerWidth, `${what}: ${scrollWidth} px wide in a ${innerWidth} px window`);
    };

    await page.goto(`${w.base}/ui/#token=${await adminToken(w)}`);
    await page.getByRole("heading", { level: 1, name: "Overview" }).waitFor();
    await page.locator(".card-dead .card-count").waitFor();
    await page.locator("svg.chart-svg").waitFor();
    await assertFits("the overview");
    // ICU may still call the zone by its old name.
    const zone = await page.evaluate<string>("Intl.DateTimeFormat().resolvedOptions().timeZone");
    assert.match(zone, /^Asia\/(Kolkata|Calcutta)$/);
    assert.equal(await page.locator("#time-zone").innerText(), `Times in ${zone} (UTC+05:30)`);
    // Times on screen are the phone's; the <time> element keeps the exact instant.
    // Read at once: the overview's refresh replaces the element every 5 s.
    const shown = await page.locator(".view-head .updated time").evaluate((element) => ({
      datetime: element.getAttribute("datetime") ?? "",
      title: element.getAttribute("title"),
      text: element.textContent,
    }));
    assert.equal(shown.title, shown.datetime);
    assert.equal(
      shown.text,
      new Date(Date.parse(shown.datetime) + 330 * 60_000).toISOString().slice(0, 19).replace("T", " "),
    );

    const nav = page.getByRole("navigation", { name: "Dashboard" });
    await nav.getByRole("link", { name: "Jobs" }).click();
    const rows = page.locator("table.jobs-table tbody tr");
    await rows.first().waitFor();
    await assertFits("the job list");
    // The navigation and the session stay on screen, wrapped above the page.
    for (const locator of [
      nav.getByRole("link", { name: "Overview" }),
      page.getByRole("button", { name: "Sign out" }),
    ]) {
      const box = await locator.boundingBox();
      assert.ok(box && box.x >= 0 && box.x + box.width <= 375, "inside the width");
    }
    // Each job is a card as wide as the page, naming each value.
    const card = await rows.first().boundingBox();
    assert.ok(card && card.width <= 375 && card.height > 100, `a card: ${JSON.stringify(card)}`);
    const labels = await page.evaluate<string[]>(
      '[...document.querySelectorAll("table.jobs-table tbody tr:first-child td")].map((td) => getComputedStyle(td, "::before").content)',
    );
    assert.deepEqual(
      labels,
      ["Operation", "Status", "Attempt", "Last error", "User", "Chain", "Created", "Run / ended"].map(
        (label) => `"${label}"`,
      ),
    );
    // The jobs waiting to retry, each card with its last error.
    await page.getByRole("checkbox", { name: "retrying" }).check();
    await page.getByRole("button", { name: "Apply filters" }).click();
    await page.getByRole("heading", { level: 1, name: "Jobs: retrying" }).waitFor();
    await until(
      async () => (await rows.locator(".error-line").count()) === (await rows.count()) && (await rows.count()) > 0,
      "retrying cards with errors",
    );
    await assertFits("the retrying jobs");
    await screenshot(page, "phone.png");

    for (const job of [w.deadRecord, w.delayed]) {
      await page.goto(`${w.base}/ui/#/jobs/${job.id}`);
      await page.locator("ol.timeline li").first().waitFor();
      await assertFits(`the page of job ${job.id}`);
    }
    assert.equal(await page.locator("#chain-id").innerText(), LONG_CHAIN_ID);
    await page.goto(`${w.base}/ui/#/flow`);
    await page.locator("table.flow-table tbody tr").first().waitFor();
    await assertFits("the flow control view");
    // Each operation is a card naming each value, its jobs waiting and running among them.
    const flowLabels = await page.evaluate<string[]>(
      '[...document.querySelectorAll("table.flow-table tbody tr:first-child td")].map((td) => getComputedStyle(td, "::before").content)',
    );
    assert.deepEqual(
      flowLabels,
      ["State", "Jobs", "Limits", "Limits from", "Actions"].map((label) => `"${label}"`),
    );
    await page.goto(`${w.base}/ui/#/schedules`);
    await page.locator("table.schedules-table tbody tr").first().waitFor();
    await assertFits("the schedules view");
    const scheduleLabels = await page.evaluate<string[]>(
      '[...document.querySelectorAll("table.schedules-table tbody tr:first-child td")].map((td) => getComputedStyle(td, "::before").content)',
    );
    assert.deepEqual(
      scheduleLabels,
      ["When", "Job", "State", "Next run", "Last run", "Actions"].map((label) => `"${label}"`),
    );
    await context.close();
  });

  test("shows on a job's page the attempt its target took asynchronously, and the progress it reports", async () => {
    const { page } = w;
    const job = await enqueue(
      w,
      { operation_id: "buildReport", request: { body: { async: true } } },
      { sub: "ops", op: "createUser", rid: "nightly-video" },
    );
    const delivery = await until(
      async () => w.target.requests.find((request) => request.headers["x-job-id"] === job.id),
      "its delivery",
    );
    await until(
      async () => (await w.service.store.jobAsyncStateGet({ id: job.id }))?.accepted ?? undefined,
      "the hand-off",
    );
    const beat = await fetch(`${w.base}/jobs/${job.id}/heartbeat`, {
      method: "POST",
      headers: { authorization: String(delivery.headers["authorization"]), "content-type": "application/json" },
      body: JSON.stringify({ progress: { frames: 1200, of: 4800 } }),
    });
    assert.equal(beat.status, 200, await beat.text());
    await page.goto(`${w.base}/ui/#/jobs/${job.id}`);
    await page.getByRole("heading", { level: 1, name: `Job ${job.id}` }).waitFor();
    const fields = page.locator("table.fields").first();
    await until(
      async () => /running on the target's heartbeats/.test(await fields.innerText()),
      "the asynchronous attempt on the page",
    );
    assert.match(await fields.innerText(), /progress \(extension\)\s+\{"frames":1200,"of":4800\} from attempt 1/);
    // Back to the list, where the next case expects the dashboard.
    await page.goto(`${w.base}/ui/#/jobs`);
    await page.getByRole("heading", { level: 1, name: "Jobs" }).waitFor();
  });

  test("goes back to the sign-in form with the service's message when the token is refused", async () => {
    const { page } = w;
    await page.evaluate('sessionStorage.setItem("opqueue.adminToken", "not-a-jwt")');
    await page.reload();
    const error = page.locator("#sign-in-error");
    await error.waitFor();
    assert.match(await error.innerText(), /refused (this|the) token.*invalid admin token/);
    await page.getByLabel("Admin token").fill(await adminToken(w));
    await page.keyboard.press("Enter");
    await page.getByRole("heading", { level: 1, name: "Jobs" }).waitFor();

    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByRole("heading", { level: 1, name: "Sign in to the opqueue dashboard" }).waitFor();
    assert.equal(await page.evaluate<number>("sessionStorage.length"), 0);
    assert.deepEqual(w.problems, [], "no console error, no CSP violation");
  });
});

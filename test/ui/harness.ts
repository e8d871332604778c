/**
 * What the dashboard's browser tests other than dashboard.test.ts build for themselves, each test its own: a service
 * listening on 127.0.0.1 (SQLite, the system clock) in front of a small product, Debian's Chromium, and pages signed in
 * as a site administrator at a chosen width. Everything started is stopped when the test ends.
 *
 * Screenshots for a person to look at are written only with OPQUEUE_UI_SHOTS=DIR (into DIR).
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestContext } from "node:test";
import { chromium, type Browser, type Page } from "playwright-core";
import { mintToken } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import { parseConfig, type Config } from "../../src/config.js";
import { newJobId } from "../../src/job/job-id.js";
import type { JobRow } from "../../src/job/job.js";
import { createService, type Service } from "../../src/service.js";
import type { JobInsertParams } from "../../src/store/store.js";
import { rawTestConfig } from "../helpers/service.js";
import { answer, startTarget, type Target, type TargetHandler } from "../helpers/target.js";

/** Where Debian installs Chromium. */
export const CHROMIUM = "/usr/bin/chromium";
/** Why the browser tests cannot run here, or false. */
export const SKIP = existsSync(CHROMIUM)
  ? false
  : `no Chromium at ${CHROMIUM}: install Debian's (apt-get install -y chromium; .ci/run does it when missing)`;
/** Bound of every wait in the browser: far above what a passing run needs (a job's page refreshes every 2 s). */
export const WAIT_MS = 15_000;
const SHOTS = process.env["OPQUEUE_UI_SHOTS"];

/** A service, its product and a browser, for one test. */
export interface Dashboard {
  service: Service;
  config: Config;
  /** The service's address, `http://127.0.0.1:PORT`. */
  base: string;
  target: Target;
  browser: Browser;
  /** A site administrator's token. */
  adminToken(): Promise<string>;
  /**
   * A page `width` px wide, signed in (as a site administrator, or with `token`), on the overview; `mobile` makes it a
   * phone's (touch, 2× pixels).
   */
  open(options: { width: number; height: number; mobile?: boolean; token?: string }): Promise<Page>;
  /** Script errors and CSP violations of every page opened: a test ends by checking there is none. */
  problems: string[];
}

/**
 * Starts a dashboard for test `t`. `configure` may change the raw config; `handler` answers the product's calls
 * (204 by default); the worker runs only when `worker` is true.
 */
export async function startDashboard(
  t: TestContext,
  options: { configure?: (raw: Record<string, unknown>) => void; handler?: TargetHandler; worker?: boolean } = {},
): Promise<Dashboard> {
  const cleanups: Array<() => Promise<unknown>> = [];
  t.after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  });
  const target = await startTarget({ after: (fn) => void cleanups.push(fn) }, options.handler ?? answer(204));
  const dir = mkdtempSync(join(tmpdir(), "opqueue-ui-"));
  cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
  const raw = rawTestConfig(dir);
  raw["target"] = { base_url: target.url, audience: "product" };
  raw["cron"] = [];
  raw["limits"] = { spawn_cap: 10_000 };
  options.configure?.(raw);
  const config = parseConfig({ raw, baseDir: dir, env: {} });
  const service = await createService({ config, clock: systemClock });
  cleanups.push(() => service.close({ graceMs: 200 }));
  await service.app.listen({ host: "127.0.0.1", port: 0 });
  if (options.worker) {
    service.start();
    await service.worker?.cron.stop();
  }
  const base = `http://127.0.0.1:${(service.app.server.address() as AddressInfo).port}`;
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  cleanups.push(() => browser.close());
  const problems: string[] = [];
  const adminToken = () =>
    mintToken({ auth: config.auth, clock: systemClock, sub: "oncall@example.com", siteAdmin: true });
  return {
    service,
    config,
    base,
    target,
    browser,
    adminToken,
    problems,
    async open({ width, height, mobile = false, token }) {
      const context = await browser.newContext({
        viewport: { width, height },
        timezoneId: "UTC",
        locale: "en-US",
        ...(mobile ? { deviceScaleFactor: 2, isMobile: true, hasTouch: true } : {}),
      });
      const page = await context.newPage();
      page.setDefaultTimeout(WAIT_MS);
      page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
      page.on("console", (message) => {
        if (message.type() === "error" && !message.text().startsWith("Failed to load resource"))
          problems.push(message.text());
      });
      await page.goto(`${base}/ui/#token=${token ?? (await adminToken())}`);
      await page.getByRole("heading", { level: 1, name: "Overview" }).waitFor();
      return page;
    },
  };
}

/** Writes a screenshot of the whole page into OPQUEUE_UI_SHOTS, when it is set. */
export async function shot(page: Page, name: string): Promise<void> {
  if (!SHOTS) return;
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, name), fullPage: true });
}

/** A job of a chain to insert: its parent (an index into the list), its operation. */
export interface ChainJobSpec {
  parent: number | null;
  operationId?: string;
}

/**
 * Inserts chain `rid` through the store in one batch, in the list's order (so that is its creation order), every job
 * pending an hour from now: nothing delivers them while the test reads them. Returns the jobs in the list's order.
 */
export async function insertChain(service: Service, rid: string, specs: ChainJobSpec[]): Promise<JobRow[]> {
  const ids = specs.map(() => newJobId());
  const jobs: JobInsertParams[] = specs.map((spec, i) => ({
    id: ids[i] as string,
    operationId: spec.operationId ?? "buildReport",
    priority: 0,
    maxAttempts: 5,
    dedupeKey: null,
    concurrencyKey: null,
    rateKey: null,
    enqueuedByOperationId: spec.parent === null ? "createUser" : "buildReport",
    parentJobId: spec.parent === null ? null : (ids[spec.parent] as string),
    originalRequestId: rid,
    userId: "ops",
    authority: { kind: "request", request_id: rid, user_id: "ops" },
    request: { body: { part: i } },
    spawnCap: 10_000,
    traceparent: null,
    expiry: null,
    callbacks: null,
    runTime: { delayMs: 3_600_000 },
  }));
  const settled = await service.store.jobInsertMany({ jobs });
  return settled.map((outcome, i) => {
    if (!outcome.ok || outcome.value.kind !== "created") {
      throw new Error(`job ${i} of chain ${rid} was not created: ${JSON.stringify(outcome)}`);
    }
    return outcome.value.job;
  });
}

/**
 * `@opqueue/client` installs on its own, as a product installs it: packed from its workspace (`npm pack`, whose
 * prepack builds it), installed from the tarball into a scratch product folder with `--prefer-offline` (jose comes from
 * the npm cache, which `npm ci` of this repository filled), and run there against a real `opqueue serve` (from this
 * repository's sources, on a SQLite file). The product's node_modules must hold none of the service's server and native
 * dependencies; its script enqueues with the installed client and verifies the delivery on a plain node:http target
 * with the installed bare verifier.
 *
 * It takes about 3.5 seconds on a 2-core machine alone, 5 beside other test files: `npm pack` with the package's
 * build by tsc (about 2.5 s, while `serve` starts from source beside it), the install from the cache (under 1 s), and
 * the enqueue and delivery (a few ms).
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { mintToken } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import { parseConfig } from "../../src/config.js";
import { REPO_ROOT, startCli, waitForStart, logLines, type CliProcess } from "../helpers/cli-process.js";
import { freePort } from "../helpers/ports.js";
import { rawTestConfig, TEST_DELIVERY_SECRET, TEST_SECRET } from "../helpers/service.js";

const execFileAsync = promisify(execFile);

/** Upper bound of each step run as a process (pack, install, the product's script); far above a passing run. */
const STEP_LIMIT_MS = 120_000;
/** Upper bound of the wait for the delivery's outcome once the product has answered. */
const OUTCOME_LIMIT_MS = 10_000;
/** What the service must never bring into a product. */
const SERVICE_ONLY = ["better-sqlite3", "pg", "fastify"];

/**
 * This process's environment without what would steer the children: `npm test` sets npm_config_* naming this
 * repository (an npm run in the scratch product would otherwise work on the repository), and the test runner's own.
 */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (/^npm_/i.test(name) || name.startsWith("NODE_TEST") || name === "NODE_OPTIONS" || name.startsWith("OPQUEUE_")) continue;
    env[name] = value;
  }
  return { ...env, ...extra };
}

/** Runs `command args` in `cwd` to its end; fails with its output if it fails. */
async function run(command: string, args: string[], options: { cwd: string; env?: Record<string, string> }): Promise<string> {
  try {
    const { stdout } = await execFileAsync(command, args, {
      cwd: options.cwd,
      env: cleanEnv(options.env),
      timeout: STEP_LIMIT_MS,
      maxBuffer: 16 * 1024 * 1024,
    });
    return stdout;
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string; stderr?: string };
    throw new Error(`${command} ${args.join(" ")} failed in ${options.cwd}: ${(error as Error).message}\n${stderr ?? ""}${stdout ?? ""}`);
  }
}

/** Every folder below `dir` named one of `names` (at any depth of nested node_modules). */
function foldersNamed(dir: string, names: string[]): string[] {
  const found: string[] = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    if (!entry.isDirectory()) continue;
    const full = path.join(dir, entry.name);
    if (names.includes(entry.name)) found.push(path.relative(dir, full));
    found.push(...foldersNamed(full, names).map((below) => path.join(entry.name, below)));
  }
  return found;
}

/** Resolves with the first log line of `cli` that `predicate` accepts; fails after a bound. */
function logLine(cli: CliProcess, predicate: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const onData = () => {
      const line = logLines(cli.stdout()).find(predicate);
      if (line) settle(line);
    };
    const timer = setTimeout(() => settle(new Error(`no such log line:\n${cli.stdout()}`)), OUTCOME_LIMIT_MS);
    function settle(result: Record<string, unknown> | Error): void {
      clearTimeout(timer);
      cli.child.stdout?.off("data", onData);
      if (result instanceof Error) reject(result);
      else resolve(result);
    }
    cli.child.stdout?.on("data", onData);
    onData();
  });
}

/**
 * The scratch product's script: a node:http target whose route checks every delivery with the installed bare
 * verifier, an enqueue with the installed client, and a refusal surfacing as the installed typed error. It prints
 * what it saw as one JSON line.
 */
const PRODUCT_SCRIPT = `
import { createServer } from "node:http";
import {
  createDeliveryVerifier, createJobsClient, deliveryRefusal, OpqueueError, UnknownOperationError,
} from "@opqueue/client";

const env = process.env;
const verifier = createDeliveryVerifier({ secret: env.DELIVERY_SECRET, audience: "product" });
let delivered;
const received = new Promise((resolve) => (delivered = resolve));
const server = createServer((req, res) => {
  verifier.verifyDelivery(req.headers, { operationId: "sendWelcomeEmail" }).then(
    (delivery) => {
      res.writeHead(204).end();
      delivered({ delivery, method: req.method, url: req.url });
    },
    (error) => {
      const refusal = deliveryRefusal(error);
      res.writeHead(refusal.statusCode, { "content-type": "application/json" }).end(JSON.stringify(refusal.body));
      delivered({ refused: refusal.body });
    },
  );
});
await new Promise((resolve) => server.listen(Number(env.TARGET_PORT), "127.0.0.1", resolve));

const jobs = createJobsClient({ baseUrl: env.OPQUEUE_URL, sign: { kid: env.ENQUEUE_KID, secret: env.ENQUEUE_SECRET } });
const caller = { userId: "u1", operationId: "createUser", requestId: "package-test-1" };
const { job, created } = await jobs.enqueue({ caller, operationId: "sendWelcomeEmail", request: { path_params: { userId: "42" } } });
let refusal;
try {
  await jobs.enqueue({ caller, operationId: "noSuchOperation", request: {} });
} catch (error) {
  refusal = { typed: error instanceof UnknownOperationError && error instanceof OpqueueError, code: error.code, status: error.status };
}
const seen = await received;
console.log(JSON.stringify({ job, created, refusal, ...seen }));
server.closeAllConnections();
server.close();
process.exit(0);
`;

test("@opqueue/client packs, installs without the service's dependencies, enqueues and verifies a delivery of opqueue serve", async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "opqueue-package-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));

  // The service first: it starts from source while the package is built and installed.
  const [port, targetPort] = [await freePort(), await freePort()];
  const raw = rawTestConfig(dir);
  raw["listen"] = { host: "127.0.0.1", port };
  raw["target"] = { base_url: `http://127.0.0.1:${targetPort}`, audience: "product" };
  raw["cron"] = [];
  const configFile = path.join(dir, "opqueue.json");
  fs.writeFileSync(configFile, JSON.stringify(raw, null, 2));
  const cli = startCli(t, ["serve", "--config", configFile]);
  const started = waitForStart(cli);

  const packs = path.join(dir, "packs");
  fs.mkdirSync(packs);
  await run("npm", ["pack", "--workspace", "@opqueue/client", "--pack-destination", packs], { cwd: REPO_ROOT });
  const tarballs = fs.readdirSync(packs).filter((name) => name.endsWith(".tgz"));
  assert.equal(tarballs.length, 1, `one tarball: ${tarballs.join(", ")}`);

  const product = path.join(dir, "product");
  fs.mkdirSync(product);
  fs.writeFileSync(path.join(product, "package.json"), JSON.stringify({ name: "scratch-product", private: true, type: "module" }));
  await run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", path.join(packs, tarballs[0] as string)], { cwd: product });

  const modules = path.join(product, "node_modules");
  assert.deepEqual(foldersNamed(modules, SERVICE_ONLY), [], "none of the service's dependencies was installed");
  assert.ok(fs.existsSync(path.join(modules, "jose", "package.json")), "jose, the client's one dependency, was installed");
  const installed = path.join(modules, "@opqueue", "client");
  assert.deepEqual(fs.readdirSync(installed).sort(), ["README.md", "dist", "package.json"]);

  fs.writeFileSync(path.join(product, "enqueue-and-verify.mjs"), PRODUCT_SCRIPT);
  await started;
  const output = await run("node", ["enqueue-and-verify.mjs"], {
    cwd: product,
    env: {
      OPQUEUE_URL: `http://127.0.0.1:${port}`,
      TARGET_PORT: String(targetPort),
      ENQUEUE_KID: "k1",
      ENQUEUE_SECRET: TEST_SECRET,
      DELIVERY_SECRET: TEST_DELIVERY_SECRET,
    },
  });
  const seen = JSON.parse(output.trim().split("\n").at(-1) ?? "{}") as {
    job: { id: string; status: string };
    created: boolean;
    refusal: { typed: boolean; code: string; status: number };
    delivery?: Record<string, unknown>;
    refused?: unknown;
    method: string;
    url: string;
  };
  assert.equal(seen.created, true);
  assert.deepEqual(seen.refusal, { typed: true, code: "unknown_operation", status: 422 });
  assert.equal(seen.refused, undefined, `the delivery was refused: ${JSON.stringify(seen.refused)}`);
  // The delivery as verified, with the token it carried (kept by a target that takes the attempt asynchronously).
  const { token, ...delivery } = seen.delivery ?? {};
  assert.equal(typeof token, "string");
  assert.deepEqual(delivery, {
    jobId: seen.job.id,
    attempt: 1,
    userId: "u1",
    operationId: "sendWelcomeEmail",
    originalRequestId: "package-test-1",
    authority: { kind: "request", request_id: "package-test-1", user_id: "u1" },
  });
  assert.equal(`${seen.method} ${seen.url}`, "POST /users/42/welcome-email");

  // The service saw the 204: its log says so once the attempt finished, and the job reads succeeded.
  await logLine(cli, (line) => line["msg"] === "attempt succeeded" && line["jobId"] === seen.job.id);
  const config = parseConfig({ raw, baseDir: dir, env: {} });
  const admin = await mintToken({ auth: config.auth, clock: systemClock, sub: "admin", siteAdmin: true });
  const deadline = Date.now() + OUTCOME_LIMIT_MS;
  let status = "";
  // The outcome is written a moment after the log line; each read is a round trip to the service, not a pause.
  while (status !== "succeeded" && Date.now() < deadline) {
    const answer = await fetch(`http://127.0.0.1:${port}/jobs/${seen.job.id}`, { headers: { authorization: `Bearer ${admin}` } });
    status = ((await answer.json()) as { job: { status: string } }).job.status;
  }
  assert.equal(status, "succeeded");
});

/**
 * Both packages install outside this repository, as docs/deploying.md and packages/client/README.md say: `npm pack` of
 * the service (whose prepare builds it and the client it bundles) and of the client, each tarball installed into an
 * empty folder under the system's temporary directory, with no registry copy of `opqueue` or `@opqueue/client` (the
 * third-party dependencies come from the registry, or the npm cache `npm ci` of this repository filled). Then, from the
 * installs alone: `npx opqueue --help`; `serve` on a SQLite file up to `/readyz` and a clean SIGTERM; the bundled
 * `opqueue/client` entry; and a product that installed only the client enqueueing to that serve and verifying the
 * delivery with the installed bare verifier.
 *
 * Each tarball is installed once for every case. The service's install skips install scripts, so that better-sqlite3
 * does not spend a minute building its native module again: when the version installed is the one this repository
 * built, its module is copied in; otherwise `npm rebuild better-sqlite3` builds it. The test checks that opqueue
 * itself has no install script, so skipping them hides nothing of ours. Alone on a 2-core machine it takes about
 * 25 seconds: the service's build by `npm pack` (tsc, about 15 s), both installs side by side from the npm cache
 * (about 5 s), and the two `serve` start-ups.
 */
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test, type TestContext } from "node:test";
import { promisify } from "node:util";
import { logLines, REPO_ROOT, stopServe, waitForStart, watchProcess, type CliProcess } from "../helpers/cli-process.js";
import { freePort } from "../helpers/ports.js";

const execFileAsync = promisify(execFile);

/** Upper bound of each step run as a process (pack, install, rebuild, a script); far above a passing run. */
const STEP_LIMIT_MS = 300_000;
/** What the service must never bring into a product that installed the client alone. */
const SERVICE_ONLY = ["better-sqlite3", "pg", "fastify"];
/** The enqueue key and the delivery key of the scratch service (test values, never used elsewhere). */
const ENQUEUE_KID = "install-k1";
const ENQUEUE_SECRET = "install-test-enqueue-secret-of-32-bytes-or-more";
const DELIVERY_SECRET = "install-test-delivery-secret-of-32-bytes-or-more";

/**
 * This process's environment without what would steer the children: `npm test` sets npm_config_* naming this
 * repository (an npm command in a scratch folder would otherwise work on the repository), and the test runner's own.
 */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (/^npm_/i.test(name) || name.startsWith("NODE_TEST") || name === "NODE_OPTIONS" || name.startsWith("OPQUEUE_"))
      continue;
    env[name] = value;
  }
  return { ...env, ...extra };
}

/** Runs `command args` in `cwd` to its end; fails with its output if it fails. */
async function run(
  command: string,
  args: string[],
  options: { cwd: string; env?: Record<string, string> },
): Promise<{ stdout: string; stderr: string }> {
  try {
    return await execFileAsync(command, args, {
      cwd: options.cwd,
      env: cleanEnv(options.env),
      timeout: STEP_LIMIT_MS,
      maxBuffer: 16 * 1024 * 1024,
    });
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string; stderr?: string };
    throw new Error(
      `${command} ${args.join(" ")} failed in ${options.cwd}: ${(error as Error).message}\n${stderr ?? ""}${stdout ?? ""}`,
    );
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

/** An empty npm project in `dir`, as `npm init -y` would leave it. */
function emptyProject(dir: string, name: string): void {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(
    path.join(dir, "package.json"),
    JSON.stringify({ name, version: "1.0.0", private: true, type: "module" }, null, 2),
  );
}

/** The one tarball `npm pack` left in `dir`. */
function tarball(dir: string): string {
  const found = fs.readdirSync(dir).filter((name) => name.endsWith(".tgz"));
  assert.equal(found.length, 1, `one tarball in ${dir}: ${found.join(", ")}`);
  return path.join(dir, found[0] as string);
}

/** The package.json of `name` as installed in `project`. */
function installedManifest(project: string, name: string): Record<string, unknown> {
  return JSON.parse(fs.readFileSync(path.join(project, "node_modules", name, "package.json"), "utf8")) as Record<
    string,
    unknown
  >;
}

/**
 * Gives the installed better-sqlite3 its native module: this repository's build when the versions agree (same Node,
 * same sources), else a build by npm, as an install with scripts would have made.
 */
async function provideSqliteModule(project: string): Promise<void> {
  const installedVersion = installedManifest(project, "better-sqlite3")["version"];
  const ours = path.join(REPO_ROOT, "node_modules", "better-sqlite3");
  const ourVersion = (JSON.parse(fs.readFileSync(path.join(ours, "package.json"), "utf8")) as { version: string })
    .version;
  const built = path.join(ours, "build", "Release", "better_sqlite3.node");
  if (installedVersion === ourVersion && fs.existsSync(built)) {
    const release = path.join(project, "node_modules", "better-sqlite3", "build", "Release");
    fs.mkdirSync(release, { recursive: true });
    fs.copyFileSync(built, path.join(release, "better_sqlite3.node"));
    return;
  }
  await run("npm", ["rebuild", "better-sqlite3"], { cwd: project });
}

/** The installed `opqueue serve` of `project`, run as the systemd unit runs it: node on the installed dist/cli.js. */
function startInstalledServe(t: TestContext, project: string, configFile: string): CliProcess {
  const child = spawn(
    process.execPath,
    [path.join(project, "node_modules", "opqueue", "dist", "cli.js"), "serve", "--config", configFile],
    {
      cwd: project,
      env: cleanEnv(),
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  return watchProcess(t, child);
}

/**
 * A configuration of the scratch service in `dir`: a SQLite file there, the OpenAPI document of the installed
 * package's demo (examples/demo/product.openapi.yaml), keys of this test, and the target at `targetPort`.
 */
function writeServiceConfig(options: { dir: string; project: string; port: number; targetPort: number }): string {
  fs.mkdirSync(options.dir, { recursive: true });
  const config = {
    listen: { host: "127.0.0.1", port: options.port },
    database: `sqlite:${path.join(options.dir, "opqueue.db")}`,
    openapi: path.join(options.project, "node_modules", "opqueue", "examples", "demo", "product.openapi.yaml"),
    target: { base_url: `http://127.0.0.1:${options.targetPort}`, audience: "product" },
    auth: {
      audience: "opqueue",
      keys: [{ kid: ENQUEUE_KID, alg: "HS256", secret: ENQUEUE_SECRET }],
      delivery_key: { kid: "install-d1", alg: "HS256", secret: DELIVERY_SECRET },
    },
    triggers: { createUser: ["sendWelcomeEmail"] },
  };
  const file = path.join(options.dir, "opqueue.json");
  fs.writeFileSync(file, JSON.stringify(config, null, 2));
  return file;
}

/**
 * The scratch product's script: a node:http target whose route checks every delivery with the installed bare
 * verifier, an enqueue with the installed client, a refusal surfacing as the installed typed error, and a wait for the
 * job's end as its producer. It prints what it saw as one JSON line.
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
const caller = { userId: "u1", operationId: "createUser", requestId: "install-test-1" };
const { job, created } = await jobs.enqueue({
  caller, operationId: "sendWelcomeEmail", request: { path_params: { userId: "42" }, body: { email: "u42@example.com" } },
});
let refusal;
try {
  await jobs.enqueue({ caller, operationId: "noSuchOperation", request: {} });
} catch (error) {
  refusal = { typed: error instanceof UnknownOperationError && error instanceof OpqueueError, code: error.code, status: error.status };
}
const seen = await received;
const ended = await jobs.wait(job.id, { waitMs: 20000, caller });
console.log(JSON.stringify({ job, created, refusal, ...seen, ended: ended.status }));
server.closeAllConnections();
server.close();
`;

describe("the packed tarballs install outside the repository", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "opqueue-install-"));
  const servicePack = path.join(dir, "pack-service");
  const clientPack = path.join(dir, "pack-client");
  /** The empty project the service's tarball is installed into, as docs/deploying.md says. */
  const service = path.join(dir, "service");
  /** The empty product the client's tarball is installed into, as packages/client/README.md says. */
  const product = path.join(dir, "product");
  let serviceInstall = { stdout: "", stderr: "" };
  let productInstall = { stdout: "", stderr: "" };

  before(async () => {
    fs.mkdirSync(servicePack);
    fs.mkdirSync(clientPack);
    // The service's prepare builds the client, then the service, whose tarball bundles the client's build.
    await run("npm", ["pack", "--pack-destination", servicePack], { cwd: REPO_ROOT });
    await run("npm", ["pack", "--workspace", "@opqueue/client", "--ignore-scripts", "--pack-destination", clientPack], {
      cwd: REPO_ROOT,
    });
    emptyProject(service, "scratch-service");
    emptyProject(product, "scratch-product");
    const install = ["install", "--prefer-offline", "--no-audit", "--no-fund"];
    [serviceInstall, productInstall] = await Promise.all([
      run("npm", [...install, "--ignore-scripts", tarball(servicePack)], { cwd: service }),
      run("npm", [...install, tarball(clientPack)], { cwd: product }),
    ]);
    await provideSqliteModule(service);
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  test("npm warns of no engine on this Node, and opqueue has no install script of its own", () => {
    for (const [name, output] of [
      ["service", serviceInstall],
      ["product", productInstall],
    ] as const) {
      assert.doesNotMatch(
        `${output.stderr}${output.stdout}`,
        /EBADENGINE/,
        `the ${name}'s install warned of an engine:\n${output.stderr}`,
      );
    }
    const scripts = (installedManifest(service, "opqueue")["scripts"] ?? {}) as Record<string, string>;
    assert.deepEqual(
      ["preinstall", "install", "postinstall"].filter((name) => name in scripts),
      [],
      "skipping install scripts skipped none of opqueue's",
    );
  });

  test("the service's tarball carries the client: nothing named @opqueue came from a registry", () => {
    const lock = JSON.parse(fs.readFileSync(path.join(service, "package-lock.json"), "utf8")) as {
      packages: Record<string, { resolved?: string; inBundle?: boolean; version?: string }>;
    };
    const ours = Object.entries(lock.packages).filter(([where]) =>
      /node_modules\/(opqueue|@opqueue\/client)$/.test(where),
    );
    assert.deepEqual(ours.map(([where]) => where).sort(), [
      "node_modules/opqueue",
      "node_modules/opqueue/node_modules/@opqueue/client",
    ]);
    assert.equal(
      lock.packages["node_modules/opqueue/node_modules/@opqueue/client"]?.inBundle,
      true,
      "the client came in the bundle",
    );
    assert.match(lock.packages["node_modules/opqueue"]?.resolved ?? "", /^file:/, "opqueue came from the tarball");
  });

  test("npx opqueue --help prints the usage", async () => {
    const { stdout } = await run("npx", ["opqueue", "--help"], { cwd: service });
    assert.match(stdout, /^opqueue \d+\.\d+\.\d+/m);
    assert.match(stdout, /opqueue serve/);
  });

  test("the opqueue/client entry of the service's install serves the bundled client", async () => {
    const script =
      'const client = await import("opqueue/client"); console.log(typeof client.createJobsClient, typeof client.createDeliveryVerifier);';
    const { stdout } = await run("node", ["--input-type=module", "-e", script], { cwd: service });
    assert.equal(stdout.trim(), "function function");
  });

  test("the installed serve starts on a SQLite file, answers /readyz 200, and stops on SIGTERM", async (t) => {
    const port = await freePort();
    const configFile = writeServiceConfig({
      dir: path.join(dir, "readyz"),
      project: service,
      port,
      targetPort: await freePort(),
    });
    const cli = startInstalledServe(t, service, configFile);
    await waitForStart(cli);
    const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
    assert.equal(ready.status, 200, await ready.text());
    await stopServe(cli);
  });

  test("a product with the client alone enqueues to the installed serve and verifies the delivery", async (t) => {
    const modules = path.join(product, "node_modules");
    assert.deepEqual(foldersNamed(modules, SERVICE_ONLY), [], "none of the service's dependencies was installed");
    assert.ok(
      fs.existsSync(path.join(modules, "jose", "package.json")),
      "jose, the client's one dependency, was installed",
    );
    assert.deepEqual(fs.readdirSync(path.join(modules, "@opqueue", "client")).sort(), [
      "README.md",
      "dist",
      "package.json",
    ]);

    const [port, targetPort] = [await freePort(), await freePort()];
    const configFile = writeServiceConfig({ dir: path.join(dir, "delivery"), project: service, port, targetPort });
    const cli = startInstalledServe(t, service, configFile);
    await waitForStart(cli);

    fs.writeFileSync(path.join(product, "enqueue-and-verify.mjs"), PRODUCT_SCRIPT);
    const { stdout } = await run("node", ["enqueue-and-verify.mjs"], {
      cwd: product,
      env: {
        OPQUEUE_URL: `http://127.0.0.1:${port}`,
        TARGET_PORT: String(targetPort),
        ENQUEUE_KID,
        ENQUEUE_SECRET,
        DELIVERY_SECRET,
      },
    });
    const seen = JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}") as {
      job: { id: string };
      created: boolean;
      refusal: { typed: boolean; code: string; status: number };
      delivery?: Record<string, unknown>;
      refused?: unknown;
      method: string;
      url: string;
      ended: string;
    };
    assert.equal(seen.created, true);
    assert.deepEqual(seen.refusal, { typed: true, code: "unknown_operation", status: 422 });
    assert.equal(seen.refused, undefined, `the delivery was refused: ${JSON.stringify(seen.refused)}`);
    const { token, ...delivery } = seen.delivery ?? {};
    assert.equal(typeof token, "string");
    assert.deepEqual(delivery, {
      jobId: seen.job.id,
      attempt: 1,
      userId: "u1",
      operationId: "sendWelcomeEmail",
      originalRequestId: "install-test-1",
      authority: { kind: "request", request_id: "install-test-1", user_id: "u1" },
    });
    assert.equal(`${seen.method} ${seen.url}`, "POST /users/42/welcome-email");
    assert.equal(
      seen.ended,
      "succeeded",
      `the job as its producer waited for it:\n${logLines(cli.stdout()).length} log lines`,
    );
    await stopServe(cli);
  });
});

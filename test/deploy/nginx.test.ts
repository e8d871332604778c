/**
 * examples/nginx/opqueue.conf run as docs/deploying.md ("Behind a TLS-terminating proxy") says, in front of a real
 * node: nginx terminates TLS with a certificate made for the test, and everything an operator and a product do goes
 * through it (an enqueue, an admin read, the dashboard, /metrics from an allowed address, an online backup), while a
 * body over opqueue's cap is refused by opqueue itself, with its JSON error.
 *
 * Needs nginx (Debian's nginx-light; .ci/run installs it when missing) and openssl.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Agent, fetch, type RequestInit } from "undici";
import { mintToken } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import { parseConfig } from "../../src/config.js";
import { startCli, stopServe, waitForStart } from "../helpers/cli-process.js";
import { freePort } from "../helpers/ports.js";
import { rawTestConfig } from "../helpers/service.js";
import { answer, startTarget } from "../helpers/target.js";

const EXAMPLE = fileURLToPath(new URL("../../examples/nginx/opqueue.conf", import.meta.url));
const NGINX = ["/usr/sbin/nginx", "/usr/bin/nginx"].find((candidate) => fs.existsSync(candidate));
const SKIP = NGINX
  ? false
  : "no nginx: install Debian's (apt-get install -y nginx-light; .ci/run does it when missing)";
/** Upper bound of the wait for nginx to listen; far above what a passing test needs. */
const WAIT_LIMIT_MS = 10_000;

function tempDir(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "opqueue-nginx-test-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A self-signed certificate for 127.0.0.1, made with openssl: `{ cert, key }` paths. */
function makeCertificate(dir: string): { cert: string; key: string } {
  const cert = path.join(dir, "fullchain.pem");
  const key = path.join(dir, "privkey.pem");
  const result = spawnSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-days",
      "1",
      "-subj",
      "/CN=127.0.0.1",
      "-addext",
      "subjectAltName=IP:127.0.0.1",
      "-keyout",
      key,
      "-out",
      cert,
    ],
    { encoding: "utf8" },
  );
  assert.equal(result.status, 0, result.stderr);
  return { cert, key };
}

/** Resolves once something accepts TLS connections on `port`, polling a connect; fails after `WAIT_LIMIT_MS`. */
async function waitForListener(url: string, dispatcher: Agent, exited: () => string | undefined): Promise<void> {
  const deadline = Date.now() + WAIT_LIMIT_MS;
  for (;;) {
    const failure = exited();
    if (failure !== undefined) throw new Error(`nginx exited: ${failure}`);
    try {
      await fetch(`${url}/healthz`, { dispatcher });
      return;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      // nginx gives no sign that it listens but the listening itself: try again shortly.
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

test(
  "the nginx example terminates TLS in front of a node: enqueue, admin, dashboard, metrics and backup go through it",
  { skip: SKIP },
  async (t) => {
    const dir = tempDir(t);
    const target = await startTarget(t, answer(204));
    const raw = rawTestConfig(dir);
    raw["target"] = { base_url: target.url, audience: "product" };
    const configFile = path.join(dir, "opqueue.json");
    fs.writeFileSync(configFile, JSON.stringify(raw));
    const config = parseConfig({ raw, baseDir: dir, env: {} });
    const opqueuePort = await freePort();
    const node = startCli(t, ["serve", "--config", configFile], { OPQUEUE_PORT: String(opqueuePort) });
    await waitForStart(node);

    // The example, with this test's ports and certificate, inside the http block of a minimal nginx.conf.
    const { cert, key } = makeCertificate(dir);
    const nginxPort = await freePort();
    const example = fs.readFileSync(EXAMPLE, "utf8");
    const site = example
      .replace("server 127.0.0.1:8080;", `server 127.0.0.1:${opqueuePort};`)
      .replace("listen 443 ssl;", `listen 127.0.0.1:${nginxPort} ssl;`)
      .replace("/etc/ssl/opqueue/fullchain.pem", cert)
      .replace("/etc/ssl/opqueue/privkey.pem", key);
    assert.notEqual(site, example);
    for (const changed of [`127.0.0.1:${opqueuePort};`, `127.0.0.1:${nginxPort} ssl;`, cert, key]) {
      assert.ok(site.includes(changed), `the example still has the line the test replaces (${changed})`);
    }
    fs.writeFileSync(path.join(dir, "opqueue-site.conf"), site);
    const nginxConf = path.join(dir, "nginx.conf");
    fs.writeFileSync(
      nginxConf,
      [
        // As root, nginx's workers would run as nobody, who cannot enter this test's private folder.
        ...(process.getuid?.() === 0 ? ["user root;"] : []),
        "worker_processes 1;",
        "daemon off;",
        `pid ${path.join(dir, "nginx.pid")};`,
        `error_log ${path.join(dir, "error.log")} warn;`,
        "events { worker_connections 256; }",
        "http {",
        `  access_log ${path.join(dir, "access.log")};`,
        ...["client_body", "proxy", "fastcgi", "uwsgi", "scgi"].map(
          (kind) => `  ${kind}_temp_path ${path.join(dir, kind)};`,
        ),
        `  include ${path.join(dir, "opqueue-site.conf")};`,
        "}",
      ].join("\n"),
    );
    const checked = spawnSync(NGINX as string, ["-t", "-p", dir, "-c", nginxConf], { encoding: "utf8" });
    assert.equal(checked.status, 0, checked.stderr);
    const nginx = spawn(NGINX as string, ["-p", dir, "-c", nginxConf], { stdio: ["ignore", "ignore", "pipe"] });
    let nginxErrors = "";
    nginx.stderr.setEncoding("utf8").on("data", (chunk: string) => (nginxErrors += chunk));
    let nginxExit: string | undefined;
    nginx.on("exit", (code, signal) => (nginxExit = `code ${code}, signal ${signal}: ${nginxErrors}`));
    t.after(async () => {
      if (nginxExit === undefined) {
        const closed = new Promise((resolve) => nginx.on("exit", resolve));
        nginx.kill("SIGQUIT");
        await closed;
      }
    });

    const url = `https://127.0.0.1:${nginxPort}`;
    const dispatcher = new Agent({ connect: { ca: fs.readFileSync(cert) } });
    t.after(() => dispatcher.close());
    await waitForListener(url, dispatcher, () => nginxExit);
    const send = (pathname: string, init: RequestInit = {}) => fetch(`${url}${pathname}`, { ...init, dispatcher });

    // A product enqueues over TLS; the job is delivered.
    const assertion = await mintToken({
      auth: config.auth,
      clock: systemClock,
      sub: "u1",
      op: "createUser",
      rid: "nginx-1",
    });
    const enqueued = await send("/jobs", {
      method: "POST",
      headers: { authorization: `Bearer ${assertion}`, "content-type": "application/json" },
      body: JSON.stringify({ operation_id: "sendWelcomeEmail", request: { path_params: { userId: "u1" } } }),
    });
    assert.equal(enqueued.status, 201, await enqueued.clone().text());
    const { job } = (await enqueued.json()) as { job: { id: string } };
    await target.waitForRequests(1);

    // An administrator reads it; the dashboard's page loads.
    const admin = await mintToken({ auth: config.auth, clock: systemClock, sub: "ops", siteAdmin: true });
    const read = await send(`/jobs/${job.id}`, { headers: { authorization: `Bearer ${admin}` } });
    assert.equal(read.status, 200);
    const ui = await send("/ui/");
    assert.equal(ui.status, 200);
    assert.match(await ui.text(), /<html/i);

    // A body over opqueue's 1 MiB is refused by opqueue, with its own error, not by nginx; every time (opqueue answers
    // before reading the body, and a connection closed on unread bytes would lose that answer: nginx said 502 to about
    // two of five before opqueue lingered on close).
    const oversized = JSON.stringify({ operation_id: "sendWelcomeEmail", request: { body: "x".repeat(1_500_000) } });
    for (let i = 0; i < 10; i++) {
      const tooLarge = await send("/jobs", {
        method: "POST",
        headers: { authorization: `Bearer ${assertion}`, "content-type": "application/json" },
        body: oversized,
      });
      assert.equal(tooLarge.status, 413, `request ${i + 1}: ${await tooLarge.clone().text()}`);
      assert.equal(((await tooLarge.json()) as { code: string }).code, "body_too_large");
    }

    // /metrics and the backup from an allowed address (the loopback one here).
    const metrics = await send("/metrics");
    assert.equal(metrics.status, 200);
    assert.match(await metrics.text(), /^opqueue_deliveries_total/m);
    const backup = await send("/admin/backup", { headers: { authorization: `Bearer ${admin}` } });
    assert.equal(backup.status, 200);
    const bytes = Buffer.from(await backup.arrayBuffer());
    assert.equal(bytes.subarray(0, 16).toString("latin1"), "SQLite format 3\u0000");
    assert.equal(bytes.length, Number(backup.headers.get("content-length")));

    await stopServe(node);
  },
);

/**
 * Enqueue-to-target latency on one idle SQLite node (issue 3's performance figure).
 *
 * A real `opqueue serve` process (built dist/cli.js) on a temporary SQLite file; this process is both the caller
 * (enqueueing over HTTP with undici, keep-alive) and the target (a node:http server answering 204). Each job's body
 * carries its send time, so latency = arrival at the target − the moment the enqueue request was sent, both read
 * from this process's monotonic clock. Jobs are sent at a fixed rate (default 100/s) for a fixed count.
 *
 * Usage: npm run bench:latency [-- --rate 100 --count 1000]
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Agent, request } from "undici";
import { mintToken } from "../src/auth/tokens.js";
import { systemClock } from "../src/clock.js";
import { parseConfig } from "../src/config.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** Percentile of sorted values (nearest rank). */
export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] ?? Number.NaN;
}

async function listen(server: Server): Promise<number> {
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  if (typeof address !== "object" || address === null) throw new Error("no address");
  return address.port;
}

async function freePort(): Promise<number> {
  const server = createServer();
  const port = await listen(server);
  server.close();
  return port;
}

async function waitHealthy(url: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    try {
      const response = await request(`${url}/readyz`);
      await response.body.dump();
      if (response.statusCode === 200) return;
    } catch {
      // not up yet
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error("opqueue did not become ready");
}

/** Runs the latency scenario and returns its figures in milliseconds. */
export async function runLatency(options: { rate: number; count: number }): Promise<{
  p50: number;
  p95: number;
  p99: number;
  max: number;
  delivered: number;
}> {
  const dir = mkdtempSync(join(tmpdir(), "opqueue-bench-"));
  const arrivals = new Map<number, number>();
  let resolveAll: () => void = () => undefined;
  const allArrived = new Promise<void>((resolve) => (resolveAll = resolve));
  const target = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const now = performance.now();
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { n: number };
      if (!arrivals.has(body.n)) arrivals.set(body.n, now);
      res.writeHead(204).end();
      if (arrivals.size === options.count) resolveAll();
    });
  });
  const targetPort = await listen(target);
  const port = await freePort();
  const raw = {
    listen: { host: "127.0.0.1", port },
    database: `sqlite:${join(dir, "opqueue.db")}`,
    openapi: join(ROOT, "test/fixtures/product.openapi.yaml"),
    target: { base_url: `http://127.0.0.1:${targetPort}`, audience: "product" },
    auth: {
      audience: "opqueue",
      keys: [{ kid: "k1", alg: "HS256", secret: "bench-secret-that-is-at-least-32-bytes" }],
      delivery_key: { kid: "q1", alg: "HS256", secret: "bench-delivery-secret-32-bytes-or-more" },
    },
    triggers: { createUser: ["buildReport"] },
    worker: { concurrency: 32, poll_ms: 1000 },
  };
  const configPath = join(dir, "opqueue.json");
  writeFileSync(configPath, JSON.stringify(raw));
  const config = parseConfig({ raw, baseDir: dir, env: {} });
  const child = spawn(process.execPath, [join(ROOT, "dist/cli.js"), "serve", "--config", configPath], {
    env: { ...process.env, OPQUEUE_LOG_LEVEL: "warn" },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitHealthy(url);
    const agent = new Agent({ connections: 8 });
    const assertion = await mintToken({ auth: config.auth, clock: systemClock, sub: "bench", op: "createUser", rid: "bench" , ttlSeconds: 300 });
    const sentAt = new Map<number, number>();
    const intervalMs = 1000 / options.rate;
    const started = performance.now();
    const sends: Array<Promise<void>> = [];
    for (let n = 0; n < options.count; n++) {
      const due = started + n * intervalMs;
      const wait = due - performance.now();
      if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
      sentAt.set(n, performance.now());
      sends.push(
        request(`${url}/jobs`, {
          dispatcher: agent,
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${assertion}` },
          body: JSON.stringify({ operation_id: "buildReport", request: { body: { n } } }),
        }).then(async (response) => {
          await response.body.dump();
          if (response.statusCode !== 201) throw new Error(`enqueue answered ${response.statusCode}`);
        }),
      );
      if (n % 50 === 0) process.stderr.write(`\r  latency: sent ${n + 1}/${options.count}`);
    }
    await Promise.all(sends);
    await Promise.race([allArrived, new Promise((resolve) => setTimeout(resolve, 10_000))]);
    process.stderr.write(`\r  latency: ${arrivals.size}/${options.count} delivered\n`);
    const latencies = [...arrivals.entries()].map(([n, at]) => at - (sentAt.get(n) ?? at)).sort((a, b) => a - b);
    await agent.close();
    return {
      p50: percentile(latencies, 50),
      p95: percentile(latencies, 95),
      p99: percentile(latencies, 99),
      max: latencies.at(-1) ?? Number.NaN,
      delivered: arrivals.size,
    };
  } finally {
    child.kill("SIGTERM");
    await once(child, "exit");
    target.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({ options: { rate: { type: "string" }, count: { type: "string" } } });
  const result = await runLatency({ rate: Number(values.rate ?? 100), count: Number(values.count ?? 1000) });
  console.log(JSON.stringify(result));
}

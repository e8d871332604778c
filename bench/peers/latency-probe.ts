/**
 * The latency probe (what bench/latency.ts used to be): one process that is both the caller and the target, so a
 * job's enqueue-to-target latency is read on one monotonic clock. It enqueues over HTTP (undici, keep-alive) at a
 * fixed rate, each body carrying a run nonce and a sequence number; its own node:http server answers every
 * delivery 204 and notes when each job arrived. Latency = arrival − the moment the enqueue request was sent.
 *
 * With `mint`, every enqueue carries a freshly minted assertion (its own chain), as a product's requests would.
 *
 * Ready info: `{port}` (point the system's target there). Command: `run {url, mint?, rate, count, warmup}` →
 * `{p50, p95, p99, max, delivered, sent, refused}`.
 */
import { once } from "node:events";
import { createServer } from "node:http";
import { randomBytes } from "node:crypto";
import { Agent, request } from "undici";
import { assertionMinter, type MintSpec } from "../lib/assertions.js";
import { serveCommands } from "../lib/ipc.js";
import { percentile } from "../lib/stats.js";

interface Run {
  nonce: string;
  count: number;
  arrivals: Map<number, number>;
  done: () => void;
}

let current: Run | undefined;

const server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    const now = performance.now();
    res.writeHead(204).end();
    const run = current;
    if (!run) return;
    try {
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { nonce?: string; n?: number };
      if (body.nonce !== run.nonce || typeof body.n !== "number") return;
      if (!run.arrivals.has(body.n)) run.arrivals.set(body.n, now);
      if (run.arrivals.size === run.count) run.done();
    } catch {
      // not a probe job
    }
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1");
await once(server, "listening");
const address = server.address();
const port = typeof address === "object" && address ? address.port : 0;

const agent = new Agent({ connections: 8, keepAliveTimeout: 30_000 });

async function send(url: string, token: string | undefined, nonce: string, n: number): Promise<boolean> {
  const response = await request(`${url}/jobs`, {
    dispatcher: agent,
    method: "POST",
    headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify({ operation_id: "buildReport", request: { body: { nonce, n } } }),
  });
  await response.body.dump();
  return response.statusCode === 201;
}

/** Sends `count` jobs at `rate` per second, measured; `warmup` jobs first, not measured. */
async function run(args: { url: string; mint?: MintSpec; rate: number; count: number; warmup: number }) {
  const minter = args.mint ? assertionMinter(args.mint) : undefined;
  let minted = 0;
  const token = () => minter?.(minted++);
  // Warm-up: connections opened, code paths compiled; waits for their deliveries (or 5 s).
  if (args.warmup > 0) {
    let done: () => void = () => undefined;
    const arrived = new Promise<void>((resolve) => (done = resolve));
    current = { nonce: randomBytes(6).toString("hex"), count: args.warmup, arrivals: new Map(), done };
    for (let n = 0; n < args.warmup; n++) {
      await send(args.url, token(), current.nonce, n);
      await new Promise((resolve) => setTimeout(resolve, 1000 / args.rate));
    }
    await Promise.race([arrived, new Promise((resolve) => setTimeout(resolve, 5000))]);
  }
  let done: () => void = () => undefined;
  const allArrived = new Promise<void>((resolve) => (done = resolve));
  const thisRun: Run = { nonce: randomBytes(6).toString("hex"), count: args.count, arrivals: new Map(), done };
  current = thisRun;
  const sentAt = new Map<number, number>();
  const intervalMs = 1000 / args.rate;
  const started = performance.now();
  const sends: Array<Promise<boolean>> = [];
  for (let n = 0; n < args.count; n++) {
    const wait = started + n * intervalMs - performance.now();
    if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
    sentAt.set(n, performance.now());
    sends.push(send(args.url, token(), thisRun.nonce, n).catch(() => false));
  }
  const accepted = (await Promise.all(sends)).filter(Boolean).length;
  await Promise.race([allArrived, new Promise((resolve) => setTimeout(resolve, 10_000))]);
  current = undefined;
  const latencies = [...thisRun.arrivals.entries()].map(([n, at]) => at - (sentAt.get(n) ?? at)).sort((a, b) => a - b);
  return {
    p50: percentile(latencies, 50),
    p95: percentile(latencies, 95),
    p99: percentile(latencies, 99),
    max: latencies.at(-1) ?? Number.NaN,
    delivered: thisRun.arrivals.size,
    sent: args.count,
    refused: args.count - accepted,
  };
}

serveCommands({ run }, { port }, async () => {
  await agent.close();
  server.close();
});

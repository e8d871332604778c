/**
 * The flow control benchmark's target (bench/flow.ts): a node:http server (keep-alive) answering every request 204
 * once its body is read, like bench/peers/target.ts, but keeping every arrival: its wall-clock time and the `g`
 * (group: a user, or "rate") and `k` (rate key, or B's job number) of the JSON body opqueue delivers, so rates per key
 * and the deliveries between two moments can be read afterwards. A repeated `idempotency-key` counts as a duplicate.
 *
 * Commands: `reset`; `counts` (arrivals per group, duplicates); `arrivals` (every arrival as [g, k, wall ms]).
 * Ready info: `{port}`.
 */
import { once } from "node:events";
import { createServer } from "node:http";
import { serveCommands } from "../lib/ipc.js";

/** One arrival: group, key (or ""), epoch ms with sub-millisecond precision. */
type Arrival = [string, string, number];

let arrivals: Arrival[] = [];
let counts: Record<string, number> = {};
let duplicates = 0;
const keys = new Set<string>();

const server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    // Read the clock before parsing: the arrival is when the request was complete.
    const wall = performance.timeOrigin + performance.now();
    let group = "?";
    let key = "";
    try {
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { g?: unknown; k?: unknown };
      if (typeof body.g === "string") group = body.g;
      if (body.k !== undefined) key = String(body.k);
    } catch {
      // Not a flow benchmark body: counted under "?".
    }
    const idempotencyKey = req.headers["idempotency-key"];
    if (typeof idempotencyKey === "string") {
      if (keys.has(idempotencyKey)) duplicates++;
      else keys.add(idempotencyKey);
    }
    arrivals.push([group, key, wall]);
    counts[group] = (counts[group] ?? 0) + 1;
    res.writeHead(204).end();
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1");
await once(server, "listening");
const address = server.address();
const port = typeof address === "object" && address ? address.port : 0;

serveCommands(
  {
    reset: () => {
      arrivals = [];
      counts = {};
      duplicates = 0;
      keys.clear();
    },
    counts: () => ({ counts, duplicates }),
    arrivals: () => arrivals,
  },
  { port },
  () => new Promise<void>((resolve) => server.close(() => resolve())),
);

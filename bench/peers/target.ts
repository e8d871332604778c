/**
 * The no-op delivery target: a node:http server (keep-alive) answering every request 204 once its body is read.
 * It counts the requests to `/reports` (what drains deliver), the distinct `idempotency-key`s among them (a repeated
 * delivery shows as requests > distinct), and the arrival times of the first and the last, so a drain's rate is
 * read where the work arrives. Requests to any other path (warm-up jobs) are answered and counted apart.
 * `reset {expect}` also has it announce the first arrival (progress `{arrival: "start"}`) and the `expect`th
 * (`{arrival: "end"}`) as they happen: a drain's measured window, at whose edges the harness reads CPU.
 *
 * Commands: `reset {expect?}`, `stats`. Ready info: `{port}`.
 */
import { once } from "node:events";
import { createServer } from "node:http";
import { serveCommands } from "../lib/ipc.js";

let requests = 0;
let others = 0;
let firstAt = 0;
let lastAt = 0;
/** The arrival to announce as the window's end, when asked to (null: announce nothing). */
let expect: number | null = null;
const keys = new Set<string>();
let progress: (value: unknown) => void = () => undefined;

const server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
  req.on("data", () => undefined);
  req.on("end", () => {
    const now = performance.now();
    if (!req.url?.startsWith("/reports")) {
      others++;
      res.writeHead(204).end();
      return;
    }
    if (requests === 0) firstAt = now;
    lastAt = now;
    requests++;
    if (expect !== null && requests === 1) progress({ arrival: "start" });
    if (expect !== null && requests === expect) progress({ arrival: "end" });
    const key = req.headers["idempotency-key"];
    if (typeof key === "string") keys.add(key);
    res.writeHead(204).end();
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1");
await once(server, "listening");
const address = server.address();
const port = typeof address === "object" && address ? address.port : 0;

({ progress } = serveCommands(
  {
    reset: (args: { expect?: number | null }) => {
      expect = args.expect ?? null;
      requests = 0;
      others = 0;
      firstAt = 0;
      lastAt = 0;
      keys.clear();
    },
    stats: () => ({
      requests,
      others,
      distinct: keys.size,
      firstAt,
      lastAt,
      spanMs: lastAt - firstAt,
      // Wall-clock (epoch ms, sub-millisecond) so other processes can compare with their own clocks.
      firstWall: performance.timeOrigin + firstAt,
      lastWall: performance.timeOrigin + lastAt,
    }),
  },
  { port },
  () => new Promise<void>((resolve) => server.close(() => resolve())),
));

/**
 * The load generator, a child process of its own (so it never shares an event loop with what it measures): an
 * undici keep-alive pool of `connections` sockets, one request in flight per socket (no pipelining), each virtual
 * client sending its next request as soon as the previous one is answered (a closed loop, like autocannon).
 *
 * Two modes: for a duration (after a warm-up that is not counted) or for a fixed count. Bodies and bearer tokens
 * rotate through the lists given, so many distinct requests (and assertions) are sent. Answers with the number
 * of expected answers per second (the answers that arrive within the measured window, whenever their request was
 * sent: a slow request, such as a batch's, would otherwise be missed at both edges of the window), the other answers by status, errors, and the latency percentiles. The measured
 * window's opening and closing are announced to the parent as they happen (progress `{window: "start" | "end"}`),
 * so it can read the CPU of what is measured at the same moments.
 *
 * For a batch endpoint (`items`), each expected answer is read: `{results: [{status, code?}, ...]}`, and the rate
 * counts the items answered with the expected status, not the requests.
 */
import { Pool } from "undici";
import { assertionMinter, type MintSpec } from "./assertions.js";
import { serveCommands } from "./ipc.js";
import { percentile } from "./stats.js";

/** One load run. */
export interface LoadTask {
  origin: string;
  path: string;
  method: "POST" | "GET";
  connections: number;
  /** Measure for this long after `warmupMs` (duration mode). */
  durationMs?: number;
  warmupMs?: number;
  /** Send exactly this many requests (count mode); the rate is count / elapsed. */
  count?: number;
  headers: Record<string, string>;
  bodies: string[];
  /** Bearer tokens, rotated per request. */
  tokens?: string[];
  /** Or: a fresh enqueue assertion minted for every request (its own chain each). */
  mint?: MintSpec;
  /** The status that counts as success. */
  expectStatus: number;
  /** A batch endpoint: count the items of `results` answered with this status (the others by status and code). */
  items?: { expectStatus: number };
}

/** An edge of the measured window. */
export type LoadWindowEdge = "start" | "end";

/** What a load run measured. */
export interface LoadResult {
  ok: number;
  other: Record<string, number>;
  errors: number;
  firstError: string | null;
  elapsedMs: number;
  /** Expected answers per second over the measured window (expected items, for a batch endpoint). */
  rate: number;
  p50: number;
  p99: number;
  /** For a batch endpoint: items answered with the expected status, and the others by `status code`. */
  items?: { ok: number; other: Record<string, number> };
}

/** What a batch endpoint answers per item; only the status (and an error's code) are read. */
interface BatchAnswer {
  results?: Array<{ status?: number; code?: string }>;
}

let progress: (value: unknown) => void = () => undefined;

async function run(task: LoadTask): Promise<LoadResult> {
  const pool = new Pool(task.origin, {
    connections: task.connections,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    headersTimeout: 60_000,
    bodyTimeout: 60_000,
  });
  const latencies: number[] = [];
  const other: Record<string, number> = {};
  let ok = 0;
  let errors = 0;
  let firstError: string | null = null;
  let seq = 0;
  let okItems = 0;
  const otherItems: Record<string, number> = {};
  let measuring = task.count !== undefined || !task.warmupMs;
  let stopped = false;
  let windowStart = performance.now();
  const baseHeaders = { ...task.headers };
  const mint = task.mint ? assertionMinter(task.mint) : undefined;

  const client = async () => {
    while (!stopped) {
      const i = seq++;
      if (task.count !== undefined && i >= task.count) return;
      const body = task.bodies[i % task.bodies.length];
      const headers = mint
        ? { ...baseHeaders, authorization: `Bearer ${mint(i)}` }
        : task.tokens
          ? { ...baseHeaders, authorization: `Bearer ${task.tokens[i % task.tokens.length]}` }
          : baseHeaders;
      const sentAt = performance.now();
      try {
        const response = await pool.request({ path: task.path, method: task.method, headers, body: body ?? null });
        const answer =
          task.items && response.statusCode === task.expectStatus
            ? ((await response.body.json()) as BatchAnswer)
            : null;
        if (!answer) await response.body.dump();
        if (!measuring) continue;
        if (response.statusCode === task.expectStatus) {
          ok++;
          latencies.push(performance.now() - sentAt);
          for (const item of answer?.results ?? []) {
            if (item.status === task.items?.expectStatus) okItems++;
            else {
              const key = `${item.status ?? "?"}${item.code ? ` ${item.code}` : ""}`;
              otherItems[key] = (otherItems[key] ?? 0) + 1;
            }
          }
        } else {
          other[response.statusCode] = (other[response.statusCode] ?? 0) + 1;
        }
      } catch (error) {
        if (!measuring) continue;
        errors++;
        firstError ??= (error as Error).message;
      }
    }
  };

  const ticker = setInterval(() => progress({ ok, errors, measuring }), 250);
  const clients = Array.from({ length: task.connections }, () => client());
  let elapsedMs: number;
  if (task.count !== undefined) {
    windowStart = performance.now();
    progress({ window: "start" });
    await Promise.all(clients);
    elapsedMs = performance.now() - windowStart;
    progress({ window: "end" });
  } else {
    if (task.warmupMs) {
      await new Promise((resolve) => setTimeout(resolve, task.warmupMs));
      measuring = true;
    }
    windowStart = performance.now();
    progress({ window: "start" });
    await new Promise((resolve) => setTimeout(resolve, task.durationMs ?? 3000));
    measuring = false;
    elapsedMs = performance.now() - windowStart;
    progress({ window: "end" });
    stopped = true;
    await Promise.all(clients);
  }
  clearInterval(ticker);
  await pool.close();
  latencies.sort((a, b) => a - b);
  return {
    ok,
    other,
    errors,
    firstError,
    elapsedMs,
    rate: (task.items ? okItems : ok) / (elapsedMs / 1000),
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    ...(task.items ? { items: { ok: okItems, other: otherItems } } : {}),
  };
}

({ progress } = serveCommands({ run: (task: LoadTask) => run(task) }));

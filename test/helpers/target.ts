/**
 * A real HTTP server standing in for the product's target operations: it records every request it gets and
 * answers through a handler the test supplies, which may hold an answer back until the test releases it.
 * Tests wait for what the target sees (`target.waitForRequests(n)`), never for time to pass.
 */
import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** Upper bound of a wait for requests; far above what a passing test needs. */
const WAIT_LIMIT_MS = 10_000;

/** One request as the target received it. */
export interface TargetRequest {
  method: string;
  /** The request target exactly as sent: path and query, still percent-encoded. */
  url: string;
  /** The path part of `url`, still percent-encoded. */
  path: string;
  query: URLSearchParams;
  headers: IncomingHttpHeaders;
  body: string;
}

/** Answers one request; may hold the answer back (return a promise that settles later). */
export type TargetHandler = (request: TargetRequest, res: ServerResponse) => void | Promise<void>;

/** A running target server. */
export interface Target {
  /** `http://127.0.0.1:PORT`, for `target.base_url` or `operations.X.base_url`. */
  url: string;
  /** Every request received so far, in arrival order. */
  requests: TargetRequest[];
  /** Resolves with the requests once at least `count` have arrived. */
  waitForRequests(count: number): Promise<TargetRequest[]>;
  /** Replaces the handler for the requests still to come. */
  setHandler(handler: TargetHandler): void;
  close(): Promise<void>;
}

/** Writes a whole answer: `status`, optional headers, optional body. */
export function reply(
  res: ServerResponse,
  status: number,
  options: { headers?: Record<string, string>; body?: string } = {},
): void {
  res.writeHead(status, options.headers ?? {});
  res.end(options.body);
}

/** A handler that answers every request with `status` (and `body`, if given). */
export function answer(status: number, body?: string): TargetHandler {
  return (_request, res) => reply(res, status, body === undefined ? {} : { body });
}

/** A promise with its resolver, to hold an answer until the test says so. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** Starts a target on an ephemeral port of 127.0.0.1, closed when test `t` ends. */
export async function startTarget(
  t: { after: (fn: () => Promise<void>) => void },
  handler: TargetHandler = answer(204),
): Promise<Target> {
  let current = handler;
  const requests: TargetRequest[] = [];
  const waiters: Array<{ count: number; resolve: (requests: TargetRequest[]) => void }> = [];
  const server = createServer((req, res) => {
    // A held answer may be written after the test closed the connection; that is not a failure of the target.
    res.on("error", () => undefined);
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const url = req.url ?? "/";
      const parsed = new URL(url, "http://target.invalid");
      const request: TargetRequest = {
        method: req.method ?? "",
        url,
        path: url.split("?")[0] ?? "",
        query: parsed.searchParams,
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      };
      requests.push(request);
      for (const waiter of waiters.filter((w) => requests.length >= w.count)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve([...requests]);
      }
      Promise.resolve(current(request, res)).catch((error: unknown) => {
        if (!res.headersSent) reply(res, 599, { body: `target handler failed: ${String(error)}` });
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const close = async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  t.after(close);
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    waitForRequests(count) {
      if (requests.length >= count) return Promise.resolve([...requests]);
      return new Promise((resolve, reject) => {
        // A bound for a broken test or service, never a pause: a passing test is woken by the request itself.
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(waiter), 1);
          const seen = requests.map((request) => `${request.method} ${request.url}`).join(", ");
          reject(new Error(`the target got ${requests.length} of ${count} awaited requests: ${seen || "none"}`));
        }, WAIT_LIMIT_MS);
        const waiter = {
          count,
          resolve: (all: TargetRequest[]) => {
            clearTimeout(timer);
            resolve(all);
          },
        };
        waiters.push(waiter);
      });
    },
    setHandler(next) {
      current = next;
    },
    close,
  };
}

/** A port on 127.0.0.1 that nothing listens on (it was bound, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

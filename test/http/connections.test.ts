/**
 * The HTTP listener bounds every connection (docs/api.md, Revision 2), over real sockets: headers within the
 * headers timeout, the whole request within the request timeout, a body trickled behind an early refusal cut off
 * at once, idle keep-alive connections closed, at most `listen.max_connections` open, and the service still
 * enqueuing and delivering while the listener is full. Then the pure computation of the connection cap.
 *
 * The timeouts configured here are a fraction of a second; every "closed within" bound is several times the
 * longest of them (and Node's extra second of keep-alive), yet far below the 60 s and 72 s that Node's and
 * Fastify's defaults would hold a socket for.
 */
import { PerOperationSettings } from "../../src/operations/settings.js";
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import { connect, type AddressInfo, type Socket } from "node:net";
import {
  connectionLimit,
  connectionsCheckingIntervalMs,
  FD_MARGIN,
  parseOpenFilesLimit,
  readOpenFilesLimit,
  resolveConnectionLimit,
} from "../../src/http/connection-limits.js";
import { parseConfig } from "../../src/config.js";
import { buildReport, enqueue } from "../helpers/jobs.js";
import { startLiveService, type LiveService } from "../helpers/live-service.js";
import { rawTestConfig } from "../helpers/service.js";
import { startTarget } from "../helpers/target.js";

/** Small bounds, so that every test here runs in about a second. */
const LISTEN = {
  request_timeout_ms: 1000,
  headers_timeout_ms: 300,
  keep_alive_timeout_ms: 200,
  max_connections: 20,
};

/**
 * Upper bound of every wait for the server to close a socket: it catches a socket never closed, not a slow close. The
 * timeouts under test are 0.3 to 1 s, but a busy machine (the suite beside other work on two cores) has taken over
 * 5 s to write 500 pipelined answers into a stalled socket.
 */
const CLOSE_LIMIT_MS = 20_000;

/** A raw client socket that records what it receives and when the connection ends. */
interface Client {
  socket: Socket;
  /** Everything received so far, as latin1 text. */
  received(): string;
  /** Resolves once `predicate` holds of what was received; rejects after CLOSE_LIMIT_MS. */
  until(predicate: (received: string) => boolean, what: string): Promise<string>;
  /** Resolves with everything received once the connection closed; rejects (and destroys it) if still open after CLOSE_LIMIT_MS. */
  closed(what: string): Promise<string>;
}

/** Opens a connection to the service; resolves once it is established. */
async function openClient(s: LiveService): Promise<Client> {
  const { port } = s.service.app.server.address() as AddressInfo;
  const socket = connect(port, "127.0.0.1");
  let data = "";
  const listeners = new Set<() => void>();
  socket.on("data", (chunk: Buffer) => {
    data += chunk.toString("latin1");
    for (const listener of listeners) listener();
  });
  // The server resetting the connection is one way of closing it.
  socket.on("error", () => undefined);
  const ended = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  socket.once("close", () => {
    for (const listener of listeners) listener();
  });
  await once(socket, "connect");
  const bounded = <T>(promise: Promise<T>, failure: () => string): Promise<T> => {
    let timer: NodeJS.Timeout | undefined;
    const limit = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(failure())), CLOSE_LIMIT_MS);
    });
    return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
  };
  return {
    socket,
    received: () => data,
    until(predicate, what) {
      const met = new Promise<string>((resolve) => {
        const check = () => {
          if (!predicate(data)) return;
          listeners.delete(check);
          resolve(data);
        };
        listeners.add(check);
        check();
      });
      return bounded(met, () => `${what}: not received within ${CLOSE_LIMIT_MS} ms; got ${JSON.stringify(data)}`);
    },
    closed(what) {
      return bounded(
        ended.then(() => data),
        () => `${what}: still open after ${CLOSE_LIMIT_MS} ms; got ${JSON.stringify(data)}`,
      ).finally(() => socket.destroy());
    },
  };
}

/** Writes one byte every few milliseconds until the connection closes: a client trickling its body. */
function trickle(client: Client): void {
  const timer = setInterval(() => {
    if (client.socket.writable) client.socket.write(" ");
  }, 20);
  client.socket.once("close", () => clearInterval(timer));
}

/** The status and parsed JSON body of the first response in `text` (a `Content-Length` one). */
function firstResponse(text: string): { status: number; headers: string; body: Record<string, unknown> } {
  const match = /^HTTP\/1\.1 (\d{3}) [^\r]*\r\n([\s\S]*?)\r\n\r\n/.exec(text);
  assert.ok(match, `an HTTP response: ${JSON.stringify(text)}`);
  const headers = match[2] ?? "";
  const length = Number(/^content-length: (\d+)$/im.exec(headers)?.[1]);
  const body = text.slice(match[0].length, match[0].length + length);
  return { status: Number(match[1]), headers, body: JSON.parse(body) as Record<string, unknown> };
}

/** A live service (API only unless `worker`) with the small bounds of LISTEN. */
function startBounded(
  t: { after: (fn: () => Promise<void>) => void },
  options: { worker?: boolean; targetUrl?: string } = {},
): Promise<LiveService> {
  return startLiveService(t, {
    ...(options.worker ? { worker: true } : {}),
    configure: (raw) => {
      raw["listen"] = { ...LISTEN };
      if (options.targetUrl) raw["target"] = { base_url: options.targetUrl, audience: "product" };
    },
  });
}

/** A request line and headers declaring a body of `length` bytes, of which none is sent yet. */
function declaredBody(options: { method: string; url: string; length: number; headers?: string[] }): string {
  const lines = [
    `${options.method} ${options.url} HTTP/1.1`,
    "Host: localhost",
    "Content-Type: application/json",
    `Content-Length: ${options.length}`,
    ...(options.headers ?? []),
  ];
  return `${lines.join("\r\n")}\r\n\r\n`;
}

describe("the headers timeout", () => {
  test("a socket that sends part of its headers is closed within the headers timeout, answered 400 invalid_request", async (t) => {
    const s = await startBounded(t);
    const client = await openClient(s);
    client.socket.write("GET /healthz HTTP/1.1\r\nHost: localhost\r\nAccept: application/js");
    const received = await client.closed("a socket stalled in its headers");
    const res = firstResponse(received);
    assert.equal(res.status, 400);
    assert.equal(res.body["code"], "invalid_request");
    assert.match(String(res.body["message"]), /timeout/);
  });

  test("a socket that sends nothing at all is closed within the headers timeout", async (t) => {
    const s = await startBounded(t);
    const client = await openClient(s);
    await client.closed("a silent socket");
  });
});

describe("the request timeout and early refusals", () => {
  // A declared megabyte (just under the body limit), of which one byte arrives every 20 ms: without the bounds,
  // the server would wait about six hours for it.
  const MEGABYTE = 1024 * 1024 - 1;
  const refusals: Array<{ what: string; request: (s: LiveService) => Promise<string>; status: number; code: string }> =
    [
      {
        what: "to an unknown route is answered 404 not_found",
        request: async () => declaredBody({ method: "POST", url: "/no-such-route", length: MEGABYTE }),
        status: 404,
        code: "not_found",
      },
      {
        what: "to POST /jobs without an assertion is answered 401 invalid_assertion",
        request: async () => declaredBody({ method: "POST", url: "/jobs", length: MEGABYTE }),
        status: 401,
        code: "invalid_assertion",
      },
      {
        what: "to an admin action without a token is answered 401 unauthenticated",
        request: async () => declaredBody({ method: "POST", url: "/jobs/abcdefgh/cancel", length: MEGABYTE }),
        status: 401,
        code: "unauthenticated",
      },
      {
        what: "in another media type is answered 415 unsupported_media_type",
        request: async (s) =>
          declaredBody({
            method: "POST",
            url: "/jobs",
            length: MEGABYTE,
            headers: [`Authorization: Bearer ${await s.assertion()}`],
          }).replace("Content-Type: application/json", "Content-Type: text/plain"),
        status: 415,
        code: "unsupported_media_type",
      },
      {
        what: "over the body limit is answered 413 body_too_large",
        request: async (s) =>
          declaredBody({
            method: "POST",
            url: "/jobs",
            length: 2 * 1024 * 1024,
            headers: [`Authorization: Bearer ${await s.assertion()}`],
          }),
        status: 413,
        code: "body_too_large",
      },
    ];
  for (const refusal of refusals) {
    test(`a body trickled ${refusal.what} and the connection closed`, async (t) => {
      const s = await startBounded(t);
      const client = await openClient(s);
      client.socket.write(await refusal.request(s));
      trickle(client);
      const received = await client.closed(`a body trickled ${refusal.what}`);
      const res = firstResponse(received);
      assert.equal(res.status, refusal.status, received);
      assert.equal(res.body["code"], refusal.code, received);
      assert.match(res.headers, /^connection: close$/im);
      // One answer only: no timeout answer written behind it.
      assert.equal(received.match(/HTTP\/1\.1 /g)?.length, 1, received);
    });
  }

  test("a body trickled to POST /jobs with a valid assertion is cut off at the request timeout, answered 400 invalid_request", async (t) => {
    const s = await startBounded(t);
    const client = await openClient(s);
    client.socket.write(
      declaredBody({
        method: "POST",
        url: "/jobs",
        length: MEGABYTE,
        headers: [`Authorization: Bearer ${await s.assertion()}`],
      }),
    );
    trickle(client);
    const res = firstResponse(await client.closed("a body trickled to an accepting route"));
    assert.equal(res.status, 400);
    assert.equal(res.body["code"], "invalid_request");
    assert.match(String(res.body["message"]), /timeout/);
    const jobs = await s.inject({ method: "GET", url: "/jobs", token: await s.adminToken() });
    assert.deepEqual(jobs.json(), { jobs: [], next_cursor: null }, "nothing was enqueued");
  });

  test("a refusal after the whole body was read keeps the connection for the next request", async (t) => {
    const s = await startBounded(t);
    const client = await openClient(s);
    const body = JSON.stringify({ operation_id: "buildReport", unknown_field: true });
    client.socket.write(
      declaredBody({
        method: "POST",
        url: "/jobs",
        length: Buffer.byteLength(body),
        headers: [`Authorization: Bearer ${await s.assertion()}`],
      }) + body,
    );
    const first = firstResponse(await client.until((text) => text.endsWith("}"), "the 400 answer"));
    assert.equal(first.status, 400);
    assert.match(first.headers, /^connection: keep-alive$/im);
    client.socket.write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
    await client.until((text) => text.endsWith('{"status":"ok"}'), "the /healthz answer on the same connection");
    client.socket.destroy();
  });
});

describe("stalled responses", () => {
  test("a client that pipelines requests and stops reading the responses is closed once nothing moves for the request timeout", async (t) => {
    const s = await startBounded(t);
    const serverSide = new Promise<Socket>((resolve) => s.service.app.server.once("connection", resolve));
    const client = await openClient(s);
    // The client reads nothing: once the kernel's buffers are full, the server's writes stall.
    client.socket.pause();
    // About 45 KB of /openapi.json each, far more than loopback socket buffers hold.
    client.socket.write("GET /openapi.json HTTP/1.1\r\nHost: localhost\r\n\r\n".repeat(500));
    const socket = await serverSide;
    // The paused client never reads the close, so watch the server's end of the connection.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      once(socket, "close"),
      new Promise((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`a stalled connection still open after ${CLOSE_LIMIT_MS} ms`)),
          CLOSE_LIMIT_MS,
        );
      }),
    ]).finally(() => {
      clearTimeout(timer);
      client.socket.destroy();
    });
  });
});

describe("idle keep-alive connections", () => {
  test("an idle keep-alive connection serves requests, then is closed after the keep-alive timeout", async (t) => {
    const s = await startBounded(t);
    const client = await openClient(s);
    const healthz = "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";
    const ok = '{"status":"ok"}';
    client.socket.write(healthz);
    const first = firstResponse(await client.until((text) => text.endsWith(ok), "the first answer"));
    assert.equal(first.status, 200);
    assert.match(first.headers, /^connection: keep-alive$/im);
    client.socket.write(healthz);
    await client.until((text) => text.split(ok).length === 3, "the second answer on the same connection");
    const received = await client.closed("an idle keep-alive connection");
    assert.equal(received.split("HTTP/1.1 ").length, 3, "nothing is written when the idle connection closes");
  });
});

describe("the connection cap", () => {
  test("with max_connections 20, 40 idle sockets hold at most 20 connections, are reclaimed, and enqueues, deliveries and /healthz go on", async (t) => {
    const target = await startTarget(t);
    const s = await startBounded(t, { worker: true, targetUrl: target.url });
    const server = s.service.app.server;
    assert.equal(server.maxConnections, LISTEN.max_connections);
    let open = 0;
    let mostOpen = 0;
    let dropped = 0;
    server.on("connection", (socket: Socket) => {
      open += 1;
      mostOpen = Math.max(mostOpen, open);
      socket.once("close", () => (open -= 1));
    });
    server.on("drop", () => (dropped += 1));

    const idle = await Promise.all(Array.from({ length: 40 }, () => openClient(s)));
    // While the listener is full, the worker still delivers: `inject` needs no listener socket.
    const queued = await enqueue(s, buildReport(), { rid: "while-full" });
    const [delivered] = await target.waitForRequests(1);
    assert.equal(delivered?.headers["x-job-id"], queued.id);

    await Promise.all(idle.map((client) => client.closed("an idle socket")));
    assert.ok(mostOpen <= LISTEN.max_connections, `at most ${LISTEN.max_connections} open at once, saw ${mostOpen}`);
    assert.ok(dropped > 0, "connections past the cap are refused");

    // Once the idle sockets are reclaimed, the listener answers again.
    const health = await fetch(`${s.url}/healthz`);
    assert.equal(health.status, 200);
    const res = await fetch(`${s.url}/jobs`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${await s.assertion({ rid: "after-reclaim" })}`,
        "content-type": "application/json",
      },
      body: JSON.stringify(buildReport()),
    });
    assert.equal(res.status, 201, await res.clone().text());
    const { job } = (await res.json()) as { job: { id: string } };
    const requests = await target.waitForRequests(2);
    assert.equal(requests[1]?.headers["x-job-id"], job.id);
  });
});

describe("the connection cap's computation", () => {
  test("fd limit 1024, pool 10, concurrency 32 and two origins leave 885 connections: 1024 - 11 - 64 - 64", () => {
    const limit = connectionLimit({
      configured: 10_000,
      fdLimit: 1024,
      databasePoolSize: 10,
      deliveryConnectionsPerOrigin: 32,
      deliveryOrigins: 2,
    });
    assert.deepEqual(limit, {
      maxConnections: 885,
      configured: 10_000,
      fdLimit: 1024,
      reserved: { database: 11, deliveries: 64, margin: FD_MARGIN },
      lowered: true,
    });
  });

  test("a configured cap below what the descriptors allow stays as configured", () => {
    const limit = connectionLimit({
      configured: 500,
      fdLimit: 1024,
      databasePoolSize: 10,
      deliveryConnectionsPerOrigin: 32,
      deliveryOrigins: 2,
    });
    assert.equal(limit.maxConnections, 500);
    assert.equal(limit.lowered, false);
  });

  test("the deliverer's connections are reserved per origin", () => {
    const limit = connectionLimit({
      configured: 10_000,
      fdLimit: 1024,
      databasePoolSize: 10,
      deliveryConnectionsPerOrigin: 8,
      deliveryOrigins: 3,
    });
    assert.equal(limit.reserved.deliveries, 24);
    assert.equal(limit.maxConnections, 1024 - 11 - 24 - FD_MARGIN);
  });

  test("an unknown descriptor limit leaves the configured cap", () => {
    const limit = connectionLimit({
      configured: 10_000,
      fdLimit: null,
      databasePoolSize: 10,
      deliveryConnectionsPerOrigin: 32,
      deliveryOrigins: 1,
    });
    assert.equal(limit.maxConnections, 10_000);
    assert.equal(limit.lowered, false);
  });

  test("a descriptor limit below the reserve still leaves one connection", () => {
    const limit = connectionLimit({
      configured: 10_000,
      fdLimit: 100,
      databasePoolSize: 10,
      deliveryConnectionsPerOrigin: 32,
      deliveryOrigins: 1,
    });
    assert.equal(limit.maxConnections, 1);
    assert.equal(limit.lowered, true);
  });

  test("the settings count distinct delivery origins of target.base_url and operations.*.base_url, and 8 connections per origin at least", () => {
    const raw = rawTestConfig("/tmp/unused");
    raw["target"] = { base_url: "http://product:3000/api", audience: "product" };
    raw["operations"] = {
      a: { base_url: "http://product:3000/v2" },
      b: { base_url: "http://mailer:8080" },
      c: { max_attempts: 3 },
    };
    raw["worker"] = { concurrency: 2 };
    const settings = new PerOperationSettings(parseConfig({ raw, baseDir: "/tmp/unused", env: {} }));
    assert.deepEqual(settings.deliveryOrigins(), ["http://product:3000", "http://mailer:8080"]);
    assert.equal(settings.deliveryConnectionsPerOrigin, 8);
  });

  test("resolveConnectionLimit reads the config's listen, pool, worker and origins", () => {
    const raw = rawTestConfig("/tmp/unused");
    raw["listen"] = { max_connections: 50_000 };
    raw["database_pool_size"] = 20;
    raw["worker"] = { concurrency: 100 };
    raw["operations"] = { buildReport: { base_url: "http://reports:9000" } };
    const config = parseConfig({ raw, baseDir: "/tmp/unused", env: {} });
    const limit = resolveConnectionLimit(config, new PerOperationSettings(config), 4096);
    assert.deepEqual(limit.reserved, { database: 21, deliveries: 200, margin: FD_MARGIN });
    assert.equal(limit.maxConnections, 4096 - 21 - 200 - FD_MARGIN);
  });

  test("parseOpenFilesLimit reads the soft limit of /proc/<pid>/limits; unlimited or absent is null", () => {
    const limits = [
      "Limit                     Soft Limit           Hard Limit           Units     ",
      "Max processes             63432                63432                processes ",
      "Max open files            1024                 524288               files     ",
      "Max locked memory         8388608              8388608              bytes     ",
    ].join("\n");
    assert.equal(parseOpenFilesLimit(limits), 1024);
    assert.equal(parseOpenFilesLimit(limits.replace("1024   ", "unlimited")), null);
    assert.equal(
      parseOpenFilesLimit("Max processes             63432                63432                processes"),
      null,
    );
    assert.equal(readOpenFilesLimit("/no/such/proc/limits"), null);
  });

  test("Node sweeps for expired timeouts every tenth of the shorter one, between 10 ms and 1 s", () => {
    assert.equal(connectionsCheckingIntervalMs({ headers_timeout_ms: 10_000, request_timeout_ms: 30_000 }), 1000);
    assert.equal(connectionsCheckingIntervalMs({ headers_timeout_ms: 300, request_timeout_ms: 1000 }), 30);
    assert.equal(connectionsCheckingIntervalMs({ headers_timeout_ms: 20, request_timeout_ms: 20 }), 10);
    assert.equal(connectionsCheckingIntervalMs({ headers_timeout_ms: 60_000, request_timeout_ms: 60_000 }), 1000);
  });
});

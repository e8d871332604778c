/**
 * The HTTP server every opqueue listener is built on (the API's, and the ops listener's): see `createServer`.
 */
import type { Socket } from "node:net";
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyRequest } from "fastify";
import type { Config } from "../config.js";
import { ApiError } from "../errors.js";
import type { PerOperationSettings } from "../operations/settings.js";
import { connectionsCheckingIntervalMs, resolveConnectionLimit, type ConnectionLimit } from "./connection-limits.js";
import { errorHandler, sendError } from "./error-handler.js";
import { createValidatorCompiler, strictQueryStrings } from "./validation.js";

declare module "fastify" {
  interface FastifyInstance {
    /** The listener's connection cap and how it was reached; `serve` logs it. */
    connectionLimit: ConnectionLimit;
  }
}

/** Largest request body: refused with 413 before parsing. */
export const BODY_LIMIT_BYTES = 1024 * 1024;

/** The message of a request Node's HTTP parser refused. */
function clientErrorMessage(code: string): string {
  if (code === "HPE_HEADER_OVERFLOW") return "the request headers are larger than the server accepts (16 KiB)";
  if (code === "ERR_HTTP_REQUEST_TIMEOUT") return "the request was not received in full before the server's timeout";
  return `malformed HTTP request (${code})`;
}

/** How long a connection closed before its request's body was read goes on reading what the client still sends. */
const LINGER_MS = 2000;

/**
 * Closes `socket` after its answer the way a careful server does: it sends its end of the stream at once, then reads
 * and drops what the client is still sending until the client closes its end too, for `LINGER_MS` at most.
 *
 * Node's server closes such a connection outright once the answer is written. A socket closed with unread bytes in
 * its receive buffer answers them with a TCP reset, which can reach the client before it has read the answer and
 * makes it discard it: a reverse proxy still sending a large body then reports 502 instead of opqueue's 413 or 401
 * (about two requests in five, measured with nginx). Clients that close on the server's end of stream, as HTTP clients
 * do, end the lingering at once; one that trickles a body holds its connection `LINGER_MS` at most.
 */
function lingerOnClose(socket: Socket): void {
  // Node's server ends a `connection: close` response's socket with destroySoon(); this one ends it gently instead.
  socket.destroySoon = function lingeringClose(this: Socket) {
    this.end();
    if (this.readableEnded) {
      this.destroy();
      return;
    }
    const timer = setTimeout(() => this.destroy(), LINGER_MS);
    timer.unref();
    this.once("end", () => {
      clearTimeout(timer);
      this.destroy();
    });
    this.once("close", () => clearTimeout(timer));
    this.resume();
  };
}

/** The answer to a request for a route that does not exist. */
function notFound(request: FastifyRequest): ApiError {
  return new ApiError(404, "not_found", `no route ${request.method} ${request.url.split("?")[0]}`);
}

/**
 * A Fastify instance with what every opqueue listener shares: the connection bounds, the `{code, message}` answers to
 * malformed requests, unknown routes and errors, the 503 while closing, and validation (unknown query parameters
 * refused on every route added later). No routes, no `listen()`.
 */
export function createServer(options: {
  config: Config;
  settings: PerOperationSettings;
  /** A pino logger; none (silent) by default. */
  logger?: FastifyBaseLogger | undefined;
}): FastifyInstance {
  const { listen } = options.config;
  const app = Fastify({
    ...(options.logger ? { loggerInstance: options.logger } : { logger: false }),
    bodyLimit: BODY_LIMIT_BYTES,
    // Every connection is bounded (docs/api.md, "Connection bounds"). Fastify's own defaults bound none of it: no
    // request timeout at all, and idle keep-alive connections held for 72 s.
    requestTimeout: listen.request_timeout_ms,
    keepAliveTimeout: listen.keep_alive_timeout_ms,
    // The request timeout stops counting once the request is in; a client that then stops reading its responses
    // (pipelining requests behind them) would hold the connection for ever. A connection on which no byte moves
    // either way for as long as a whole request may take is closed.
    connectionTimeout: listen.request_timeout_ms,
    // Chain ids (request ids) and job ids arrive as path parameters; Fastify's default cap is 100 characters.
    routerOptions: { maxParamLength: 2048 },
    requestIdHeader: "x-request-id",
    return503OnClosing: false,
    // Malformed URLs never reach a route; answer them in the contract's shape.
    frameworkErrors: (error, _request, reply) => {
      void sendError(reply, new ApiError(400, "invalid_request", error.message));
    },
    // Nor do requests Node's HTTP parser refuses (a bad request line or header, headers over 16 KiB, a timeout):
    // Fastify's default answer is a `{error, statusCode}` body, and 431 or 408; answer 400 `{code, message}`.
    clientErrorHandler: (error, socket) => {
      if (error.code === "ECONNRESET" || socket.destroyed) return;
      // A request timing out behind a response already being written (a pipelined one) must not splice a second
      // response into the first: Node's own handler makes the same check.
      const inFlight = (socket as { _httpMessage?: { headersSent?: boolean } | null })._httpMessage;
      if (socket.writable && !inFlight?.headersSent) {
        const body = JSON.stringify({ code: "invalid_request", message: clientErrorMessage(error.code) });
        socket.write(
          "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\n" +
            `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
        );
      }
      socket.destroy(error);
    },
    http: {
      // Node would answer an HTTP/1.1 request without Host with an empty 400 of its own; the hook below answers it.
      requireHostHeader: false,
      // Node's default is 60 s. The request timeout is given here as well as above because Node checks the pair
      // when it creates the server, before Fastify sets its own.
      headersTimeout: listen.headers_timeout_ms,
      requestTimeout: listen.request_timeout_ms,
      // Node enforces both only when it sweeps its connections, every 30 s by default.
      connectionsCheckingInterval: connectionsCheckingIntervalMs(listen),
    },
  });
  const connectionLimit = resolveConnectionLimit(options.config, options.settings);
  app.server.maxConnections = connectionLimit.maxConnections;
  app.decorate("connectionLimit", connectionLimit);

  // While closing, requests still arriving on open keep-alive connections get the contract's 503 (Fastify's own
  // return503OnClosing answer has another body shape).
  let closing = false;
  app.addHook("preClose", async () => {
    closing = true;
  });
  app.addHook("onRequest", async (request) => {
    if (closing) throw new ApiError(503, "unavailable", "the service is shutting down", { "retry-after": "1" });
    if (request.raw.httpVersion === "1.1" && request.headers.host === undefined) {
      throw new ApiError(400, "invalid_request", "an HTTP/1.1 request must send a Host header");
    }
    // Fastify reads the body of a request for an unknown route before its not-found handler answers: refuse it
    // now, so a client trickling a declared megabyte to no route is answered (and let go, below) at once.
    if (request.is404) throw notFound(request);
  });
  // A response sent before the request's body was read in full (a 401 from an onRequest hook, a 404, a 413, a
  // 415) closes the connection. Otherwise Node reads and discards the rest of the body to reuse the connection,
  // and a client trickling it holds the connection, and a file descriptor, until the request timeout; which would
  // then write its 400 behind the answer already sent. (`inject`'s requests have no `complete` flag: nothing to do.)
  app.addHook("onSend", (request, reply, payload, done) => {
    if (request.raw.complete === false) {
      reply.header("connection", "close");
      lingerOnClose(request.raw.socket);
    }
    done(null, payload);
  });

  app.setValidatorCompiler(createValidatorCompiler());
  // Before any route is added: every route the OpenAPI document lists refuses unknown query parameters.
  app.addHook("onRoute", strictQueryStrings);
  // Responses are built by code that already fixes their shape (toWireJob drops the stored evidence); the response
  // schemas document them in /openapi.json. Serialising by schema would re-validate every union (authority,
  // result) per response for nothing, so plain JSON.stringify it is.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((request, reply) => sendError(reply, notFound(request)));
  return app;
}

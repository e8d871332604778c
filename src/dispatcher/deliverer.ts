/**
 * The deliverer: turns a claimed job into one HTTP exchange with its target operation (docs/delivery.md, "The delivery
 * request") and reports how it ended. It never throws for anything the target or the network does; every ending is an
 * `AttemptResult`.
 *
 * One undici Agent holds a keep-alive pool per origin. The timeout covers the whole exchange (connect, headers,
 * body). Redirects are not followed. A success's body is discarded as it arrives (kept like a failure's for an
 * operation that stores its results, docs/chains.md); a failure body is kept up to 8192
 * bytes, cut on a UTF-8 boundary, and the rest is read and thrown away (up to 128 KiB) so the socket can be reused.
 */
import type { IncomingHttpHeaders } from "node:http";
import { Agent, type Dispatcher } from "undici";
import { deliveryTokenHash } from "../auth/delivery-tokens.js";
import type { DeliverySigner } from "../auth/tokens.js";
import type { AttemptResult } from "../job/retry-policy.js";
import { pathParamText } from "../job/payload-rules.js";
import { wireAuthority } from "../job/wire.js";
import type { Operation, OperationRegistry } from "../operations/registry.js";
import type { PerOperationSettings } from "../operations/settings.js";
import type { JobRow } from "../job/job.js";
import { VERSION } from "../version.js";
import { deliveryTraceparent, type DeliverySpan } from "../telemetry/delivery-trace.js";

/** Most bytes of a failure body kept in `result.error_body`. */
export const MAX_ERROR_BODY_BYTES = 8192;

/**
 * How an attempt ended: an exchange happened (or failed); or opqueue refused to send it (`undeliverable`: the target
 * vanished from the OpenAPI document, or the URL would reach another route), which ends the job; or opqueue's own
 * process could not open a connection (`local-failure`: out of file descriptors or memory), which is not the target's
 * answer and uses up no attempt.
 */
export type DeliveryResult =
  | AttemptResult
  | { kind: "undeliverable"; error: string }
  | { kind: "local-failure"; error: string }
  /**
   * The target answered 202 with `x-job-async: 1`: it took the attempt asynchronously (docs/delivery.md, "Long jobs"),
   * and will call back with the delivery token whose digest is `tokenHash`.
   */
  | { kind: "async"; tokenHash: string };

/** How one exchange ended, before `deliver` adds what it alone knows (the token of an asynchronous attempt). */
type ExchangeResult = Exclude<DeliveryResult, { kind: "async" }> | { kind: "async" };

/**
 * The answer that takes an attempt asynchronously: exactly 202 with `x-job-async: 1`. Any other 2xx, or a 202 without
 * the header, is a success, as the contract reads it.
 */
function takesAsync(statusCode: number, jobAsync: string | undefined): boolean {
  return statusCode === 202 && jobAsync === "1";
}

/** The HTTP request a job turns into. */
export interface DeliveryRequest {
  origin: string;
  path: string;
  method: string;
  headers: Record<string, string>;
  body: string | undefined;
}

/** Appends `query` to a path: scalars as strings, arrays as repeated keys, null omitted, objects as JSON. */
export function buildQueryString(query: Record<string, unknown> | undefined): string {
  if (!query) return "";
  const params = new URLSearchParams();
  const add = (name: string, value: unknown) => {
    if (value === null || value === undefined) return;
    params.append(name, typeof value === "object" ? JSON.stringify(value) : String(value));
  };
  for (const [name, value] of Object.entries(query)) {
    if (Array.isArray(value)) value.forEach((item) => add(name, item));
    else add(name, value);
  }
  const text = params.toString();
  return text === "" ? "" : `?${text}`;
}

/** The target path with each `{name}` replaced by its encoded path parameter. */
export function buildPath(template: string, pathParams: Record<string, unknown> | undefined): string {
  return template.replace(/\{([^}]+)\}/g, (_match, name: string) =>
    encodeURIComponent(pathParamText(pathParams, name)),
  );
}

/**
 * Why `path`, built from `template`, must not be sent, or undefined when it keeps the template's shape. A URL parser
 * or proxy on the way (`new URL`, nginx, Envoy) resolves dot segments, so a parameter `..` in `/users/{userId}/welcome`
 * would reach `/welcome`, another operation; an empty parameter makes `//`. Enqueue refuses such values; this guards
 * the jobs stored before it did.
 */
export function pathShapeProblem(template: string, path: string): string | undefined {
  const templateSegments = template.split("/");
  const segments = path.split("/");
  const normalised = new URL(path, "http://opqueue.invalid").pathname.split("/");
  if (normalised.length !== segments.length) return `the path ${path} normalises to another route`;
  const emptied = segments.findIndex((segment, index) => segment === "" && templateSegments[index] !== "");
  if (emptied >= 0) return `the path ${path} has an empty segment where ${template} has a parameter`;
  return undefined;
}

/**
 * Cuts a buffer to at most `maxBytes` without splitting a UTF-8 sequence, and decodes it. U+0000 becomes U+FFFD, as
 * invalid UTF-8 does: PostgreSQL's text cannot hold it, and one such error body would make every write of its
 * outcome fail. Both engines store the same text.
 */
export function cutUtf8(buffer: Buffer, maxBytes: number): string {
  let end = Math.min(buffer.length, maxBytes);
  // A continuation byte (10xxxxxx) at the cut means the character straddles it: cut before its lead byte.
  if (end < buffer.length) while (end > 0 && ((buffer[end] ?? 0) & 0xc0) === 0x80) end--;
  let text = buffer.subarray(0, end).toString("utf8").replaceAll("\u0000", "\ufffd");
  // Invalid input and U+0000 become U+FFFD (3 bytes), which can grow the text past the cap; trim it back.
  while (Buffer.byteLength(text, "utf8") > maxBytes) text = text.slice(0, -1);
  return text;
}

/**
 * Errors of this process, not of the target or the network: no file descriptor for a socket, no memory, no buffer,
 * no local port. Seen during an attack that held 1,100 sockets open: jobs went dead after three EMFILE attempts
 * without ever reaching their target.
 */
const LOCAL_ERRORS = new Set(["EMFILE", "ENFILE", "ENOMEM", "ENOBUFS", "EADDRNOTAVAIL"]);

function isLocalFailure(error: unknown): boolean {
  const err = error as { code?: string; cause?: { code?: string } };
  return LOCAL_ERRORS.has(err.code ?? "") || LOCAL_ERRORS.has(err.cause?.code ?? "");
}

function describeFailure(error: unknown, timeoutMs: number, timedOut: boolean): string {
  if (timedOut) return `timed out after ${timeoutMs} ms`;
  const err = error as { code?: string; message?: string; cause?: { code?: string; message?: string } };
  const code = err.code ?? err.cause?.code;
  const message = err.cause?.message ?? err.message ?? String(error);
  return code ? `${code}: ${message}` : message;
}

/**
 * Bytes of a failure body read past the cap, and thrown away, so the connection can be reused; a longer body ends
 * the exchange instead (a target streaming an endless error must not hold a connection).
 */
const DISCARDED_BYTES_MAX = 128 * 1024;

/** What the attempt of a delivery an administrator's cancel aborted says (the job is already cancelled). */
export const ABORTED_BY_CANCEL = "aborted: the job was cancelled by an administrator";

/**
 * One exchange, as undici's low-level handler: no response stream, no AbortSignal, one timer. A success's body is
 * discarded as it arrives, unless its operation stores results. A failure's (or a kept success's) is kept up to `MAX_ERROR_BODY_BYTES`: the attempt is over once the cap is
 * passed, and the rest of the body is read and thrown away in the background (up to `DISCARDED_BYTES_MAX`, and
 * within the timeout) so the connection goes back to the pool.
 */
class Exchange implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | null = null;
  private readonly timer: NodeJS.Timeout;
  private timedOut = false;
  private aborted = false;
  private settled = false;
  private response: { statusCode: number; jobRetry: string | undefined; retryAfter: string | undefined } | null = null;
  /** A kept success body's `content-type`: it says whether the body is stored as JSON (job/stored-result.ts). */
  private contentType: string | undefined;
  /** The answer took the attempt asynchronously (see `takesAsync`). */
  private async = false;
  /** The body so far: a failure's, or a success's when it is kept; null when it is discarded. */
  private chunks: Buffer[] | null = null;
  private size = 0;

  constructor(
    private readonly timeoutMs: number,
    private readonly resolve: (result: ExchangeResult) => void,
    /** Keep a success's body too (the operation stores its results), up to the same cap. */
    private readonly keepSuccessBody = false,
  ) {
    this.timer = setTimeout(() => {
      this.timedOut = true;
      // A response whose body was still arriving when time ran out is a timeout, not a response.
      this.settle({ kind: "no-response", error: describeFailure(undefined, timeoutMs, true) });
      this.controller?.abort(new Error(`timed out after ${timeoutMs} ms`));
    }, timeoutMs);
  }

  private settle(result: ExchangeResult): void {
    if (this.settled) return;
    this.settled = true;
    this.resolve(result);
  }

  private bodyResult(): ExchangeResult {
    const response = this.response;
    if (!response) return { kind: "no-response", error: "the exchange ended without a response" };
    if (this.async) return { kind: "async" };
    const body = this.chunks === null ? null : cutUtf8(Buffer.concat(this.chunks), MAX_ERROR_BODY_BYTES);
    // A kept success body is stored in the job's result, parsed when its type says JSON and it arrived whole.
    const stored =
      body !== null && response.statusCode < 300
        ? { contentType: this.contentType, truncated: this.size > MAX_ERROR_BODY_BYTES }
        : {};
    return { kind: "response", ...response, body, ...stored };
  }

  /** Ends the exchange now, whatever the target was doing: its job was cancelled. */
  abort(): void {
    clearTimeout(this.timer);
    this.aborted = true;
    this.settle({ kind: "no-response", error: ABORTED_BY_CANCEL });
    this.controller?.abort(new Error(ABORTED_BY_CANCEL));
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.timedOut) controller.abort(new Error(`timed out after ${this.timeoutMs} ms`));
    else if (this.aborted) controller.abort(new Error(ABORTED_BY_CANCEL));
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    if (statusCode < 200) return; // 1xx: the real response follows
    const header = (name: string) => {
      const value = headers[name];
      return Array.isArray(value) ? value[0] : value;
    };
    this.response = {
      statusCode,
      jobRetry: header("x-job-retry")?.trim().toLowerCase(),
      retryAfter: header("retry-after"),
    };
    this.contentType = header("content-type");
    this.async = takesAsync(statusCode, header("x-job-async")?.trim());
    if (statusCode >= 300 || (this.keepSuccessBody && !this.async)) this.chunks = [];
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.chunks === null) return;
    this.size += chunk.length;
    if (this.settled) {
      if (this.size > MAX_ERROR_BODY_BYTES + DISCARDED_BYTES_MAX)
        controller.abort(new Error("failure body too long to discard"));
      return;
    }
    this.chunks.push(chunk);
    if (this.size > MAX_ERROR_BODY_BYTES) this.settle(this.bodyResult());
  }

  onResponseEnd(): void {
    clearTimeout(this.timer);
    this.settle(this.bodyResult());
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    clearTimeout(this.timer);
    const description = describeFailure(error, this.timeoutMs, this.timedOut);
    if (this.response === null && !this.timedOut && isLocalFailure(error)) {
      this.settle({ kind: "local-failure", error: description });
      return;
    }
    this.settle({ kind: "no-response", error: description });
  }
}

/** Delivers jobs over HTTP. */
export class Deliverer {
  private readonly agent: Dispatcher;
  private readonly settings: PerOperationSettings;
  private readonly registry: OperationRegistry;
  private readonly signer: DeliverySigner;
  /** The exchanges in progress, by job id, for `abort`. */
  private readonly exchanges = new Map<string, Exchange>();

  constructor(options: {
    settings: PerOperationSettings;
    registry: OperationRegistry;
    signer: DeliverySigner;
    /** The HTTP client; a keep-alive undici Agent by default (tests pass one that fails as they need). */
    agent?: Dispatcher;
  }) {
    this.settings = options.settings;
    this.registry = options.registry;
    this.signer = options.signer;
    this.agent =
      options.agent ??
      new Agent({
        connections: options.settings.deliveryConnectionsPerOrigin,
        keepAliveTimeout: 10_000,
        // The whole-exchange timeout below is the one that counts; undici's own per-phase timers stay out of its way.
        headersTimeout: 0,
        bodyTimeout: 0,
      });
  }

  /**
   * The request a job turns into, with a freshly signed delivery token, and the `traceparent` of `span` (or, with no
   * tracer, one made for this attempt) when the job has a trace context (docs/tracing.md).
   */
  async buildRequest(job: JobRow, operation: Operation, span?: DeliverySpan): Promise<DeliveryRequest> {
    const { target, timeoutMs } = this.settings.of(operation.operationId);
    const token = await this.signer.sign({
      sub: job.userId,
      op: job.operationId,
      job: job.id,
      att: job.attempt,
      clm: job.claimCount,
      rid: job.originalRequestId,
      authority: wireAuthority(job.authority),
      timeoutMs,
    });
    const hasBody = job.request.body !== undefined;
    const headers: Record<string, string> = {
      authorization: `Bearer ${token}`,
      "idempotency-key": job.id,
      "x-request-id": job.originalRequestId,
      "x-job-id": job.id,
      "x-job-attempt": String(job.attempt),
      "user-agent": `opqueue/${VERSION}`,
    };
    if (hasBody) headers["content-type"] = "application/json";
    // An extension of the contract's headers (docs/delivery.md): only for jobs that have a trace context.
    const traceparent = span === undefined ? deliveryTraceparent(job) : span.traceparent;
    if (traceparent !== undefined) headers["traceparent"] = traceparent;
    return {
      origin: target.origin,
      path: target.basePath + buildPath(operation.path, job.request.path_params) + buildQueryString(job.request.query),
      method: operation.method,
      headers,
      body: hasBody ? JSON.stringify(job.request.body) : undefined,
    };
  }

  /**
   * Delivers one attempt of a claimed job. Never throws. `span`, given while OTLP export is on, names the attempt's
   * span in its `traceparent` and is told the request's method and URL; its caller ends it.
   */
  async deliver(job: JobRow, span?: DeliverySpan): Promise<DeliveryResult> {
    const operation = this.registry.get(job.operationId);
    if (!operation) {
      return { kind: "undeliverable", error: `operation "${job.operationId}" is no longer in the OpenAPI document` };
    }
    let path: string;
    try {
      path = buildPath(operation.path, job.request.path_params);
    } catch (error) {
      // A job stored before enqueue bounded its callbacks' nesting may hold a path parameter too deep to write out.
      return {
        kind: "undeliverable",
        error: `not sent: its path parameters cannot be written into ${operation.path}: ${String(error)}`,
      };
    }
    const problem = pathShapeProblem(operation.path, path);
    if (problem !== undefined) return { kind: "undeliverable", error: `not sent: ${problem}` };
    const { timeoutMs, storeResult } = this.settings.of(job.operationId);
    let request: DeliveryRequest;
    try {
      request = await this.buildRequest(job, operation, span);
    } catch (error) {
      return { kind: "no-response", error: describeFailure(error, timeoutMs, false) };
    }
    span?.sending(request.method, request.origin + request.path);
    return new Promise<DeliveryResult>((resolve) => {
      const exchange = new Exchange(
        timeoutMs,
        (result) => {
          if (this.exchanges.get(job.id) === exchange) this.exchanges.delete(job.id);
          if (result.kind !== "async") return resolve(result);
          // The attempt is bound to the token it was sent with: the target calls back with it, and with no other.
          const token = request.headers["authorization"]?.slice("Bearer ".length) ?? "";
          resolve({ kind: "async", tokenHash: deliveryTokenHash(token) });
        },
        storeResult,
      );
      this.exchanges.set(job.id, exchange);
      this.agent.dispatch(
        {
          origin: request.origin,
          path: request.path,
          method: request.method as Dispatcher.HttpMethod,
          headers: request.headers,
          body: request.body ?? null,
        },
        exchange,
      );
    });
  }

  /**
   * Aborts the exchange of job `jobId` if this node has one in progress (an administrator cancelled the running job);
   * its attempt ends with `ABORTED_BY_CANCEL`, whose outcome finds the job no longer running. Answers whether it had.
   */
  abort(jobId: string): boolean {
    const exchange = this.exchanges.get(jobId);
    if (!exchange) return false;
    this.exchanges.delete(jobId);
    exchange.abort();
    return true;
  }

  /** Closes every pooled connection, aborting exchanges still in progress (they were already given up). */
  async close(): Promise<void> {
    await this.agent.destroy();
  }
}

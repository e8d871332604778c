/**
 * What bounds the memory of `POST /jobs/batch` (docs/api.md, "Batch enqueue"): a budget of body bytes per node, taken
 * before a batch's body is read and given back once the batch is answered; and a body of declared length read into one
 * buffer as it arrives, which spares a copy of it (Fastify keeps the chunks and concatenates them at the end).
 *
 * A batch holds a few times its body's size while it is read, parsed, checked and stored (the body, its text, the parsed
 * items, the inserts sent to the database and the rows it returns), and about 1 KiB per item whatever the item's size:
 * measured with 1,000 items of 16 KiB (a 16 MiB body), 85 MiB of peak RSS on SQLite and 64 MiB on PostgreSQL; with 1,000
 * items of 10 bytes (80 KB), about 1 MiB. So each batch counts its declared length plus `BATCH_ITEMS_BYTES` against
 * `limits.batch_bytes_in_flight`, and the batches a node reads and enqueues at once hold about 5 times that budget at
 * most. A batch that would pass it is refused at once with 503 `unavailable` and `Retry-After: 1`, its body unread,
 * rather than queued: a queued batch would hold its connection, and its client's request timeout, for nothing it sees.
 */
import { Readable } from "node:stream";
import type { FastifyReply, FastifyRequest, RequestPayload } from "fastify";
import { BATCH_ITEMS_BYTES } from "../config.js";
import { ApiError } from "../errors.js";

/** Seconds a batch refused for want of budget is told to wait. */
const BUSY_RETRY_AFTER_S = 1;

/** A count of bytes in use, against a limit. */
export class ByteBudget {
  private inUse = 0;

  constructor(readonly limit: number) {}

  /** Bytes taken and not yet given back. */
  get used(): number {
    return this.inUse;
  }

  /** Takes `bytes` if they fit beside those in use: the function that gives them back (once), else undefined. */
  take(bytes: number): (() => void) | undefined {
    if (this.inUse + bytes > this.limit) return undefined;
    this.inUse += bytes;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.inUse -= bytes;
    };
  }
}

/** The bytes a request's `content-length` declares; undefined without one (a chunked body). */
function declaredLength(request: FastifyRequest): number | undefined {
  const header = request.headers["content-length"];
  if (header === undefined || !/^\d{1,16}$/.test(header)) return undefined;
  return Number(header);
}

/** One batch's hold on the budget. */
interface Hold {
  release: () => void;
  /** Set when the handler starts: from then on, its end gives the bytes back, whatever the connection does. */
  processing: boolean;
}

/**
 * The hooks of the batch route that keep it within `limitBytes` at once. Each batch takes its declared length (the
 * largest body, `bodyLimit`, when it declares none) plus `BATCH_ITEMS_BYTES` in `preParsing`, once its assertion checked
 * out; they are given back when the handler has answered (`done` after `processing`), when the request fails before the
 * handler ran (`done` from the route's onError: a body too large, not JSON, not a batch), or when the connection closes
 * while the body is still being read.
 */
export function batchBudget(options: { limitBytes: number; bodyLimit: number }) {
  const budget = new ByteBudget(options.limitBytes);
  const holds = new WeakMap<FastifyRequest, Hold>();
  return {
    async preParsing(request: FastifyRequest, reply: FastifyReply, payload: RequestPayload): Promise<RequestPayload> {
      const declared = declaredLength(request);
      // Too large to be read at all: refused unread, whatever the budget (the body parser would say 1 MiB).
      if (declared !== undefined && declared > options.bodyLimit) {
        throw new ApiError(
          413,
          "body_too_large",
          `the batch body is larger than limits.batch_body_bytes (${options.bodyLimit} bytes)`,
        );
      }
      const release = budget.take((declared ?? options.bodyLimit) + BATCH_ITEMS_BYTES);
      if (!release) {
        throw new ApiError(
          503,
          "unavailable",
          `this node is enqueueing as many batch bytes as it takes at once (limits.batch_bytes_in_flight, ${options.limitBytes}); ` +
            "try again shortly",
          { "retry-after": String(BUSY_RETRY_AFTER_S) },
        );
      }
      const hold: Hold = { release, processing: false };
      holds.set(request, hold);
      // A connection gone before the handler started takes its body with it: nothing will be enqueued.
      reply.raw.once("close", () => {
        if (!hold.processing) release();
      });
      // A chunked body is gathered by Fastify, within `bodyLimit`.
      return declared === undefined ? payload : readWhole(payload, declared);
    },
    /** The handler starts enqueueing the batch. */
    processing(request: FastifyRequest): void {
      const hold = holds.get(request);
      if (hold) hold.processing = true;
    },
    /** The batch was answered, or refused before its handler ran: its bytes are given back. */
    done(request: FastifyRequest): void {
      holds.get(request)?.release();
    },
  };
}

/**
 * Reads a body of `length` declared bytes into one buffer as it arrives, and answers a stream that gives that buffer as
 * its one chunk: the JSON parser then decodes it as it is (Fastify's reader copies only to join several). A body
 * that ends short is given as far as it came, and Fastify's reader refuses it (400, its length is not the declared
 * one); a connection that fails is given as the stream's error (400).
 */
function readWhole(payload: RequestPayload, length: number): Promise<Readable> {
  return new Promise((resolve) => {
    const whole = Buffer.allocUnsafe(length);
    let received = 0;
    let settled = false;
    const settle = (error?: Error) => {
      if (settled) return;
      settled = true;
      payload.removeListener("data", onData);
      payload.removeListener("end", onEnd);
      payload.removeListener("error", onError);
      payload.removeListener("close", onClose);
      if (error) {
        // Failed once read, when Fastify's reader listens: a stream failing before anyone listens would throw.
        resolve(
          new Readable({
            read() {
              this.destroy(error);
            },
          }),
        );
        return;
      }
      const body = new Readable({ read() {} });
      body.push(received === length ? whole : whole.subarray(0, received));
      body.push(null);
      resolve(body);
    };
    // Node's HTTP parser never gives more than the declared length; were it to, the rest would be dropped.
    const onData = (chunk: Buffer | string) => {
      const bytes = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
      const room = Math.max(0, length - received);
      bytes.copy(whole, received, 0, Math.min(room, bytes.length));
      received = Math.min(length, received + bytes.length);
    };
    const onEnd = () => settle();
    const onError = (error: Error) => settle(error);
    const onClose = () => settle(new Error("the connection closed before the body was read"));
    payload.on("data", onData);
    payload.once("end", onEnd);
    payload.once("error", onError);
    payload.once("close", onClose);
  });
}

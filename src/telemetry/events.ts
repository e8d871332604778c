/**
 * Typed events from the core. The core emits; metrics, logs and the OTLP tracer subscribe. Emitting with no listener
 * costs a map lookup, so the hot paths may emit freely; an event whose payload is worth building only for a listener
 * (the tracer's) is emitted behind `observes`, so that a node without one allocates nothing for it.
 */
import { EventEmitter } from "node:events";

/** Every event opqueue emits, with its payload. */
export interface OpqueueEvents {
  /**
   * An enqueue (`POST /jobs`, an item of `POST /jobs/batch`, a cron tick) was answered with a job: created, created
   * already cancelled (chain), deduplicated, or the job an idempotency key already answered with (replayed).
   */
  "job:enqueued": {
    operationId: string;
    outcome: "created" | "deduplicated" | "cancelled-by-chain" | "replayed";
    /** When the job becomes claimable. */
    runAt: number;
  };
  /**
   * A `POST /jobs` or `POST /jobs/batch` request was answered, accepted or refused (emitted behind `observes`: only the
   * OTLP tracer reads it, as the enqueue span).
   */
  "enqueue:answered": {
    route: "/jobs" | "/jobs/batch";
    /** The request's `traceparent` header as received; whoever reads it validates it. */
    traceparent: string | string[] | undefined;
    /** When the request arrived, in milliseconds since the epoch (`wallClockMs`). */
    startTime: number;
    /** When it was answered, likewise. */
    endTime: number;
    statusCode: number;
    /** The error code of a request refused whole. */
    code: string | undefined;
    /** The jobs it answered with, in order (a batch's refused items aside). */
    jobs: Array<{
      jobId: string;
      operationId: string;
      outcome: "created" | "deduplicated" | "cancelled-by-chain" | "replayed";
    }>;
    /** A batch's items refused on their own. */
    refused: number;
  };
  /** A `POST /jobs` was refused with an error code. */
  "job:enqueue-refused": { code: string };
  /** A job became claimable by other means than enqueue (an admin retry). */
  "job:retried": { operationId: string; runAt: number };
  /** A job claimed `waitMs` after its run time (what gates and a busy queue kept it waiting). */
  "job:claimed": { operationId: string; waitMs: number };
  /**
   * A claim came back from the database, with `jobs` of the `limit` it asked for, or failed (emitted behind `observes`:
   * only the OTLP tracer reads it, as the claim span).
   */
  "claim:finished": {
    /** When the claim was sent and when it came back, in milliseconds since the epoch (`wallClockMs`). */
    startTime: number;
    endTime: number;
    limit: number;
    jobs: number;
    /** Why it failed; undefined when it did not. */
    error: string | undefined;
  };
  /** A delivery attempt ended and its outcome was written (one someone else had decided first is not reported). */
  "delivery:finished": {
    jobId: string;
    attempt: number;
    operationId: string;
    outcome: "succeeded" | "retrying" | "dead";
    terminalReason: string | null;
    statusCode: number | undefined;
    durationMs: number;
    /** For a retry: how long until it is due. */
    retryInMs: number | undefined;
    /** The start of the failure's `error_body` (at most 200 characters); null for a success. */
    error: string | null;
  };
  /**
   * The target took an attempt asynchronously (answered 202 with `x-job-async: 1`) and that was recorded: the exchange
   * is over and its slot free; the attempt runs on, renewed by the target's heartbeats (docs/delivery.md, "Long jobs").
   */
  "delivery:async": { jobId: string; attempt: number; operationId: string; durationMs: number };
  /**
   * An attempt the target took asynchronously was ended by the target's complete or fail, or, called past its
   * operation's `max_async_ms`, as timed out (`via: "max_async_ms"`); and that was written.
   */
  "async:finished": {
    jobId: string;
    attempt: number;
    operationId: string;
    via: "complete" | "fail" | "max_async_ms";
    /** The status the job was left in (`cancelled` for a failure in a cancelled chain). */
    outcome: "succeeded" | "retrying" | "dead" | "cancelled";
    terminalReason: string | null;
    statusCode: number | undefined;
    /** For a retry: how long until it is due. */
    retryInMs: number | undefined;
    /** The start of the failure's `error_body` (at most 200 characters); null for a success. */
    error: string | null;
  };
  /** A running job whose lease expired was recovered. */
  "lease:rescued": { jobId: string; attempt: number; operationId: string; outcome: "retrying" | "dead" };
  /** A waiting job passed its expiry unstarted and ended cancelled/expired. */
  "job:expired": { jobId: string; operationId: string };
  /** A callback job was enqueued (docs/chains.md, "Callbacks"): of job `of` (or chain, for on_settled). */
  "callback:enqueued": {
    kind: "on_complete" | "on_dead" | "on_settled";
    of: string;
    jobId: string;
    operationId: string;
    outcome: "created" | "cancelled-by-chain";
  };
  /** A callback was due but refused (the chain at its spawn cap): no callback job. */
  "callback:refused": { kind: "on_complete" | "on_dead" | "on_settled"; of: string; reason: string };
  /** A chain settled: no job of it pending, running or retrying; `seconds` since its first job was enqueued. */
  "chain:settled": { originalRequestId: string; seconds: number };
  /** A cron tick enqueued its job (or found it enqueued already). */
  "cron:tick": { name: string; tickAt: number; outcome: string };
  /** This node's clock was compared with the database's: how far the database's is ahead (ms; negative: behind). */
  "clock:measured": { offsetMs: number };
}

/**
 * A typed event bus. A subscriber that throws is reported to `onListenerError` and never reaches the emitter: events
 * report actions already taken (a batch committed, an outcome written), so an observer's bug must not turn them into
 * a failure answered to a caller, nor keep the other subscribers from hearing of them.
 */
export class Telemetry {
  // Many subscribers are fine: one per request waiting for a job (GET /jobs/{id}?wait_ms), each gone when it answers.
  private readonly emitter = new EventEmitter().setMaxListeners(0);
  private readonly onListenerError: (event: keyof OpqueueEvents, error: unknown) => void;

  constructor(options: { onListenerError?: (event: keyof OpqueueEvents, error: unknown) => void } = {}) {
    this.onListenerError =
      options.onListenerError ??
      ((event, error) => {
        process.emitWarning(`a telemetry subscriber to "${event}" threw: ${String(error)}`);
      });
  }

  /** Subscribes to one event; returns the function that unsubscribes. */
  on<E extends keyof OpqueueEvents>(event: E, listener: (payload: OpqueueEvents[E]) => void): () => void {
    const guarded = (payload: OpqueueEvents[E]) => {
      try {
        listener(payload);
      } catch (error) {
        this.onListenerError(event, error);
      }
    };
    this.emitter.on(event, guarded);
    return () => this.emitter.off(event, guarded);
  }

  /** Whether anything subscribes to `event`: a hot path builds a payload only a subscriber reads behind this. */
  observes<E extends keyof OpqueueEvents>(event: E): boolean {
    return this.emitter.listenerCount(event) > 0;
  }

  /** Emits one event to its subscribers; never throws. */
  emit<E extends keyof OpqueueEvents>(event: E, payload: OpqueueEvents[E]): void {
    this.emitter.emit(event, payload);
  }
}

/**
 * Now, in milliseconds since the epoch with a fraction: the times events give spans. Read from the monotonic clock
 * (as OpenTelemetry's SDK reads its own), so a span's duration is right even while the system clock is stepped.
 */
export function wallClockMs(): number {
  return performance.timeOrigin + performance.now();
}

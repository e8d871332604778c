/**
 * Typed events from the core. The core emits; metrics and logs subscribe. Emitting with no listener costs a
 * map lookup, so the hot paths may emit freely.
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
  /** A `POST /jobs` was refused with an error code. */
  "job:enqueue-refused": { code: string };
  /** A job became claimable by other means than enqueue (an admin retry). */
  "job:retried": { operationId: string; runAt: number };
  /** A job claimed `waitMs` after its run time (what gates and a busy queue kept it waiting). */
  "job:claimed": { operationId: string; waitMs: number };
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
  /** An attempt the target took asynchronously was ended by the target's complete or fail, and that was written. */
  "async:finished": {
    jobId: string;
    attempt: number;
    operationId: string;
    via: "complete" | "fail";
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
  /** A cron tick enqueued its job (or found it enqueued already). */
  "cron:tick": { name: string; tickAt: number; outcome: string };
  /** This node's clock was compared with the database's: how far the database's is ahead (ms; negative: behind). */
  "clock:measured": { offsetMs: number };
}

/** A typed event bus. */
export class Telemetry {
  private readonly emitter = new EventEmitter();

  /** Subscribes to one event. */
  on<E extends keyof OpqueueEvents>(event: E, listener: (payload: OpqueueEvents[E]) => void): void {
    this.emitter.on(event, listener);
  }

  /** Emits one event to its subscribers. */
  emit<E extends keyof OpqueueEvents>(event: E, payload: OpqueueEvents[E]): void {
    this.emitter.emit(event, payload);
  }
}

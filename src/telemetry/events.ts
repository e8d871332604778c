/**
 * Typed events from the core. The core emits; metrics and logs subscribe. Emitting with no listener costs a
 * map lookup, so the hot paths may emit freely.
 */
import { EventEmitter } from "node:events";

/** Every event opqueue emits, with its payload. */
export interface OpqueueEvents {
  /** A `POST /jobs` was answered with a job: created, created already cancelled (chain), or deduplicated. */
  "job:enqueued": { operationId: string; outcome: "created" | "deduplicated" | "cancelled-by-chain" };
  /** A `POST /jobs` was refused with an error code. */
  "job:enqueue-refused": { code: string };
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

/**
 * The completer: collects attempt outcomes for a moment and writes them in one store call. Each write is
 * conditional on the job still being `running` with the same attempt, so a late or repeated outcome changes
 * nothing. While the database is unavailable, outcomes wait and are written when it returns; none is dropped.
 */
import type { Logger } from "pino";
import type { JobOutcome, Store } from "../store/store.js";

/** Most outcomes in one write. */
const MAX_BATCH = 512;
/** Wait before writing again after a failed write. */
const RETRY_MS = 500;

/** Batched, conditional outcome writes. */
export class Completer {
  private pending: JobOutcome[] = [];
  private flushing = false;
  private scheduled = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private idleWaiters: Array<() => void> = [];

  constructor(
    private readonly options: {
      store: Store;
      logger: Logger;
      /** Called after outcomes were written (slots and concurrency keys are free again). */
      onWritten: () => void;
    },
  ) {}

  /** Outcomes waiting to be written. */
  get size(): number {
    return this.pending.length;
  }

  /** Queues one outcome for the next write. */
  add(outcome: JobOutcome): void {
    this.pending.push(outcome);
    this.schedule();
  }

  private schedule(): void {
    if (this.scheduled || this.flushing || this.retryTimer) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    if (this.flushing) return;
    this.flushing = true;
    try {
      while (this.pending.length > 0) {
        const batch = this.pending.slice(0, MAX_BATCH);
        try {
          await this.options.store.jobCompleteMany({ outcomes: batch });
        } catch (error) {
          this.options.logger.warn({ err: error, waiting: this.pending.length }, "outcome write failed; retrying");
          this.retryTimer = setTimeout(() => {
            this.retryTimer = undefined;
            this.schedule();
          }, RETRY_MS);
          return;
        }
        this.pending.splice(0, batch.length);
        this.options.onWritten();
      }
    } finally {
      this.flushing = false;
      if (this.pending.length === 0) this.idleWaiters.splice(0).forEach((resolve) => resolve());
    }
  }

  /** Resolves when every queued outcome is written, or after `timeoutMs` (whatever is left stays queued). */
  drain(timeoutMs: number): Promise<void> {
    if (this.pending.length === 0 && !this.flushing) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      this.idleWaiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
      if (this.retryTimer) {
        clearTimeout(this.retryTimer);
        this.retryTimer = undefined;
      }
      this.schedule();
    });
  }

  /** Stops retrying; outcomes still queued are abandoned (their leases expire and the rescuer retries them). */
  stop(): number {
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    const abandoned = this.pending.length;
    this.pending = [];
    return abandoned;
  }
}

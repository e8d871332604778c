/**
 * The completer: collects attempt outcomes for a moment and writes them in one store call. Each write is
 * conditional on the job still being `running` with the same attempt of the same claim, so a late or repeated
 * outcome changes nothing. While the database is unavailable, outcomes wait and are written when it returns; only
 * one the database refuses outright (it cannot be written, ever) is dropped, and logged.
 */
import type { Logger } from "pino";
import { StoreUnavailableError, type JobOutcome, type Store } from "../store/store.js";

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
          if (!(error instanceof StoreUnavailableError) && (await this.writeOneByOne(batch))) {
            this.pending.splice(0, batch.length);
            this.options.onWritten();
            continue;
          }
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

  /**
   * After a batch failed with the database up: writes its outcomes one at a time, so that one the database refuses
   * (a bug, or data it cannot store) does not hold back the rest for ever. One refused alone is dropped and logged:
   * its lease expires and the rescuer settles the job. False, dropping nothing, if the database becomes unavailable
   * meanwhile: the batch is retried whole (a repeated write of an outcome already written changes nothing).
   */
  private async writeOneByOne(batch: JobOutcome[]): Promise<boolean> {
    for (const outcome of batch) {
      try {
        await this.options.store.jobCompleteMany({ outcomes: [outcome] });
      } catch (error) {
        if (error instanceof StoreUnavailableError) return false;
        this.options.logger.error(
          { err: error, jobId: outcome.id, attempt: outcome.attempt },
          "the database refused this outcome; dropped: the job's lease will expire and the rescuer will settle it",
        );
      }
    }
    return true;
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

/**
 * The completer: collects attempt outcomes for a moment and writes them in one store call. Each write is
 * conditional on the job still being `running` with the same attempt of the same claim, so a late or repeated
 * outcome changes nothing. While the database is unavailable, outcomes wait and are written when it returns; only
 * one the database refuses outright (it cannot be written, ever) is dropped, and logged.
 *
 * After each write it reports the outcomes that were written (not those someone else had already decided: a rescue,
 * a cancel), so what telemetry counts is what the database holds.
 */
import type { Logger } from "pino";
import type { JobOutcome } from "../job/job.js";
import { StoreUnavailableError, type ClaimStore } from "../store/store.js";

/** An outcome waiting to be written, with what its report needs. */
export interface PendingOutcome<Report = unknown> {
  outcome: JobOutcome;
  report: Report;
}

/** Most outcomes in one write. */
const MAX_BATCH = 512;
/** Wait before writing again after a failed write. */
const RETRY_MS = 500;

/** Batched, conditional outcome writes. */
export class Completer<Report = unknown> {
  private pending: Array<PendingOutcome<Report>> = [];
  private flushing = false;
  private scheduled = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private idleWaiters: Array<() => void> = [];

  constructor(
    private readonly options: {
      store: Pick<ClaimStore, "jobSetStateIfRunningMany">;
      logger: Logger;
      /**
       * Called after each write with the outcomes it wrote (possibly none: slots and concurrency keys may be free
       * again all the same).
       */
      onWritten: (written: Array<PendingOutcome<Report>>) => void;
    },
  ) {}

  /** Outcomes waiting to be written. */
  get size(): number {
    return this.pending.length;
  }

  /** Queues one outcome for the next write. */
  add(pending: PendingOutcome<Report>): void {
    this.pending.push(pending);
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
        let written: boolean[];
        try {
          written = await this.options.store.jobSetStateIfRunningMany({ outcomes: batch.map((item) => item.outcome) });
        } catch (error) {
          const oneByOne = error instanceof StoreUnavailableError ? undefined : await this.writeOneByOne(batch);
          if (oneByOne) {
            this.pending.splice(0, batch.length);
            this.options.onWritten(batch.filter((_item, index) => oneByOne[index]));
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
        this.options.onWritten(batch.filter((_item, index) => written[index]));
      }
    } finally {
      this.flushing = false;
      if (this.pending.length === 0) this.idleWaiters.splice(0).forEach((resolve) => resolve());
    }
  }

  /**
   * After a batch failed with the database up: writes its outcomes one at a time, so that one the database refuses
   * (a bug, or data it cannot store) does not hold back the rest for ever. One refused alone is dropped and logged:
   * its lease expires and the rescuer settles the job. Returns which were written; undefined, dropping nothing, if the
   * database becomes unavailable meanwhile: the batch is retried whole (a repeated write of an outcome already
   * written changes nothing).
   */
  private async writeOneByOne(batch: Array<PendingOutcome<Report>>): Promise<boolean[] | undefined> {
    const written: boolean[] = [];
    for (const { outcome } of batch) {
      try {
        written.push((await this.options.store.jobSetStateIfRunningMany({ outcomes: [outcome] }))[0] === true);
      } catch (error) {
        if (error instanceof StoreUnavailableError) return undefined;
        written.push(false);
        this.options.logger.error(
          { err: error, jobId: outcome.id, attempt: outcome.attempt },
          "the database refused this outcome; dropped: the job's lease will expire and the rescuer will settle it",
        );
      }
    }
    return written;
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

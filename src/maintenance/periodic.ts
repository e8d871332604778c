/**
 * The one shape of every periodic service (lease rescuer, retention cleaner): run, wait `intervalMs`, run again;
 * never two runs at once; a failed run is logged and the next one comes as usual.
 */
import type { Logger } from "pino";

/** A task run every `intervalMs`. */
export class Periodic {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = true;

  constructor(
    private readonly options: {
      name: string;
      intervalMs: number;
      run: () => Promise<void>;
      logger: Logger;
      /** Delay of the first run; `intervalMs` by default. */
      firstRunMs?: number;
    },
  ) {}

  /** Starts the schedule. */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(this.options.firstRunMs ?? this.options.intervalMs);
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      void this.runNow().finally(() => this.schedule(this.options.intervalMs));
    }, delayMs);
  }

  /** Runs the task now (or joins the run in progress). */
  runNow(): Promise<void> {
    this.running ??= this.options
      .run()
      .catch((error: unknown) =>
        this.options.logger.warn({ err: error, task: this.options.name }, "periodic task failed"),
      )
      .finally(() => {
        this.running = undefined;
      });
    return this.running;
  }

  /** Stops the schedule and waits for a run in progress. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }
}

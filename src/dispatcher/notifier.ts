/**
 * The notifier: "work may be available at `runAt`". Whatever makes a job claimable in this process (an enqueue, an
 * administrator's retry or bulk retry, a shutdown's requeue) and the store's listener for other nodes call `notify`;
 * the dispatcher subscribes and wakes (or sets its timer). It carries wake-ups only: telemetry observes what happened,
 * and nothing waits on it.
 */

/** A wake-up call for whoever claims jobs. */
export class WorkNotifier {
  private readonly listeners = new Set<(runAt: number) => void>();

  /** Calls `listener` for every later notification; returns the function that stops it. */
  subscribe(listener: (runAt: number) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** A job became claimable at `runAt` (ms, on the database's clock). */
  notify(runAt: number): void {
    for (const listener of this.listeners) listener(runAt);
  }
}

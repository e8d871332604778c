/**
 * The work notifier: "work may be available at `runAt`". Whatever makes a job claimable in this process (an enqueue,
 * an administrator's retry or bulk retry, a shutdown's requeue) and the store's listener for other nodes call
 * `notify`; the dispatcher subscribes and wakes (or sets its timer). It also carries aborts: a running job cancelled
 * here or on another node, whose exchange the deliverer ends. It carries signals only: telemetry observes what
 * happened, and nothing waits on it. It sits at the root of src/ because every part that makes work (enqueue, admin,
 * flow control, chains, schedules) reaches it, as does the dispatcher that takes the work.
 */

/** Where the work a notification announces was made: in this process, or on another node. */
export type WorkSource = "here" | "elsewhere";

/** A wake-up call for whoever claims jobs. */
export class WorkNotifier {
  private readonly listeners = new Set<(runAt: number, from: WorkSource) => void>();
  private readonly abortListeners = new Set<(jobId: string) => void>();
  private readonly takers = new Set<() => boolean>();

  /**
   * Calls `listener` for every later notification; returns the function that stops it. A listener that claims what it
   * hears of (a dispatcher) also gives `takesOne`, which `takesHere` asks.
   */
  subscribe(listener: (runAt: number, from: WorkSource) => void, takesOne?: () => boolean): () => void {
    this.listeners.add(listener);
    if (takesOne) this.takers.add(takesOne);
    return () => {
      this.listeners.delete(listener);
      if (takesOne) this.takers.delete(takesOne);
    };
  }

  /**
   * Whether a job made here and due now will be claimed in this process, once `notify` tells of it, without another
   * node's help: a dispatcher here has a free slot that no earlier job so answered holds (and takes it). Such a job
   * need not be announced to the other nodes (docs/delivery.md, "Who hears of a new job").
   */
  takesHere(): boolean {
    for (const takesOne of this.takers) if (takesOne()) return true;
    return false;
  }

  /**
   * A job became claimable at `runAt` (ms, on the database's clock), made so by this process (`here`, the default) or
   * by another node (`elsewhere`, heard through the store's listener).
   */
  notify(runAt: number, from: WorkSource = "here"): void {
    for (const listener of this.listeners) listener(runAt, from);
  }

  /** Calls `listener` for every later abort; returns the function that stops it. */
  subscribeAborts(listener: (jobId: string) => void): () => void {
    this.abortListeners.add(listener);
    return () => this.abortListeners.delete(listener);
  }

  /** A running job was cancelled: whichever node delivers it aborts the exchange. */
  abort(jobId: string): void {
    for (const listener of this.abortListeners) listener(jobId);
  }
}

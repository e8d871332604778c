/**
 * Group commit for inserts, shared by both engines: the inserts asked for within one turn of the event loop go to the
 * database together, as one batch (one round trip, one commit, one fsync), and each caller is answered once its batch
 * has committed, never before. The engine's `send` settles every item of a batch on its own, so one bad insert fails
 * only its own request.
 */

/** How one item of a batch ended. */
export type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

interface Waiting<P, T> {
  params: P;
  resolve: (value: T) => void;
  reject: (error: unknown) => void;
}

/** A queue of inserts sent in batches. */
export class GroupCommit<P, T> {
  private waiting: Array<Waiting<P, T>> = [];
  private scheduled = false;
  private readonly sending = new Set<Promise<void>>();

  constructor(
    private readonly options: {
      /** Sends one batch; answers one settled item per item, in order. Rejecting fails the whole batch. */
      send: (batch: P[]) => Promise<Array<Settled<T>>>;
      /** Most items in one batch. */
      maxBatch: number;
      /** Most batches on their way at once; later arrivals wait and form the next, larger batch. */
      maxInFlight: number;
    },
  ) {}

  /** Queues one insert; resolves once its batch committed. */
  add(params: P): Promise<T> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ params, resolve, reject });
      this.schedule();
    });
  }

  /** Fails every insert not yet sent with `error`. */
  failWaiting(error: unknown): void {
    for (const item of this.waiting.splice(0)) item.reject(error);
  }

  /** Sends everything queued and waits until every batch has been answered. */
  async drain(): Promise<void> {
    for (;;) {
      this.sendBatches();
      if (this.sending.size === 0 && this.waiting.length === 0) return;
      await Promise.race([...this.sending]);
    }
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.sendBatches();
    });
  }

  private sendBatches(): void {
    while (this.waiting.length > 0 && this.sending.size < this.options.maxInFlight) {
      this.sendBatch(this.waiting.splice(0, this.options.maxBatch));
    }
  }

  private sendBatch(batch: Array<Waiting<P, T>>): void {
    const sent: Promise<void> = this.options
      .send(batch.map((item) => item.params))
      .then(
        (settled) => {
          batch.forEach((item, index) => {
            const answer = settled[index];
            if (!answer) item.reject(new Error("the database answered fewer inserts than it was given"));
            else if (answer.ok) item.resolve(answer.value);
            else item.reject(answer.error);
          });
        },
        (error: unknown) => {
          for (const item of batch) item.reject(error);
        },
      )
      .finally(() => {
        this.sending.delete(sent);
        if (this.waiting.length > 0) this.schedule();
      });
    this.sending.add(sent);
  }
}

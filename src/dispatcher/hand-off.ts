/**
 * The hand-off of an attempt its target took asynchronously: a delivery answered 202 with `x-job-async: 1`
 * (docs/delivery.md, "Long jobs"). The attempt goes on without this node: it is marked asynchronous in the database,
 * bound to the token it was sent with, its lease starting then, conditional like an outcome. Until that write lands
 * the dispatcher keeps the job in flight and heartbeats it; once it has, the target's own heartbeats, through any
 * node, keep the lease.
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import type { JobAttempt } from "../job/job.js";
import { StoreUnavailableError, type ClaimStore } from "../store/store.js";

/** Wait before writing a hand-off again while the database is unavailable, as the completer waits for outcomes. */
const HAND_OFF_RETRY_MS = 500;

/**
 * Marks `attempt` asynchronous, bound to `tokenHash`. The mark is found moot when the attempt ended first (a target's
 * complete may well overtake its own 202). While the database is unavailable the mark is tried again, until
 * `stopped()`; a mark the database refuses outright is dropped, and the lease, no longer renewed by the dispatcher,
 * expires: the job is retried. Returns whether the mark was written.
 */
export async function handOff(options: {
  store: Pick<ClaimStore, "jobMarkAsyncIfRunning">;
  logger: Logger;
  attempt: JobAttempt;
  tokenHash: string;
  /** Whether the dispatcher has stopped: a mark is not tried again then. */
  stopped: () => boolean;
}): Promise<boolean> {
  const { store, logger, attempt, tokenHash } = options;
  for (;;) {
    try {
      return await store.jobMarkAsyncIfRunning({ job: attempt, tokenHash });
    } catch (error) {
      if (!(error instanceof StoreUnavailableError) || options.stopped()) {
        logger.error(
          { err: error, jobId: attempt.id, attempt: attempt.attempt },
          "could not record that the target took the attempt asynchronously; its lease will expire and the job be retried",
        );
        return false;
      }
      await sleep(HAND_OFF_RETRY_MS);
    }
  }
}

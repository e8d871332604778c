/**
 * Jobs the dispatcher puts back in the queue without an outcome of their own: one this process could not send (its
 * attempt refunded, since the target never saw it), and those a stop left unfinished or unstarted. Each write is
 * conditional on the attempt this node claimed; when it fails, the job's lease expires and the rescuer retries it.
 */
import type { Logger } from "pino";
import type { JobAttempt } from "../job/job.js";
import type { ClaimStore } from "../store/store.js";

/** What putting jobs back writes with. */
interface PutBackOptions {
  store: Pick<ClaimStore, "jobRequeueMany">;
  logger: Logger;
}

/** Puts back, due in `delayMs`, an attempt this process could not send (`error` says why); it is not counted. */
export async function putBackUnsent(
  options: PutBackOptions & { attempt: JobAttempt; error: string; delayMs: number },
): Promise<void> {
  const { store, logger, attempt, error } = options;
  try {
    await store.jobRequeueMany({
      jobs: [attempt],
      delayMs: options.delayMs,
      errorBody: `not sent, not counted as an attempt: ${error}`,
      refund: "always",
    });
  } catch (writeError) {
    logger.error(
      { err: writeError, jobId: attempt.id },
      "could not put back a job this process could not send; its lease will expire",
    );
  }
}

/** Puts jobs of a stopping node back to `retrying`, due at once; `errorBody` says why they did not finish. */
export async function putBackOnStop(
  options: PutBackOptions & { jobs: JobAttempt[]; errorBody: string },
): Promise<void> {
  const { store, logger, jobs, errorBody } = options;
  if (jobs.length === 0) return;
  try {
    const requeued = await store.jobRequeueMany({ jobs, delayMs: 0, errorBody, refund: "if-last" });
    logger.warn({ requeued, reason: errorBody }, "jobs put back to retrying");
  } catch (error) {
    logger.error({ err: error }, "could not requeue jobs of a stopping node; their leases will expire instead");
  }
}

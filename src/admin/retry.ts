/**
 * Administrators' retries (docs/api.md, "Admin operations"): a dead or cancelled job, or the dead jobs matching a
 * filter, back to `pending`. The store decides, conditionally; this wakes the dispatcher for what it re-queued and
 * lets telemetry see it. Cancels need neither, so their routes call the store directly.
 */
import type { WorkNotifier } from "../work-notifier.js";
import type { JobRow } from "../job/job.js";
import type { AdminStore, DeadJobFilter, JobRetryOutcome } from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";

/** What a retry needs from the running service. */
export interface RetryDeps {
  store: Pick<AdminStore, "jobRetry" | "jobRetryDeadMany">;
  notifier: WorkNotifier;
  telemetry: Telemetry;
}

function requeued(deps: RetryDeps, job: JobRow): void {
  deps.notifier.notify(job.runAt);
  deps.telemetry.emit("job:retried", { operationId: job.operationId, runAt: job.runAt });
}

/** `dead`/`cancelled` → `pending`, attempt 0, due now; or why not. */
export async function retryJob(deps: RetryDeps, params: { id: string; actor: string }): Promise<JobRetryOutcome> {
  const outcome = await deps.store.jobRetry(params);
  if (outcome.kind === "retried") requeued(deps, outcome.job);
  return outcome;
}

/** Re-queues up to `limit` dead jobs matching `filter`, newest first; returns them. */
export async function retryDeadJobs(
  deps: RetryDeps,
  options: { filter: DeadJobFilter; limit: number; actor: string },
): Promise<JobRow[]> {
  const jobs = await deps.store.jobRetryDeadMany(options);
  for (const job of jobs) requeued(deps, job);
  return jobs;
}

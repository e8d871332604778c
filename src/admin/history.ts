/**
 * A job's history as administrators read it: its creation, every finished attempt numbered across administrators'
 * retries (which start the job's own attempt counter again), and every administrator's action, oldest first.
 */
import type { JobAttemptRow, JobRow } from "../job/job.js";
import type { JobHistory } from "../job/schemas.js";
import { formatTime } from "../job/wire.js";
import type { AdminActionRow } from "../store/store.js";

type Event = JobHistory["events"][number];

/** A recorded action's role as the wire has it: only an operator or an admin acts; older rows have none. */
function recordedRole(role: string | null): "operator" | "admin" | null {
  return role === "operator" || role === "admin" ? role : null;
}

/** The events of one job, oldest first; at the same instant, what came first in the job's life comes first. */
export function jobHistory(options: { job: JobRow; attempts: JobAttemptRow[]; actions: AdminActionRow[] }): Event[] {
  const { job } = options;
  const timed: Array<{ at: number; order: number; event: Event }> = [
    {
      at: job.createdAt,
      order: 0,
      event: { type: "enqueued", at: formatTime(job.createdAt), by: job.enqueuedByOperationId },
    },
  ];
  options.attempts.forEach((attempt, index) => {
    timed.push({
      at: attempt.finishedAt,
      order: 1,
      event: {
        type: "attempt",
        at: formatTime(attempt.finishedAt),
        number: index + 1,
        attempt: attempt.attempt,
        started_at: attempt.startedAt === null ? null : formatTime(attempt.startedAt),
        outcome: attempt.outcome,
        status_code: attempt.statusCode,
        error_body: attempt.errorBody,
      },
    });
  });
  for (const action of options.actions) {
    timed.push({
      at: action.at,
      order: 2,
      event: {
        type: "admin",
        at: formatTime(action.at),
        actor: action.actor,
        role: recordedRole(action.role),
        action: action.action,
      },
    });
  }
  // Stable: attempts keep their order, actions theirs.
  return timed.sort((a, b) => a.at - b.at || a.order - b.order).map((item) => item.event);
}

/**
 * Job statuses and administrators' actions, as docs/api.md names them; in a module of their own so the SQLite thread
 * loads no schemas.
 */
export const JOB_STATUSES = ["pending", "running", "retrying", "succeeded", "dead", "cancelled"] as const;
/** A job status. */
export type JobStatus = (typeof JOB_STATUSES)[number];

/** What an administrator can do to a job, as its history names it. */
export const ADMIN_ACTIONS = ["cancel", "retry", "retry-dead", "cancel-chain", "run-now", "cancel-many"] as const;
/** An administrator's action. */
export type AdminAction = (typeof ADMIN_ACTIONS)[number];

/** Job statuses, as docs/api.md names them; in a module of their own so the SQLite thread loads no schemas. */
export const JOB_STATUSES = ["pending", "running", "retrying", "succeeded", "dead", "cancelled"] as const;
/** A job status. */
export type JobStatus = (typeof JOB_STATUSES)[number];

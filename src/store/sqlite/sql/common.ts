/**
 * SQL text shared by the SQLite engine's statements: the claimable-status test, the running keys, and the test of an
 * attempt taken asynchronously. Every statement the engine runs lives under this folder, one file per concern, under
 * the names the PostgreSQL engine's sql/ uses; migrations/sqlite/ holds their history only.
 *
 * The hot queries name their partial index (INDEXED BY): without statistics SQLite's planner prefers the broader
 * jobs_status_seq and then sorts every claimable row, which a large backlog makes ruinous. A hint that cannot be
 * honoured fails loudly at prepare time instead of quietly scanning.
 */

/** The statuses a job can be claimed in (and holds its dedupe key in). */
export const CLAIMABLE = "status IN ('pending', 'retrying')";

/** The concurrency keys of running jobs, read through their partial index. */
export const RUNNING_KEYS =
  "SELECT concurrency_key FROM jobs INDEXED BY jobs_running_concurrency_key WHERE concurrency_key IS NOT NULL AND status = 'running'";

/**
 * The job's current attempt is the one its target took asynchronously: the mark names this attempt of this claim
 * (migration 0008). Null, not false, for a job never marked.
 */
export const TAKEN_ASYNC = "(jobs.async_attempt = jobs.attempt AND jobs.async_started_at = jobs.started_at)";

/**
 * The administrators' use cases on jobs and chains (docs/api.md, "Admin operations"), behind the routes of
 * src/http/routes/admin.ts: read a job (waiting for it to end, if asked), its attempts, its history and what opqueue
 * keeps of it beyond the wire form; cancel, retry and run now one job; retry the dead jobs matching a filter; cancel a
 * chain. The store decides every write, conditionally, and answers a typed outcome that the route turns into its
 * answer; this adds what follows a write: the notifier aborts the delivery of a running job it cancelled and wakes the
 * dispatcher for what it made due, and telemetry sees every retry.
 */
import type { JobAsyncState, JobAttemptRow, JobRow } from "../job/job.js";
import type { JobHistoryEvent } from "../job/schemas.js";
import type {
  AdminActor,
  AdminStore,
  AsyncAttemptStore,
  DeadJobFilter,
  JobCancelOutcome,
  JobReadStore,
  JobRetryOutcome,
  JobRunNowOutcome,
} from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";
import type { WorkNotifier } from "../work-notifier.js";
import { jobHistory } from "./history.js";

/** What the administrators' job use cases need from the running service. */
export interface AdminJobsDeps {
  store: Pick<AdminStore, "jobCancel" | "jobRetry" | "jobRetryDeadMany" | "chainCancel" | "jobRunNow"> &
    Pick<JobReadStore, "jobGet" | "jobAttemptList" | "adminActionList"> &
    Pick<AsyncAttemptStore, "jobAsyncStateGet">;
  notifier: WorkNotifier;
  telemetry: Telemetry;
}

/** A job with what opqueue keeps of it beyond the wire form. */
export interface JobWithExtensions {
  job: JobRow;
  /** Its latest asynchronous attempt and progress; undefined when it has none. */
  asyncState: JobAsyncState | undefined;
}

const TERMINAL = new Set(["succeeded", "dead", "cancelled"]);

/** The use cases of the administrators' job routes. */
export class AdminJobs {
  constructor(private readonly deps: AdminJobsDeps) {}

  /**
   * Job `id` if `visible` (the caller's authority: a job it may not read is answered as absent, undefined). With
   * `waitMs`, waits until the job is terminal or the time has passed, and answers the job as it then is (as last seen
   * visible).
   */
  async get(params: { id: string; waitMs: number; visible: (job: JobRow) => boolean }): Promise<JobRow | undefined> {
    const { id, visible } = params;
    const isVisible = (row: JobRow | undefined): row is JobRow => row !== undefined && visible(row);
    let row = await this.deps.store.jobGet({ id });
    if (!isVisible(row)) return undefined;
    const deadline = Date.now() + params.waitMs;
    // Looks again at growing intervals (a job delivered on another node is seen by looking), at once when this
    // node ends one of its deliveries.
    for (
      let interval = 25;
      !TERMINAL.has(row.status) && Date.now() < deadline;
      interval = Math.min(interval * 2, 250)
    ) {
      await this.changed(id, Math.min(interval, deadline - Date.now()));
      const fresh = await this.deps.store.jobGet({ id });
      if (!isVisible(fresh)) break;
      row = fresh;
    }
    return row;
  }

  /**
   * `pending`/`retrying` → `cancelled`, and with `abortRunning` a `running` job too, whose delivery is then aborted on
   * whichever node runs it; or why not.
   */
  async cancel(params: { id: string; abortRunning: boolean } & AdminActor): Promise<JobCancelOutcome> {
    const outcome = await this.deps.store.jobCancel(params);
    if (outcome.kind === "cancelled" && outcome.wasRunning) this.deps.notifier.abort(outcome.job.id);
    return outcome;
  }

  /** `dead`/`cancelled` → `pending`, attempt 0, due now; or why not. */
  async retry(params: { id: string } & AdminActor): Promise<JobRetryOutcome> {
    const outcome = await this.deps.store.jobRetry(params);
    if (outcome.kind === "retried") this.requeued(outcome.job);
    return outcome;
  }

  /** Re-queues up to `limit` dead jobs matching `filter`, newest first; returns them. */
  async retryDead(params: { filter: DeadJobFilter; limit: number } & AdminActor): Promise<JobRow[]> {
    const jobs = await this.deps.store.jobRetryDeadMany(params);
    for (const job of jobs) this.requeued(job);
    return jobs;
  }

  /** A waiting job (`pending`/`retrying`) due now, the dispatcher woken for it; or why not. */
  async runNow(params: { id: string } & AdminActor): Promise<JobRunNowOutcome> {
    const outcome = await this.deps.store.jobRunNow(params);
    if (outcome.kind === "moved") this.deps.notifier.notify(outcome.job.runAt);
    return outcome;
  }

  /** Cancels a chain: its claimable jobs now (returned), and every job enqueued into it later. */
  async cancelChain(params: { originalRequestId: string } & AdminActor): Promise<JobRow[]> {
    return this.deps.store.chainCancel(params);
  }

  /** Job `id`'s delivery attempts, oldest first; undefined when no job has the id. */
  async attempts(id: string): Promise<JobAttemptRow[] | undefined> {
    const row = await this.deps.store.jobGet({ id });
    if (!row) return undefined;
    return this.deps.store.jobAttemptList({ id: row.id });
  }

  /** Job `id`'s history, oldest first (history.ts); undefined when no job has the id. */
  async history(id: string): Promise<JobHistoryEvent[] | undefined> {
    const row = await this.deps.store.jobGet({ id });
    if (!row) return undefined;
    const [attempts, actions] = await Promise.all([
      this.deps.store.jobAttemptList({ id: row.id }),
      this.deps.store.adminActionList({ jobId: row.id }),
    ]);
    return jobHistory({ job: row, attempts, actions });
  }

  /** Job `id` with its latest asynchronous attempt and progress; undefined when no job has the id. */
  async extensions(id: string): Promise<JobWithExtensions | undefined> {
    const [job, asyncState] = await Promise.all([
      this.deps.store.jobGet({ id }),
      this.deps.store.jobAsyncStateGet({ id }),
    ]);
    return job ? { job, asyncState } : undefined;
  }

  private requeued(job: JobRow): void {
    this.deps.notifier.notify(job.runAt);
    this.deps.telemetry.emit("job:retried", { operationId: job.operationId, runAt: job.runAt });
  }

  /**
   * Resolves when job `id` may have changed: one of this node's deliveries of it ended, or `ms` passed (a job delivered
   * by another node is seen at the next look).
   */
  private changed(id: string, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        off();
        resolve();
      };
      const timer = setTimeout(done, ms);
      const off = this.deps.telemetry.on("delivery:finished", (event) => {
        if (event.jobId === id) done();
      });
    });
  }
}

/**
 * A chain as a unit (docs/chains.md), as `GET /chains/{original_request_id}` answers it: its jobs as a tree (each with
 * its attempts), how they stand, whether it has settled, and its spawn cap's use. Read from the store in four reads;
 * src/http/routes/chains.ts answers it.
 */
import type { ChainBody, ChainNodeBody } from "./schemas.js";
import type { Config } from "../config.js";
import type { JobAttemptRow, JobRow } from "../job/job.js";
import { JOB_STATUSES } from "../job/schemas.js";
import { formatTime, toWireJob } from "../job/wire.js";
import type { ChainJobCounts, ChainStore, JobReadStore } from "../store/store.js";
import type { RequestRedaction } from "../job/redaction.js";

/** What the chain view needs from the running service. */
export interface ChainViewDeps {
  store: Pick<ChainStore, "chainGet" | "chainJobCounts"> & Pick<JobReadStore, "jobList" | "jobAttemptListMany">;
  config: Pick<Config, "limits">;
  /** How the jobs' requests are shown. */
  redaction: RequestRedaction;
}

/** Most jobs one answer's tree holds; a larger chain's has its newest (its counts and settling are of every job). */
const MAX_CHAIN_JOBS = 10_000;
const ACTIVE_STATUSES = ["pending", "running", "retrying"] as const;

/** The use case of the chain routes: a chain read as a unit. */
export class ChainView {
  constructor(private readonly deps: ChainViewDeps) {}

  /** Chain `originalRequestId` in its wire form; undefined when no job was ever enqueued into it. */
  async get(originalRequestId: string): Promise<ChainBody | undefined> {
    const { store } = this.deps;
    const [chain, counts] = await Promise.all([
      store.chainGet({ originalRequestId }),
      store.chainJobCounts({ originalRequestId }),
    ]);
    // The jobs are read after their counts, never beside them: on PostgreSQL each read is its own snapshot, and a list
    // read before the counts could miss a job the counts hold (a chain answered as settled with a job left out of its
    // tree). Read after, the tree holds every job counted, and perhaps a newer one.
    const newestFirst = await store.jobList({ originalRequestId, limit: MAX_CHAIN_JOBS + 1 });
    if (!chain && newestFirst.length === 0) return undefined;
    const jobs = newestFirst.slice(0, MAX_CHAIN_JOBS).reverse();
    const attempts = await store.jobAttemptListMany({ ids: jobs.map((job) => job.id) });
    return {
      ...standing(counts),
      original_request_id: originalRequestId,
      started_at: formatOrNull(chain?.createdAt ?? counts.firstCreatedAt),
      cancelled_at: formatOrNull(chain?.cancelledAt ?? null),
      cancelled_by: chain?.cancelledBy ?? null,
      spawn_cap: { used: chain?.jobsCreated ?? jobs.length, limit: this.deps.config.limits.spawn_cap },
      on_settled: chain?.onSettled
        ? {
            operation_id: chain.onSettled.operation_id,
            job_id: chain.onSettled.job_id,
            fired_at: formatOrNull(chain.onSettledFiredAt),
          }
        : null,
      jobs: tree(jobs, attempts, this.deps.redaction),
      truncated: newestFirst.length > MAX_CHAIN_JOBS,
    };
  }
}

function formatOrNull(ms: number | null): string | null {
  return ms === null ? null : formatTime(ms);
}

/** Counts by status of every job of the chain, and whether (and when) it settled. */
function standing(jobs: ChainJobCounts): Pick<ChainBody, "counts" | "settled" | "settled_at"> {
  const counts = Object.fromEntries(
    JOB_STATUSES.map((status) => [status, jobs.byStatus[status] ?? 0]),
  ) as ChainBody["counts"];
  const settled = ACTIVE_STATUSES.every((status) => counts[status] === 0);
  return {
    counts,
    settled,
    settled_at: settled && jobs.lastFinishedAt !== null ? formatTime(jobs.lastFinishedAt) : null,
  };
}

/** The jobs as a forest: each job under its parent, roots those whose parent is not in the chain; oldest first. */
function tree(jobs: JobRow[], attempts: Map<string, JobAttemptRow[]>, redaction: RequestRedaction): ChainNodeBody[] {
  const nodes = new Map<string, ChainNodeBody>();
  for (const job of jobs) {
    nodes.set(job.id, {
      job: toWireJob(job, redaction),
      attempts: (attempts.get(job.id) ?? []).map((attempt) => ({
        attempt: attempt.attempt,
        started_at: formatOrNull(attempt.startedAt),
        finished_at: formatTime(attempt.finishedAt),
        outcome: attempt.outcome,
        status_code: attempt.statusCode,
        error_body: attempt.errorBody,
      })),
      children: [],
    });
  }
  const roots: ChainNodeBody[] = [];
  for (const job of jobs) {
    const node = nodes.get(job.id) as ChainNodeBody;
    const parent = job.parentJobId === null ? undefined : nodes.get(job.parentJobId);
    if (parent) parent.children.push(node);
    else roots.push(node);
  }
  return roots;
}

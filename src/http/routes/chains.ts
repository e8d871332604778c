/**
 * A chain as a unit (docs/chains.md): `GET /chains/{original_request_id}` answers its jobs as a tree (each with its
 * attempts), how they stand, whether it has settled, and its spawn cap's use. Cancelling a chain is in admin.ts.
 */
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import type { TokenVerifier } from "../../auth/tokens.js";
import { ChainEnvelope, type ChainBody, type ChainNodeBody } from "../../chains/schemas.js";
import type { Config } from "../../config.js";
import { ApiError } from "../../errors.js";
import type { JobAttemptRow, JobRow } from "../../job/job.js";
import { JOB_STATUSES } from "../../job/schemas.js";
import { formatTime, toWireJob } from "../../job/wire.js";
import type { ChainJobCounts, ChainStore, JobReadStore } from "../../store/store.js";
import { adminAuthHook } from "../auth.js";
import { errorResponses } from "./error-responses.js";

/** What the chain routes need. */
export interface ChainRoutesOptions {
  store: Pick<ChainStore, "chainGet" | "chainJobCounts"> & Pick<JobReadStore, "jobList" | "jobAttemptListMany">;
  verifier: TokenVerifier;
  config: Pick<Config, "limits">;
}

/** Most jobs one answer's tree holds; a larger chain's has its newest (its counts and settling are of every job). */
const MAX_CHAIN_JOBS = 10_000;
const ACTIVE_STATUSES = ["pending", "running", "retrying"] as const;

/** Registers the chain routes. */
export const chainRoutes: FastifyPluginAsyncTypebox<ChainRoutesOptions> = async (app, options) => {
  const { store } = options;
  app.get(
    "/chains/:original_request_id",
    {
      onRequest: adminAuthHook({ verifier: options.verifier }),
      schema: {
        operationId: "getChain",
        summary: "A chain as a unit: its jobs as a tree with their attempts, counts by status, whether it has settled",
        tags: ["chains"],
        security: [{ adminToken: [] }],
        params: Type.Object({ original_request_id: Type.String() }),
        response: { 200: ChainEnvelope, ...errorResponses(401, 403, 404, 503) },
      },
    },
    async (request) => {
      const rid = request.params.original_request_id;
      const [chain, newestFirst, counts] = await Promise.all([
        store.chainGet({ originalRequestId: rid }),
        store.jobList({ originalRequestId: rid, limit: MAX_CHAIN_JOBS + 1 }),
        store.chainJobCounts({ originalRequestId: rid }),
      ]);
      if (!chain && newestFirst.length === 0) {
        throw new ApiError(404, "chain_not_found", `no job was ever enqueued into chain "${rid.slice(0, 64)}"`);
      }
      const jobs = newestFirst.slice(0, MAX_CHAIN_JOBS).reverse();
      const attempts = await store.jobAttemptListMany({ ids: jobs.map((job) => job.id) });
      const body: ChainBody = {
        ...standing(counts),
        original_request_id: rid,
        started_at: formatOrNull(chain?.createdAt ?? counts.firstCreatedAt),
        cancelled_at: formatOrNull(chain?.cancelledAt ?? null),
        cancelled_by: chain?.cancelledBy ?? null,
        spawn_cap: { used: chain?.jobsCreated ?? jobs.length, limit: options.config.limits.spawn_cap },
        on_settled: chain?.onSettled
          ? {
              operation_id: chain.onSettled.operation_id,
              job_id: chain.onSettled.job_id,
              fired_at: formatOrNull(chain.onSettledFiredAt),
            }
          : null,
        jobs: tree(jobs, attempts),
        truncated: newestFirst.length > MAX_CHAIN_JOBS,
      };
      return { chain: body };
    },
  );
};

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
function tree(jobs: JobRow[], attempts: Map<string, JobAttemptRow[]>): ChainNodeBody[] {
  const nodes = new Map<string, ChainNodeBody>();
  for (const job of jobs) {
    nodes.set(job.id, {
      job: toWireJob(job),
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

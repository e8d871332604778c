/** A chain's jobs counted by status (`Store.chainJobCounts`), from one row per status as either engine groups them. */
import type { JobStatus } from "../job/statuses.js";
import type { ChainJobCounts } from "./store.js";

/** One status's group of a chain's jobs. Times are ms since the epoch. */
export interface ChainStatusGroup {
  status: string;
  jobs: number;
  firstCreatedAt: number;
  lastFinishedAt: number | null;
}

/** The counts of a chain from its groups by status (none: a chain without jobs). */
export function chainJobCountsOf(groups: readonly ChainStatusGroup[]): ChainJobCounts {
  const counts: ChainJobCounts = { jobs: 0, byStatus: {}, firstCreatedAt: null, lastFinishedAt: null };
  for (const group of groups) {
    counts.jobs += group.jobs;
    counts.byStatus[group.status as JobStatus] = group.jobs;
    counts.firstCreatedAt = Math.min(counts.firstCreatedAt ?? group.firstCreatedAt, group.firstCreatedAt);
    if (group.lastFinishedAt !== null)
      counts.lastFinishedAt = Math.max(counts.lastFinishedAt ?? 0, group.lastFinishedAt);
  }
  return counts;
}

/**
 * The statistics keeper: every few seconds, asks the store to bring the planner's statistics of the job tables up to
 * date if the tables have grown far past what those last counted (`UpkeepStore.statisticsRefresh`; on PostgreSQL an
 * ANALYZE once a table has more than doubled, docs/postgres.md "Plans"). A queue that grows from nearly empty to a
 * large backlog otherwise keeps plans made for a few jobs until autovacuum's next round. A burst of 150,000 jobs was
 * drained at 770 jobs/s for the 46 s before autovacuum came, and at 8,300–10,500 after it; with the keeper, at
 * 7,000–9,000 from its second second on (docs/performance.md).
 */
import type { Logger } from "pino";
import type { UpkeepStore } from "../store/store.js";

/** How often the keeper asks: a read of two rows of the server's statistics. */
export const STATISTICS_CHECK_MS = 5000;

/** One pass of the keeper. */
export async function refreshStatistics(options: {
  store: Pick<UpkeepStore, "statisticsRefresh">;
  logger: Logger;
}): Promise<void> {
  if (await options.store.statisticsRefresh()) {
    options.logger.info("analyzed the job tables: they had grown far past what their statistics counted");
  }
}

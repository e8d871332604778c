/** The store's `UpkeepStore` role; src/store/store.ts composes the roles into `Store`. */
import type { JobRow, LeaseLimits } from "../../job/job.js";

/**
 * The maintenance loops' work: finding expired leases, expiring jobs not started in time, forgetting what retention
 * lets go (finished jobs, idempotency keys, old cron ticks, attempt counts, rate buckets), and keeping the planner's
 * statistics up with the tables.
 */
export interface UpkeepStore {
  /**
   * Running jobs whose lease has expired by the database's clock (no heartbeat for their limit, the asynchronous lease
   * for an attempt taken asynchronously), oldest first.
   */
  jobListExpired(params: { lease: LeaseLimits; limit: number }): Promise<JobRow[]>;
  /**
   * Ends up to `limit` waiting jobs (`pending`/`retrying`) whose expiry has passed: `cancelled`, terminal reason
   * `expired`, keeping the last attempt's status code and error body. Returns them.
   */
  jobExpireMany(params: { limit: number }): Promise<JobRow[]>;
  /**
   * Deletes up to `limit` terminal jobs that finished more than `olderThanMs` ago, but none an unexpired idempotency
   * key still answers with; returns how many.
   */
  jobDeleteFinishedMany(params: { olderThanMs: number; limit: number }): Promise<number>;
  /** Forgets up to `limit` idempotency keys whose window has passed; returns how many. */
  idempotencyKeyDeleteMany(params: { limit: number }): Promise<number>;
  /**
   * Forgets cron ticks more than `olderThanMs` old (they can never fire again), but the newest of each name, which
   * `cronTickLatestMany` answers as its last run; returns how many.
   */
  cronTickDeleteMany(params: { olderThanMs: number }): Promise<number>;
  /** Forgets the attempt counts of minutes more than `olderThanMs` old (the dashboard charts the last hour); returns how many rows. */
  attemptCountDeleteMany(params: { olderThanMs: number }): Promise<number>;
  /** Deletes the rate buckets whose time has passed (they say no more than a missing one); returns how many. */
  rateBucketDeleteMany(): Promise<number>;
  /**
   * Brings the planner's statistics of the job tables up to date when the tables have grown far past what they last
   * counted, so that plans made for small tables are made again; answers whether it did. PostgreSQL analyzes them
   * (docs/postgres.md, "Plans"); SQLite keeps no statistics opqueue's plans depend on, and answers false.
   */
  statisticsRefresh(): Promise<boolean>;
}

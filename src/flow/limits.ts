/**
 * Flow control's vocabulary (docs/flow-control.md): an operation's limits and pause, a paused concurrency key, and the
 * rate limits' arithmetic. Types and pure functions, shared by both engines (the PostgreSQL engine repeats the
 * arithmetic in SQL: migrations/postgres/current/functions/opqueue_rate_allowance.sql) and by the API; the SQLite
 * thread loads this module too.
 */

/** At most `limit` jobs started per `periodMs` on average, and `burst` at once after a quiet spell. */
export interface RateLimit {
  limit: number;
  periodMs: number;
  burst: number;
}

/** The limits of one operation, cluster-wide. `null`: no such limit. */
export interface OperationLimits {
  /** Jobs of the operation started, over time. */
  rate: RateLimit | null;
  /** Jobs of the operation started per rate key, over time (jobs without a rate key are not limited by it). */
  ratePerKey: RateLimit | null;
  /** Jobs of the operation running at once, across every node. */
  maxConcurrency: number | null;
  /** Jobs running at once per concurrency key, for jobs of this operation (1: the contract's rule). */
  concurrencyLimit: number;
}

/** No limit at all: what an operation that neither the configuration nor an administrator limited has. */
export const NO_LIMITS: Readonly<OperationLimits> = Object.freeze({
  rate: null,
  ratePerKey: null,
  maxConcurrency: null,
  concurrencyLimit: 1,
});

/** Who did something, and when (ms since the epoch). */
export interface Stamp {
  at: number;
  by: string;
}

/** Where an operation's limits in force come from. */
export type LimitsSource = "config" | "admin";

/** An operation's flow control as the database holds it. */
export interface OperationControl {
  operationId: string;
  /** Set while the operation is paused: no job of it is claimed. */
  paused: Stamp | null;
  limits: OperationLimits;
  /**
   * `config`: the configuration's values, which every node writes when it starts. `admin`: set through the API, kept
   * across restarts until an administrator resets them.
   */
  limitsSource: LimitsSource;
  /** Who set the limits through the API last, and when; null for the configuration's. */
  limitsSet: Stamp | null;
}

/** A paused concurrency key: no job with it is claimed, of any operation. */
export interface PausedKey {
  concurrencyKey: string;
  paused: Stamp;
}

/** A rate limit's period when none is given, in ms (docs/flow-control.md, "Rate limits"). */
export const RATE_PERIOD_MS_DEFAULT = 1000;

/** The configuration's form of a rate limit. */
export interface RateLimitConfig {
  limit: number;
  period_ms?: number | undefined;
  burst?: number | undefined;
}

/** A configured rate limit, its period defaulting to 1000 ms and its burst to its limit (a period's worth at once). */
export function rateFromConfig(rate: RateLimitConfig | undefined): RateLimit | null {
  return rate === undefined
    ? null
    : { limit: rate.limit, periodMs: rate.period_ms ?? RATE_PERIOD_MS_DEFAULT, burst: rate.burst ?? rate.limit };
}

/** The limits an operation's configuration entry gives it. */
export function limitsFromConfig(
  entry:
    | {
        rate?: RateLimitConfig | undefined;
        rate_per_key?: RateLimitConfig | undefined;
        max_concurrency?: number | undefined;
        concurrency_limit?: number | undefined;
      }
    | undefined,
): OperationLimits {
  return {
    rate: rateFromConfig(entry?.rate),
    ratePerKey: rateFromConfig(entry?.rate_per_key),
    maxConcurrency: entry?.max_concurrency ?? null,
    concurrencyLimit: entry?.concurrency_limit ?? 1,
  };
}

/** Whether `limits` limits anything (the contract's one running job per concurrency key aside). */
export function limitsSomething(limits: OperationLimits): boolean {
  return (
    limits.rate !== null || limits.ratePerKey !== null || limits.maxConcurrency !== null || limits.concurrencyLimit > 1
  );
}

/** Slack for floating-point arithmetic on times in ms: far below a millisecond, far above rounding errors. */
const EPSILON = 1e-6;

/**
 * How many jobs `rate` lets start at `now`, by the generic cell rate algorithm: jobs are spaced T = period / limit
 * apart, with a tolerance of (burst − 1)·T, and the bucket is one number, `tat`, the theoretical arrival time of its
 * next job (null: the bucket is full). Starting n jobs moves `tat` to max(tat, now) + n·T (`rateAdvance`).
 */
export function rateAllowance(rate: RateLimit, tat: number | null, now: number): number {
  const spacing = rate.periodMs / rate.limit;
  const tolerance = (rate.burst - 1) * spacing;
  const ahead = Math.max((tat ?? now) - now, 0);
  if (ahead > tolerance + EPSILON) return 0;
  return Math.floor((tolerance - ahead) / spacing + EPSILON) + 1;
}

/** The bucket's `tat` after `count` jobs started at `now`. */
export function rateAdvance(rate: RateLimit, tat: number | null, now: number, count: number): number {
  return Math.max(tat ?? now, now) + (count * rate.periodMs) / rate.limit;
}

/** When a bucket at `tat` lets the next job start (ms since the epoch): at once for a full bucket. */
export function rateOpensAt(rate: RateLimit, tat: number | null, now: number): number {
  if (tat === null) return now;
  return Math.max(now, tat - ((rate.burst - 1) * rate.periodMs) / rate.limit);
}

/** The lane of a job, the unit claims take turns by: its rate key, else its user (both engines write this form). */
export function laneOf(job: { rateKey: string | null; userId: string }): string {
  return job.rateKey === null ? `u:${job.userId}` : `r:${job.rateKey}`;
}

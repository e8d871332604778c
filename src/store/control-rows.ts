/**
 * The rows of operation_controls as both engines read them (times in ms since the epoch), and the columns of a set of
 * limits as both write them.
 */
import type { LimitsSource, OperationControl, OperationLimits, RateLimit } from "../flow/limits.js";

/** An operation_controls row. */
export interface ControlRow {
  operation_id: string;
  paused_at: number | null;
  paused_by: string | null;
  rate_limit: number | null;
  rate_period_ms: number | null;
  rate_burst: number | null;
  key_rate_limit: number | null;
  key_rate_period_ms: number | null;
  key_rate_burst: number | null;
  max_concurrency: number | null;
  concurrency_limit: number;
  limits_source: LimitsSource;
  limits_set_at: number | null;
  limits_set_by: string | null;
}

/** The columns of a row's limits, as statements bind them. */
export function limitColumns(limits: OperationLimits): Record<string, number | null> {
  return {
    rate_limit: limits.rate?.limit ?? null,
    rate_period_ms: limits.rate?.periodMs ?? null,
    rate_burst: limits.rate?.burst ?? null,
    key_rate_limit: limits.ratePerKey?.limit ?? null,
    key_rate_period_ms: limits.ratePerKey?.periodMs ?? null,
    key_rate_burst: limits.ratePerKey?.burst ?? null,
    max_concurrency: limits.maxConcurrency,
    concurrency_limit: limits.concurrencyLimit,
  };
}

function rateOf(limit: number | null, periodMs: number | null, burst: number | null): RateLimit | null {
  return limit === null || periodMs === null || burst === null ? null : { limit, periodMs, burst };
}

/** A row as the store answers it. */
export function toOperationControl(row: ControlRow): OperationControl {
  return {
    operationId: row.operation_id,
    paused: row.paused_at === null ? null : { at: row.paused_at, by: row.paused_by ?? "" },
    limits: {
      rate: rateOf(row.rate_limit, row.rate_period_ms, row.rate_burst),
      ratePerKey: rateOf(row.key_rate_limit, row.key_rate_period_ms, row.key_rate_burst),
      maxConcurrency: row.max_concurrency,
      concurrencyLimit: row.concurrency_limit,
    },
    limitsSource: row.limits_source,
    limitsSet: row.limits_set_at === null ? null : { at: row.limits_set_at, by: row.limits_set_by ?? "" },
  };
}

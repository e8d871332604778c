/**
 * What an attempt's result means for its job (docs/delivery.md, "How an attempt ends"), and when a retry runs. Pure:
 * time and randomness come in as arguments, so every rule is table-tested.
 */
import type { JobResult, TerminalReason } from "./schemas.js";
import { storedBody } from "./stored-result.js";

/** How one delivery attempt ended, as seen by the deliverer. */
export type AttemptResult =
  /** No HTTP response at all: connection refused or reset, DNS failure, timeout. */
  | { kind: "no-response"; error: string }
  | {
      kind: "response";
      statusCode: number;
      /** The `x-job-retry` response header, lower-cased, if any. */
      jobRetry: string | undefined;
      /** The `retry-after` response header, if any. */
      retryAfter: string | undefined;
      /** The body, cut at a UTF-8 boundary to at most 8192 bytes; null on success (not read). */
      body: string | null;
      /** The `content-type` response header, if any: a kept success body is stored parsed when it says JSON. */
      contentType?: string | undefined;
      /** Whether `body` was cut (the target sent more than 8192 bytes). */
      truncated?: boolean | undefined;
    };

/** Backoff settings (`retry` of the config, merged with the operation's override). */
export interface RetrySettings {
  base_ms: number;
  factor: number;
  max_ms: number;
  retry_after_max_ms: number;
}

/** The decision for one attempt, ready to be written conditionally by the completer. */
export type AttemptDecision =
  | { status: "succeeded"; result: JobResult }
  | { status: "dead"; result: JobResult }
  /** Due again `delayMs` after the outcome is written (the store adds it to its own clock). */
  | { status: "retrying"; delayMs: number; result: JobResult };

/** The classification of docs/delivery.md, "How an attempt ends", before attempts are counted. */
type Verdict = { kind: "success" } | { kind: "retry" } | { kind: "dead"; reason: TerminalReason };

function isAuthUnresolvable(body: string | null): boolean {
  if (body === null) return false;
  try {
    const parsed: unknown = JSON.parse(body);
    return typeof parsed === "object" && parsed !== null && (parsed as { code?: unknown }).code === "auth_unresolvable";
  } catch {
    return false;
  }
}

/** Rules 1–7 of docs/delivery.md, "How an attempt ends", first match wins. */
export function classify(attempt: AttemptResult): Verdict {
  if (attempt.kind === "no-response") return { kind: "retry" };
  const { statusCode, jobRetry } = attempt;
  const success = statusCode >= 200 && statusCode < 300;
  if (!success && jobRetry === "never") return { kind: "dead", reason: "rejected-by-endpoint" };
  if (success) return { kind: "success" };
  if (jobRetry === "always") return { kind: "retry" };
  if (statusCode === 401 && isAuthUnresolvable(attempt.body)) return { kind: "dead", reason: "auth-unresolvable" };
  if (statusCode === 408 || statusCode === 425 || statusCode === 429 || statusCode >= 500) return { kind: "retry" };
  return { kind: "dead", reason: "permanent-status" };
}

const MONTH = "(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)";
const CLOCK_TIME = "\\d{2}:\\d{2}:\\d{2}";
/**
 * The three forms of an HTTP-date (RFC 9110 §5.6.7). Checked before `Date.parse`, which guesses at almost
 * anything: "3600.5" would be the year 3600 and "2099-01-01" an ISO date, both honoured up to the cap.
 */
const IMF_FIXDATE = new RegExp(`^[A-Z][a-z]{2}, \\d{2} ${MONTH} \\d{4} ${CLOCK_TIME} GMT$`);
const RFC850_DATE = new RegExp(`^[A-Z][a-z]{5,8}, \\d{2}-${MONTH}-\\d{2} ${CLOCK_TIME} GMT$`);
const ASCTIME_DATE = new RegExp(`^[A-Z][a-z]{2} ${MONTH} [ \\d]\\d ${CLOCK_TIME} \\d{4}$`);

/**
 * Milliseconds a `Retry-After` header asks for (delta-seconds or an HTTP-date), or undefined when absent or
 * unreadable. A date in the past asks for 0.
 */
export function parseRetryAfter(value: string | undefined, now: number): number | undefined {
  if (value === undefined) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  let date = Number.NaN;
  if (IMF_FIXDATE.test(trimmed) || RFC850_DATE.test(trimmed)) date = Date.parse(trimmed);
  // asctime carries no zone and means GMT; Date.parse alone would read it as local time.
  else if (ASCTIME_DATE.test(trimmed)) date = Date.parse(`${trimmed} GMT`);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - now);
}

/** The backoff before retry number `attempt` (1 after the first failure), with jitter in [50 %, 100 %]. */
export function backoffMs(options: { attempt: number; retry: RetrySettings; random: number }): number {
  const { attempt, retry, random } = options;
  const exponential = retry.base_ms * retry.factor ** Math.max(0, attempt - 1);
  return Math.min(retry.max_ms, exponential) * (0.5 + 0.5 * random);
}

/** Decides what one finished attempt means: success, a retry after a computed delay, or death with its reason. */
export function decideAttempt(options: {
  attempt: number;
  maxAttempts: number;
  result: AttemptResult;
  /** The current time, against which a `Retry-After` given as an HTTP-date is read. */
  now: number;
  retry: RetrySettings;
  /** A number in [0, 1); `Math.random()` in production. */
  random: number;
}): AttemptDecision {
  const { result } = options;
  const verdict = classify(result);
  const statusCode = result.kind === "response" ? { status_code: result.statusCode } : {};
  const errorBody = result.kind === "response" ? (result.body ?? "") : result.error;
  if (verdict.kind === "success") {
    // A success's body is read only for an operation that stores its results; JSON is stored parsed (stored-result.ts).
    const body =
      result.kind === "response" && result.body !== null
        ? storedBody({ text: result.body, contentType: result.contentType, truncated: result.truncated ?? false })
        : {};
    return { status: "succeeded", result: { ...statusCode, error_body: null, terminal_reason: null, ...body } };
  }
  if (verdict.kind === "dead") {
    return { status: "dead", result: { ...statusCode, error_body: errorBody, terminal_reason: verdict.reason } };
  }
  if (options.attempt >= options.maxAttempts) {
    return { status: "dead", result: { ...statusCode, error_body: errorBody, terminal_reason: "exhausted" } };
  }
  let delay = backoffMs({ attempt: options.attempt, retry: options.retry, random: options.random });
  if (result.kind === "response") {
    const honoursRetryAfter = result.statusCode === 429 || result.statusCode === 503 || result.jobRetry === "always";
    const asked = honoursRetryAfter ? parseRetryAfter(result.retryAfter, options.now) : undefined;
    if (asked !== undefined) delay = Math.max(delay, Math.min(asked, options.retry.retry_after_max_ms));
  }
  return {
    status: "retrying",
    delayMs: Math.round(delay),
    result: { ...statusCode, error_body: errorBody, terminal_reason: null },
  };
}

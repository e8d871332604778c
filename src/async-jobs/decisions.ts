/**
 * What a target's complete or fail means for its job (docs/delivery.md, "Long jobs"): the decision an answer would
 * have led to, by the same rules (docs/delivery.md, "How an attempt ends"). Pure: time and randomness come in as
 * arguments.
 */
import { cutUtf8, MAX_ERROR_BODY_BYTES } from "../dispatcher/deliverer.js";
import { decideAttempt, type AttemptDecision, type RetrySettings } from "../job/retry-policy.js";
import type { CompleteBody, FailBody } from "./schemas.js";

/** The `error_body` of a fail that gives neither an error nor a status code. */
export const FAILED_WITHOUT_DETAILS = "the target reported a failure";

/**
 * A complete: succeeded, as the 2xx it names (200 by default) would have. Its `result` (a JSON value the route checked:
 * at most 8 KB, storable) is the job's `result.body` when the operation stores its results, as a delivered JSON answer
 * would be (docs/chains.md): the value itself, `body_format: "json"`.
 */
export function completeDecision(body: CompleteBody, options: { storeResult: boolean }): AttemptDecision {
  const kept =
    options.storeResult && body.result !== undefined ? { body: body.result, body_format: "json" as const } : {};
  return {
    status: "succeeded",
    result: { status_code: body.status_code ?? 200, error_body: null, terminal_reason: null, ...kept },
  };
}

/** What decides an attempt's end besides its outcome: the job's attempts, the time, the backoff and its draw. */
type AttemptRules = {
  attempt: number;
  maxAttempts: number;
  now: number;
  retry: RetrySettings;
  /** A number in [0, 1). */
  random: number;
};

/**
 * A fail. With a `status_code`, it is that answer, its `error` the body and its `retry` the `x-job-retry` header: the
 * seven rules decide. Without one, `retry: "never"` ends the job dead (`rejected-by-endpoint`, as the header would),
 * and otherwise the attempt is retried like one that got no answer: the target knows it failed, not why it
 * might not again.
 */
export function failDecision(options: AttemptRules & { body: FailBody }): AttemptDecision {
  const { body, ...rules } = options;
  // Cut like an answer's body, on a UTF-8 boundary; U+0000 and a lone surrogate become U+FFFD, which both engines store.
  const error = body.error === undefined ? undefined : cutUtf8(Buffer.from(body.error, "utf8"), MAX_ERROR_BODY_BYTES);
  if (body.status_code !== undefined) {
    return decideAttempt({
      ...rules,
      result: {
        kind: "response",
        statusCode: body.status_code,
        jobRetry: body.retry,
        retryAfter: undefined,
        body: error ?? "",
      },
    });
  }
  const errorBody = error ?? FAILED_WITHOUT_DETAILS;
  if (body.retry === "never")
    return { status: "dead", result: { error_body: errorBody, terminal_reason: "rejected-by-endpoint" } };
  return decideAttempt({ ...rules, result: { kind: "no-response", error: errorBody } });
}

/** The `error_body` of an attempt ended for running past its operation's `max_async_ms`. */
export function timedOutError(maxAsyncMs: number): string {
  return `timed out after ${maxAsyncMs} ms: the attempt ran longer than its operation's max_async_ms`;
}

/**
 * An attempt that ran past its operation's `max_async_ms`: timed out, as an exchange past its `timeout_ms` is (rule 1 of
 * "How an attempt ends"): retried with backoff, or dead `exhausted` on the last attempt.
 */
export function timedOutDecision(options: AttemptRules & { maxAsyncMs: number }): AttemptDecision {
  const { maxAsyncMs, ...rules } = options;
  return decideAttempt({ ...rules, result: { kind: "no-response", error: timedOutError(maxAsyncMs) } });
}

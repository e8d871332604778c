/**
 * docs/delivery.md, "How an attempt ends", rule by rule in order of precedence: what one attempt's ending means for its job, the backoff
 * formula and Retry-After. The policy is pure, so every case is a row of a table.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  backoffMs,
  classify,
  decideAttempt,
  parseRetryAfter,
  type AttemptResult,
  type RetrySettings,
} from "../../src/job/retry-policy.js";

/** A whole second, so HTTP-dates (second precision) land exactly. */
const NOW = Date.UTC(2026, 10, 21, 12, 0, 0);
const RETRY: RetrySettings = { base_ms: 1000, factor: 2, max_ms: 10_000, retry_after_max_ms: 600_000 };
/** The backoff after the first failure at random 0.5: 1000 × (0.5 + 0.25). */
const FIRST_BACKOFF_MS = 750;

function response(
  statusCode: number,
  options: { jobRetry?: string; retryAfter?: string; body?: string | null } = {},
): AttemptResult {
  return {
    kind: "response",
    statusCode,
    jobRetry: options.jobRetry,
    retryAfter: options.retryAfter,
    body: options.body === undefined ? (statusCode >= 200 && statusCode < 300 ? null : "") : options.body,
  };
}

const noResponse = (error: string): AttemptResult => ({ kind: "no-response", error });

const httpDate = (ms: number): string => new Date(ms).toUTCString();

function decide(
  result: AttemptResult,
  options: { attempt?: number; maxAttempts?: number; retry?: RetrySettings; random?: number } = {},
) {
  return decideAttempt({
    attempt: options.attempt ?? 1,
    maxAttempts: options.maxAttempts ?? 5,
    result,
    now: NOW,
    retry: options.retry ?? RETRY,
    random: options.random ?? 0.5,
  });
}

const AUTH_UNRESOLVABLE = JSON.stringify({ code: "auth_unresolvable", message: "user deleted" });

describe("classify: the rules of docs/delivery.md, 'How an attempt ends', first match wins", () => {
  const retry = { kind: "retry" };
  const success = { kind: "success" };
  const dead = (reason: string) => ({ kind: "dead", reason });
  const rows: Array<{ rule: string; name: string; result: AttemptResult; expected: object }> = [
    // Rule 1: no response.
    {
      rule: "1",
      name: "connection refused",
      result: noResponse("ECONNREFUSED: connect ECONNREFUSED"),
      expected: retry,
    },
    { rule: "1", name: "a timeout", result: noResponse("timed out after 30000 ms"), expected: retry },
    { rule: "1", name: "a reset connection", result: noResponse("ECONNRESET: socket hang up"), expected: retry },
    // Rule 2: non-2xx with x-job-retry: never, even where a later rule would retry.
    {
      rule: "2",
      name: "503 with x-job-retry: never",
      result: response(503, { jobRetry: "never" }),
      expected: dead("rejected-by-endpoint"),
    },
    {
      rule: "2",
      name: "429 with x-job-retry: never",
      result: response(429, { jobRetry: "never" }),
      expected: dead("rejected-by-endpoint"),
    },
    {
      rule: "2",
      name: "400 with x-job-retry: never",
      result: response(400, { jobRetry: "never" }),
      expected: dead("rejected-by-endpoint"),
    },
    {
      rule: "2",
      name: "302 with x-job-retry: never",
      result: response(302, { jobRetry: "never" }),
      expected: dead("rejected-by-endpoint"),
    },
    {
      rule: "2",
      name: "401 auth_unresolvable with x-job-retry: never",
      result: response(401, { jobRetry: "never", body: AUTH_UNRESOLVABLE }),
      expected: dead("rejected-by-endpoint"),
    },
    // Rule 3: 2xx succeeds whatever x-job-retry says.
    { rule: "3", name: "200", result: response(200), expected: success },
    { rule: "3", name: "204", result: response(204), expected: success },
    { rule: "3", name: "299", result: response(299), expected: success },
    { rule: "3", name: "200 with x-job-retry: never", result: response(200, { jobRetry: "never" }), expected: success },
    {
      rule: "3",
      name: "204 with x-job-retry: always",
      result: response(204, { jobRetry: "always" }),
      expected: success,
    },
    // Rule 4: x-job-retry: always retries what would otherwise be dead.
    { rule: "4", name: "400 with x-job-retry: always", result: response(400, { jobRetry: "always" }), expected: retry },
    { rule: "4", name: "404 with x-job-retry: always", result: response(404, { jobRetry: "always" }), expected: retry },
    { rule: "4", name: "302 with x-job-retry: always", result: response(302, { jobRetry: "always" }), expected: retry },
    {
      rule: "4",
      name: "401 auth_unresolvable with x-job-retry: always",
      result: response(401, { jobRetry: "always", body: AUTH_UNRESOLVABLE }),
      expected: retry,
    },
    // Rule 5: 401 whose JSON body has code auth_unresolvable.
    {
      rule: "5",
      name: "401 with JSON code auth_unresolvable",
      result: response(401, { body: AUTH_UNRESOLVABLE }),
      expected: dead("auth-unresolvable"),
    },
    {
      rule: "5",
      name: "401 with JSON code auth_unresolvable and whitespace",
      result: response(401, { body: ' \n{ "code" : "auth_unresolvable" }\n' }),
      expected: dead("auth-unresolvable"),
    },
    {
      rule: "5",
      name: "401 with another JSON code",
      result: response(401, { body: '{"code":"token_expired"}' }),
      expected: dead("permanent-status"),
    },
    {
      rule: "5",
      name: "401 with a non-JSON body naming the code",
      result: response(401, { body: "auth_unresolvable" }),
      expected: dead("permanent-status"),
    },
    {
      rule: "5",
      name: "401 with a JSON string body",
      result: response(401, { body: '"auth_unresolvable"' }),
      expected: dead("permanent-status"),
    },
    {
      rule: "5",
      name: "401 with the code nested deeper",
      result: response(401, { body: '{"error":{"code":"auth_unresolvable"}}' }),
      expected: dead("permanent-status"),
    },
    {
      rule: "5",
      name: "401 with a JSON null body",
      result: response(401, { body: "null" }),
      expected: dead("permanent-status"),
    },
    {
      rule: "5",
      name: "401 with an empty body",
      result: response(401, { body: "" }),
      expected: dead("permanent-status"),
    },
    {
      rule: "5",
      name: "403 with JSON code auth_unresolvable",
      result: response(403, { body: AUTH_UNRESOLVABLE }),
      expected: dead("permanent-status"),
    },
    // Rule 6: 408, 425, 429, 5xx retry.
    ...[408, 425, 429, 500, 502, 503, 504, 599].map((status) => ({
      rule: "6",
      name: String(status),
      result: response(status, { body: "try later" }),
      expected: retry,
    })),
    {
      rule: "6",
      name: "503 with an unknown x-job-retry value",
      result: response(503, { jobRetry: "sometimes" }),
      expected: retry,
    },
    // Rule 7: anything else is permanent.
    ...[300, 301, 302, 304, 307, 308, 400, 402, 403, 404, 405, 409, 410, 413, 422, 451].map((status) => ({
      rule: "7",
      name: String(status),
      result: response(status, { body: "no" }),
      expected: dead("permanent-status"),
    })),
    {
      rule: "7",
      name: "400 with an unknown x-job-retry value",
      result: response(400, { jobRetry: "sometimes" }),
      expected: dead("permanent-status"),
    },
  ];
  for (const row of rows) {
    const verdict =
      "reason" in row.expected ? `dead ${String(row.expected.reason)}` : (row.expected as { kind: string }).kind;
    test(`rule ${row.rule}: ${row.name} → ${verdict}`, () => {
      assert.deepEqual(classify(row.result), row.expected);
    });
  }
});

describe("decideAttempt: the result written for each kind of ending", () => {
  test("a 2xx succeeds with {status_code, error_body: null, terminal_reason: null}", () => {
    assert.deepEqual(decide(response(204)), {
      status: "succeeded",
      result: { status_code: 204, error_body: null, terminal_reason: null },
    });
  });

  test("a dead attempt keeps its status code and body, with its terminal reason", () => {
    assert.deepEqual(decide(response(404, { body: "no such user" })), {
      status: "dead",
      result: { status_code: 404, error_body: "no such user", terminal_reason: "permanent-status" },
    });
    assert.deepEqual(decide(response(401, { body: AUTH_UNRESOLVABLE })), {
      status: "dead",
      result: { status_code: 401, error_body: AUTH_UNRESOLVABLE, terminal_reason: "auth-unresolvable" },
    });
    assert.deepEqual(decide(response(503, { jobRetry: "never", body: "go away" })), {
      status: "dead",
      result: { status_code: 503, error_body: "go away", terminal_reason: "rejected-by-endpoint" },
    });
  });

  test("a retried response keeps its status code and body, with no terminal reason", () => {
    assert.deepEqual(decide(response(503, { body: "busy" })), {
      status: "retrying",
      delayMs: FIRST_BACKOFF_MS,
      result: { status_code: 503, error_body: "busy", terminal_reason: null },
    });
  });

  test("an attempt without a response has no status_code and says what happened", () => {
    const decision = decide(noResponse("timed out after 30000 ms"));
    assert.deepEqual(decision, {
      status: "retrying",
      delayMs: FIRST_BACKOFF_MS,
      result: { error_body: "timed out after 30000 ms", terminal_reason: null },
    });
    assert.equal("status_code" in decision.result, false);
  });

  test("a retry at attempt < max_attempts goes back to retrying", () => {
    assert.equal(decide(response(503), { attempt: 4, maxAttempts: 5 }).status, "retrying");
  });

  test("a retry at attempt == max_attempts is dead exhausted, keeping the status code and body", () => {
    assert.deepEqual(decide(response(503, { body: "still busy" }), { attempt: 5, maxAttempts: 5 }), {
      status: "dead",
      result: { status_code: 503, error_body: "still busy", terminal_reason: "exhausted" },
    });
  });

  test("a retry at attempt > max_attempts is dead exhausted too", () => {
    assert.deepEqual(decide(response(500, { body: "boom" }), { attempt: 6, maxAttempts: 5 }), {
      status: "dead",
      result: { status_code: 500, error_body: "boom", terminal_reason: "exhausted" },
    });
  });

  test("an exhausted attempt without a response has no status_code", () => {
    assert.deepEqual(decide(noResponse("ECONNREFUSED: connect ECONNREFUSED"), { attempt: 1, maxAttempts: 1 }), {
      status: "dead",
      result: { error_body: "ECONNREFUSED: connect ECONNREFUSED", terminal_reason: "exhausted" },
    });
  });

  test("x-job-retry: always is exhausted like any other retry", () => {
    assert.deepEqual(decide(response(400, { jobRetry: "always", body: "later" }), { attempt: 3, maxAttempts: 3 }), {
      status: "dead",
      result: { status_code: 400, error_body: "later", terminal_reason: "exhausted" },
    });
  });

  test("a dead verdict at the last attempt keeps its own reason, not exhausted", () => {
    assert.equal(decide(response(404), { attempt: 5, maxAttempts: 5 }).result.terminal_reason, "permanent-status");
    assert.equal(
      decide(response(503, { jobRetry: "never" }), { attempt: 5, maxAttempts: 5 }).result.terminal_reason,
      "rejected-by-endpoint",
    );
  });

  test("a success at the last attempt succeeds", () => {
    assert.equal(decide(response(200), { attempt: 5, maxAttempts: 5 }).status, "succeeded");
  });
});

describe("backoff: min(max_ms, base_ms × factor^(attempt−1)) × (0.5 + 0.5 × random)", () => {
  const rows: Array<{ attempt: number; random: number; expected: number; retry?: RetrySettings }> = [
    { attempt: 1, random: 0, expected: 500 },
    { attempt: 1, random: 1, expected: 1000 },
    { attempt: 1, random: 0.5, expected: 750 },
    { attempt: 2, random: 0, expected: 1000 },
    { attempt: 2, random: 1, expected: 2000 },
    { attempt: 3, random: 1, expected: 4000 },
    { attempt: 4, random: 0, expected: 4000 },
    { attempt: 4, random: 1, expected: 8000 },
    // 16000 before the cap.
    { attempt: 5, random: 1, expected: 10_000 },
    { attempt: 5, random: 0, expected: 5000 },
    // factor^(attempt−1) overflows to Infinity; the cap still holds.
    { attempt: 5000, random: 0.5, expected: 7500 },
    { attempt: 7, random: 1, expected: 1000, retry: { ...RETRY, factor: 1 } },
    // The config defaults: 5 s × 4^(attempt−1), capped at 1 h.
    {
      attempt: 1,
      random: 1,
      expected: 5000,
      retry: { base_ms: 5000, factor: 4, max_ms: 3_600_000, retry_after_max_ms: 86_400_000 },
    },
    {
      attempt: 3,
      random: 0,
      expected: 40_000,
      retry: { base_ms: 5000, factor: 4, max_ms: 3_600_000, retry_after_max_ms: 86_400_000 },
    },
    {
      attempt: 7,
      random: 1,
      expected: 3_600_000,
      retry: { base_ms: 5000, factor: 4, max_ms: 3_600_000, retry_after_max_ms: 86_400_000 },
    },
  ];
  for (const row of rows) {
    const settings = row.retry ?? RETRY;
    test(`attempt ${row.attempt} at random ${row.random} with base ${settings.base_ms}, factor ${settings.factor}, max ${settings.max_ms} → ${row.expected} ms`, () => {
      assert.equal(backoffMs({ attempt: row.attempt, retry: settings, random: row.random }), row.expected);
    });
  }

  test("a retrying attempt runs again after the backoff of its attempt number", () => {
    for (const attempt of [1, 2, 3, 4]) {
      const decision = decide(response(500), { attempt, random: 1 });
      assert.equal(decision.status, "retrying");
      assert.equal(decision.status === "retrying" && decision.delayMs, 1000 * 2 ** (attempt - 1));
    }
  });
});

describe("Retry-After", () => {
  /** The delay of a retrying decision, counted from the moment its outcome is written. */
  const delayOf = (result: AttemptResult, options: Parameters<typeof decide>[1] = {}): number => {
    const decision = decide(result, options);
    assert.equal(decision.status, "retrying");
    return decision.status === "retrying" ? decision.delayMs : Number.NaN;
  };

  test("parses delta-seconds", () => {
    assert.equal(parseRetryAfter("120", NOW), 120_000);
    assert.equal(parseRetryAfter("0", NOW), 0);
    assert.equal(parseRetryAfter(" 30 ", NOW), 30_000);
    assert.equal(parseRetryAfter("2030", NOW), 2_030_000);
  });

  test("parses an HTTP-date in each of its three forms, as the time left until it", () => {
    assert.equal(parseRetryAfter(httpDate(NOW + 90_000), NOW), 90_000);
    // 1994-11-06T08:49:37Z in IMF-fixdate, the obsolete RFC 850 form and asctime (always GMT).
    const then = Date.UTC(1994, 10, 6, 8, 49, 37);
    assert.equal(parseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", then - 1000), 1000);
    assert.equal(parseRetryAfter("Sunday, 06-Nov-94 08:49:37 GMT", then - 1000), 1000);
    assert.equal(parseRetryAfter("Sun Nov  6 08:49:37 1994", then - 1000), 1000);
  });

  test("an HTTP-date in the past asks for no wait", () => {
    assert.equal(parseRetryAfter(httpDate(NOW - 60_000), NOW), 0);
  });

  test("an absent header asks for nothing", () => {
    assert.equal(parseRetryAfter(undefined, NOW), undefined);
  });

  for (const value of ["soon", "", "1.5", "3600.5", "-5", "+5", "10 seconds", "2099-01-01T00:00:00Z", "12abc"]) {
    test(`an unreadable value ${JSON.stringify(value)} is ignored`, () => {
      assert.equal(parseRetryAfter(value, NOW), undefined);
      assert.equal(delayOf(response(503, { retryAfter: value })), FIRST_BACKOFF_MS);
    });
  }

  test("is honoured on 503 as seconds", () => {
    assert.equal(delayOf(response(503, { retryAfter: "120" })), 120_000);
  });

  test("is honoured on 429 as an HTTP-date", () => {
    assert.equal(delayOf(response(429, { retryAfter: httpDate(NOW + 90_000) })), 90_000);
  });

  test("is honoured on any status with x-job-retry: always", () => {
    assert.equal(delayOf(response(400, { jobRetry: "always", retryAfter: "30" })), 30_000);
    assert.equal(delayOf(response(500, { jobRetry: "always", retryAfter: "30" })), 30_000);
  });

  for (const status of [408, 425, 500, 502, 504]) {
    test(`is ignored on ${status} without x-job-retry: always`, () => {
      assert.equal(delayOf(response(status, { retryAfter: "120" })), FIRST_BACKOFF_MS);
    });
  }

  test("never lowers the backoff", () => {
    // Attempt 4 at random 0.5: 8000 × 0.75 = 6000 ms, more than the 1 s asked for.
    assert.equal(delayOf(response(503, { retryAfter: "1" }), { attempt: 4 }), 6000);
    assert.equal(delayOf(response(429, { retryAfter: httpDate(NOW - 5000) }), { attempt: 4 }), 6000);
  });

  test("is capped at retry_after_max_ms", () => {
    assert.equal(delayOf(response(503, { retryAfter: "86400" })), RETRY.retry_after_max_ms);
    assert.equal(delayOf(response(429, { retryAfter: httpDate(NOW + 3_600_000) })), RETRY.retry_after_max_ms);
  });

  test("capped below the backoff, leaves the backoff", () => {
    const retry = { ...RETRY, retry_after_max_ms: 1000 };
    assert.equal(delayOf(response(503, { retryAfter: "86400" }), { attempt: 4, retry }), 6000);
  });

  test("does not save an exhausted job", () => {
    assert.deepEqual(decide(response(503, { retryAfter: "5", body: "" }), { attempt: 5, maxAttempts: 5 }), {
      status: "dead",
      result: { status_code: 503, error_body: "", terminal_reason: "exhausted" },
    });
  });
});

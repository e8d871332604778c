/**
 * `@opqueue/client` describes the wire with types and rules of its own, so that a product installs it without the
 * service. The service's schemas stay the one source of truth: these tests hold the client to them, so a status,
 * terminal reason or error code added to the service, a changed field of the job, of flow control's or of schedules' forms, or
 * another request-id rule fails here until the client says the same.
 */
import assert from "node:assert/strict";
import type { Static } from "@sinclair/typebox";
import { describe, test } from "node:test";
import * as client from "@opqueue/client";
import {
  isCanonicalSegment as clientIsCanonicalSegment,
  isValidRequestId as clientIsValidRequestId,
  REQUEST_ID_RULE as CLIENT_REQUEST_ID_RULE,
} from "../../packages/client/src/token-rules.js";
import { isCanonicalSegment, isValidRequestId, REQUEST_ID_RULE } from "../../src/auth/hs256.js";
import { ERROR_CODES } from "../../src/errors.js";
import * as service from "../../src/job/schemas.js";
import type * as chains from "../../src/chains/schemas.js";
import type * as flow from "../../src/flow/schemas.js";
import type * as attemptCalls from "../../src/async-jobs/schemas.js";
import type { OperationList } from "../../src/http/routes/operations.js";
import type * as schedules from "../../src/schedules/schemas.js";

/** True when A and B are assignable both ways: the same wire shape. */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
/** A wire name as the client's options spell it: `original_request_id` is `originalRequestId`. */
type Camel<S extends string> = S extends `${infer Head}_${infer Tail}` ? `${Head}${Capitalize<Camel<Tail>>}` : S;

// Checked by `npm run lint` (tsc): each line fails to compile when the client's type and the service's schema differ.
const typesAgree: Array<true> = [
  true satisfies Same<client.Job, service.Job>,
  true satisfies Same<client.Authority, service.Authority>,
  true satisfies Same<client.RequestPayload, service.RequestPayload>,
  true satisfies Same<client.JobResult, service.JobResult>,
  true satisfies Same<client.JobStatus, service.JobStatus>,
  true satisfies Same<client.TerminalReason, service.TerminalReason>,
  true satisfies Same<client.JobAttempt, service.JobAttempt>,
  true satisfies Same<client.JobHistoryEvent, service.JobHistoryEvent>,
  true satisfies Same<client.JobExtensions, Static<typeof service.JobExtensions>["extensions"]>,
  true satisfies Same<client.Chain, chains.ChainBody>,
  true satisfies Same<client.RateLimit, flow.RateLimitBody>,
  true satisfies Same<client.OperationLimits, Static<typeof flow.Limits>>,
  true satisfies Same<client.LimitsPatch, flow.LimitsPatch>,
  true satisfies Same<client.OperationControl, flow.OperationControlBody>,
  true satisfies Same<client.PausedKey, flow.PausedKeyBody>,
  true satisfies Same<client.OperationSummary, OperationList["operations"][number]>,
  // cancelJobs takes every filter of POST /jobs/cancel, by its camelCase name, and the same statuses.
  true satisfies Same<keyof client.CancelJobsFilter, Camel<keyof flow.CancelJobsBody>>,
  true satisfies Same<
    NonNullable<client.CancelJobsFilter["statuses"]>[number],
    NonNullable<flow.CancelJobsBody["statuses"]>[number]
  >,
  true satisfies Same<client.Schedule, schedules.ScheduleBody>,
  true satisfies Same<client.ScheduleDefinition, schedules.ScheduleCreateBody>,
  true satisfies Same<client.SchedulePatch, schedules.SchedulePatchBody>,
  // A target's calls on its attempt: the answer to a heartbeat, and every field of complete and fail by its camelCase name.
  true satisfies Same<client.HeartbeatAnswer, attemptCalls.HeartbeatAnswer>,
  true satisfies Same<keyof client.CompleteOptions, Camel<keyof attemptCalls.CompleteBody>>,
  true satisfies Same<keyof client.FailOptions, Camel<keyof attemptCalls.FailBody>>,
  true satisfies Same<NonNullable<client.FailOptions["retry"]>, NonNullable<attemptCalls.FailBody["retry"]>>,
];

describe("the client's wire agrees with the service's", () => {
  test("the wire types are the same shapes (checked at compile time)", () => {
    assert.equal(typesAgree.length, 25);
  });

  test("job statuses and terminal reasons are the same lists, in the same order", () => {
    assert.deepEqual(client.JOB_STATUSES, service.JOB_STATUSES);
    assert.deepEqual(client.TERMINAL_REASONS, service.TERMINAL_REASONS);
  });

  test("error codes are the same, under the same statuses, and each has a typed error class in the client", () => {
    assert.deepEqual(client.ERROR_CODES, ERROR_CODES);
    for (const [status, codes] of Object.entries(client.ERROR_CODES)) {
      for (const code of codes) {
        const error = client.errorFor({ status: Number(status), code, message: "m" });
        assert.ok(error instanceof client.OpqueueError);
        assert.notEqual(error.constructor, client.OpqueueError, `${code} has a class of its own`);
        // The class is named after the code: invalid_request is InvalidRequestError.
        const expected = `${code.replace(/(^|_)([a-z])/g, (_match, _sep, letter: string) => letter.toUpperCase())}Error`;
        assert.equal(error.name, expected, code);
      }
    }
  });

  test("the request-id rule says the same of every case, and words it the same", () => {
    const cases: Array<[string, boolean]> = [
      ["req-1", true],
      ["a", true],
      ["!", true],
      ["~", true],
      ["x".repeat(255), true],
      ["x".repeat(256), false],
      ["", false],
      [".", false],
      ["..", false],
      ["...", true],
      [".x", true],
      ["%2e%2e", true],
      ["a b", false],
      ["a\tb", false],
      ["line\nbreak", false],
      ["\x7f", false],
      ["é", false],
      ["日本", false],
      ["\u{1F600}", false],
      ["a/b?c#d", true],
    ];
    for (const [rid, valid] of cases) {
      assert.equal(isValidRequestId(rid), valid, `service: ${JSON.stringify(rid)}`);
      assert.equal(clientIsValidRequestId(rid), valid, `client: ${JSON.stringify(rid)}`);
    }
    assert.equal(CLIENT_REQUEST_ID_RULE, REQUEST_ID_RULE);
  });

  test("the canonical spelling of a token segment is the same: every last character of every length, and strangers", () => {
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const segments = ["", "AA==", "A+/B", "AB C", "ABé", "A.B"];
    for (const last of alphabet) for (const head of ["", "A", "AB", "ABC", "ABCD"]) segments.push(head + last);
    for (const segment of segments) {
      assert.equal(clientIsCanonicalSegment(segment), isCanonicalSegment(segment), JSON.stringify(segment));
    }
    // Not vacuous: the table holds both answers.
    assert.ok(
      segments.some((segment) => isCanonicalSegment(segment)) &&
        segments.some((segment) => !isCanonicalSegment(segment)),
    );
  });
});

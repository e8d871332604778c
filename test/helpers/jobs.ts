/**
 * Shared steps of the HTTP contract tests: enqueue through the API, read a job back, and move a job into a
 * state only the dispatcher reaches (running, retrying, dead, succeeded) through the store.
 */
import assert from "node:assert/strict";
import type { LightMyRequestResponse } from "fastify";
import type { Job, JobResult } from "../../src/job/schemas.js";
import { startTestService, type TestService } from "./service.js";

/** Starts a fresh test service for test `t`, closed when that test ends. */
export async function startService(
  t: { after: (fn: () => Promise<void>) => void },
  options: Parameters<typeof startTestService>[0] = {},
): Promise<TestService> {
  const s = await startTestService(options);
  t.after(() => s.close());
  return s;
}

/** An instant as the API writes it: RFC 3339 UTC with milliseconds. */
export const iso = (ms: number): string => new Date(ms).toISOString();

/** Claims made by `s.assertion`. */
export type AssertionClaims = Parameters<TestService["assertion"]>[0];

/** An RFC 3339 UTC date with milliseconds, as every job time is written. */
export const RFC3339_MS_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** The fields of docs/api.md's Job, sorted. */
export const JOB_FIELDS = [
  "attempt",
  "authority",
  "concurrency_key",
  "created_at",
  "dedupe_key",
  "enqueued_by_operation_id",
  "finished_at",
  "id",
  "max_attempts",
  "operation_id",
  "original_request_id",
  "parent_job_id",
  "priority",
  "request",
  "result",
  "run_at",
  "started_at",
  "status",
  "user_id",
] as const;

/** A valid enqueue body for `sendWelcomeEmail` (which needs the `userId` path parameter). */
export function welcomeEmail(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { operation_id: "sendWelcomeEmail", request: { path_params: { userId: "42" } }, ...extra };
}

/** A valid enqueue body for `buildReport` (no path parameters). */
export function buildReport(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { operation_id: "buildReport", request: { body: {} }, ...extra };
}

/** `POST /jobs` with a freshly minted assertion; the raw response. */
export async function postJob(
  s: TestService,
  payload: unknown,
  claims: AssertionClaims = {},
): Promise<LightMyRequestResponse> {
  return s.inject({ method: "POST", url: "/jobs", token: await s.assertion(claims), payload: payload as object });
}

/** `POST /jobs` that must answer `status` (201 by default); the job of the answer. */
export async function enqueue(
  s: TestService,
  payload: unknown,
  claims: AssertionClaims = {},
  status: 200 | 201 = 201,
): Promise<Job> {
  const res = await postJob(s, payload, claims);
  assert.equal(res.statusCode, status, res.body);
  return (res.json() as { job: Job }).job;
}

/** Asserts an error response's status and code, and that its body is exactly `{code, message}`. */
export function assertError(res: LightMyRequestResponse, status: number, code: string): void {
  assert.equal(res.statusCode, status, res.body);
  const body = res.json() as Record<string, unknown>;
  assert.deepEqual(Object.keys(body).sort(), ["code", "message"], res.body);
  assert.equal(body["code"], code, res.body);
  assert.equal(typeof body["message"], "string");
  assert.ok((body["message"] as string).length > 0, "the message is not empty");
}

/** `GET /jobs/{id}` as a site admin; the job. */
export async function getJob(s: TestService, id: string): Promise<Job> {
  const res = await s.inject({ method: "GET", url: `/jobs/${id}`, token: await s.adminToken() });
  assert.equal(res.statusCode, 200, res.body);
  return (res.json() as { job: Job }).job;
}

/** A failed attempt's result. */
export const FAILED: JobResult = { status_code: 500, error_body: "x", terminal_reason: null };

/**
 * Claims the next claimable job, which must be `id` (create the job to drive before any other due job), and
 * leaves it in `status`: `running`, or the outcome of that attempt. A `retrying` job is due an hour later.
 */
export async function driveTo(
  s: TestService,
  id: string,
  status: "running" | "retrying" | "dead" | "succeeded",
): Promise<void> {
  const store = s.service.store;
  const claimed = await store.jobClaimMany({ limit: 1 });
  assert.equal(claimed[0]?.id, id, "the job to drive must be the next one in claim order");
  const attempt = claimed[0].attempt;
  let written: boolean[] = [];
  switch (status) {
    case "running":
      return;
    case "retrying":
      written = await store.jobSetStateIfRunningMany({
        outcomes: [{ id, attempt, status, delayMs: 3_600_000, result: FAILED }],
      });
      break;
    case "dead":
      written = await store.jobSetStateIfRunningMany({
        outcomes: [{ id, attempt, status, result: { ...FAILED, terminal_reason: "exhausted" } }],
      });
      break;
    case "succeeded":
      written = await store.jobSetStateIfRunningMany({
        outcomes: [{ id, attempt, status, result: { status_code: 200, error_body: null, terminal_reason: null } }],
      });
      break;
  }
  assert.deepEqual(written, [true]);
}

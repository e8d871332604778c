/**
 * TypeBox schemas of everything a job looks like on the wire: validation, TypeScript types and the served
 * OpenAPI document all come from here. Each concern keeps its schemas in a module of its own, named here:
 * - job-view-schemas.ts: the job itself (authority, request payload, result) and the envelopes that carry jobs;
 * - enqueue-schemas.ts: the bodies of `POST /jobs` and `POST /jobs/batch`, their limits and the batch's answer;
 * - job-detail-schemas.ts: a job's extensions, attempts and history;
 * - admin-schemas.ts: the dashboard's overview and the bulk retry of dead jobs;
 * and here, the error body every route answers with.
 */
import { Type } from "@sinclair/typebox";

export { JOB_STATUSES, type JobStatus } from "./statuses.js";
export {
  Authority,
  CronAuthority,
  Job,
  JobEnvelope,
  JobPage,
  JobResult,
  JobsEnvelope,
  RequestAuthority,
  RequestPayload,
  ResourceAuthority,
  TERMINAL_REASONS,
  type TerminalReason,
} from "./job-view-schemas.js";
export {
  BatchEnqueueAnswer,
  BatchEnqueueBody,
  BatchEnqueueEnvelope,
  BatchEnqueueResult,
  CALLBACK_FIELDS,
  EnqueueBody,
  MAX_BATCH_JOBS,
  MAX_DELAY_MS,
} from "./enqueue-schemas.js";
export { JobAttempt, JobAttempts, JobExtensions, JobHistory, JobHistoryEvent } from "./job-detail-schemas.js";
export { MAX_BULK_RETRY, RetryDeadBody, Stats } from "./admin-schemas.js";

/** The body of every error response. */
export const ErrorBody = Type.Object({ code: Type.String(), message: Type.String() }, { additionalProperties: false });

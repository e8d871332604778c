/**
 * What the service sends and accepts, as plain TypeScript types: the job on the wire (docs/api.md, "The job on the
 * wire"), its statuses and terminal reasons, the error codes (docs/api.md, "Errors"), and flow control's forms
 * (docs/flow-control.md): an operation's limits and pause, a paused concurrency key. The service validates with
 * schemas of its own; a test of its suite (test/client/wire-agreement.test.ts) holds these to them, so the client
 * needs none of the service's code.
 */

/** Every status of a job, in the order of its life. */
export const JOB_STATUSES = ["pending", "running", "retrying", "succeeded", "dead", "cancelled"] as const;
/** A job status. */
export type JobStatus = (typeof JOB_STATUSES)[number];

/** Why a job ended the way it did. */
export const TERMINAL_REASONS = [
  "exhausted",
  "permanent-status",
  "rejected-by-endpoint",
  "auth-unresolvable",
  "cancelled-by-admin",
  "cancelled-by-chain",
  "expired",
] as const;
/** A terminal reason. */
export type TerminalReason = (typeof TERMINAL_REASONS)[number];

/** Every `code` an error answer of the service can carry, by HTTP status. */
export const ERROR_CODES = {
  400: ["invalid_request", "payload_too_large", "invalid_on_behalf_of", "missing_path_param", "invalid_path_param"],
  401: ["invalid_assertion", "unauthenticated", "invalid_delivery_token"],
  403: [
    "trigger_not_allowed",
    "on_behalf_of_not_allowed",
    "chain_mismatch",
    "site_admin_required",
    "insufficient_role",
  ],
  404: ["job_not_found", "not_found", "operation_not_found", "chain_not_found", "schedule_not_found", "api_disabled"],
  409: [
    "job_running",
    "job_not_cancellable",
    "job_not_retryable",
    "dedupe_conflict",
    "job_not_waiting",
    "chain_exists",
    "schedule_exists",
    "schedule_read_only",
    "job_not_running",
    "schedule_limit_reached",
  ],
  413: ["body_too_large"],
  415: ["unsupported_media_type"],
  422: ["unknown_operation", "operation_not_background", "request_schema_mismatch", "idempotency_key_reused"],
  429: ["spawn_cap_exceeded"],
  500: ["internal"],
  503: ["unavailable"],
} as const;
/** An error code of the service. */
export type ErrorCode = (typeof ERROR_CODES)[keyof typeof ERROR_CODES][number];

/** The authority a chain runs under (docs/api.md, "Chains"), discriminated on `kind`. */
export type Authority =
  | { kind: "request"; request_id: string; user_id: string }
  | { kind: "resource"; resource_id: string; resource_kind: string; user_id: string }
  | { kind: "cron"; cron_job_name: string; user_id: string };

/** The request delivered to the target operation. */
export interface RequestPayload {
  /** The JSON body. */
  body?: unknown;
  /** Path template substitutions by name; a value whose text is empty, `.` or `..` is refused (400 invalid_path_param). */
  path_params?: Record<string, unknown>;
  /** Query parameters by name. */
  query?: Record<string, unknown>;
}

/** The outcome of a job's latest terminal or failed attempt. */
export interface JobResult {
  /** The target's HTTP status, when it answered. */
  status_code?: number;
  error_body: string | null;
  terminal_reason: TerminalReason | null;
  /**
   * The target's 2xx body, for an operation with `store_result`; absent otherwise. The JSON value itself when the
   * target answered JSON (`body_format: "json"`), else the text (`"text"`), cut at 8 KiB.
   */
  body?: unknown;
  /** `json`: `body` is the parsed JSON answer; `text`: it is text. Absent on results stored before opqueue parsed them (text). */
  body_format?: "json" | "text";
  /** Present when the body was cut at 8,192 bytes: it is then text, even from a JSON answer. */
  body_truncated?: true;
}

/** A job on the wire; times are ISO 8601 strings. */
export interface Job {
  id: string;
  operation_id: string;
  status: JobStatus;
  attempt: number;
  max_attempts: number;
  priority: number;
  run_at: string;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  dedupe_key: string | null;
  concurrency_key: string | null;
  enqueued_by_operation_id: string;
  parent_job_id: string | null;
  original_request_id: string;
  user_id: string;
  authority: Authority;
  request: RequestPayload;
  result: JobResult | null;
}

/** One finished delivery attempt (`GET /jobs/{id}/attempts`). */
export interface JobAttempt {
  /** Its number: 1 for the first after creation or after an administrator's retry. */
  attempt: number;
  started_at: string | null;
  finished_at: string;
  /** The status it left the job in. */
  outcome: JobStatus;
  /** The target's status, or null when it did not answer. */
  status_code: number | null;
  error_body: string | null;
}

/** What an administrator did to a job. */
export type AdminAction = "cancel" | "retry" | "retry-dead" | "cancel-chain" | "run-now" | "cancel-many";

/** One event of a job's history (`GET /jobs/{id}/history`), discriminated on `type`. */
export type JobHistoryEvent =
  /** The job was created, by the calling operation `by` (`cron:NAME` for a cron tick). */
  | { type: "enqueued"; at: string; by: string }
  /**
   * A finished attempt: `number` counts every attempt of the job across administrators' retries, `attempt` is the
   * job's counter then (which a retry starts again).
   */
  | {
      type: "attempt";
      at: string;
      number: number;
      attempt: number;
      started_at: string | null;
      outcome: JobStatus;
      status_code: number | null;
      error_body: string | null;
    }
  /**
   * An administrator's change; `actor` is the admin token's `sub`, `role` its role (null for a change recorded before
   * roles were).
   */
  | { type: "admin"; at: string; actor: string; role: "operator" | "admin" | null; action: AdminAction };

/** What opqueue keeps of a job beyond its wire form (`GET /jobs/{id}/extensions`). */
export interface JobExtensions {
  /** The rate key it was enqueued with, or null. */
  rate_key: string | null;
  /** Its expiry (RFC 3339), or null. */
  expires_at: string | null;
  /** Its W3C trace context, or null. */
  traceparent: string | null;
  /** The latest attempt its target took asynchronously (202 with x-job-async: 1), and when; null if none was. */
  async: { attempt: number; accepted_at: string } | null;
  /** The latest progress a target's heartbeat reported: by which attempt, its JSON value, and when; null if none. */
  progress: { attempt: number; value: unknown; reported_at: string } | null;
}

/** The answer to a heartbeat (`POST /jobs/{id}/heartbeat`). */
export interface HeartbeatAnswer {
  /** When the attempt is rescued (retried) unless another heartbeat, a complete or a fail comes first. */
  lease_expires_at: string;
}

/** Who did an administrator's action (the admin token's `sub`), and when. */
export interface AdminStamp {
  at: string;
  by: string;
}

/**
 * A rate limit: at most `limit` jobs started per `period_ms` on average, and at most `burst` (default `limit`) at once
 * after a quiet spell. The service always answers with `burst`; a limit you send may leave it out.
 */
export interface RateLimit {
  limit: number;
  period_ms: number;
  burst?: number;
}

/** An operation's limits, cluster-wide; null: no such limit. */
export interface OperationLimits {
  /** Jobs of the operation started over time. */
  rate: RateLimit | null;
  /** Jobs of the operation started over time per `rate_key` (jobs enqueued without one are not limited by it). */
  rate_per_key: RateLimit | null;
  /** Jobs of the operation running at once, across every node. */
  max_concurrency: number | null;
  /** Jobs of the operation running at once per concurrency key (1: the contract's rule). */
  concurrency_limit: number;
}

/** A rate limit as you send it: `period_ms` may be left out (1000), `burst` too (`limit`). */
export interface RateLimitInput {
  limit: number;
  period_ms?: number;
  burst?: number;
}

/** The body of `PATCH /operations/{id}/limits`: the limits to change (null removes one); the others are kept. */
export type LimitsPatch = Partial<
  Omit<OperationLimits, "rate" | "rate_per_key"> & { rate: RateLimitInput | null; rate_per_key: RateLimitInput | null }
>;

/** An operation's flow control: its pause, and its limits in force with where they come from. */
export interface OperationControl {
  operation_id: string;
  /** Who paused the operation, and when; null while it runs. */
  paused: AdminStamp | null;
  limits: OperationLimits;
  /** `config`: the configuration's values; `admin`: set through the API, kept across restarts until reset. */
  limits_source: "config" | "admin";
  /** Who set the limits through the API last, and when; null for the configuration's. */
  limits_set: AdminStamp | null;
}

/** A background operation as `GET /operations` lists it, with its flow control. */
export interface OperationSummary {
  operation_id: string;
  /** The HTTP method of a delivery, upper case. */
  method: string;
  /** The path template, as the product's OpenAPI document writes it. */
  path: string;
  max_attempts: number;
  timeout_ms: number;
  control: Omit<OperationControl, "operation_id">;
}

/** A paused concurrency key: no job with it is claimed, of any operation, until it is resumed. */
export interface PausedKey {
  concurrency_key: string;
  paused: AdminStamp;
}

/** A job of a chain with its attempts and the jobs it enqueued (`GET /chains/{original_request_id}`). */
export interface ChainNode {
  job: Job;
  attempts: JobAttempt[];
  children: ChainNode[];
}

/** A chain as a unit (docs/chains.md). */
export interface Chain {
  original_request_id: string;
  started_at: string | null;
  settled: boolean;
  settled_at: string | null;
  cancelled_at: string | null;
  cancelled_by: string | null;
  counts: Record<JobStatus, number>;
  spawn_cap: { used: number; limit: number };
  on_settled: { operation_id: string; job_id: string; fired_at: string | null } | null;
  jobs: ChainNode[];
  truncated: boolean;
}

/** What a schedule enqueues and when (docs/schedules.md): the fields of `POST /schedules`, defaults noted. */
export interface ScheduleDefinition {
  /** Letters, digits, `_`, `-` and `.` (not first), at most 200; unique, config entries included. */
  name: string;
  /** A cron expression of 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first). */
  schedule: string;
  /** The IANA time zone the expression is read in (default `UTC`). */
  timezone?: string;
  /** The background operation each tick enqueues a job of (the trigger map's `cron:*` must list it). */
  operation_id: string;
  /** The user the jobs run as. */
  user_id: string;
  /** The jobs' request (default `{}`). */
  request?: RequestPayload;
  /** The jobs' priority (default 0). */
  priority?: number;
  /** The jobs' dedupe key (default `cron:{name}`: a tick refreshes a job still waiting); null: none. */
  dedupe_key?: string | null;
  /** The jobs' concurrency key (default none). */
  concurrency_key?: string | null;
}

/** The body of `PATCH /schedules/{name}`: the fields to change (null removes a key); the others are kept. */
export type SchedulePatch = Partial<Required<Omit<ScheduleDefinition, "name">>>;

/** A schedule as the service answers it: its definition, where it comes from, and its next and last runs. */
export interface Schedule {
  name: string;
  /** `config`: a cron entry of the config file, read-only through the API; `api`: created through the API. */
  source: "config" | "api";
  schedule: string;
  timezone: string;
  operation_id: string;
  user_id: string;
  request: RequestPayload;
  priority: number;
  dedupe_key: string | null;
  concurrency_key: string | null;
  /** Who paused it, and when; null while it runs. */
  paused: AdminStamp | null;
  /** Who created it, and when; null for a config entry. */
  created: AdminStamp | null;
  /** Who last changed its definition, and when; null for a config entry. */
  updated: AdminStamp | null;
  /** Its next tick; null while paused, or when the expression never fires again. */
  next_run_at: string | null;
  /** Its last recorded tick. */
  last_run_at: string | null;
  /** The job the last tick enqueued (or refreshed); null when it enqueued none. */
  last_job_id: string | null;
}

/**
 * TypeBox schemas of the job on the wire (docs/api.md, "The job on the wire"): its authority, its request payload, its
 * result, and the envelopes that carry one job or many. The schemas of what else is said about jobs sit beside it
 * (enqueue-schemas.ts, job-detail-schemas.ts, admin-schemas.ts); schemas.ts names them all.
 */
import { Type, type Static } from "@sinclair/typebox";
import { JOB_STATUSES } from "./statuses.js";

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

/** A string of at least one character. */
export const NonEmpty = Type.String({ minLength: 1 });

/** Authority granted by a user request. */
export const RequestAuthority = Type.Object(
  { kind: Type.Literal("request"), request_id: NonEmpty, user_id: NonEmpty },
  { additionalProperties: false },
);
/** Authority granted over a resource. */
export const ResourceAuthority = Type.Object(
  { kind: Type.Literal("resource"), resource_id: NonEmpty, resource_kind: NonEmpty, user_id: NonEmpty },
  { additionalProperties: false },
);
/** Authority of a cron schedule. */
export const CronAuthority = Type.Object(
  { kind: Type.Literal("cron"), cron_job_name: NonEmpty, user_id: NonEmpty },
  { additionalProperties: false },
);
/** The authority object (docs/api.md, "Chains"), discriminated on `kind`. */
export const Authority = Type.Union([RequestAuthority, ResourceAuthority, CronAuthority]);
/** The wire form of an authority (the stored enqueue assertion is never part of it). */
export type Authority = Static<typeof Authority>;

/**
 * An object with any keys. Not `Type.Record(Type.String(), …)`: the response serializer tests keys against its
 * `^(.*)$` pattern, which a key holding a line break does not match, so such keys vanished from responses.
 */
const AnyKeys = (options: { description: string }) =>
  Type.Unsafe<Record<string, unknown>>({ type: "object", additionalProperties: {}, ...options });

/** The capped request payload delivered to the target operation. */
export const RequestPayload = Type.Object(
  {
    body: Type.Optional(Type.Unknown({ description: "JSON body for the target operation." })),
    path_params: Type.Optional(
      AnyKeys({
        description:
          "Path template substitutions by name, sent as encodeURIComponent(String(value)); a value whose text is empty, " +
          '"." or ".." is refused with 400 invalid_path_param (it would reach another route once normalised).',
      }),
    ),
    query: Type.Optional(AnyKeys({ description: "Query parameters by name." })),
  },
  { additionalProperties: false },
);
/** A request payload. */
export type RequestPayload = Static<typeof RequestPayload>;

/** The outcome of the latest terminal or failed attempt. */
export const JobResult = Type.Object(
  {
    status_code: Type.Optional(Type.Integer()),
    error_body: Type.Union([Type.String(), Type.Null()]),
    terminal_reason: Type.Union([...TERMINAL_REASONS.map((reason) => Type.Literal(reason)), Type.Null()]),
    body: Type.Optional(
      Type.Unknown({
        description:
          "The target's 2xx body, for an operation with store_result (docs/chains.md); absent otherwise. The JSON value " +
          "itself when the target answered JSON (body_format json), else the text, cut at 8,192 bytes (body_format text).",
      }),
    ),
    body_format: Type.Optional(
      Type.Union([Type.Literal("json"), Type.Literal("text")], {
        description:
          "json: body is the parsed JSON answer; text: body is text. Absent on results stored as text before it existed.",
      }),
    ),
    body_truncated: Type.Optional(
      Type.Literal(true, {
        description: "Present when the body was cut at 8,192 bytes: it is then text, even from a JSON answer.",
      }),
    ),
  },
  { additionalProperties: false },
);
/** A job result. */
export type JobResult = Static<typeof JobResult>;

/** An RFC 3339 date-time. */
export const DateTime = Type.String({ format: "date-time" });
const NullableString = Type.Union([Type.String(), Type.Null()]);

/** The wire form of a job: exactly the fields of docs/api.md, "The job on the wire". */
export const Job = Type.Object(
  {
    id: Type.String({ pattern: "^[0-9A-Za-z_-]{8,32}$" }),
    operation_id: Type.String(),
    status: Type.Union(JOB_STATUSES.map((status) => Type.Literal(status))),
    attempt: Type.Integer({ minimum: 0 }),
    max_attempts: Type.Integer({ minimum: 1 }),
    priority: Type.Integer(),
    run_at: DateTime,
    created_at: DateTime,
    started_at: Type.Union([DateTime, Type.Null()]),
    finished_at: Type.Union([DateTime, Type.Null()]),
    dedupe_key: NullableString,
    concurrency_key: NullableString,
    enqueued_by_operation_id: Type.String(),
    parent_job_id: NullableString,
    original_request_id: Type.String(),
    user_id: Type.String(),
    authority: Authority,
    request: RequestPayload,
    result: Type.Union([JobResult, Type.Null()]),
  },
  { additionalProperties: false },
);
/** A job on the wire. */
export type Job = Static<typeof Job>;

/** `{ job }`, the answer of every operation that returns one job. */
export const JobEnvelope = Type.Object({ job: Job }, { additionalProperties: false });

/** `{ jobs }`, the answer of operations that return several. */
export const JobsEnvelope = Type.Object({ jobs: Type.Array(Job) }, { additionalProperties: false });

/** A page of the job list. */
export const JobPage = Type.Object(
  { jobs: Type.Array(Job), next_cursor: Type.Union([Type.String(), Type.Null()]) },
  { additionalProperties: false },
);

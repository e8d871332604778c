/**
 * TypeBox schemas of everything a job looks like on the wire: validation, TypeScript types and the served
 * OpenAPI document all come from here.
 */
import { Type, type Static } from "@sinclair/typebox";
import { ADMIN_ACTIONS, JOB_STATUSES } from "./statuses.js";

export { JOB_STATUSES, type JobStatus } from "./statuses.js";

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

const NonEmpty = Type.String({ minLength: 1 });

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

const DateTime = Type.String({ format: "date-time" });
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

/**
 * What opqueue keeps of a job beyond the contract's wire form (`GET /jobs/{id}/extensions`): the fields its extensions
 * added, which the job's wire form, fixed by the contract, does not carry.
 */
export const JobExtensions = Type.Object(
  {
    extensions: Type.Object(
      {
        rate_key: Type.Union([Type.String(), Type.Null()], {
          description: "The rate key it was enqueued with (flow-control.md).",
        }),
        expires_at: Type.Union([DateTime, Type.Null()], { description: 'Its expiry (api.md, "Expiry"), or null.' }),
        traceparent: Type.Union([Type.String(), Type.Null()], {
          description: "Its W3C trace context (tracing.md), or null.",
        }),
        async: Type.Union(
          [
            Type.Object(
              {
                attempt: Type.Integer({ minimum: 1 }),
                accepted_at: DateTime,
              },
              { additionalProperties: false },
            ),
            Type.Null(),
          ],
          {
            description:
              "The latest attempt its target took asynchronously (202 with x-job-async: 1), and when opqueue recorded it " +
              '(delivery.md, "Long jobs"); null if none was.',
          },
        ),
        progress: Type.Union(
          [
            Type.Object(
              {
                attempt: Type.Integer({ minimum: 1 }),
                value: Type.Unknown({ description: "The JSON value the heartbeat carried, as given." }),
                reported_at: DateTime,
              },
              { additionalProperties: false },
            ),
            Type.Null(),
          ],
          {
            description: "The latest progress a target's heartbeat reported, by which attempt and when; null if none.",
          },
        ),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);

/**
 * The answer to one item of `POST /jobs/batch`, in the item's place: the job's id, not the whole job (a thousand jobs
 * on the wire would be most of the batch's cost; GET /jobs/{id} has the rest).
 */
export const BatchEnqueueResult = Type.Union([
  Type.Object(
    {
      status: Type.Union([Type.Literal(201), Type.Literal(200)], {
        description: "201 created; 200 a dedupe upsert, or the job the item's idempotency key already answered with.",
      }),
      id: Type.String({ description: "The job's id." }),
      replayed: Type.Optional(Type.Literal(true, { description: "Present when the idempotency key answered." })),
    },
    { additionalProperties: false },
  ),
  Type.Object(
    {
      status: Type.Integer({
        minimum: 400,
        maximum: 599,
        description:
          "What POST /jobs would have answered for this item: its 4xx refusal, or 503 unavailable (500 internal) when the " +
          "database failed to store this item while the others were stored.",
      }),
      code: Type.String(),
      message: Type.String(),
    },
    { additionalProperties: false },
  ),
]);

/** The answer to `POST /jobs/batch`: one result per item, in order. */
export const BatchEnqueueAnswer = Type.Object(
  { results: Type.Array(BatchEnqueueResult) },
  { additionalProperties: false },
);

/** `{ jobs }`, the answer of operations that return several. */
export const JobsEnvelope = Type.Object({ jobs: Type.Array(Job) }, { additionalProperties: false });

/** A page of the job list. */
export const JobPage = Type.Object(
  { jobs: Type.Array(Job), next_cursor: Type.Union([Type.String(), Type.Null()]) },
  { additionalProperties: false },
);

/** The body of every error response. */
export const ErrorBody = Type.Object({ code: Type.String(), message: Type.String() }, { additionalProperties: false });

/** Longest key for dedupe and concurrency. */
const Key = Type.Union([Type.String({ minLength: 1, maxLength: 255 }), Type.Null()]);

/** Largest `delay_ms` accepted: 100 years, so that every computed run time is a valid date. */
export const MAX_DELAY_MS = 100 * 365 * 24 * 3600 * 1000;

/** The body of `POST /jobs`. */
export const EnqueueBody = Type.Object(
  {
    operation_id: Type.String({ minLength: 1, description: "Target operationId; must carry the `background` tag." }),
    request: RequestPayload,
    priority: Type.Optional(
      Type.Integer({ minimum: -2147483648, maximum: 2147483647, description: "Higher is claimed first; default 0." }),
    ),
    delay_ms: Type.Optional(
      Type.Integer({ minimum: 0, maximum: MAX_DELAY_MS, description: "Delay from now; wins over run_at." }),
    ),
    run_at: Type.Optional(Type.String({ format: "date-time", description: "Absolute earliest claim time." })),
    dedupe_key: Type.Optional(
      Type.Union([Type.String({ minLength: 1, maxLength: 255 }), Type.Null()], {
        description:
          "Global key: a pending or retrying job holding it is upserted (200) instead of creating a job, unless it is " +
          "for another operation or runs as another user or under another kind of authority (409 dedupe_conflict).",
      }),
    ),
    concurrency_key: Type.Optional(Key),
    rate_key: Type.Optional(
      Type.Union([Type.String({ minLength: 1, maxLength: 255 }), Type.Null()], {
        description:
          "Limits the job by its operation's rate_per_key, per key (a tenant, a customer, a third-party account), and " +
          "is the lane claims take turns by instead of the user (docs/flow-control.md). Not part of the job's wire form.",
      }),
    ),
    on_behalf_of: Type.Optional(
      Type.Object(
        { user_id: NonEmpty, authority: Authority },
        { additionalProperties: false, description: "Explicit authority; the caller must be allowed to send it." },
      ),
    ),
    ttl_ms: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_DELAY_MS,
        description:
          "Expiry, relative: a job not started within this many ms of the enqueue ends cancelled with terminal reason " +
          "`expired`, never delivered. Wins over expires_at. Not part of the job's wire form.",
      }),
    ),
    expires_at: Type.Optional(
      Type.String({ format: "date-time", description: "Expiry, absolute (see ttl_ms); after the job's run time." }),
    ),
    on_complete: Type.Optional(CallbackSpecSchema("when the job succeeds")),
    on_dead: Type.Optional(CallbackSpecSchema("when the job ends dead")),
    on_settled: Type.Optional(
      CallbackSpecSchema(
        "when the whole chain settles (no job pending, running or retrying); with the chain's first job only",
      ),
    ),
    idempotency_key: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 255,
        pattern: "^[\\x21-\\x7E]+$",
        description:
          "Remembered per caller (calling operation and user) for idempotency.window_ms (24 h by default): the same " +
          "key again answers 200 with the job it created, even after the job ran. Same as the Idempotency-Key header.",
      }),
    ),
  },
  { additionalProperties: false },
);
/** The body of `POST /jobs`. */
export type EnqueueBody = Static<typeof EnqueueBody>;

/** The callbacks an enqueue may name (docs/chains.md, "Callbacks"). */
export const CALLBACK_FIELDS = ["on_complete", "on_dead", "on_settled"] as const;

/**
 * A callback on the wire: a background operation enqueued as a chained job, once, when the job (or chain) reaches the
 * named state; its body is the outcome, its path parameters and query these.
 */
function CallbackSpecSchema(when: string) {
  return Type.Object(
    {
      operation_id: Type.String({ minLength: 1 }),
      request: Type.Optional(
        Type.Object(
          {
            path_params: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
            query: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
          },
          { additionalProperties: false },
        ),
      ),
    },
    { additionalProperties: false, description: `A callback enqueued ${when} (docs/chains.md).` },
  );
}

/** Most jobs in one `POST /jobs/batch`. */
export const MAX_BATCH_JOBS = 1000;

/** The body of `POST /jobs/batch`: jobs as `POST /jobs` takes them, each checked and answered on its own. */
export const BatchEnqueueBody = Type.Object(
  { jobs: Type.Array(EnqueueBody, { minItems: 1, maxItems: MAX_BATCH_JOBS }) },
  { additionalProperties: false },
);

/**
 * What the route validates of a batch before looking at its items: the envelope. Each item is then validated against
 * `EnqueueBody` on its own, so one bad item is answered alone instead of refusing the batch.
 */
export const BatchEnqueueEnvelope = Type.Object(
  { jobs: Type.Array(Type.Unknown(), { minItems: 1, maxItems: MAX_BATCH_JOBS }) },
  { additionalProperties: false },
);

/** One finished delivery attempt on the wire. */
export const JobAttempt = Type.Object(
  {
    attempt: Type.Integer({ minimum: 1 }),
    started_at: Type.Union([DateTime, Type.Null()]),
    finished_at: DateTime,
    outcome: Type.Union(
      JOB_STATUSES.map((status) => Type.Literal(status)),
      {
        description: "The status the attempt left the job in.",
      },
    ),
    status_code: Type.Union([Type.Integer(), Type.Null()]),
    error_body: Type.Union([Type.String(), Type.Null()]),
  },
  { additionalProperties: false },
);

/** One finished attempt on the wire. */
export type JobAttempt = Static<typeof JobAttempt>;

/** `{ attempts }`: a job's attempt history, oldest first. */
export const JobAttempts = Type.Object({ attempts: Type.Array(JobAttempt) }, { additionalProperties: false });

/** One event of a job's history (`GET /jobs/{id}/history`), discriminated on `type`. */
export const JobHistoryEvent = Type.Union([
  Type.Object(
    {
      type: Type.Literal("enqueued"),
      at: DateTime,
      by: Type.String({ description: "The calling operation that enqueued it (cron:NAME for a cron tick)." }),
    },
    { additionalProperties: false },
  ),
  Type.Object(
    {
      type: Type.Literal("attempt"),
      at: DateTime,
      number: Type.Integer({
        minimum: 1,
        description: "The attempt's place among all of the job's attempts, 1 first.",
      }),
      attempt: Type.Integer({
        minimum: 1,
        description: "The job's attempt counter then (an administrator's retry starts it again).",
      }),
      started_at: Type.Union([DateTime, Type.Null()]),
      outcome: Type.Union(JOB_STATUSES.map((status) => Type.Literal(status))),
      status_code: Type.Union([Type.Integer(), Type.Null()]),
      error_body: Type.Union([Type.String(), Type.Null()]),
    },
    { additionalProperties: false },
  ),
  Type.Object(
    {
      type: Type.Literal("admin"),
      at: DateTime,
      actor: Type.String({ description: "The administrator (the admin token's sub)." }),
      action: Type.Union(ADMIN_ACTIONS.map((action) => Type.Literal(action))),
    },
    { additionalProperties: false },
  ),
]);

/** One event of a job's history on the wire. */
export type JobHistoryEvent = Static<typeof JobHistoryEvent>;

/** `{ events }`: a job's history, oldest first. */
export const JobHistory = Type.Object({ events: Type.Array(JobHistoryEvent) }, { additionalProperties: false });
/** A job's history on the wire. */
export type JobHistory = Static<typeof JobHistory>;

/** The overview the dashboard shows. */
export const Stats = Type.Object(
  {
    by_status: Type.Record(Type.String(), Type.Integer()),
    by_operation: Type.Array(
      Type.Object(
        { operation_id: Type.String(), status: Type.String(), count: Type.Integer() },
        { additionalProperties: false },
      ),
    ),
    queue_lag_seconds: Type.Number({
      description:
        "Age of the oldest due claimable job; 0 when none waits. Jobs a pause holds (their operation or concurrency key " +
        "is paused) are not claimable and do not count: see paused_jobs.",
    }),
    paused_jobs: Type.Array(
      Type.Object({ operation_id: Type.String(), count: Type.Integer() }, { additionalProperties: false }),
      {
        description:
          "Jobs due now that a pause of their operation or concurrency key holds back, by operation; none listed when nothing is held.",
      },
    ),
    throughput: Type.Array(
      Type.Object(
        {
          start: DateTime,
          succeeded: Type.Integer(),
          retrying: Type.Integer(),
          dead: Type.Integer(),
          cancelled: Type.Integer(),
        },
        { additionalProperties: false },
      ),
      { description: "Finished attempts per minute over the last hour, by the status they left their job in." },
    ),
  },
  { additionalProperties: false },
);

/** Most dead jobs one bulk retry re-queues. */
export const MAX_BULK_RETRY = 1000;

/** The body of `POST /jobs/retry-dead`. */
export const RetryDeadBody = Type.Object(
  {
    operation_id: Type.Optional(Type.String({ minLength: 1 })),
    original_request_id: Type.Optional(Type.String({ minLength: 1 })),
    user_id: Type.Optional(Type.String({ minLength: 1 })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_BULK_RETRY, default: 100 })),
  },
  { additionalProperties: false },
);

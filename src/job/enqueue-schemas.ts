/**
 * TypeBox schemas of enqueueing: the bodies of `POST /jobs` and `POST /jobs/batch`, the callbacks an enqueue may name,
 * the limits on both, and the batch's answer.
 */
import { Type, type Static } from "@sinclair/typebox";
import { Authority, NonEmpty, RequestPayload } from "./job-view-schemas.js";

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

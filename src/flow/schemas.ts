/**
 * Flow control's wire forms (docs/flow-control.md): a rate limit as the configuration and the admin API write it, an
 * operation's control and a paused key as the API answers them, and the bodies of the limits and bulk cancel routes.
 * TypeBox, so the configuration's validation, the routes' and the served OpenAPI come from these.
 */
import { Type, type Static } from "@sinclair/typebox";
import {
  RATE_PERIOD_MS_DEFAULT,
  type OperationControl,
  type OperationLimits,
  type PausedKey,
  type RateLimit as RateLimitValue,
  type Stamp,
} from "./limits.js";
import { formatTime } from "../job/wire.js";

/** The largest count or period the database holds (a PostgreSQL integer). */
const MAX_INT = 2_147_483_647;

const Count = (description: string) => Type.Integer({ minimum: 1, maximum: MAX_INT, description });

const PeriodMs = Type.Integer({
  minimum: 1,
  maximum: MAX_INT,
  default: RATE_PERIOD_MS_DEFAULT,
  description: `The period, in ms (default ${RATE_PERIOD_MS_DEFAULT}).`,
});
const RateLimitFields = {
  limit: Count("Jobs started per period, on average."),
  burst: Type.Optional(Count("Jobs that may start at once after a quiet spell (default `limit`).")),
};

/**
 * A rate limit: at most `limit` jobs started per `period_ms` on average, and at most `burst` (default `limit`) at once
 * after a quiet spell. Enforced by the generic cell rate algorithm, cluster-wide. The configuration's form, whose
 * validation fills in `period_ms`, and the form the API answers, which always names it.
 */
export const RateLimit = Type.Object({ ...RateLimitFields, period_ms: PeriodMs }, { additionalProperties: false });
export type RateLimitBody = Static<typeof RateLimit>;

/**
 * A rate limit as a request writes it: `period_ms` may be left out (it defaults to 1000). The API's validation fills in
 * no default, and a default inside a union would not be filled anyway, so a defaulted field is optional in every request
 * schema and the code applies its default (test/http/openapi-defaults.test.ts walks the served document for it).
 */
export const RateLimitInput = Type.Object(
  { ...RateLimitFields, period_ms: Type.Optional(PeriodMs) },
  { additionalProperties: false },
);
export type RateLimitInput = Static<typeof RateLimitInput>;

/** An operation's limits as the API shows them; null: no such limit. */
export const Limits = Type.Object(
  {
    rate: Type.Union([RateLimit, Type.Null()], {
      description: "Jobs of the operation started over time, cluster-wide.",
    }),
    rate_per_key: Type.Union([RateLimit, Type.Null()], { description: "Jobs started over time per `rate_key`." }),
    max_concurrency: Type.Union([Count("Jobs running at once, across every node."), Type.Null()]),
    concurrency_limit: Count("Jobs running at once per concurrency key (1: the contract's rule)."),
  },
  { additionalProperties: false },
);

/** The body of `PATCH /operations/{id}/limits`: the limits to change (null: remove); the rest are kept. */
export const LimitsPatch = Type.Partial(
  Type.Object({
    ...Limits.properties,
    rate: Type.Union([RateLimitInput, Type.Null()], {
      description: "Jobs of the operation started over time, cluster-wide.",
    }),
    rate_per_key: Type.Union([RateLimitInput, Type.Null()], { description: "Jobs started over time per `rate_key`." }),
  }),
  { additionalProperties: false, minProperties: 1 },
);
export type LimitsPatch = Static<typeof LimitsPatch>;

/** Who did an administrator's action (the admin token's `sub`), and when. */
export const WireStamp = Type.Object(
  { at: Type.String({ format: "date-time" }), by: Type.String({ description: "The admin token's `sub`." }) },
  { additionalProperties: false },
);

/** An operation's flow control. */
export const OperationControlBody = Type.Object(
  {
    operation_id: Type.String(),
    paused: Type.Union([WireStamp, Type.Null()], { description: "Who paused the operation, and when; null: running." }),
    limits: Limits,
    limits_source: Type.Union([Type.Literal("config"), Type.Literal("admin")], {
      description: "config: the configuration's values; admin: set through the API, kept until reset.",
    }),
    limits_set: Type.Union([WireStamp, Type.Null()], { description: "Who set the limits through the API, and when." }),
  },
  { additionalProperties: false },
);
export type OperationControlBody = Static<typeof OperationControlBody>;

/** A paused concurrency key. */
export const PausedKeyBody = Type.Object(
  { concurrency_key: Type.String(), paused: WireStamp },
  { additionalProperties: false },
);
export type PausedKeyBody = Static<typeof PausedKeyBody>;

/** Most jobs one bulk cancel cancels. */
export const MAX_BULK_CANCEL = 1000;

/** The body of `POST /jobs/cancel`: every given filter must match; at least one besides `statuses`. */
export const CancelJobsBody = Type.Object(
  {
    statuses: Type.Optional(
      Type.Array(Type.Union([Type.Literal("pending"), Type.Literal("retrying"), Type.Literal("running")]), {
        minItems: 1,
        uniqueItems: true,
        description: "Which jobs to cancel (default pending and retrying); running ones have their delivery aborted.",
      }),
    ),
    operation_id: Type.Optional(Type.String({ minLength: 1 })),
    original_request_id: Type.Optional(Type.String({ minLength: 1 })),
    user_id: Type.Optional(Type.String({ minLength: 1 })),
    dedupe_key: Type.Optional(Type.String({ minLength: 1 })),
    created_after: Type.Optional(
      Type.String({ format: "date-time", description: "Created at or after this instant." }),
    ),
    created_before: Type.Optional(Type.String({ format: "date-time", description: "Created before this instant." })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_BULK_CANCEL, default: 100 })),
  },
  { additionalProperties: false },
);
export type CancelJobsBody = Static<typeof CancelJobsBody>;

/** A rate limit's wire form. */
export function wireRate(rate: RateLimitValue | null): RateLimitBody | null {
  return rate === null ? null : { limit: rate.limit, period_ms: rate.periodMs, burst: rate.burst };
}

/** A wire rate limit as the store holds it, its period defaulting to 1000 ms and its burst to its limit. */
export function rateFromWire(rate: RateLimitInput | null): RateLimitValue | null {
  return rate === null
    ? null
    : { limit: rate.limit, periodMs: rate.period_ms ?? RATE_PERIOD_MS_DEFAULT, burst: rate.burst ?? rate.limit };
}

/** A stamp's wire form; null stays null. */
export function wireStamp(stamp: Stamp | null): { at: string; by: string } | null {
  return stamp === null ? null : { at: formatTime(stamp.at), by: stamp.by };
}

/** An operation's control as the API answers it. */
export function wireControl(control: OperationControl): OperationControlBody {
  return {
    operation_id: control.operationId,
    paused: wireStamp(control.paused),
    limits: wireLimits(control.limits),
    limits_source: control.limitsSource,
    limits_set: wireStamp(control.limitsSet),
  };
}

export function wireLimits(limits: OperationLimits): Static<typeof Limits> {
  return {
    rate: wireRate(limits.rate),
    rate_per_key: wireRate(limits.ratePerKey),
    max_concurrency: limits.maxConcurrency,
    concurrency_limit: limits.concurrencyLimit,
  };
}

/** `limits` with `patch` applied. */
export function patchLimits(limits: OperationLimits, patch: LimitsPatch): OperationLimits {
  return {
    rate: patch.rate === undefined ? limits.rate : rateFromWire(patch.rate),
    ratePerKey: patch.rate_per_key === undefined ? limits.ratePerKey : rateFromWire(patch.rate_per_key),
    maxConcurrency: patch.max_concurrency === undefined ? limits.maxConcurrency : patch.max_concurrency,
    concurrencyLimit: patch.concurrency_limit ?? limits.concurrencyLimit,
  };
}

export function wirePausedKey(key: PausedKey): PausedKeyBody {
  return { concurrency_key: key.concurrencyKey, paused: { at: formatTime(key.paused.at), by: key.paused.by } };
}

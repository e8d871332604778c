/**
 * Schedules' wire forms (docs/schedules.md): the bodies of `POST /schedules` and `PATCH /schedules/{name}`, and a
 * schedule as every route answers it. TypeBox, so the routes' validation, the types and the served OpenAPI come from
 * these.
 */
import { Type, type Static } from "@sinclair/typebox";
import { WireStamp, wireStamp } from "../flow/schemas.js";
import { RequestPayload } from "../job/schemas.js";
import { formatTime } from "../job/wire.js";
import { defaultDedupeKey, type ScheduleFields } from "./schedule.js";
import type { ScheduleView } from "./schedules.js";
import type { RequestRedaction } from "../job/redaction.js";

/** The largest priority, concurrency and dedupe keys of an enqueue (docs/api.md, "Enqueue, step by step"). */
const Priority = Type.Integer({
  minimum: -2_147_483_648,
  maximum: 2_147_483_647,
  description: "Claim order, higher first (default 0).",
});
const Key = (description: string) =>
  Type.Union([Type.String({ minLength: 1, maxLength: 255 }), Type.Null()], { description });

/**
 * A schedule's name: letters, digits, `_`, `-` and `.`, not starting with `.` (so no name is a dot-segment of a URL),
 * and short enough that `cron:{name}:manual:{time}` stays within a request id's 255 characters.
 */
export const ScheduleName = Type.String({
  minLength: 1,
  maxLength: 200,
  pattern: "^[A-Za-z0-9_-][A-Za-z0-9_.-]*$",
  description: "Unique among schedules and config entries; its jobs call as cron:{name}.",
});

/** The definition's fields a change may set: all but the name. */
const DefinitionFields = {
  schedule: Type.String({
    minLength: 1,
    maxLength: 255,
    description: "A cron expression of 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first).",
  }),
  timezone: Type.String({
    minLength: 1,
    maxLength: 100,
    description: 'The IANA time zone the expression is read in (default "UTC").',
  }),
  operation_id: Type.String({ minLength: 1, description: "The background operation each tick enqueues a job of." }),
  user_id: Type.String({ minLength: 1, maxLength: 255, description: "The user the jobs run as." }),
  request: RequestPayload,
  priority: Priority,
  dedupe_key: Key("The jobs' dedupe key (default cron:{name}: a tick refreshes a job still waiting); null: none."),
  concurrency_key: Key("The jobs' concurrency key (default none)."),
};

/** The body of `POST /schedules`. */
export const ScheduleCreateBody = Type.Object(
  {
    name: ScheduleName,
    schedule: DefinitionFields.schedule,
    timezone: Type.Optional(DefinitionFields.timezone),
    operation_id: DefinitionFields.operation_id,
    user_id: DefinitionFields.user_id,
    request: Type.Optional(DefinitionFields.request),
    priority: Type.Optional(DefinitionFields.priority),
    dedupe_key: Type.Optional(DefinitionFields.dedupe_key),
    concurrency_key: Type.Optional(DefinitionFields.concurrency_key),
  },
  { additionalProperties: false },
);
/** The body of `POST /schedules`. */
export type ScheduleCreateBody = Static<typeof ScheduleCreateBody>;

/** The body of `PATCH /schedules/{name}`: the fields to change (null removes a key); the others are kept. */
export const SchedulePatchBody = Type.Partial(Type.Object(DefinitionFields), {
  additionalProperties: false,
  minProperties: 1,
});
/** The body of `PATCH /schedules/{name}`. */
export type SchedulePatchBody = Static<typeof SchedulePatchBody>;

/** A schedule as the API answers it. */
export const ScheduleBody = Type.Object(
  {
    name: Type.String(),
    source: Type.Union([Type.Literal("config"), Type.Literal("api")], {
      description: "config: an entry of the config file, read-only here; api: created through the API.",
    }),
    schedule: Type.String(),
    timezone: Type.String(),
    operation_id: Type.String(),
    user_id: Type.String(),
    request: RequestPayload,
    priority: Type.Integer(),
    dedupe_key: Type.Union([Type.String(), Type.Null()]),
    concurrency_key: Type.Union([Type.String(), Type.Null()]),
    paused: Type.Union([WireStamp, Type.Null()], { description: "Who paused the schedule, and when; null: it runs." }),
    created: Type.Union([WireStamp, Type.Null()], {
      description: "Who created it, and when; null for a config entry.",
    }),
    updated: Type.Union([WireStamp, Type.Null()], {
      description: "Who last changed its definition, and when; null for a config entry.",
    }),
    next_run_at: Type.Union([Type.String({ format: "date-time" }), Type.Null()], {
      description: "Its next tick; null while paused, or when the expression never fires again.",
    }),
    last_run_at: Type.Union([Type.String({ format: "date-time" }), Type.Null()], {
      description: "Its last recorded tick, or null.",
    }),
    last_job_id: Type.Union([Type.String(), Type.Null()], {
      description: "The job the last tick enqueued (or refreshed, with a dedupe key); null when it enqueued none.",
    }),
  },
  { additionalProperties: false },
);
/** A schedule on the wire. */
export type ScheduleBody = Static<typeof ScheduleBody>;

/** `{schedule}`: one schedule. */
export const ScheduleEnvelope = Type.Object({ schedule: ScheduleBody }, { additionalProperties: false });
/** `{schedules}`: every schedule, by name. */
export const ScheduleList = Type.Object({ schedules: Type.Array(ScheduleBody) }, { additionalProperties: false });

/** A create body's fields, its defaults filled in: UTC, no request, priority 0, dedupe key `cron:{name}`. */
export function fieldsOfCreateBody(body: ScheduleCreateBody): ScheduleFields {
  return {
    name: body.name,
    schedule: body.schedule,
    timezone: body.timezone ?? "UTC",
    operationId: body.operation_id,
    userId: body.user_id,
    request: body.request ?? {},
    priority: body.priority ?? 0,
    dedupeKey: body.dedupe_key === undefined ? defaultDedupeKey(body.name) : body.dedupe_key,
    concurrencyKey: body.concurrency_key ?? null,
  };
}

/** `fields` with `patch` applied. */
export function patchFields(fields: ScheduleFields, patch: SchedulePatchBody): ScheduleFields {
  return {
    name: fields.name,
    schedule: patch.schedule ?? fields.schedule,
    timezone: patch.timezone ?? fields.timezone,
    operationId: patch.operation_id ?? fields.operationId,
    userId: patch.user_id ?? fields.userId,
    request: patch.request ?? fields.request,
    priority: patch.priority ?? fields.priority,
    dedupeKey: patch.dedupe_key === undefined ? fields.dedupeKey : patch.dedupe_key,
    concurrencyKey: patch.concurrency_key === undefined ? fields.concurrencyKey : patch.concurrency_key,
  };
}

/** A schedule's wire form. */
export function wireSchedule(view: ScheduleView, redaction: RequestRedaction): ScheduleBody {
  const { fields, row, lastTick } = view;
  return {
    name: fields.name,
    source: view.source,
    schedule: fields.schedule,
    timezone: fields.timezone,
    operation_id: fields.operationId,
    user_id: fields.userId,
    request: redaction.shown(fields.operationId, fields.request),
    priority: fields.priority,
    dedupe_key: fields.dedupeKey,
    concurrency_key: fields.concurrencyKey,
    paused: wireStamp(row?.paused ?? null),
    created: wireStamp(row?.created ?? null),
    updated: wireStamp(row?.updated ?? null),
    next_run_at: view.nextRunAt === null ? null : formatTime(view.nextRunAt),
    last_run_at: lastTick === null ? null : formatTime(lastTick.tickAt),
    last_job_id: lastTick?.jobId ?? null,
  };
}

/**
 * The configuration's cron entries, kept together so that cron can move home in one cut: the schema of one `cron`
 * entry, its type, and the caller names entries and API schedules enqueue as.
 */
import { Type, type Static } from "@sinclair/typebox";

/** The calling operation of cron entry `name`: its key in the trigger map, and its jobs' `enqueued_by_operation_id`. */
export function cronCaller(name: string): string {
  return `cron:${name}`;
}

/**
 * The trigger-map key whose targets schedules created through the API may enqueue (docs/schedules.md, "Who may
 * schedule what"): every such schedule calls as `cron:{name}`, and this one key speaks for all of them.
 */
export const SCHEDULE_TRIGGER_KEY = "cron:*";

/** The schema of one entry of `cron`. */
export const CronEntry = Type.Object(
  {
    name: Type.String({ minLength: 1, pattern: "^[A-Za-z0-9_.-]+$" }),
    schedule: Type.String({ minLength: 1 }),
    timezone: Type.String({ minLength: 1, default: "UTC" }),
    operation_id: Type.String({ minLength: 1 }),
    user_id: Type.String({ minLength: 1 }),
    request: Type.Object(
      {
        body: Type.Optional(Type.Unknown()),
        path_params: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
        query: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
      },
      { additionalProperties: false, default: {} },
    ),
    dedupe_key: Type.Optional(Type.Union([Type.String({ minLength: 1, maxLength: 255 }), Type.Null()])),
    concurrency_key: Type.Optional(Type.Union([Type.String({ minLength: 1, maxLength: 255 }), Type.Null()])),
    priority: Type.Optional(Type.Integer({ minimum: -2147483648, maximum: 2147483647 })),
  },
  { additionalProperties: false },
);

/** One entry of `cron`. */
export type CronConfig = Static<typeof CronEntry>;

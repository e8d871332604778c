/**
 * The config file's `cron` section: the schema of one entry and its type. What an entry means (the name its jobs call
 * as, its checks, its ticks) is src/schedules/, cron's one home, which sits above the config.
 */
import { Type, type Static } from "@sinclair/typebox";

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

/**
 * TypeBox schemas of what administrators see and do across many jobs: the dashboard's overview (`GET /stats`) and the
 * bulk retry of dead jobs (`POST /jobs/retry-dead`).
 */
import { Type } from "@sinclair/typebox";
import { DateTime } from "./job-view-schemas.js";

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

/**
 * TypeBox schemas of what opqueue tells of a job beyond its wire form: the fields its extensions added
 * (`GET /jobs/{id}/extensions`), its attempts (`GET /jobs/{id}/attempts`) and its history (`GET /jobs/{id}/history`).
 */
import { Type, type Static } from "@sinclair/typebox";
import { DateTime } from "./job-view-schemas.js";
import { ADMIN_ACTIONS, JOB_STATUSES } from "./statuses.js";

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
      role: Type.Union([Type.Literal("operator"), Type.Literal("admin"), Type.Null()], {
        description: 'The admin token\'s role (docs/api.md, "Roles"); null for an action recorded before roles were.',
      }),
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

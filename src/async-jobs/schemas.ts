/**
 * TypeBox schemas of a target's calls on an attempt it took asynchronously (docs/api.md, "Asynchronous attempts"):
 * heartbeat, complete and fail. Validation, types and the served OpenAPI document come from here.
 */
import { Type, type Static } from "@sinclair/typebox";

/** Most bytes of a heartbeat's `progress`, as JSON: a figure and a few words, not a report. */
export const MAX_PROGRESS_BYTES = 4096;
/** Most bytes of a complete's `result`, as JSON: as much as an attempt keeps of an answer's body. */
export const MAX_RESULT_BYTES = 8192;

/** `POST /jobs/{id}/heartbeat`: renews the attempt's lease, and reports progress if given. */
export const HeartbeatBody = Type.Object(
  {
    progress: Type.Optional(
      Type.Unknown({
        description:
          `Any JSON value (at most ${MAX_PROGRESS_BYTES} bytes of it): replaces the job's progress, shown by ` +
          "GET /jobs/{id}/extensions and the dashboard. Left out, the last progress stays.",
      }),
    ),
  },
  { additionalProperties: false },
);
/** A heartbeat's body. */
export type HeartbeatBody = Static<typeof HeartbeatBody>;

/** The answer to a heartbeat. */
export const HeartbeatAnswer = Type.Object(
  {
    lease_expires_at: Type.String({
      format: "date-time",
      description: "When the attempt is rescued (retried) unless another heartbeat, a complete or a fail comes first.",
    }),
  },
  { additionalProperties: false },
);
/** The answer to a heartbeat. */
export type HeartbeatAnswer = Static<typeof HeartbeatAnswer>;

/** `POST /jobs/{id}/complete`: the attempt succeeded, as a 2xx answer would have said. */
export const CompleteBody = Type.Object(
  {
    status_code: Type.Optional(
      Type.Integer({ minimum: 200, maximum: 299, description: "The 2xx the job's result records; 200 by default." }),
    ),
    result: Type.Optional(
      Type.Unknown({
        description:
          `The job's result (any JSON value, at most ${MAX_RESULT_BYTES} bytes of it): kept as result.body, the ` +
          "value itself (body_format json), when the operation stores its results (operations.X.store_result); " +
          "checked and dropped otherwise.",
      }),
    ),
  },
  { additionalProperties: false },
);
/** A complete's body. */
export type CompleteBody = Static<typeof CompleteBody>;

/** `POST /jobs/{id}/fail`: the attempt failed; what happens next follows the rules of an answer. */
export const FailBody = Type.Object(
  {
    retry: Type.Optional(
      Type.Union([Type.Literal("never"), Type.Literal("always")], {
        description:
          "never: the job ends dead, rejected-by-endpoint (as x-job-retry: never); always: it is retried while it has " +
          "attempts left, whatever the status_code (as x-job-retry: always). Left out: the status_code decides, and " +
          "without one the attempt is retried.",
      }),
    ),
    status_code: Type.Optional(
      Type.Integer({
        minimum: 300,
        maximum: 599,
        description:
          "The non-2xx the attempt would have answered, read by the rules of an answer (408, 425, 429, 5xx retried).",
      }),
    ),
    error: Type.Optional(
      Type.String({
        description: "What went wrong: the job's error_body, cut to 8,192 bytes of UTF-8 like an answer's body.",
      }),
    ),
  },
  { additionalProperties: false },
);
/** A fail's body. */
export type FailBody = Static<typeof FailBody>;

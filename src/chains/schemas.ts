/** TypeBox schemas of a chain on the wire (`GET /chains/{original_request_id}`, docs/chains.md). */
import { Type, type Static } from "@sinclair/typebox";
import { Job, JobAttempt, JOB_STATUSES } from "../job/schemas.js";

const DateTime = Type.String({ format: "date-time" });
const Count = Type.Integer({ minimum: 0 });

/** A job of a chain with its attempts and the jobs it enqueued (its children, oldest first). */
export const ChainNode = Type.Recursive(
  (Self) =>
    Type.Object(
      {
        job: Job,
        attempts: Type.Array(JobAttempt, { description: "Its finished attempts, oldest first." }),
        children: Type.Array(Self),
      },
      { additionalProperties: false },
    ),
  { $id: "ChainNode" },
);

/** A chain as a unit: its jobs as a tree, how they stand, and when it began and settled. */
export const Chain = Type.Object(
  {
    original_request_id: Type.String(),
    started_at: Type.Union([DateTime, Type.Null()], { description: "When its first job was enqueued." }),
    settled: Type.Boolean({ description: "No job of it is pending, running or retrying." }),
    settled_at: Type.Union([DateTime, Type.Null()], { description: "When its last job finished, once settled." }),
    cancelled_at: Type.Union([DateTime, Type.Null()]),
    cancelled_by: Type.Union([Type.String(), Type.Null()]),
    counts: Type.Object(
      {
        pending: Count,
        running: Count,
        retrying: Count,
        succeeded: Count,
        dead: Count,
        cancelled: Count,
      } satisfies Record<(typeof JOB_STATUSES)[number], typeof Count>,
      { additionalProperties: false, description: "Its jobs by status." },
    ),
    spawn_cap: Type.Object(
      {
        used: Type.Integer({ minimum: 0, description: "Jobs ever created in the chain, cancelled or not." }),
        limit: Type.Integer({ minimum: 1, description: "limits.spawn_cap." }),
      },
      { additionalProperties: false },
    ),
    on_settled: Type.Union([
      Type.Object(
        {
          operation_id: Type.String(),
          job_id: Type.String({ description: "The job whose enqueue set it: the callback's parent." }),
          fired_at: Type.Union([DateTime, Type.Null()]),
        },
        { additionalProperties: false },
      ),
      Type.Null(),
    ]),
    jobs: Type.Array(ChainNode, {
      description: "Its root jobs (no parent in the chain), oldest first, each with its descendants.",
    }),
    truncated: Type.Boolean({
      description:
        "More jobs than one answer holds (10,000): the tree has the newest; counts and settling are of every job.",
    }),
  },
  { additionalProperties: false },
);

/** `{ chain }`. */
export const ChainEnvelope = Type.Object({ chain: Chain }, { additionalProperties: false });
/** A chain on the wire. */
export type ChainBody = Static<typeof Chain>;
/** One node of a chain's tree on the wire. */
export type ChainNodeBody = Static<typeof ChainNode>;

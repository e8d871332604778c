/**
 * Erasing one user's data (docs/api.md, "Erasing a user's data"): `POST /admin/erasures` takes the user's next `limit`
 * jobs after where the last call for them stopped, cancels the waiting ones when asked, and removes the payloads,
 * results and error bodies of the finished ones, on whichever engine, for every node. Bounded and idempotent: call
 * again while `more` is true. Each call is audited without the user's data: the audit row and the log line name the
 * user by a SHA-256 digest of their id.
 */
import { createHash } from "node:crypto";
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { ApiError } from "../../errors.js";
import { hasUnstorableText } from "../../job/payload-rules.js";
import type { AdminStore } from "../../store/store.js";
import { actingAs, actorFields, type AdminAccess } from "../auth.js";
import { errorResponses } from "./error-responses.js";

/** What the erasure route needs. */
export interface ErasureRoutesOptions {
  store: Pick<AdminStore, "userErase">;
  access: AdminAccess;
}

/** Most jobs one call erases (and cancels). */
export const MAX_ERASE_LIMIT = 1000;

/** How the audit names a user: the SHA-256 of their id, hex. Who knows the id finds its erasures; nobody else. */
export function erasureSubject(userId: string): string {
  return createHash("sha256").update(userId, "utf8").digest("hex");
}

const EraseBody = Type.Object(
  {
    user_id: Type.String({ minLength: 1, maxLength: 255, description: "The user whose jobs' data goes." }),
    cancel_waiting: Type.Optional(
      Type.Boolean({
        default: false,
        description: "First cancel the user's waiting (pending, retrying) jobs, whose data then goes too.",
      }),
    ),
    limit: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_ERASE_LIMIT,
        default: 100,
        description:
          "The user's jobs this call looks at: the next ones after where the last call for the user stopped.",
      }),
    ),
  },
  { additionalProperties: false },
);

const EraseAnswer = Type.Object(
  {
    subject: Type.String({ description: "The SHA-256 of the user id, hex: how the audit names the user." }),
    erased: Type.Integer({ description: "Jobs whose data this call removed." }),
    cancelled: Type.Integer({ description: "Waiting jobs this call cancelled first (with cancel_waiting)." }),
    waiting: Type.Integer({
      description:
        "The user's jobs still waiting: their data is kept to be delivered. Counted over all of them by the call " +
        "that reaches the last one; before it, those seen so far.",
    }),
    running: Type.Integer({
      description: "The user's jobs being delivered: a later call erases them once finished. Counted as waiting is.",
    }),
    more: Type.Boolean({ description: "Whether calling again now would do more." }),
  },
  { additionalProperties: false },
);

/** Registers `POST /admin/erasures`. */
export const erasureRoutes: FastifyPluginAsyncTypebox<ErasureRoutesOptions> = async (app, options) => {
  app.post(
    "/admin/erasures",
    {
      onRequest: options.access.needs("admin"),
      schema: {
        operationId: "eraseUserData",
        summary:
          "Erase one user's data: the requests, results and error bodies of their finished jobs (limit of their jobs per " +
          "call), having cancelled their waiting jobs first if asked",
        tags: ["access"],
        security: [{ adminToken: [] }],
        body: EraseBody,
        response: { 200: EraseAnswer, ...errorResponses(400, 401, 403, 415, 503) },
      },
    },
    async (request) => {
      const { user_id: userId, cancel_waiting: cancelWaiting = false, limit = 100 } = request.body;
      if (hasUnstorableText([userId])) {
        throw new ApiError(400, "invalid_request", "user_id cannot hold U+0000 or a lone UTF-16 surrogate");
      }
      const subject = erasureSubject(userId);
      const outcome = await options.store.userErase({ userId, cancelWaiting, limit, subject, ...actingAs(request) });
      // The user's id is not logged: the digest names them.
      request.log.info(
        { ...actorFields(request), action: "erase-user", subject, ...outcome, cancelWaiting },
        "admin action",
      );
      return { subject, ...outcome };
    },
  );
};

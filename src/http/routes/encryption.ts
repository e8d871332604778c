/**
 * Re-encryption of stored payloads under the newest key (docs/encryption.md, "Rotating keys"):
 * `POST /admin/encryption/rewrap` takes one page of a pass over the payload columns (src/store/rewrap.ts) and answers
 * the cursor to go on from; `opqueue rewrap` calls it until the pass is done. The service keeps running meanwhile.
 */
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { ApiError } from "../../errors.js";
import type { PayloadCipher } from "../../store/payload-cipher.js";
import { formatCursor, parseCursor, rewrapPage } from "../../store/rewrap.js";
import type { PayloadStore } from "../../store/store.js";
import { actorFields, type AdminAccess } from "../auth.js";
import { errorResponses } from "./error-responses.js";

/** What the re-encryption route needs. */
export interface EncryptionRoutesOptions {
  store: PayloadStore;
  access: AdminAccess;
  /** The payload cipher; null when `encryption` is not configured. */
  cipher: PayloadCipher | null;
}

/** Most rows one call reads. */
export const MAX_REWRAP_LIMIT = 1000;

/** Registers `POST /admin/encryption/rewrap`. */
export const encryptionRoutes: FastifyPluginAsyncTypebox<EncryptionRoutesOptions> = async (app, options) => {
  app.post(
    "/admin/encryption/rewrap",
    {
      onRequest: options.access.needs("admin"),
      preValidation: async (request) => {
        request.body ??= {};
      },
      schema: {
        operationId: "rewrapPayloads",
        summary:
          "Re-encrypt one page of stored payloads under the newest key (and encrypt those still in clear); call again " +
          "with the cursor answered until it is null",
        tags: ["access"],
        security: [{ adminToken: [] }],
        body: Type.Object(
          {
            cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 600, description: "From the last answer." })),
            limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_REWRAP_LIMIT, default: 200 })),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object(
            {
              rewrapped: Type.Integer({ description: "Payload columns this call rewrote." }),
              examined: Type.Integer({ description: "Rows this call read." }),
              key_id: Type.String({ description: "The key every rewritten payload is now sealed with." }),
              cursor: Type.Union([Type.String(), Type.Null()], {
                description: "Where to go on; null: the pass is done.",
              }),
            },
            { additionalProperties: false },
          ),
          ...errorResponses(400, 401, 403, 415, 503),
        },
      },
    },
    async (request) => {
      const { cipher } = options;
      if (cipher === null) {
        throw new ApiError(
          400,
          "invalid_request",
          "payloads are not encrypted here: the config has no encryption.keys",
        );
      }
      const body = request.body;
      const cursor = body.cursor === undefined ? null : parseCursor(body.cursor);
      if (cursor === undefined) throw new ApiError(400, "invalid_request", "cursor is not one this endpoint answered");
      const page = await rewrapPage({ store: options.store, cipher, cursor, limit: body.limit ?? 200 });
      const next = page.cursor === null ? null : formatCursor(page.cursor);
      request.log.info(
        { ...actorFields(request), action: "rewrap", rewrapped: page.rewrapped, examined: page.examined, cursor: next },
        "admin action",
      );
      return { rewrapped: page.rewrapped, examined: page.examined, key_id: cipher.currentKeyId, cursor: next };
    },
  );
};

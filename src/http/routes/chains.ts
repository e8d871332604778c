/**
 * A chain as a unit (docs/chains.md): `GET /chains/{original_request_id}` answers its jobs as a tree (each with its
 * attempts), how they stand, whether it has settled, and its spawn cap's use, as src/chains/chain-view.ts reads them.
 * Cancelling a chain is in admin.ts.
 */
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import type { ChainView } from "../../chains/chain-view.js";
import { ChainEnvelope } from "../../chains/schemas.js";
import { ApiError } from "../../errors.js";
import type { AdminAccess } from "../auth.js";
import { errorResponses } from "./error-responses.js";

/** What the chain routes need. */
export interface ChainRoutesOptions {
  chainView: ChainView;
  access: AdminAccess;
}

/** Registers the chain routes. */
export const chainRoutes: FastifyPluginAsyncTypebox<ChainRoutesOptions> = async (app, options) => {
  const { chainView } = options;
  app.get(
    "/chains/:original_request_id",
    {
      onRequest: options.access.needs("viewer"),
      schema: {
        operationId: "getChain",
        summary: "A chain as a unit: its jobs as a tree with their attempts, counts by status, whether it has settled",
        tags: ["chains"],
        security: [{ adminToken: [] }],
        params: Type.Object({ original_request_id: Type.String() }),
        response: { 200: ChainEnvelope, ...errorResponses(401, 403, 404, 503) },
      },
    },
    async (request) => {
      const rid = request.params.original_request_id;
      const chain = await chainView.get(rid);
      if (!chain) {
        throw new ApiError(404, "chain_not_found", `no job was ever enqueued into chain "${rid.slice(0, 64)}"`);
      }
      return { chain };
    },
  );
};

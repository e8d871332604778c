/**
 * Who is signed in, and revocation of admin tokens (docs/api.md, "Roles" and "Revoking admin tokens"):
 * `GET /admin/me` answers the caller's own token as opqueue reads it (the dashboard shows it and hides what the role
 * cannot do); `POST /admin/revocations` revokes one token by its `jti`, or every token issued before an instant, in the
 * database, so every node refuses it from its next request on; `GET /admin/revocations` lists them.
 */
import { Type, type Static } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { ADMIN_ROLES, CLOCK_TOLERANCE_S } from "../../auth/tokens.js";
import type { Clock } from "../../clock.js";
import { ApiError } from "../../errors.js";
import { hasUnstorableText } from "../../job/payload-rules.js";
import { formatTime } from "../../job/wire.js";
import type { AccessStore, AdminTokenCutoff, RevokedAdminToken } from "../../store/store.js";
import { actorFields, actorOf, adminOf, type AdminAccess } from "../auth.js";
import { errorResponses } from "./error-responses.js";

/** What the access routes need. */
export interface AccessRoutesOptions {
  store: AccessStore;
  access: AdminAccess;
  clock: Clock;
}

/** Most revoked tokens `GET /admin/revocations` lists. */
export const MAX_REVOCATION_LIST = 1000;

const Session = Type.Object(
  {
    sub: Type.String({ description: "The token's sub: who is signed in." }),
    role: Type.Union(
      ADMIN_ROLES.map((role) => Type.Literal(role)),
      { description: "The token's role (admin for site_admin: true without a role)." },
    ),
    operations: Type.Union([Type.Array(Type.String()), Type.Null()], {
      description: "An operator's ops: the operations its actions are limited to; null when not limited.",
    }),
    jti: Type.Union([Type.String(), Type.Null()], { description: "The token's jti, by which it can be revoked." }),
    issued_at: Type.Union([Type.String({ format: "date-time" }), Type.Null()]),
    expires_at: Type.String({ format: "date-time" }),
  },
  { additionalProperties: false },
);

const RevokedToken = Type.Object(
  { jti: Type.String(), revoked_at: Type.String({ format: "date-time" }), revoked_by: Type.String() },
  { additionalProperties: false },
);

const Cutoff = Type.Object(
  {
    issued_before: Type.String({ format: "date-time" }),
    revoked_at: Type.String({ format: "date-time" }),
    revoked_by: Type.String(),
  },
  { additionalProperties: false },
);

const RevokeBody = Type.Object(
  {
    jti: Type.Optional(
      Type.String({ minLength: 1, maxLength: 255, description: "Revoke the admin tokens with this jti." }),
    ),
    issued_before: Type.Optional(
      Type.String({
        format: "date-time",
        description:
          "Revoke every admin token issued before this instant, taken to the whole second as iat is (and every " +
          "admin token without iat); not later than now.",
      }),
    ),
  },
  { additionalProperties: false },
);

const RevokeAnswer = Type.Object(
  { token: Type.Optional(RevokedToken), cutoff: Type.Optional(Cutoff) },
  { additionalProperties: false },
);

const RevocationList = Type.Object(
  { tokens: Type.Array(RevokedToken), cutoff: Type.Union([Cutoff, Type.Null()]) },
  { additionalProperties: false },
);

const wireToken = (token: RevokedAdminToken): Static<typeof RevokedToken> => ({
  jti: token.jti,
  revoked_at: formatTime(token.revoked.at),
  revoked_by: token.revoked.by,
});

const wireCutoff = (cutoff: AdminTokenCutoff): Static<typeof Cutoff> => ({
  issued_before: formatTime(cutoff.issuedBefore),
  revoked_at: formatTime(cutoff.revoked.at),
  revoked_by: cutoff.revoked.by,
});

/** Registers `GET /admin/me` and the revocation routes. */
export const accessRoutes: FastifyPluginAsyncTypebox<AccessRoutesOptions> = async (app, options) => {
  const { store, access, clock } = options;
  const security = [{ adminToken: [] }];
  const tags = ["access"];

  app.get(
    "/admin/me",
    {
      onRequest: access.needs("viewer"),
      schema: {
        operationId: "getAdminSession",
        summary: "The admin token this request is signed with, as opqueue reads it: who, which role, its jti",
        tags,
        security,
        response: { 200: Session, ...errorResponses(401, 403, 503) },
      },
    },
    async (request) => {
      const admin = adminOf(request);
      return {
        sub: admin.sub,
        role: admin.role ?? "admin",
        operations: admin.operations === null ? null : [...admin.operations],
        jti: admin.jti ?? null,
        issued_at: admin.iat === undefined ? null : formatTime(admin.iat * 1000),
        expires_at: formatTime(admin.exp * 1000),
      };
    },
  );

  app.get(
    "/admin/revocations",
    {
      onRequest: access.needs("admin"),
      schema: {
        operationId: "listRevocations",
        summary: "The revoked admin tokens, newest first, and the cutoff on their issue time, if any",
        tags,
        security,
        querystring: Type.Object(
          { limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_REVOCATION_LIST, default: 100 })) },
          { additionalProperties: false },
        ),
        response: { 200: RevocationList, ...errorResponses(400, 401, 403, 503) },
      },
    },
    async (request) => {
      const list = await store.adminRevocationList({ limit: request.query.limit ?? 100 });
      return { tokens: list.tokens.map(wireToken), cutoff: list.cutoff === null ? null : wireCutoff(list.cutoff) };
    },
  );

  app.post(
    "/admin/revocations",
    {
      onRequest: access.needs("admin"),
      schema: {
        operationId: "revokeAdminTokens",
        summary:
          "Revoke one admin token by its jti, or every admin token issued before an instant; every node refuses them " +
          "from its next request on",
        tags,
        security,
        body: RevokeBody,
        response: { 200: RevokeAnswer, ...errorResponses(400, 401, 403, 415, 503) },
      },
    },
    async (request) => {
      const { jti, issued_before: issuedBefore } = request.body;
      if ((jti === undefined) === (issuedBefore === undefined)) {
        throw new ApiError(400, "invalid_request", "give exactly one of jti and issued_before");
      }
      const actor = actorOf(request);
      if (jti !== undefined) {
        if (hasUnstorableText([jti])) {
          throw new ApiError(400, "invalid_request", "jti cannot hold U+0000 or a lone UTF-16 surrogate");
        }
        const token = await store.adminTokenRevoke({ jti, actor });
        request.log.info({ ...actorFields(request), action: "revoke-token", revokedJti: jti }, "admin action");
        return { token: wireToken(token) };
      }
      // To the whole second, as `iat` is: a token minted later in the same second as the instant stays good.
      const instant = Math.floor(Date.parse(issuedBefore as string) / 1000) * 1000;
      // Raised, never lowered: an instant in the future would refuse every token, new ones too, until it has passed.
      if (instant > clock.now() + CLOCK_TOLERANCE_S * 1000) {
        throw new ApiError(400, "invalid_request", "issued_before is in the future; give an instant up to now");
      }
      const cutoff = await store.adminTokenCutoffRaise({ issuedBefore: instant, actor });
      request.log.info(
        { ...actorFields(request), action: "revoke-issued-before", issuedBefore: formatTime(instant) },
        "admin action",
      );
      return { cutoff: wireCutoff(cutoff) };
    },
  );
};

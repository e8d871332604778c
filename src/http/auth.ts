/**
 * Authentication hooks, run on `onRequest`, before the body is even read: a caller without valid credentials
 * learns nothing else about its request (docs/api.md, "Enqueue, step by step": step 1 answers first).
 */
import type { FastifyReply, FastifyRequest } from "fastify";
import type { DeliveryCaller, DeliveryTokenVerifier } from "../auth/delivery-tokens.js";
import {
  roleIncludes,
  TokenError,
  type AdminIdentity,
  type AdminRole,
  type EnqueueAssertion,
  type TokenVerifier,
} from "../auth/tokens.js";
import { ApiError } from "../errors.js";
import { hasUnstorableText } from "../job/payload-rules.js";
import type { EnqueueCaller } from "../enqueue/enqueue.js";
import type { AccessStore, JobReadStore } from "../store/store.js";

declare module "fastify" {
  interface FastifyRequest {
    /** Set on `POST /jobs` once the assertion (and the parent it names) checked out. */
    enqueueCaller: EnqueueCaller | null;
    /** Set on admin routes once the admin token checked out. */
    admin: AdminIdentity | null;
    /** Set on `GET /jobs/{id}` when a producer reads with an enqueue assertion instead of an admin token. */
    producer: EnqueueAssertion | null;
    /** Set on a target's calls on its attempt (heartbeat, complete, fail) once its delivery token checked out. */
    deliveryCaller: DeliveryCaller | null;
  }
}

/** The token of `Authorization: Bearer <token>`, or undefined. */
function bearerToken(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (typeof header !== "string") return undefined;
  const match = /^Bearer[ \t]+([^\s]+)[ \t]*$/i.exec(header);
  return match?.[1];
}

/** The `onRequest` hook of `POST /jobs`: verifies the enqueue assertion and reads the parent job it names. */
export function enqueueAuthHook(options: { verifier: TokenVerifier; store: Pick<JobReadStore, "jobGet"> }) {
  return async (request: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const token = bearerToken(request);
    if (token === undefined) {
      throw new ApiError(401, "invalid_assertion", "missing enqueue assertion: send Authorization: Bearer <assertion>");
    }
    let assertion;
    try {
      assertion = await options.verifier.verifyAssertion(token);
    } catch (error) {
      if (error instanceof TokenError)
        throw new ApiError(401, "invalid_assertion", `invalid assertion: ${error.message}`);
      throw error;
    }
    if (hasUnstorableText([assertion.sub, assertion.op, assertion.rid ?? "", assertion.job ?? ""])) {
      throw new ApiError(
        401,
        "invalid_assertion",
        "invalid assertion: a claim holds U+0000 or a lone UTF-16 surrogate",
      );
    }
    let parent;
    if (assertion.job !== undefined) {
      parent = await options.store.jobGet({ id: assertion.job });
      if (!parent) {
        throw new ApiError(
          401,
          "invalid_assertion",
          `the assertion names job "${assertion.job}", which does not exist`,
        );
      }
    }
    request.enqueueCaller = { assertion, parent };
  };
}

/** An admin route's `onRequest` hook, marked with the role it needs (the served OpenAPI states it). */
export type AdminHook = ((request: FastifyRequest, reply: FastifyReply) => Promise<void>) & {
  readonly requiredRole: AdminRole;
};

/** The role an `onRequest` option marks, if it holds an admin hook. */
export function requiredRoleOf(onRequest: unknown): AdminRole | undefined {
  const hooks: unknown[] = Array.isArray(onRequest) ? onRequest : [onRequest];
  for (const hook of hooks) {
    const role = (hook as Partial<AdminHook> | undefined)?.requiredRole;
    if (role !== undefined) return role;
  }
  return undefined;
}

/**
 * Who may call the admin routes (docs/api.md, "Roles"): a valid admin token that carries a role, is not revoked, and
 * whose role includes the one the route needs. One per app; each route takes its hook with `needs(role)`.
 */
export class AdminAccess {
  constructor(
    private readonly options: {
      verifier: TokenVerifier;
      revocations: Pick<AccessStore, "adminTokenIsRevoked">;
    },
  ) {}

  /** The `onRequest` hook of an admin route that needs `role`. */
  needs(role: AdminRole): AdminHook {
    const hook = async (request: FastifyRequest, _reply: FastifyReply): Promise<void> => {
      request.admin = await this.authenticate(request, role);
    };
    return Object.assign(hook, { requiredRole: role });
  }

  /**
   * The `onRequest` hook of `GET /jobs/{id}`: an admin token with at least `viewer`, or a producer's enqueue assertion
   * (which may read only the jobs it enqueued: the route checks). Anything else answers as an admin route would.
   */
  jobReader(): AdminHook {
    const hook = async (request: FastifyRequest, _reply: FastifyReply): Promise<void> => {
      const token = bearerToken(request);
      if (token !== undefined) {
        try {
          // An assertion also reads as an admin token without a role: try it as an assertion first.
          request.producer = await this.options.verifier.verifyAssertion(token);
          return;
        } catch (error) {
          if (!(error instanceof TokenError)) throw error;
        }
      }
      request.admin = await this.authenticate(request, "viewer");
    };
    return Object.assign(hook, { requiredRole: "viewer" as const });
  }

  private async authenticate(request: FastifyRequest, needed: AdminRole): Promise<AdminIdentity> {
    const token = bearerToken(request);
    if (token === undefined) {
      throw new ApiError(401, "unauthenticated", "missing admin token: send Authorization: Bearer <token>");
    }
    let admin;
    try {
      admin = await this.options.verifier.verifyAdmin(token);
    } catch (error) {
      if (error instanceof TokenError)
        throw new ApiError(401, "unauthenticated", `invalid admin token: ${error.message}`);
      throw error;
    }
    if (admin.role === null) {
      throw new ApiError(
        403,
        "site_admin_required",
        `"${admin.sub}" is not an administrator: the token carries no role (role: viewer, operator or admin; or site_admin: true)`,
      );
    }
    const issuedAt = admin.iat === undefined ? undefined : admin.iat * 1000;
    if (await this.options.revocations.adminTokenIsRevoked({ jti: admin.jti, issuedAt })) {
      throw new ApiError(401, "unauthenticated", "invalid admin token: the token was revoked");
    }
    if (!roleIncludes(admin.role, needed)) {
      throw new ApiError(
        403,
        "insufficient_role",
        `"${admin.sub}" is signed in as ${admin.role}; this needs ${needed}${needed === "admin" ? "" : " or above"}`,
      );
    }
    return admin;
  }
}

/** The administrator a request is authenticated as (its admin hook ran first). */
export function adminOf(request: FastifyRequest): AdminIdentity {
  if (!request.admin) throw new Error("admin route reached without its auth hook");
  return request.admin;
}

/** The administrator a request is authenticated as: the `sub` of its admin token (its admin hook ran first). */
export function actorOf(request: FastifyRequest): string {
  return adminOf(request).sub;
}

/** Who makes an administrator's write, as the store records it with each job it changes: the token's `sub` and role. */
export function actingAs(request: FastifyRequest): { actor: string; role: AdminRole } {
  const admin = adminOf(request);
  return { actor: admin.sub, role: admin.role ?? "admin" };
}

/** What an admin action's log line says of who made it: the token's `sub`, role, and `jti` when it has one. */
export function actorFields(request: FastifyRequest): { actor: string; role: AdminRole; jti?: string } {
  const jti = adminOf(request).jti;
  return { ...actingAs(request), ...(jti === undefined ? {} : { jti }) };
}

/**
 * Refuses an operator limited to some operations (its token's `ops`) an action on `operationId` outside them; anyone
 * else may act on any operation.
 */
export function requireOperationInScope(request: FastifyRequest, operationId: string): void {
  const admin = adminOf(request);
  if (admin.operations !== null && !admin.operations.includes(operationId)) {
    throw new ApiError(
      403,
      "insufficient_role",
      `"${admin.sub}" may act only on the operations of its token (ops): not on ${JSON.stringify(operationId)}`,
    );
  }
}

/**
 * Refuses an operator limited to some operations an action that is not tied to one operation (a chain, a concurrency
 * key, a bulk action without `operation_id`): `what` names it.
 */
export function requireUnlimited(request: FastifyRequest, what: string): void {
  const admin = adminOf(request);
  if (admin.operations !== null) {
    throw new ApiError(
      403,
      "insufficient_role",
      `"${admin.sub}" may act only on the operations of its token (ops); ${what} is not limited to one operation`,
    );
  }
}

/**
 * The `onRequest` hook of a target's calls on its attempt (`/jobs/{id}/heartbeat`, `complete`, `fail`): the delivery
 * token of that attempt, for the job the path names. Whether the token may still act on the attempt (its `exp`, the
 * token an asynchronous attempt is bound to) is the store's to judge, with the job in hand.
 */
export function attemptCallAuthHook(options: { verifier: DeliveryTokenVerifier }) {
  return async (request: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const token = bearerToken(request);
    if (token === undefined) {
      throw new ApiError(
        401,
        "invalid_delivery_token",
        "missing delivery token: send Authorization: Bearer <the delivery token the attempt was sent with>",
      );
    }
    let caller;
    try {
      caller = await options.verifier.verify(token);
    } catch (error) {
      if (error instanceof TokenError)
        throw new ApiError(401, "invalid_delivery_token", `invalid delivery token: ${error.message}`);
      throw error;
    }
    const pathId = (request.params as { id?: unknown }).id;
    if (pathId !== caller.jobId) {
      throw new ApiError(
        401,
        "invalid_delivery_token",
        `the delivery token is for job ${JSON.stringify(caller.jobId.slice(0, 64))}, not this one`,
      );
    }
    request.deliveryCaller = caller;
  };
}

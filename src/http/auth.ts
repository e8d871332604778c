/**
 * Authentication hooks, run on `onRequest`, before the body is even read: a caller without valid credentials
 * learns nothing else about its request (docs/api.md, "Enqueue, step by step": step 1 answers first).
 */
import type { FastifyReply, FastifyRequest } from "fastify";
import type { DeliveryCaller, DeliveryTokenVerifier } from "../auth/delivery-tokens.js";
import { TokenError, type AdminIdentity, type EnqueueAssertion, type TokenVerifier } from "../auth/tokens.js";
import { ApiError } from "../errors.js";
import { hasUnstorableText } from "../job/payload-rules.js";
import type { EnqueueCaller } from "../enqueue/enqueue.js";
import type { JobReadStore } from "../store/store.js";

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

/**
 * The `onRequest` hook of `GET /jobs/{id}`: a site administrator's token, or a producer's enqueue assertion (which may
 * read only the jobs it enqueued: the route checks). Anything else answers as the admin hook would.
 */
export function jobReaderAuthHook(options: { verifier: TokenVerifier }) {
  const adminOnly = adminAuthHook(options);
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const token = bearerToken(request);
    if (token !== undefined) {
      try {
        // An assertion also reads as an admin token without site_admin: try it as an assertion first.
        request.producer = await options.verifier.verifyAssertion(token);
        return;
      } catch (error) {
        if (!(error instanceof TokenError)) throw error;
      }
    }
    await adminOnly(request, reply);
  };
}

/** The `onRequest` hook of admin routes: a valid admin token with `site_admin: true`. */
export function adminAuthHook(options: { verifier: TokenVerifier }) {
  return async (request: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const token = bearerToken(request);
    if (token === undefined) {
      throw new ApiError(401, "unauthenticated", "missing admin token: send Authorization: Bearer <token>");
    }
    let admin;
    try {
      admin = await options.verifier.verifyAdmin(token);
    } catch (error) {
      if (error instanceof TokenError)
        throw new ApiError(401, "unauthenticated", `invalid admin token: ${error.message}`);
      throw error;
    }
    if (!admin.siteAdmin) {
      throw new ApiError(
        403,
        "site_admin_required",
        `"${admin.sub}" is not a site administrator (site_admin: true is required)`,
      );
    }
    request.admin = admin;
  };
}

/** The administrator a request is authenticated as: the `sub` of its admin token (`adminAuthHook` ran first). */
export function actorOf(request: FastifyRequest): string {
  if (!request.admin) throw new Error("admin route reached without its auth hook");
  return request.admin.sub;
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

/**
 * A Fastify plugin for target operations: verifies every request's delivery token before the handler runs,
 * exposes it as `request.delivery`, and runs the handler inside the delivery (so `enqueue` chains by itself).
 * A request without a valid token is answered 401 `invalid_delivery_token` (opqueue ends such a job dead), or 503
 * while the service's public keys cannot be fetched (opqueue retries).
 *
 * Each route behind the plugin declares the operationId it implements, as `schema: { operationId }` (the field
 * OpenAPI generators such as @fastify/swagger read) or `config: { operationId }`. The token's `op` must equal it
 * (docs/tokens.md, "Verifying a delivery"), so a token issued for one operation is refused on another's route. A route
 * declaring neither refuses every delivery: guessing would accept any operation's token.
 *
 * `request.delivery.signal` (and `currentDelivery()?.signal`) aborts when opqueue aborts the delivery: the connection
 * closes (`reply.raw` emits `close`) before the reply has been sent (`!reply.raw.writableFinished`).
 */
import type { FastifyPluginCallback, FastifyRequest } from "fastify";
import {
  createDeliveryVerifier,
  deliveryAbortSignal,
  deliveryRefusal,
  DeliveryTokenError,
  runInDelivery,
  type DeliveryContext,
  type DeliveryVerifierOptions,
} from "./delivery.js";

declare module "fastify" {
  interface FastifyRequest {
    /** The verified delivery (set by the opqueue delivery plugin), its `signal` aborting if opqueue aborts it. */
    delivery?: DeliveryContext;
  }
  interface FastifySchema {
    /** The OpenAPI operationId the route implements; the opqueue delivery plugin requires the token's `op` to match. */
    operationId?: string;
  }
  interface FastifyContextConfig {
    /** The operationId the route implements, for routes without a schema; read by the opqueue delivery plugin. */
    operationId?: string;
  }
}

/** The operationId the route being served declares, or why it cannot be known. */
function routeOperationId(request: FastifyRequest): { operationId: string } | { problem: string } {
  const { schema, config, method, url } = request.routeOptions;
  const fromSchema = schema?.operationId;
  const fromConfig = config.operationId;
  const route = url === undefined ? "this route" : `route ${String(method)} ${url}`;
  if (fromSchema !== undefined && fromConfig !== undefined && fromSchema !== fromConfig) {
    return { problem: `${route} declares two operationIds (schema: "${fromSchema}", config: "${fromConfig}")` };
  }
  const operationId = fromSchema ?? fromConfig;
  if (typeof operationId !== "string" || operationId === "") {
    return {
      problem:
        `${route} declares no operationId, so no delivery token can be checked against it: ` +
        "declare it as schema: { operationId } or config: { operationId }",
    };
  }
  return { operationId };
}

/**
 * Register it in the encapsulated context of your background routes, each declaring its operationId:
 * `app.register(async (bg) => { bg.register(opqueueDelivery, { secret, audience });
 * bg.post("/users/:id/welcome-email", { schema: { operationId: "sendWelcomeEmail" } }, handler) })`. The keys may
 * also be `secrets` (several, by kid) or `jwksUrl`, as `DeliveryKeyOptions` says. A handler doing long work passes
 * `request.delivery.signal` to it, to stop when opqueue aborts the delivery.
 */
export const opqueueDelivery: FastifyPluginCallback<DeliveryVerifierOptions> = (app, options, done) => {
  const verifier = createDeliveryVerifier(options);
  app.addHook("onRequest", (request, reply, next) => {
    const refuse = (error: unknown) => {
      const refusal = deliveryRefusal(error);
      void reply.code(refusal.statusCode).headers(refusal.headers).send(refusal.body);
    };
    const route = routeOperationId(request);
    if ("problem" in route) {
      refuse(new DeliveryTokenError(`delivery refused: ${route.problem}`));
      return;
    }
    verifier.verifyDelivery(request.headers, route).then((verified) => {
      const delivery: DeliveryContext = { ...verified, signal: deliveryAbortSignal(reply.raw) };
      request.delivery = delivery;
      // `run` around `next` makes every later step of this request (the handler too) see the delivery.
      runInDelivery(delivery, next);
    }, refuse);
  });
  done();
};

// Let the plugin's hook apply to the routes of the context that registers it.
(opqueueDelivery as unknown as Record<symbol, boolean>)[Symbol.for("skip-override")] = true;

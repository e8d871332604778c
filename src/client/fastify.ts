/**
 * A Fastify plugin for target operations: verifies every request's delivery token before the handler runs,
 * exposes it as `request.delivery`, and runs the handler inside the delivery (so `enqueue` chains by itself).
 * A request without a valid token is answered 401 `invalid_delivery_token` (opqueue ends such a job dead), or 503
 * while the service's public keys cannot be fetched (opqueue retries).
 */
import type { FastifyPluginCallback } from "fastify";
import {
  createDeliveryVerifier,
  deliveryRefusal,
  runInDelivery,
  type DeliveryContext,
  type DeliveryVerifierOptions,
} from "./delivery.js";

declare module "fastify" {
  interface FastifyRequest {
    /** The verified delivery (set by the opqueue delivery plugin). */
    delivery?: DeliveryContext;
  }
}

/**
 * Register it in the encapsulated context of your background routes:
 * `app.register(async (bg) => { bg.register(opqueueDelivery, { secret, audience }); bg.post(...) })`.
 */
export const opqueueDelivery: FastifyPluginCallback<DeliveryVerifierOptions> = (app, options, done) => {
  const verifier = createDeliveryVerifier(options);
  app.addHook("onRequest", (request, reply, next) => {
    verifier.verifyDelivery(request.headers).then(
      (delivery) => {
        request.delivery = delivery;
        // `run` around `next` makes every later step of this request (the handler too) see the delivery.
        runInDelivery(delivery, next);
      },
      (error: unknown) => {
        const refusal = deliveryRefusal(error);
        void reply.code(refusal.statusCode).headers(refusal.headers).send(refusal.body);
      },
    );
  });
  done();
};

// Let the plugin's hook apply to the routes of the context that registers it.
(opqueueDelivery as unknown as Record<symbol, boolean>)[Symbol.for("skip-override")] = true;

/**
 * An Express (or plain Node) middleware for target operations: verifies the delivery token, sets
 * `req.delivery`, and runs the rest of the request inside the delivery (so `enqueue` chains by itself).
 * Mount body parsers (`express.json()`) BEFORE it: a callback-style parser running after it may resume the
 * request outside the delivery's async context, and `currentDelivery()` (so chaining) would be lost.
 *
 * A middleware cannot see the route it runs for, so it is told the operationId (docs/tokens.md, "Verifying a
 * delivery"): mount one per route with `operationId`, or one for many routes with `operationIdFor(req)`. A request it
 * can name no operationId for is refused, never let through.
 *
 * `req.delivery.signal` (and `currentDelivery()?.signal`) aborts when opqueue aborts the delivery: the response's
 * connection closes (`res` emits `close`) before the response has been sent (`!res.writableFinished`).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  createDeliveryVerifier,
  deliveryAbortSignal,
  deliveryRefusal,
  DeliveryTokenError,
  runInDelivery,
  type DeliveryContext,
  type DeliveryVerifierOptions,
} from "./delivery.js";

/**
 * The verifier's options (the audience and `secret`, `secrets` or `jwksUrl`, as `DeliveryKeyOptions` says), and how the
 * middleware knows the operationId of the route it guards.
 */
export type DeliveryMiddlewareOptions = DeliveryVerifierOptions &
  (
    | {
        /** The operationId of the one route this middleware is mounted on. */
        operationId: string;
        operationIdFor?: never;
      }
    | {
        /** The operationId of the route `req` is for (by method and path, say); undefined refuses the request. */
        operationIdFor: (req: IncomingMessage) => string | undefined;
        operationId?: never;
      }
  );

/**
 * `app.post("/users/:id/welcome-email", opqueueDeliveryMiddleware({ secret, audience, operationId: "sendWelcomeEmail"
 * }), handler)`; the handler reads `req.delivery`, whose `signal` aborts if opqueue aborts the delivery.
 */
export function opqueueDeliveryMiddleware(options: DeliveryMiddlewareOptions) {
  // A JavaScript caller can leave both out; failing at mount time beats refusing every delivery later.
  const { operationId, operationIdFor } = options as { operationId?: unknown; operationIdFor?: unknown };
  if (typeof operationIdFor !== "function" && (typeof operationId !== "string" || operationId === "")) {
    throw new TypeError(
      "opqueueDeliveryMiddleware needs the operationId of the route it guards: { operationId } or { operationIdFor(req) }",
    );
  }
  const verifier = createDeliveryVerifier(options);
  return (
    req: IncomingMessage & { delivery?: DeliveryContext },
    res: ServerResponse,
    next: (error?: unknown) => void,
  ): void => {
    const refuse = (error: unknown) => {
      const refusal = deliveryRefusal(error);
      res.statusCode = refusal.statusCode;
      for (const [name, value] of Object.entries(refusal.headers)) res.setHeader(name, value);
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify(refusal.body));
    };
    let routeOperationId: string | undefined;
    try {
      routeOperationId = options.operationIdFor ? options.operationIdFor(req) : options.operationId;
    } catch (error) {
      refuse(new DeliveryTokenError(`delivery refused: operationIdFor failed: ${(error as Error).message}`));
      return;
    }
    if (typeof routeOperationId !== "string" || routeOperationId === "") {
      refuse(
        new DeliveryTokenError(`delivery refused: operationIdFor names no operationId for ${req.method} ${req.url}`),
      );
      return;
    }
    verifier.verifyDelivery(req.headers, { operationId: routeOperationId }).then((verified) => {
      const delivery: DeliveryContext = { ...verified, signal: deliveryAbortSignal(res) };
      req.delivery = delivery;
      runInDelivery(delivery, next);
    }, refuse);
  };
}

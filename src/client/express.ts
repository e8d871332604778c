/**
 * An Express (or plain Node) middleware for target operations: verifies the delivery token, sets
 * `req.delivery`, and runs the rest of the request inside the delivery (so `enqueue` chains by itself).
 * Mount body parsers (`express.json()`) BEFORE it: a callback-style parser running after it may resume the
 * request outside the delivery's async context, and `currentDelivery()` (so chaining) would be lost.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  createDeliveryVerifier,
  deliveryRefusal,
  runInDelivery,
  type DeliveryContext,
  type DeliveryVerifierOptions,
} from "./delivery.js";

/** `app.use("/background", opqueueDeliveryMiddleware({ secret, audience }))`. */
export function opqueueDeliveryMiddleware(options: DeliveryVerifierOptions) {
  const verifier = createDeliveryVerifier(options);
  return (
    req: IncomingMessage & { delivery?: DeliveryContext },
    res: ServerResponse,
    next: (error?: unknown) => void,
  ): void => {
    verifier.verifyDelivery(req.headers).then(
      (delivery) => {
        req.delivery = delivery;
        runInDelivery(delivery, next);
      },
      (error: unknown) => {
        const refusal = deliveryRefusal(error);
        res.statusCode = refusal.statusCode;
        for (const [name, value] of Object.entries(refusal.headers)) res.setHeader(name, value);
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify(refusal.body));
      },
    );
  };
}

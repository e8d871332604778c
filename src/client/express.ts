/**
 * An Express (or plain Node) middleware for target operations: verifies the delivery token, sets
 * `req.delivery`, and runs the rest of the request inside the delivery (so `enqueue` chains by itself).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { createDeliveryVerifier, runInDelivery, type DeliveryContext, type DeliveryVerifierOptions } from "./delivery.js";

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
        res.statusCode = 401;
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({ code: "invalid_delivery_token", message: (error as Error).message }));
      },
    );
  };
}

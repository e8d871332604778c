/**
 * The demo product behind `npm start`: a small Fastify app whose `background` operations opqueue delivers to.
 *
 * - `createUser` (foreground) signs a user up and enqueues `sendWelcomeEmail` with its own assertion.
 * - `sendWelcomeEmail` fails now and then with 503 (opqueue retries it), and on success enqueues
 *   `recordEmailSent` as a chained job (its assertion names the job being delivered).
 * - `recordEmailSent` and `buildReport` (run by cron) just succeed.
 * Every background operation verifies the delivery token before doing anything.
 */
import { randomUUID } from "node:crypto";
import Fastify, { type FastifyInstance, type FastifyRequest } from "fastify";
import { jwtVerify, type JWTPayload } from "jose";
import { request } from "undici";
import { mintToken } from "../auth/tokens.js";
import { systemClock } from "../clock.js";
import type { Config } from "../config.js";

/** What the demo product needs to know about its opqueue. */
export interface ProductAppOptions {
  config: Config;
  /** opqueue's base URL. */
  opqueueUrl: string;
  /** Probability that a welcome email attempt answers 503. */
  failureRate?: number;
  log?: (line: string) => void;
}

interface DeliveryClaims extends JWTPayload {
  op: string;
  job: string;
  att: number;
  rid: string;
}

/** Builds the demo product app (not listening). */
export async function buildProductApp(options: ProductAppOptions): Promise<FastifyInstance> {
  const { config } = options;
  const log = options.log ?? ((line: string) => console.log(line));
  const failureRate = options.failureRate ?? 0.3;
  const deliveryKey = config.auth.delivery_key;
  if (deliveryKey.alg !== "HS256" || !deliveryKey.secret) throw new Error("the demo product verifies HS256 delivery tokens only");
  const deliverySecret = new TextEncoder().encode(deliveryKey.secret);
  const app = Fastify({ logger: false });

  /** Verifies the delivery token; answers 401 (which opqueue treats as permanent) when it does not check out. */
  async function verifyDelivery(req: FastifyRequest, operationId: string): Promise<DeliveryClaims> {
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1] ?? "";
    const { payload } = await jwtVerify<DeliveryClaims>(token, deliverySecret, {
      audience: config.target.audience,
      issuer: "opqueue",
      algorithms: ["HS256"],
    });
    if (payload.op !== operationId) throw new Error(`token is for ${payload.op}, not ${operationId}`);
    return payload;
  }

  /** Enqueues a job with a freshly minted assertion, as a product operation would. */
  async function enqueue(call: { sub: string; op: string; rid?: string; job?: string; body: object }) {
    const assertion = await mintToken({
      auth: config.auth,
      clock: systemClock,
      sub: call.sub,
      op: call.op,
      ...(call.rid ? { rid: call.rid } : {}),
      ...(call.job ? { job: call.job } : {}),
    });
    const response = await request(`${options.opqueueUrl}/jobs`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${assertion}` },
      body: JSON.stringify(call.body),
    });
    const answer = (await response.body.json()) as { job?: { id: string }; code?: string; message?: string };
    return { statusCode: response.statusCode, answer };
  }

  app.setErrorHandler((error, _req, reply) => {
    const message = error instanceof Error ? error.message : String(error);
    log(`product: refused a delivery: ${message}`);
    return reply.code(401).send({ code: "invalid_token", message });
  });

  app.post<{ Body: { name?: string } }>("/users", async (req, reply) => {
    const name = req.body?.name ?? `user-${randomUUID().slice(0, 6)}`;
    const requestId = `signup-${randomUUID().slice(0, 8)}`;
    const { statusCode, answer } = await enqueue({
      sub: name,
      op: "createUser",
      rid: requestId,
      body: {
        operation_id: "sendWelcomeEmail",
        request: { path_params: { userId: name }, body: { email: `${name}@example.com` } },
        dedupe_key: `welcome:${name}`,
      },
    });
    log(`product: ${name} signed up (request ${requestId}); opqueue answered ${statusCode} for sendWelcomeEmail, job ${answer.job?.id ?? answer.code}`);
    return reply.code(201).send({ user: name, welcome_job: answer.job?.id ?? null });
  });

  app.post<{ Params: { userId: string } }>("/users/:userId/welcome-email", async (req, reply) => {
    const claims = await verifyDelivery(req, "sendWelcomeEmail");
    if (Math.random() < failureRate) {
      log(`product: sendWelcomeEmail for ${req.params.userId} (job ${claims.job}, attempt ${claims.att}): mail provider busy, answering 503`);
      return reply.code(503).header("retry-after", "1").send({ code: "busy", message: "mail provider busy" });
    }
    const chained = await enqueue({
      sub: claims.sub ?? "",
      op: "sendWelcomeEmail",
      job: claims.job,
      body: { operation_id: "recordEmailSent", request: { path_params: { userId: req.params.userId } } },
    });
    log(`product: sendWelcomeEmail for ${req.params.userId} (job ${claims.job}, attempt ${claims.att}): sent; chained recordEmailSent as job ${chained.answer.job?.id ?? chained.answer.code}`);
    return reply.code(204).send();
  });

  app.put<{ Params: { userId: string } }>("/emails/:userId/sent", async (req, reply) => {
    const claims = await verifyDelivery(req, "recordEmailSent");
    log(`product: recordEmailSent for ${req.params.userId} (job ${claims.job}, chain ${claims.rid}): recorded`);
    return reply.code(204).send();
  });

  app.post("/reports/daily", async (req, reply) => {
    const claims = await verifyDelivery(req, "buildReport");
    log(`product: buildReport (job ${claims.job}, ${claims.rid}): built`);
    return reply.code(204).send();
  });

  return app;
}

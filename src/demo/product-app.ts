/**
 * The demo product behind `npm start`: a small Fastify app whose `background` operations opqueue delivers to,
 * written against `@opqueue/client` as a product team would.
 *
 * - `createUser` (foreground) signs a user up and enqueues `sendWelcomeEmail`.
 * - `sendWelcomeEmail` fails now and then with 503 (opqueue retries it), and on success enqueues
 *   `recordEmailSent`, which the client chains to the job being delivered by itself. For erin and judy it answers
 *   400 the first time (a permanent failure: the job goes dead), so there is a dead job to retry from the dashboard;
 *   the retried job then succeeds.
 * - `recordEmailSent` and `buildReport` (run by cron) just succeed.
 * The background routes sit behind the `opqueueDelivery` plugin, which verifies every delivery token; each declares
 * the operationId it implements (`schema: { operationId }`), so a token for one operation is refused on another's route.
 */
import { randomUUID } from "node:crypto";
import Fastify, { type FastifyInstance } from "fastify";
import { createJobsClient, opqueueDelivery } from "@opqueue/client";
import { deliveryKeyList, type Config } from "../config.js";

/** What the demo product needs to know about its opqueue. */
export interface ProductAppOptions {
  config: Config;
  /** opqueue's base URL. */
  opqueueUrl: string;
  /** Probability that a welcome email attempt answers 503. */
  failureRate?: number;
  log?: (line: string) => void;
}

/** Builds the demo product app (not listening). */
export async function buildProductApp(options: ProductAppOptions): Promise<FastifyInstance> {
  const { config } = options;
  const log = options.log ?? ((line: string) => console.log(line));
  const failureRate = options.failureRate ?? 0.3;
  const enqueueKey = config.auth.keys.find((key) => key.alg === "HS256");
  if (!enqueueKey?.secret) throw new Error("the demo product signs and verifies with HS256 keys only");
  // Every delivery key, by kid, as a product verifies during a rotation (docs/tokens.md, "Rotating keys").
  const deliverySecrets = deliveryKeyList(config.auth.delivery_key).map(({ key }) => {
    if (key.alg !== "HS256" || !key.secret) throw new Error("the demo product signs and verifies with HS256 keys only");
    return { kid: key.kid, secret: key.secret };
  });
  const jobs = createJobsClient({
    baseUrl: options.opqueueUrl,
    sign: { kid: enqueueKey.kid, secret: enqueueKey.secret, audience: config.auth.audience },
  });
  const app = Fastify({ logger: false });
  /** Jobs refused once already: a retry by an administrator goes through. */
  const refusedOnce = new Set<string>();

  app.post<{ Body: { name?: string } }>("/users", async (req, reply) => {
    const name = req.body?.name ?? `user-${randomUUID().slice(0, 6)}`;
    const requestId = `signup-${randomUUID().slice(0, 8)}`;
    const { job, created } = await jobs.enqueue({
      caller: { userId: name, operationId: "createUser", requestId },
      operationId: "sendWelcomeEmail",
      request: { path_params: { userId: name }, body: { email: `${name}@example.com` } },
      dedupeKey: `welcome:${name}`,
    });
    log(
      `product: ${name} signed up (request ${requestId}); sendWelcomeEmail ${created ? "enqueued" : "deduplicated"} as job ${job.id}`,
    );
    return reply.code(201).send({ user: name, welcome_job: job.id });
  });

  await app.register(async (background) => {
    await background.register(opqueueDelivery, { secrets: deliverySecrets, audience: config.target.audience });
    background.setErrorHandler((error, req, reply) => {
      const message = error instanceof Error ? error.message : String(error);
      log(`product: ${req.url} failed: ${message}`);
      return reply.code(500).send({ code: "internal", message });
    });

    const welcomeEmail = { schema: { operationId: "sendWelcomeEmail" } };
    background.post<{ Params: { userId: string } }>(
      "/users/:userId/welcome-email",
      welcomeEmail,
      async (req, reply) => {
        const delivery = req.delivery;
        if (/^(erin|judy)-/.test(req.params.userId) && delivery && !refusedOnce.has(delivery.jobId)) {
          refusedOnce.add(delivery.jobId);
          log(
            `product: sendWelcomeEmail for ${req.params.userId} (job ${delivery.jobId}): mailbox full, answering 400 (the job goes dead; retry it from the dashboard)`,
          );
          return reply.code(400).send({ code: "mailbox_full", message: "the mailbox is full" });
        }
        if (Math.random() < failureRate) {
          log(
            `product: sendWelcomeEmail for ${req.params.userId} (job ${delivery?.jobId}, attempt ${delivery?.attempt}): mail provider busy, answering 503`,
          );
          return reply.code(503).header("retry-after", "1").send({ code: "busy", message: "mail provider busy" });
        }
        // Inside a delivery, enqueue chains to the job being delivered: no assertion code here.
        const { job } = await jobs.enqueue({
          operationId: "recordEmailSent",
          request: { path_params: { userId: req.params.userId } },
        });
        log(
          `product: sendWelcomeEmail for ${req.params.userId} (job ${delivery?.jobId}, attempt ${delivery?.attempt}): sent; chained recordEmailSent as job ${job.id}`,
        );
        return reply.code(204).send();
      },
    );

    const emailSent = { schema: { operationId: "recordEmailSent" } };
    background.put<{ Params: { userId: string } }>("/emails/:userId/sent", emailSent, async (req, reply) => {
      log(
        `product: recordEmailSent for ${req.params.userId} (job ${req.delivery?.jobId}, chain ${req.delivery?.originalRequestId}): recorded`,
      );
      return reply.code(204).send();
    });

    const dailyReport = { schema: { operationId: "buildReport" } };
    background.post("/reports/daily", dailyReport, async (req, reply) => {
      log(`product: buildReport (job ${req.delivery?.jobId}, ${req.delivery?.originalRequestId}): built`);
      return reply.code(204).send();
    });
  });

  return app;
}

/**
 * What the reference servers and workers share: the enqueue body and the batch of them they accept (opqueue's own
 * schemas, so every route validates the same thing), the listening Fastify app, and the delivery they make (the same
 * POST opqueue makes to `buildReport`, over an undici keep-alive pool of 64 connections).
 */
import Fastify, { type FastifyInstance } from "fastify";
import { Agent } from "undici";
import { BatchEnqueueBody, EnqueueBody } from "../../src/job/schemas.js";

export { BatchEnqueueBody, EnqueueBody };

/** What a peer job carries: the parts of the enqueue body a delivery needs. */
export interface PeerPayload {
  operation_id: string;
  request: { body?: unknown; path_params?: Record<string, unknown>; query?: Record<string, unknown> };
}

/** A Fastify app without logging, listening on a free port of 127.0.0.1. */
export async function listenApp(
  build: (app: FastifyInstance) => void,
): Promise<{ app: FastifyInstance; port: number }> {
  const app = Fastify({ logger: false, bodyLimit: 1024 * 1024 });
  build(app);
  await app.listen({ host: "127.0.0.1", port: 0 });
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return { app, port };
}

/** The run time an enqueue body asks for (delay_ms wins over run_at; neither means now). */
export function runAtOf(body: { delay_ms?: number; run_at?: string }): Date {
  if (body.delay_ms !== undefined) return new Date(Date.now() + body.delay_ms);
  if (body.run_at !== undefined) return new Date(body.run_at);
  return new Date();
}

/**
 * Delivers a peer job to the target as opqueue delivers buildReport: `POST {target}/reports` with the request body
 * as JSON and the job id as `idempotency-key`. The bearer token is a fixed string (opqueue signs one per
 * delivery, which the peers are spared). Throws unless the answer is 2xx.
 */
export class PeerDeliverer {
  private readonly agent = new Agent({ connections: 64, keepAliveTimeout: 10_000 });

  constructor(private readonly targetOrigin: string) {}

  async deliver(jobId: string, payload: PeerPayload): Promise<void> {
    const hasBody = payload.request.body !== undefined;
    const response = await this.agent.request({
      origin: this.targetOrigin,
      path: "/reports",
      method: "POST",
      headers: {
        authorization: "Bearer peer-delivery",
        "idempotency-key": jobId,
        "x-job-id": jobId,
        "user-agent": "bench-peer",
        ...(hasBody ? { "content-type": "application/json" } : {}),
      },
      body: hasBody ? JSON.stringify(payload.request.body) : null,
    });
    await response.body.dump();
    if (response.statusCode < 200 || response.statusCode >= 300) {
      throw new Error(`target answered ${response.statusCode}`);
    }
  }

  close(): Promise<void> {
    return this.agent.close();
  }
}

/** Calls `add(n)` for n = 0 … count − 1, `concurrency` calls at a time; answers the time it took (a library's enqueue rate). */
export async function addConcurrently(
  args: { count: number; concurrency: number },
  add: (n: number) => Promise<unknown>,
): Promise<{ elapsedMs: number }> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: args.concurrency }, async () => {
      while (next < args.count) await add(next++);
    }),
  );
  return { elapsedMs: performance.now() - started };
}

/** Polls `counts` every 10 ms until no job is left; answers the `performance.now()` at which none was. */
export async function untilEmpty(counts: () => Promise<{ remaining: number }>): Promise<number> {
  while ((await counts()).remaining > 0) await new Promise((resolve) => setTimeout(resolve, 10));
  return performance.now();
}

/**
 * The log lines of what happens to jobs, fed by telemetry events like the metrics: one line per finished attempt
 * (`info`; `warn` when the job goes dead, with the reason), one when a target takes an attempt asynchronously and one
 * when it ends it, and one per lease rescue (`warn`). Examples of each are in
 * docs/deploying.md, "Logs".
 */
import type { Logger } from "pino";
import type { Clock } from "../clock.js";
import type { Telemetry } from "./events.js";

/** Subscribes the job log lines to `telemetry`. `clock` (the database's clock as this node knows it) dates retries. */
export function logJobEvents(options: { telemetry: Telemetry; logger: Logger; clock: Clock }): void {
  const { telemetry, logger, clock } = options;
  telemetry.on("delivery:finished", (event) => {
    const line = {
      jobId: event.jobId,
      operationId: event.operationId,
      attempt: event.attempt,
      statusCode: event.statusCode ?? null,
      outcome: event.outcome,
      durationMs: Math.round(event.durationMs),
    };
    if (event.outcome === "dead") {
      logger.warn({ ...line, reason: event.terminalReason, error: event.error }, "job dead");
    } else if (event.outcome === "retrying") {
      const nextRunAt = new Date(clock.now() + (event.retryInMs ?? 0)).toISOString();
      logger.info({ ...line, nextRunAt, error: event.error }, "attempt failed; will retry");
    } else {
      logger.info(line, "attempt succeeded");
    }
  });
  telemetry.on("delivery:async", (event) => {
    const line = {
      jobId: event.jobId,
      operationId: event.operationId,
      attempt: event.attempt,
      durationMs: Math.round(event.durationMs),
    };
    logger.info(line, "attempt continues asynchronously");
  });
  telemetry.on("async:finished", (event) => {
    const line = {
      jobId: event.jobId,
      operationId: event.operationId,
      attempt: event.attempt,
      statusCode: event.statusCode ?? null,
      outcome: event.outcome,
      via: event.via,
    };
    if (event.outcome === "dead" || event.outcome === "cancelled") {
      logger.warn(
        { ...line, reason: event.terminalReason, error: event.error },
        `asynchronous attempt ended; job ${event.outcome}`,
      );
    } else if (event.outcome === "retrying") {
      const nextRunAt = new Date(clock.now() + (event.retryInMs ?? 0)).toISOString();
      logger.info({ ...line, nextRunAt, error: event.error }, "asynchronous attempt failed; will retry");
    } else {
      logger.info(line, "asynchronous attempt succeeded");
    }
  });
  telemetry.on("lease:rescued", (event) => {
    logger.warn(
      { jobId: event.jobId, operationId: event.operationId, attempt: event.attempt, outcome: event.outcome },
      event.outcome === "dead" ? "lease expired on the last attempt; job dead" : "lease expired; job will retry",
    );
  });
  telemetry.on("callback:enqueued", (event) => {
    logger.info(
      { kind: event.kind, of: event.of, jobId: event.jobId, operationId: event.operationId },
      "callback enqueued",
    );
  });
  telemetry.on("callback:refused", (event) => {
    logger.warn({ kind: event.kind, of: event.of, reason: event.reason }, "callback due but refused; none enqueued");
  });
}

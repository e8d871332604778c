/**
 * OpenTelemetry spans exported over OTLP/HTTP (JSON), for `telemetry.otlp` (docs/tracing.md, "Spans"). Only
 * src/telemetry/tracing.ts imports this module, dynamically, when the config asks for it: nothing else in opqueue
 * imports an OpenTelemetry package.
 *
 * Three spans, two fed by typed events after the fact (telemetry observes) and one wrapping the work it measures:
 * - `POST /jobs`, `POST /jobs/batch` (server): from `enqueue:answered`, a child of the request's `traceparent` when valid;
 * - `claim` (internal, a trace of its own): from `claim:finished`, for each claim that brought jobs or failed;
 * - `deliver {operationId}` (client): started by the dispatcher before each attempt (`DeliveryTracer`), its span id
 *   the parent-id of the `traceparent` the attempt sends, ended with the attempt's outcome.
 *
 * Nothing is registered globally (no global tracer provider, context manager or propagator): several services in one
 * process (the tests) each keep their own provider, and a product embedding opqueue keeps its own globals.
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  TraceFlags,
  trace,
  type Attributes,
  type Span,
  type SpanContext,
} from "@opentelemetry/api";
import { ExportResultCode, type ExportResult } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  SamplingDecision,
  type ReadableSpan,
  type Sampler,
  type SpanExporter,
} from "@opentelemetry/sdk-trace-base";
import {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_SERVICE_NAME,
  ATTR_SERVICE_VERSION,
  ATTR_URL_FULL,
} from "@opentelemetry/semantic-conventions";
import type { Logger } from "pino";
import type { OtlpConfig } from "../config.js";
import {
  continuesProducerTrace,
  type DeliveryEnding,
  type DeliverySpan,
  type DeliveryTracer,
} from "./delivery-trace.js";
import type { JobRow } from "../job/job.js";
import { VERSION } from "../version.js";
import type { OpqueueEvents, Telemetry } from "./events.js";
import {
  formatTraceparent,
  newSpanId,
  newTraceId,
  parseTraceparent,
  sampledFlagOnly,
  type TraceContext,
} from "./trace-context.js";
import type { Tracing } from "./tracing.js";

/** opqueue's own span attributes (the HTTP ones follow OpenTelemetry's semantic conventions). */
const SPAN_ATTRIBUTES = {
  jobId: "opqueue.job.id",
  attempt: "opqueue.job.attempt",
  operationId: "opqueue.operation_id",
  /** A delivery's outcome: succeeded, retrying, dead, or not-sent (given back uncounted). */
  deliveryOutcome: "opqueue.delivery.outcome",
  terminalReason: "opqueue.job.terminal_reason",
  /** An enqueue's outcome: created, deduplicated, replayed, cancelled-by-chain, or the refusal's error code. */
  enqueueOutcome: "opqueue.enqueue.outcome",
  /** A batch's jobs, their operations and outcomes, in the same order. */
  jobIds: "opqueue.job.ids",
  operationIds: "opqueue.operation_ids",
  enqueueOutcomes: "opqueue.enqueue.outcomes",
  batchRefused: "opqueue.batch.refused",
  claimLimit: "opqueue.claim.limit",
  claimJobs: "opqueue.claim.jobs",
} as const;

/** Longest status message of a failed span: the start of the error is enough to recognise it. */
const STATUS_MESSAGE_MAX = 200;

/**
 * Samples as the trace a span continues or links to decided: a child follows its parent's `sampled` flag, and a root
 * span with links (a retry's delivery) its first link's, so a producer's choice not to sample holds for its job's
 * retries too. Other root spans (an enqueue without `traceparent`, a claim, a delivery of a job without trace context)
 * are sampled: a collector or a tail sampler may thin them.
 */
const followProducerSampler: Sampler = {
  shouldSample(context, _traceId, _spanName, _spanKind, _attributes, links) {
    const followed = trace.getSpanContext(context) ?? links[0]?.context;
    if (followed === undefined) return { decision: SamplingDecision.RECORD_AND_SAMPLED };
    const sampled = (followed.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED;
    return { decision: sampled ? SamplingDecision.RECORD_AND_SAMPLED : SamplingDecision.NOT_RECORD };
  },
  toString: () => "FollowProducerSampler",
};

/** A stored or received trace context as the remote parent (or link) OpenTelemetry takes. */
function remoteSpanContext(context: TraceContext): SpanContext {
  return {
    traceId: context.traceId,
    spanId: context.spanId,
    traceFlags: Number.parseInt(context.flags, 16),
    isRemote: true,
  };
}

/**
 * Passes spans to the OTLP exporter and logs when exports start failing (a collector down or refusing) and when they
 * work again: once each, not once per batch. OpenTelemetry's own error handler would say nothing without a global
 * diagnostic logger, which opqueue does not install.
 */
class ReportingExporter implements SpanExporter {
  private failing = false;

  constructor(
    private readonly inner: SpanExporter,
    private readonly logger: Logger,
    private readonly endpoint: string,
  ) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.inner.export(spans, (result) => {
      if (result.code !== ExportResultCode.SUCCESS) {
        if (!this.failing) {
          this.logger.warn(
            { err: result.error, endpoint: this.endpoint, spans: spans.length },
            "could not export spans over OTLP; they are dropped until the collector answers (logged again once it does)",
          );
        }
        this.failing = true;
      } else if (this.failing) {
        this.failing = false;
        this.logger.info({ endpoint: this.endpoint }, "spans are exported over OTLP again");
      }
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}

/** The span of one delivery attempt, named by the `traceparent` it sends. */
class OtlpDeliverySpan implements DeliverySpan {
  constructor(
    private readonly span: Span,
    readonly traceparent: string | undefined,
  ) {}

  sending(method: string, url: string): void {
    if (!this.span.isRecording()) return;
    // The query string can hold a job's data: the span keeps the URL without it.
    const query = url.indexOf("?");
    const parsed = new URL(query < 0 ? url : url.slice(0, query));
    const port = parsed.port === "" ? (parsed.protocol === "https:" ? 443 : 80) : Number(parsed.port);
    this.span.setAttributes({
      [ATTR_HTTP_REQUEST_METHOD]: method,
      [ATTR_URL_FULL]: parsed.href,
      [ATTR_SERVER_ADDRESS]: parsed.hostname,
      [ATTR_SERVER_PORT]: port,
    });
  }

  end(ending: DeliveryEnding): void {
    const span = this.span;
    if (span.isRecording()) {
      span.setAttribute(SPAN_ATTRIBUTES.deliveryOutcome, ending.outcome);
      if (ending.statusCode !== undefined) span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, ending.statusCode);
      if (ending.terminalReason !== null) span.setAttribute(SPAN_ATTRIBUTES.terminalReason, ending.terminalReason);
      if (ending.outcome !== "succeeded") {
        // `_OTHER` is the conventions' error type when no status code names the failure (no answer, not sent).
        span.setAttribute(ATTR_ERROR_TYPE, ending.statusCode === undefined ? "_OTHER" : String(ending.statusCode));
        span.setStatus({
          code: SpanStatusCode.ERROR,
          message: (ending.error ?? ending.outcome).slice(0, STATUS_MESSAGE_MAX),
        });
      }
    }
    span.end();
  }
}

/** Starts the OTLP tracer of `otlp`: its exporter, its spans, and its subscriptions to `telemetry`. */
export function startOtlpTracing(options: { otlp: OtlpConfig; telemetry: Telemetry; logger: Logger }): Tracing {
  const { otlp, telemetry, logger } = options;
  const exporter = new OTLPTraceExporter({ url: otlp.endpoint, headers: otlp.headers, timeoutMillis: otlp.timeout_ms });
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: otlp.service_name, [ATTR_SERVICE_VERSION]: VERSION }),
    sampler: followProducerSampler,
    // The ids the deliveries without a tracer use too: one generator, cheap and never all zeros.
    idGenerator: { generateTraceId: newTraceId, generateSpanId: newSpanId },
    spanProcessors: [
      new BatchSpanProcessor(new ReportingExporter(exporter, logger, otlp.endpoint), {
        exportTimeoutMillis: otlp.timeout_ms,
      }),
    ],
  });
  const tracer = provider.getTracer("opqueue", VERSION);

  telemetry.on("enqueue:answered", (event) => {
    const parent = parseTraceparent(event.traceparent);
    const context = parent === undefined ? ROOT_CONTEXT : trace.setSpanContext(ROOT_CONTEXT, remoteSpanContext(parent));
    const span = tracer.startSpan(
      `POST ${event.route}`,
      { kind: SpanKind.SERVER, startTime: event.startTime, attributes: enqueueAttributes(event) },
      context,
    );
    // A server span fails on a 5xx only: a 4xx is the caller's mistake, answered as designed.
    if (event.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR, message: event.code ?? "internal" });
    span.end(event.endTime);
  });

  telemetry.on("claim:finished", (event) => {
    // An idle node claims nothing every `worker.poll_ms`: such claims would flood the collector with empty traces.
    if (event.jobs === 0 && event.error === undefined) return;
    const span = tracer.startSpan(
      "claim",
      {
        kind: SpanKind.INTERNAL,
        root: true,
        startTime: event.startTime,
        attributes: { [SPAN_ATTRIBUTES.claimLimit]: event.limit, [SPAN_ATTRIBUTES.claimJobs]: event.jobs },
      },
      ROOT_CONTEXT,
    );
    if (event.error !== undefined)
      span.setStatus({ code: SpanStatusCode.ERROR, message: event.error.slice(0, STATUS_MESSAGE_MAX) });
    span.end(event.endTime);
  });

  const delivery: DeliveryTracer = {
    start(job: JobRow): DeliverySpan {
      const stored = job.traceparent === null ? undefined : parseTraceparent(job.traceparent);
      const name = `deliver ${job.operationId}`;
      const attributes: Attributes = {
        [SPAN_ATTRIBUTES.jobId]: job.id,
        [SPAN_ATTRIBUTES.attempt]: job.attempt,
        [SPAN_ATTRIBUTES.operationId]: job.operationId,
      };
      if (stored === undefined) {
        // No trace to continue: the span starts one of its own, and the request carries no traceparent (the contract's
        // headers, and nothing more, for a job whose producer did not trace it).
        return new OtlpDeliverySpan(
          tracer.startSpan(name, { kind: SpanKind.CLIENT, root: true, attributes }, ROOT_CONTEXT),
          undefined,
        );
      }
      if (continuesProducerTrace(job.attempt)) {
        const span = tracer.startSpan(
          name,
          { kind: SpanKind.CLIENT, attributes },
          trace.setSpanContext(ROOT_CONTEXT, remoteSpanContext(stored)),
        );
        const { traceId, spanId } = span.spanContext();
        return new OtlpDeliverySpan(span, formatTraceparent({ traceId, spanId, flags: stored.flags }));
      }
      // A retry: a new trace, linked to the producer's (see src/telemetry/delivery-trace.ts for why).
      const span = tracer.startSpan(
        name,
        { kind: SpanKind.CLIENT, root: true, attributes, links: [{ context: remoteSpanContext(stored) }] },
        ROOT_CONTEXT,
      );
      const { traceId, spanId } = span.spanContext();
      return new OtlpDeliverySpan(span, formatTraceparent({ traceId, spanId, flags: sampledFlagOnly(stored.flags) }));
    },
  };

  let shutdown: Promise<void> | undefined;
  return {
    delivery,
    async flush() {
      await provider.forceFlush();
    },
    shutdown() {
      shutdown ??= (async () => {
        // The exporter gives up on a request after `timeout_ms`; the bound here is for anything else that hangs, so a
        // collector that is down never holds a node's shutdown.
        let timer: NodeJS.Timeout | undefined;
        const gaveUp = new Promise<"gave up">((resolve) => {
          timer = setTimeout(() => resolve("gave up"), otlp.timeout_ms + 1000);
        });
        const ended = await Promise.race([provider.shutdown().then(() => "done" as const), gaveUp]).catch(
          (error: unknown) => {
            logger.warn({ err: error }, "the OTLP exporter failed to shut down cleanly");
            return "done" as const;
          },
        );
        clearTimeout(timer);
        if (ended === "gave up")
          logger.warn({ endpoint: otlp.endpoint }, "gave up exporting the last spans at shutdown");
      })();
      return shutdown;
    },
  };
}

/** The attributes of an enqueue span: the job, its operation and outcome (a batch's, in lists), HTTP's own. */
function enqueueAttributes(event: OpqueueEvents["enqueue:answered"]): Attributes {
  const attributes: Attributes = {
    [ATTR_HTTP_REQUEST_METHOD]: "POST",
    [ATTR_HTTP_ROUTE]: event.route,
    [ATTR_HTTP_RESPONSE_STATUS_CODE]: event.statusCode,
  };
  if (event.code !== undefined) attributes[SPAN_ATTRIBUTES.enqueueOutcome] = event.code;
  if (event.route === "/jobs") {
    const [job] = event.jobs;
    if (job !== undefined) {
      attributes[SPAN_ATTRIBUTES.jobId] = job.jobId;
      attributes[SPAN_ATTRIBUTES.operationId] = job.operationId;
      attributes[SPAN_ATTRIBUTES.enqueueOutcome] = job.outcome;
    }
  } else {
    attributes[SPAN_ATTRIBUTES.jobIds] = event.jobs.map((job) => job.jobId);
    attributes[SPAN_ATTRIBUTES.operationIds] = event.jobs.map((job) => job.operationId);
    attributes[SPAN_ATTRIBUTES.enqueueOutcomes] = event.jobs.map((job) => job.outcome);
    attributes[SPAN_ATTRIBUTES.batchRefused] = event.refused;
  }
  return attributes;
}

/**
 * A small OTLP/HTTP trace receiver standing in for a collector: it accepts JSON `ExportTraceServiceRequest`s (what
 * opqueue's exporter sends), answers 200, and keeps every span, decoded. Tests wait for the spans they expect
 * (`waitForSpans`), woken by each export that arrives, never by time passing.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

/** Upper bound of a wait for spans; far above what a passing test needs. */
const WAIT_LIMIT_MS = 10_000;

/** OTLP's span kinds (`SPAN_KIND_*`): OpenTelemetry API's `SpanKind` plus one. */
export const OTLP_SPAN_KIND = { internal: 1, server: 2, client: 3 } as const;
/** OTLP's status codes (`STATUS_CODE_*`). */
export const OTLP_STATUS = { unset: 0, ok: 1, error: 2 } as const;

/** One span as the receiver got it, attributes decoded to plain values. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** Empty for a root span. */
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  links: Array<{ traceId: string; spanId: string }>;
  status: { code: number; message: string | undefined };
  /** The attributes of the resource the span came with (`service.name`, ...). */
  resource: Record<string, unknown>;
}

/** A running receiver. */
export interface OtlpReceiver {
  /** Its traces URL, for `telemetry.otlp.endpoint`. */
  endpoint: string;
  /** Every span received so far, in arrival order. */
  spans: ReceivedSpan[];
  /** Requests that were not OTLP/JSON trace exports (a test expects none). */
  rejected: string[];
  /** Resolves with the spans once `predicate` holds of them; fails after a bound, listing what arrived. */
  waitForSpans(predicate: (spans: ReceivedSpan[]) => boolean, what: string): Promise<ReceivedSpan[]>;
}

interface OtlpValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: number | string;
  doubleValue?: number;
  arrayValue?: { values?: OtlpValue[] };
}
interface OtlpKeyValue {
  key: string;
  value: OtlpValue;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: OtlpKeyValue[];
  links?: Array<{ traceId: string; spanId: string }>;
  status?: { code?: number; message?: string };
}
interface OtlpRequest {
  resourceSpans?: Array<{ resource?: { attributes?: OtlpKeyValue[] }; scopeSpans?: Array<{ spans?: OtlpSpan[] }> }>;
}

function decodeValue(value: OtlpValue): unknown {
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.boolValue !== undefined) return value.boolValue;
  // proto3's JSON writes 64-bit integers as strings; the exporter may write numbers.
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.arrayValue !== undefined) return (value.arrayValue.values ?? []).map(decodeValue);
  return undefined;
}

function decodeAttributes(attributes: OtlpKeyValue[] | undefined): Record<string, unknown> {
  return Object.fromEntries((attributes ?? []).map(({ key, value }) => [key, decodeValue(value)]));
}

/** Starts a receiver on an ephemeral port of 127.0.0.1, closed when test `t` ends. */
export async function startOtlpReceiver(t: { after: (fn: () => Promise<void>) => void }): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const rejected: string[] = [];
  const listeners = new Set<() => void>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const contentType = String(req.headers["content-type"] ?? "");
      if (req.method !== "POST" || req.url !== "/v1/traces" || !contentType.startsWith("application/json")) {
        rejected.push(`${req.method ?? ""} ${req.url ?? ""} ${contentType}`);
        res.writeHead(415).end();
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as OtlpRequest;
      for (const resourceSpans of body.resourceSpans ?? []) {
        const resource = decodeAttributes(resourceSpans.resource?.attributes);
        for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
          for (const span of scopeSpans.spans ?? []) {
            spans.push({
              traceId: span.traceId,
              spanId: span.spanId,
              parentSpanId: span.parentSpanId ?? "",
              name: span.name,
              kind: span.kind,
              attributes: decodeAttributes(span.attributes),
              links: (span.links ?? []).map(({ traceId, spanId }) => ({ traceId, spanId })),
              status: { code: span.status?.code ?? OTLP_STATUS.unset, message: span.status?.message },
              resource,
            });
          }
        }
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
      for (const listener of [...listeners]) listener();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  t.after(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return {
    endpoint: `http://127.0.0.1:${port}/v1/traces`,
    spans,
    rejected,
    waitForSpans(predicate, what) {
      if (predicate(spans)) return Promise.resolve([...spans]);
      return new Promise((resolve, reject) => {
        // A bound for a broken test or service, never a pause: a passing test is woken by the export itself.
        const timer = setTimeout(() => {
          listeners.delete(check);
          const seen = spans.map((span) => `${span.name} ${span.traceId}/${span.spanId}`).join(", ");
          reject(new Error(`the receiver did not get ${what}; it got: ${seen || "no span"}`));
        }, WAIT_LIMIT_MS);
        const check = () => {
          if (!predicate(spans)) return;
          clearTimeout(timer);
          listeners.delete(check);
          resolve([...spans]);
        };
        listeners.add(check);
      });
    },
  };
}

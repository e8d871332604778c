/**
 * The settings of each target operation, resolved once from the config: the operation's own overrides under
 * `operations.<id>` laid over `defaults`, `retry` and `target`. Enqueue and cron read `maxAttempts`, the deliverer
 * the target and `timeoutMs`, the dispatcher and the rescuer `retry` and the lease; nothing else reads the config for
 * them. Built once per service (`createService`) and passed down as a value.
 */
import type { Config } from "../config.js";
import type { LeaseLimits } from "../job/job.js";
import {
  parseRedactPointer,
  redactRequest,
  restoreRedacted,
  type RedactPath,
  type RequestRedaction,
} from "../job/redaction.js";
import type { RetrySettings } from "../job/retry-policy.js";
import type { RequestPayload } from "../job/schemas.js";

/** Connections the deliverer keeps per target origin: `worker.concurrency`, and never fewer than this. */
const MIN_DELIVERY_CONNECTIONS_PER_ORIGIN = 8;

/** Everything opqueue needs to know about one target operation. */
export interface OperationSettings {
  /** Attempts before a job goes dead `exhausted`. */
  maxAttempts: number;
  /** The whole exchange of one attempt. */
  timeoutMs: number;
  /** Backoff between attempts: the global `retry` with the operation's overrides. */
  retry: Readonly<RetrySettings>;
  /** Where deliveries go: the origin of the base URL and its path (without a trailing slash). */
  target: { origin: string; basePath: string };
  /** How long a running job may go without a heartbeat before its lease has expired: timeout plus lease grace. */
  leaseMs: number;
  /** Whether a 2xx body is kept in the job's result (`operations.X.store_result`). */
  storeResult: boolean;
  /** Whether enqueue checks a request against the operation's own schemas (docs/api.md, step 4a). */
  validateRequest: boolean;
  /**
   * The same for an attempt the target took asynchronously, whose heartbeats come from the target:
   * `operations.<id>.async_lease_ms`, else `leaseMs`.
   */
  asyncLeaseMs: number;
  /**
   * The longest an attempt the target took asynchronously may run, from its claim, however its heartbeats renew its
   * lease: `operations.<id>.max_async_ms`, else `defaults.max_async_ms`.
   */
  maxAsyncMs: number;
  /** The values of its jobs' request that are never shown (`operations.<id>.redact`, parsed). */
  redact: readonly RedactPath[];
}

/** The settings of every operation, resolved on first use and kept (a config never changes once parsed). */
export class PerOperationSettings implements RequestRedaction {
  private readonly resolved = new Map<string, OperationSettings>();
  /** Connections the deliverer keeps open per target origin. */
  readonly deliveryConnectionsPerOrigin: number;

  constructor(private readonly config: Config) {
    this.deliveryConnectionsPerOrigin = Math.max(MIN_DELIVERY_CONNECTIONS_PER_ORIGIN, config.worker.concurrency);
  }

  /** The settings of `operationId`; the defaults for an operation the config says nothing about. */
  of(operationId: string): OperationSettings {
    let settings = this.resolved.get(operationId);
    if (!settings) {
      settings = this.resolve(operationId);
      this.resolved.set(operationId, settings);
    }
    return settings;
  }

  private resolve(operationId: string): OperationSettings {
    const { config } = this;
    // Own keys only: an operation named "constructor" must not find Object.prototype's members.
    const override = Object.hasOwn(config.operations, operationId) ? config.operations[operationId] : undefined;
    const timeoutMs = override?.timeout_ms ?? config.defaults.timeout_ms;
    const base = new URL(override?.base_url ?? config.target.base_url);
    return Object.freeze({
      maxAttempts: override?.max_attempts ?? config.defaults.max_attempts,
      timeoutMs,
      retry: Object.freeze({ ...config.retry, ...override?.retry }),
      target: Object.freeze({ origin: base.origin, basePath: base.pathname.replace(/\/+$/, "") }),
      leaseMs: timeoutMs + config.lease.grace_ms,
      storeResult: override?.store_result ?? false,
      validateRequest: override?.validate_request ?? config.defaults.validate_request,
      asyncLeaseMs: override?.async_lease_ms ?? timeoutMs + config.lease.grace_ms,
      maxAsyncMs: override?.max_async_ms ?? config.defaults.max_async_ms,
      // The config checked every pointer when it was parsed.
      redact: Object.freeze((override?.redact ?? []).map((pointer) => parseRedactPointer(pointer) as RedactPath)),
    });
  }

  /** `request` of a job (or schedule) of `operationId` as an answer may show it: redacted by its operation's pointers. */
  shown(operationId: string, request: RequestPayload): RequestPayload {
    const paths = this.of(operationId).redact;
    return paths.length === 0 ? request : redactRequest(request, paths);
  }

  /** `sent`, read redacted and sent back for `operationId`, with each placeholder put back from `stored`. */
  restored(operationId: string, sent: RequestPayload, stored: RequestPayload): RequestPayload {
    const paths = this.of(operationId).redact;
    return paths.length === 0 ? sent : restoreRedacted(sent, stored, paths);
  }

  /**
   * The lease of every operation with its own timeout, and the default for the rest; and the asynchronous lease of
   * every operation that sets one (for the rescuer).
   */
  leaseLimits(): LeaseLimits {
    const byOperation: Record<string, number> = {};
    const asyncByOperation: Record<string, number> = {};
    for (const [operationId, override] of Object.entries(this.config.operations)) {
      byOperation[operationId] = this.of(operationId).leaseMs;
      if (override.async_lease_ms !== undefined) asyncByOperation[operationId] = override.async_lease_ms;
    }
    return { defaultMs: this.config.defaults.timeout_ms + this.config.lease.grace_ms, byOperation, asyncByOperation };
  }

  /** The distinct origins deliveries go to: `target.base_url` and every `operations.*.base_url`. */
  deliveryOrigins(): string[] {
    const urls = [
      this.config.target.base_url,
      ...Object.values(this.config.operations).map((override) => override.base_url),
    ];
    return [...new Set(urls.filter((url): url is string => url !== undefined).map((url) => new URL(url).origin))];
  }
}

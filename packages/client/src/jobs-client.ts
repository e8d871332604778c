/**
 * The client for calling opqueue: enqueue (minting the assertion, chaining automatically inside a delivery,
 * retrying 503 `unavailable`), the administrator's get, list, cancel, cancelJobs, retry, cancelChain, runNow, attempts
 * and history, flow control (docs/flow-control.md): listOperations, pause and resume an operation or a concurrency
 * key, set and reset an operation's limits, and schedules (docs/schedules.md): list, get, create, update, pause,
 * resume, delete and run now; and a target's calls on an attempt it took asynchronously (docs/delivery.md, "Long
 * jobs"): heartbeat, complete, fail. Errors are the typed classes of `./errors.ts`.
 */
import { SignJWT } from "jose";
import { isValidRequestId, REQUEST_ID_RULE } from "./token-rules.js";
import type {
  Authority,
  HeartbeatAnswer,
  Job,
  JobAttempt,
  Chain,
  JobExtensions,
  JobHistoryEvent,
  JobStatus,
  LimitsPatch,
  OperationControl,
  OperationSummary,
  PausedKey,
  RequestPayload,
  Schedule,
  ScheduleDefinition,
  SchedulePatch,
} from "./wire.js";
import { currentDelivery, type AsyncAttempt } from "./delivery.js";
import { OpqueueError, errorFor } from "./errors.js";

/** Fastify's default request ids: `req-` and a per-process counter in base 36. */
const PER_PROCESS_REQUEST_ID = /^req-[0-9a-z]{1,7}$/;
/** The `code` of the warning `enqueue` emits (through `process.emitWarning`) for such an id. */
export const PER_PROCESS_REQUEST_ID_WARNING = "OPQUEUE_PER_PROCESS_REQUEST_ID";

/** Who is calling: the claims of an enqueue assertion (docs/tokens.md). */
export interface AssertionClaims {
  /** The acting user. */
  sub: string;
  /** The calling operationId (`cron:{name}` for cron). */
  op: string;
  /** The chain-root request id (a root call). */
  rid?: string;
  /** The job whose delivery makes this call (a chained call). */
  job?: string;
}

/** How assertions are made: from an HS256 key of the service's `auth.keys`, or by a function of yours. */
export type AssertionSigner =
  | { kid: string; secret: string; audience?: string; ttlSeconds?: number }
  | ((claims: AssertionClaims) => Promise<string> | string);

/** Options of `createJobsClient`. */
export interface JobsClientOptions {
  /** opqueue's base URL, e.g. http://127.0.0.1:8080. */
  baseUrl: string;
  /** Makes enqueue assertions. */
  sign?: AssertionSigner;
  /** An admin token (or a function returning one) for the administrators' calls (get, list, cancel, retry, ...). */
  adminToken?: string | (() => Promise<string> | string);
  /** Retries of a 503 `unavailable` (default 5), waiting `Retry-After` or an exponential backoff. */
  retries?: number;
  /** The fetch to use (default the global one). */
  fetch?: typeof fetch;
}

/** The arguments of `enqueue`. */
export interface EnqueueOptions {
  operationId: string;
  request: RequestPayload;
  priority?: number;
  delayMs?: number;
  runAt?: Date | string;
  dedupeKey?: string | null;
  concurrencyKey?: string | null;
  /**
   * The key the operation's `rate_per_key` limit counts the job under (a tenant, a customer, a third-party account),
   * and the lane claims take turns by instead of the user (docs/flow-control.md). Not part of the job's wire form.
   */
  rateKey?: string | null;
  onBehalfOf?: { userId: string; authority: Authority };
  /**
   * Expiry: a job not started within this many ms of the enqueue ends cancelled (`expired`), never delivered. Wins
   * over `expiresAt`. Not part of the job's wire form.
   */
  ttlMs?: number;
  /** Expiry as an instant (see `ttlMs`); it must come after the job's run time. */
  expiresAt?: Date | string;
  /** Enqueued as a chained job, once, when the job succeeds; its body the outcome (docs/chains.md). */
  onComplete?: Callback;
  /** Enqueued as a chained job, once, when the job ends dead. */
  onDead?: Callback;
  /** Enqueued as a chained job, once, when the whole chain settles; only with a chain's first job. */
  onSettled?: Callback;
  /**
   * Makes the enqueue safe to retry: the service remembers the key, per calling operation and user, for its
   * idempotency window (24 h by default), and answers the same key again with the job it created, even after the job
   * ran (`replayed` is true). The same key with another request is `IdempotencyKeyReusedError`.
   */
  idempotencyKey?: string;
  /**
   * A W3C `traceparent` to continue (docs/tracing.md): its deliveries carry the trace. Inside a delivery it defaults
   * to the delivery's own trace context.
   */
  traceparent?: string;
  /**
   * Who calls, for a root enqueue: the acting user, the calling operation and the request id. Inside a delivery
   * (a handler behind `opqueueDelivery`), leave it out: the call is chained to the job being delivered.
   * `requestId` must be 1..255 characters of visible ASCII, and neither `.` nor `..` (docs/tokens.md): it travels in
   * headers and URL paths. Anything else throws before a request is sent.
   */
  caller?: { userId: string; operationId: string; requestId: string };
}

/** A callback: the background operation enqueued, with its path parameters and query (its body is the outcome). */
export interface Callback {
  operationId: string;
  pathParams?: Record<string, unknown>;
  query?: Record<string, unknown>;
}

/** A callback on the wire. */
function callbackBody(callback: Callback): Record<string, unknown> {
  const request = {
    ...(callback.pathParams === undefined ? {} : { path_params: callback.pathParams }),
    ...(callback.query === undefined ? {} : { query: callback.query }),
  };
  return { operation_id: callback.operationId, ...(Object.keys(request).length === 0 ? {} : { request }) };
}

/** An item of `enqueueBatch`: an enqueue, its caller given once for the whole batch. */
export type BatchItem = Omit<EnqueueOptions, "caller" | "traceparent">;

/** What `enqueueBatch` answers for one item, in the item's place. */
export type BatchItemResult =
  { ok: true; id: string; created: boolean; replayed: boolean } | { ok: false; error: OpqueueError };

/** Filters of `list`. */
export interface ListOptions {
  status?: JobStatus | JobStatus[];
  operationId?: string;
  originalRequestId?: string;
  userId?: string;
  parentJobId?: string;
  /** Page size, 1..500 (default 50). */
  limit?: number;
}

/** Which jobs `cancelJobs` cancels: every given filter must match, and at least one besides `statuses` is needed. */
export interface CancelJobsFilter {
  /** The statuses to cancel (default pending and retrying); running ones have their delivery aborted. */
  statuses?: Array<"pending" | "retrying" | "running">;
  operationId?: string;
  originalRequestId?: string;
  userId?: string;
  dedupeKey?: string;
  /** Created at or after this instant. */
  createdAfter?: Date | string;
  /** Created before this instant. */
  createdBefore?: Date | string;
  /** Most jobs cancelled, newest first, 1..1000 (default 100). */
  limit?: number;
}

/** Options of `cancel`. */
export interface CancelOptions {
  /**
   * Also cancel a running job: its delivery is aborted on whichever node runs it (the target's `delivery.signal`
   * aborts), and it ends cancelled whatever the target answers. Without it, a running job is `JobRunningError`.
   */
  abort?: boolean;
}

/** Options of `heartbeat`. */
export interface HeartbeatOptions {
  /**
   * Any JSON value (at most 4 KB of it), kept as the job's progress: GET /jobs/{id}/extensions and the dashboard show
   * it. Left out, the last progress stays.
   */
  progress?: unknown;
}

/** Options of `complete`. */
export interface CompleteOptions {
  /** The 2xx the job's result records; 200 by default. */
  statusCode?: number;
  /** The job's result (any JSON value, at most 8 KB of it): its `result.body`, the value itself (`body_format: "json"`), for an operation with store_result. */
  result?: unknown;
}

/** Options of `fail`: the answer the attempt would have given, read by the rules of docs/delivery.md. */
export interface FailOptions {
  /** `never`: the job ends dead (`rejected-by-endpoint`); `always`: retried while attempts are left, whatever the status. */
  retry?: "never" | "always";
  /** A non-2xx status (300..599): 408, 425, 429 and 5xx are retried, others end the job. Without one, a retry. */
  statusCode?: number;
  /** What went wrong: the job's `error_body`, cut to 8,192 bytes. */
  error?: string;
}

/** An enqueue's options as the wire's body (docs/api.md, "Enqueue"). */
function enqueueBody(enqueue: BatchItem): Record<string, unknown> {
  const time = (value: Date | string) => (value instanceof Date ? value.toISOString() : value);
  return {
    operation_id: enqueue.operationId,
    request: enqueue.request,
    ...(enqueue.priority === undefined ? {} : { priority: enqueue.priority }),
    ...(enqueue.delayMs === undefined ? {} : { delay_ms: enqueue.delayMs }),
    ...(enqueue.runAt === undefined ? {} : { run_at: time(enqueue.runAt) }),
    ...(enqueue.dedupeKey === undefined ? {} : { dedupe_key: enqueue.dedupeKey }),
    ...(enqueue.concurrencyKey === undefined ? {} : { concurrency_key: enqueue.concurrencyKey }),
    ...(enqueue.rateKey === undefined ? {} : { rate_key: enqueue.rateKey }),
    ...(enqueue.onBehalfOf === undefined
      ? {}
      : { on_behalf_of: { user_id: enqueue.onBehalfOf.userId, authority: enqueue.onBehalfOf.authority } }),
    ...(enqueue.ttlMs === undefined ? {} : { ttl_ms: enqueue.ttlMs }),
    ...(enqueue.expiresAt === undefined ? {} : { expires_at: time(enqueue.expiresAt) }),
    ...(enqueue.idempotencyKey === undefined ? {} : { idempotency_key: enqueue.idempotencyKey }),
    ...(enqueue.onComplete === undefined ? {} : { on_complete: callbackBody(enqueue.onComplete) }),
    ...(enqueue.onDead === undefined ? {} : { on_dead: callbackBody(enqueue.onDead) }),
    ...(enqueue.onSettled === undefined ? {} : { on_settled: callbackBody(enqueue.onSettled) }),
  };
}

/** One result of `POST /jobs/batch` on the wire. */
type BatchWireResult =
  { status: 200 | 201; id: string; replayed?: true } | { status: number; code: string; message: string };

/** One page of the job list. */
export interface JobPage {
  jobs: Job[];
  nextCursor: string | null;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `value` as one path segment: percent-encoded, so `/`, `?`, `#` and `%` stay inside it. An empty value, `.` or `..`
 * cannot be sent as a segment at all (URL parsing removes dot-segments, `%2E` included), so it throws rather than
 * reach another route.
 */
function pathSegment(value: string, what: string): string {
  if (typeof value !== "string" || value === "" || value === "." || value === "..") {
    throw new Error(`${what} must be a non-empty string other than "." and ".."; got ${JSON.stringify(value)}`);
  }
  return encodeURIComponent(value);
}

/** The client. */
export interface JobsClient {
  /**
   * Enqueues a job; `created` is false when an existing job was deduplicated (200), or when `idempotencyKey` answered
   * with the job it created before (`replayed`).
   */
  enqueue(options: EnqueueOptions): Promise<{ job: Job; created: boolean; replayed: boolean }>;
  /**
   * Enqueues up to 1,000 jobs in one request (`POST /jobs/batch`), committed together, under one caller (as `enqueue`:
   * `caller` outside a delivery). Each item is answered on its own, in order: a refused item is `ok: false` with the
   * typed error `enqueue` would have thrown, and takes nothing back from the others.
   */
  enqueueBatch(
    items: BatchItem[],
    options?: { caller?: EnqueueOptions["caller"]; traceparent?: string },
  ): Promise<BatchItemResult[]>;
  /** One job by id (every id the client puts in a path is percent-encoded, so any text reaches its route). */
  get(id: string): Promise<Job>;
  /**
   * Waits (up to `waitMs`, at most 30,000) for a job to be succeeded, dead or cancelled, and answers it as it then is
   * (`GET /jobs/{id}?wait_ms=`). With `caller`, as a producer: its enqueue assertion reads the jobs its operation
   * enqueued for its user; without, as an administrator.
   */
  wait(id: string, options: { waitMs: number; caller?: EnqueueOptions["caller"] }): Promise<Job>;
  /** A chain as a unit: its jobs as a tree with their attempts, counts, settling and spawn cap use. */
  getChain(originalRequestId: string): Promise<Chain>;
  /** One page of jobs, newest first. */
  listPage(options?: ListOptions & { cursor?: string }): Promise<JobPage>;
  /** Every page of jobs matching the filters, newest first, fetched as you iterate. */
  pages(options?: ListOptions): AsyncIterable<JobPage>;
  /** Every job matching the filters, newest first, page by page as you iterate. */
  list(options?: ListOptions): AsyncIterable<Job>;
  /** Cancels a pending or retrying job; with `{ abort: true }` a running one too, aborting its delivery. */
  cancel(id: string, options?: CancelOptions): Promise<Job>;
  /** Cancels the jobs matching `filter`, newest first, up to its `limit`; returns the jobs it cancelled. */
  cancelJobs(filter: CancelJobsFilter): Promise<Job[]>;
  /** Makes a dead or cancelled job pending again. */
  retry(id: string): Promise<Job>;
  /** Cancels a chain (by its `original_request_id`, encoded whatever it holds); returns the jobs it cancelled. */
  cancelChain(originalRequestId: string): Promise<Job[]>;
  /** Makes a pending or retrying job due now (`JobNotWaitingError` for a job in another status). */
  runNow(id: string): Promise<Job>;
  /** Every finished attempt of the job, oldest first. */
  attempts(id: string): Promise<JobAttempt[]>;
  /** The job's history, oldest first: its creation, every attempt, and every administrator's action with who did it. */
  history(id: string): Promise<JobHistoryEvent[]>;
  /** What opqueue keeps of a job beyond its wire form: its rate key, expiry and trace context. */
  extensions(id: string): Promise<JobExtensions>;
  /** The background operations a job can target, by operation_id, each with its pause and limits in force. */
  listOperations(): Promise<OperationSummary[]>;
  /** Pauses a background operation: no node claims its jobs until it is resumed (enqueues are still accepted). */
  pauseOperation(operationId: string): Promise<OperationControl>;
  /** Resumes a paused operation: its due jobs are claimed at once. */
  resumeOperation(operationId: string): Promise<OperationControl>;
  /**
   * Changes some of an operation's limits (null removes one; the others are kept), kept across restarts until
   * `resetOperationLimits`. The patch has the wire form of the limits `OperationControl` shows, so they round-trip.
   */
  setOperationLimits(operationId: string, patch: LimitsPatch): Promise<OperationControl>;
  /** Puts an operation's limits back to the configuration's. */
  resetOperationLimits(operationId: string): Promise<OperationControl>;
  /** The paused concurrency keys, by key. */
  listPausedKeys(): Promise<PausedKey[]>;
  /** Pauses a concurrency key: no job with it is claimed, of any operation, until it is resumed. */
  pauseConcurrencyKey(key: string): Promise<PausedKey>;
  /** Resumes a paused concurrency key; false when it was not paused. */
  resumeConcurrencyKey(key: string): Promise<boolean>;
  /** Every schedule, by name: the config file's cron entries (`source: "config"`) and those created through the API. */
  listSchedules(): Promise<Schedule[]>;
  /** One schedule, with its next and last runs (`ScheduleNotFoundError` when no schedule has the name). */
  getSchedule(name: string): Promise<Schedule>;
  /**
   * Creates a schedule (`ScheduleExistsError` when a schedule or a config entry has its name,
   * `ScheduleLimitReachedError` when the service has `limits.max_schedules` schedules already).
   */
  createSchedule(definition: ScheduleDefinition): Promise<Schedule>;
  /**
   * Changes some of a schedule's fields (null removes a key; the others are kept); it ticks by the new definition
   * from its next tick. A config entry is `ScheduleReadOnlyError`, as for pause, resume and delete.
   */
  updateSchedule(name: string, patch: SchedulePatch): Promise<Schedule>;
  /** Pauses a schedule: its ticks enqueue nothing until it is resumed. */
  pauseSchedule(name: string): Promise<Schedule>;
  /** Resumes a schedule: it ticks again from its next tick (the ticks it missed are not enqueued). */
  resumeSchedule(name: string): Promise<Schedule>;
  /** Deletes a schedule; returns it as it was (its jobs stay). */
  deleteSchedule(name: string): Promise<Schedule>;
  /**
   * Enqueues one job of a schedule now (paused or not, config entry or not), in a chain of its own; not a tick.
   * `created` is false when a job of it still waiting held its dedupe key and was refreshed instead.
   */
  runScheduleNow(name: string): Promise<{ job: Job; created: boolean }>;
  /**
   * Renews the lease of an attempt the target took asynchronously (`continueAsync`), reporting progress if given;
   * answers when the lease now expires. Call it well within the operation's lease. `JobNotRunningError`: the attempt is
   * over (cancelled, or rescued after a missed heartbeat), stop working on it. Authenticated by the attempt's own
   * delivery token (`attempt.token`): no `sign` or `adminToken` is needed.
   */
  heartbeat(attempt: AsyncAttempt, options?: HeartbeatOptions): Promise<HeartbeatAnswer>;
  /** Ends an attempt taken asynchronously as succeeded; answers the job. `JobNotRunningError` if it was over already. */
  complete(attempt: AsyncAttempt, options?: CompleteOptions): Promise<Job>;
  /**
   * Ends an attempt taken asynchronously as failed: the job is retried with backoff or ends dead, as the answer
   * `options` describes would have; answers the job. `JobNotRunningError` if it was over already.
   */
  fail(attempt: AsyncAttempt, options?: FailOptions): Promise<Job>;
}

/** Creates a client of one opqueue service. */
export function createJobsClient(options: JobsClientOptions): JobsClient {
  const baseUrl = options.baseUrl.replace(/\/+$/, "");
  const fetchFn = options.fetch ?? fetch;
  const retries = options.retries ?? 5;
  const signer = options.sign;
  const hmacKey = signer && typeof signer !== "function" ? new TextEncoder().encode(signer.secret) : undefined;

  async function assertionFor(claims: AssertionClaims): Promise<string> {
    if (!signer) throw new Error("createJobsClient: `sign` is needed to enqueue");
    if (typeof signer === "function") return signer(claims);
    const now = Math.floor(Date.now() / 1000);
    return new SignJWT({ ...claims })
      .setProtectedHeader({ alg: "HS256", kid: signer.kid, typ: "JWT" })
      .setAudience(signer.audience ?? "opqueue")
      .setIssuedAt(now)
      .setExpirationTime(now + Math.min(300, signer.ttlSeconds ?? 60))
      .sign(hmacKey as Uint8Array);
  }

  async function adminAuthorization(): Promise<string> {
    const token = typeof options.adminToken === "function" ? await options.adminToken() : options.adminToken;
    if (!token) throw new Error("createJobsClient: `adminToken` is needed for administrator calls");
    return `Bearer ${token}`;
  }

  /** One call, retrying 503 `unavailable` with backoff (or its Retry-After). */
  async function call<T>(
    method: string,
    path: string,
    authorization: () => Promise<string>,
    body?: unknown,
    extraHeaders: Record<string, string> = {},
  ): Promise<{
    status: number;
    body: T;
    headers: Headers;
  }> {
    for (let attempt = 0; ; attempt++) {
      // Outside the try: a missing `sign`/`adminToken` or a failing token function is not a network error.
      const authorizationHeader = await authorization();
      const url = `${baseUrl}${path}`;
      let response: Response;
      let text: string;
      try {
        response = await fetchFn(url, {
          method,
          headers: {
            authorization: authorizationHeader,
            ...(body === undefined ? {} : { "content-type": "application/json" }),
            ...extraHeaders,
          },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        });
        text = await response.text();
      } catch (error) {
        throw networkError(`${method} ${url}`, error);
      }
      let parsed: unknown;
      try {
        parsed = text === "" ? undefined : JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      if (response.ok) return { status: response.status, body: parsed as T, headers: response.headers };
      const { code, message } = (parsed ?? {}) as { code?: string; message?: string };
      // Number(null) and Number("") are 0: an absent or empty header must not read as "Retry-After: 0".
      const retryAfterText = response.headers.get("retry-after")?.trim();
      const retryAfterHeader = retryAfterText ? Number(retryAfterText) : Number.NaN;
      const retryAfterSeconds =
        Number.isFinite(retryAfterHeader) && retryAfterHeader >= 0 ? retryAfterHeader : undefined;
      if (response.status === 503 && attempt < retries) {
        const backoffMs = Math.min(10_000, 100 * 2 ** attempt) * (0.5 + Math.random() / 2);
        await sleep(Math.max(backoffMs, (retryAfterSeconds ?? 0) * 1000));
        continue;
      }
      throw errorFor({
        status: response.status,
        code: code ?? `http_${response.status}`,
        message: message ?? (text.slice(0, 200) || response.statusText),
        ...(retryAfterSeconds === undefined ? {} : { retryAfterSeconds }),
      });
    }
  }

  function query(options: ListOptions & { cursor?: string }): string {
    const params = new URLSearchParams();
    const statuses =
      options.status === undefined ? [] : Array.isArray(options.status) ? options.status : [options.status];
    for (const status of statuses) params.append("status", status);
    if (options.operationId !== undefined) params.set("operation_id", options.operationId);
    if (options.originalRequestId !== undefined) params.set("original_request_id", options.originalRequestId);
    if (options.userId !== undefined) params.set("user_id", options.userId);
    if (options.parentJobId !== undefined) params.set("parent_job_id", options.parentJobId);
    if (options.limit !== undefined) params.set("limit", String(options.limit));
    if (options.cursor !== undefined) params.set("cursor", options.cursor);
    const text = params.toString();
    return text === "" ? "" : `?${text}`;
  }

  let warnedOfPerProcessRequestId = false;
  /**
   * Warns, once per client, of a request id spelled like Fastify's default `req.id`: a counter that starts again at
   * `req-1` with every process, so a restarted product would name an old chain (possibly a cancelled one, whose new
   * jobs are born cancelled). Only that spelling is warned of; no other id is second-guessed.
   */
  function warnOfPerProcessRequestId(requestId: string): void {
    if (warnedOfPerProcessRequestId || !PER_PROCESS_REQUEST_ID.test(requestId)) return;
    warnedOfPerProcessRequestId = true;
    process.emitWarning(
      `caller.requestId "${requestId}" looks like Fastify's default request id, which starts again at req-1 when the ` +
        "process restarts: a later request would join an earlier request's chain. Use a globally unique id " +
        "(crypto.randomUUID(), or a genReqId that makes one).",
      { code: PER_PROCESS_REQUEST_ID_WARNING },
    );
  }

  /** The assertion claims of an enqueue: the given caller's, else the delivery being handled's (a chained call). */
  function callerClaims(caller: EnqueueOptions["caller"]): AssertionClaims {
    if (caller) {
      // The service would answer 401 invalid_assertion; saying which field is wrong helps more.
      if (typeof caller.requestId !== "string" || !isValidRequestId(caller.requestId)) {
        const given = JSON.stringify(String(caller.requestId).slice(0, 64));
        throw new Error(`enqueue: caller.requestId must be ${REQUEST_ID_RULE}; got ${given}`);
      }
      warnOfPerProcessRequestId(caller.requestId);
      return { sub: caller.userId, op: caller.operationId, rid: caller.requestId };
    }
    const delivery = currentDelivery();
    if (delivery) return { sub: delivery.userId, op: delivery.operationId, job: delivery.jobId };
    throw new Error("enqueue: give `caller` ({userId, operationId, requestId}) outside a delivery");
  }

  /** The `traceparent` header of an enqueue: the one given, else the delivery being handled's. */
  function traceHeaders(traceparent: string | undefined): Record<string, string> {
    const context = traceparent ?? currentDelivery()?.traceparent;
    return context === undefined ? {} : { traceparent: context };
  }

  /** The authorization of a target's call on its attempt: the delivery token the attempt was sent with. */
  function attemptAuthorization(attempt: AsyncAttempt, call: string): () => Promise<string> {
    if (typeof attempt?.token !== "string" || attempt.token === "") {
      throw new Error(
        `${call}: the attempt has no token: keep the delivery's jobId, attempt and token when you continueAsync`,
      );
    }
    return async () => `Bearer ${attempt.token}`;
  }

  /** POST /jobs/{id}/{action} as the target of `attempt`. */
  async function callAttempt<T>(
    attempt: AsyncAttempt,
    action: "heartbeat" | "complete" | "fail",
    body: object,
  ): Promise<T> {
    const authorization = attemptAuthorization(attempt, action);
    const path = `/jobs/${pathSegment(attempt.jobId, `${action}: attempt.jobId`)}/${action}`;
    return (await call<T>("POST", path, authorization, body)).body;
  }

  const client: JobsClient = {
    async enqueue(enqueue) {
      const claims = callerClaims(enqueue.caller);
      const answer = await call<{ job: Job }>(
        "POST",
        "/jobs",
        async () => `Bearer ${await assertionFor(claims)}`,
        enqueueBody(enqueue),
        traceHeaders(enqueue.traceparent),
      );
      const replayed = answer.headers.get("idempotent-replayed") === "true";
      return { job: answer.body.job, created: answer.status === 201, replayed };
    },
    async enqueueBatch(items, batchOptions = {}) {
      if (!Array.isArray(items) || items.length < 1 || items.length > 1000) {
        throw new Error(
          `enqueueBatch: give 1 to 1000 items; got ${Array.isArray(items) ? items.length : typeof items}`,
        );
      }
      const claims = callerClaims(batchOptions.caller);
      const answer = await call<{ results: BatchWireResult[] }>(
        "POST",
        "/jobs/batch",
        async () => `Bearer ${await assertionFor(claims)}`,
        { jobs: items.map(enqueueBody) },
        traceHeaders(batchOptions.traceparent),
      );
      return answer.body.results.map((result): BatchItemResult =>
        "id" in result
          ? { ok: true, id: result.id, created: result.status === 201, replayed: result.replayed === true }
          : { ok: false, error: errorFor({ status: result.status, code: result.code, message: result.message }) },
      );
    },
    async get(id) {
      return (await call<{ job: Job }>("GET", `/jobs/${pathSegment(id, "get: id")}`, adminAuthorization)).body.job;
    },
    async wait(id, waitOptions) {
      const path = `/jobs/${pathSegment(id, "wait: id")}?wait_ms=${Math.max(0, Math.min(30_000, Math.floor(waitOptions.waitMs)))}`;
      const caller = waitOptions.caller;
      const authorization =
        caller === undefined ? adminAuthorization : async () => `Bearer ${await assertionFor(callerClaims(caller))}`;
      return (await call<{ job: Job }>("GET", path, authorization)).body.job;
    },
    async getChain(originalRequestId) {
      const path = `/chains/${pathSegment(originalRequestId, "getChain: originalRequestId")}`;
      return (await call<{ chain: Chain }>("GET", path, adminAuthorization)).body.chain;
    },
    async listPage(listOptions = {}) {
      const answer = await call<{ jobs: Job[]; next_cursor: string | null }>(
        "GET",
        `/jobs${query(listOptions)}`,
        adminAuthorization,
      );
      return { jobs: answer.body.jobs, nextCursor: answer.body.next_cursor };
    },
    async *pages(listOptions = {}) {
      let cursor: string | undefined;
      do {
        const page = await client.listPage({ ...listOptions, ...(cursor === undefined ? {} : { cursor }) });
        yield page;
        cursor = page.nextCursor ?? undefined;
      } while (cursor !== undefined);
    },
    async *list(listOptions = {}) {
      for await (const page of client.pages(listOptions)) yield* page.jobs;
    },
    async cancel(id, cancelOptions = {}) {
      const path = `/jobs/${pathSegment(id, "cancel: id")}/cancel${cancelOptions.abort ? "?abort=true" : ""}`;
      return (await call<{ job: Job }>("POST", path, adminAuthorization)).body.job;
    },
    async cancelJobs(filter) {
      const time = (value: Date | string) => (value instanceof Date ? value.toISOString() : value);
      const body = {
        ...(filter.statuses === undefined ? {} : { statuses: filter.statuses }),
        ...(filter.operationId === undefined ? {} : { operation_id: filter.operationId }),
        ...(filter.originalRequestId === undefined ? {} : { original_request_id: filter.originalRequestId }),
        ...(filter.userId === undefined ? {} : { user_id: filter.userId }),
        ...(filter.dedupeKey === undefined ? {} : { dedupe_key: filter.dedupeKey }),
        ...(filter.createdAfter === undefined ? {} : { created_after: time(filter.createdAfter) }),
        ...(filter.createdBefore === undefined ? {} : { created_before: time(filter.createdBefore) }),
        ...(filter.limit === undefined ? {} : { limit: filter.limit }),
      };
      return (await call<{ jobs: Job[] }>("POST", "/jobs/cancel", adminAuthorization, body)).body.jobs;
    },
    async retry(id) {
      return (await call<{ job: Job }>("POST", `/jobs/${pathSegment(id, "retry: id")}/retry`, adminAuthorization)).body
        .job;
    },
    async cancelChain(originalRequestId) {
      const path = `/chains/${pathSegment(originalRequestId, "cancelChain: originalRequestId")}/cancel`;
      return (await call<{ jobs: Job[] }>("POST", path, adminAuthorization)).body.jobs;
    },
    async runNow(id) {
      return (await call<{ job: Job }>("POST", `/jobs/${pathSegment(id, "runNow: id")}/run-now`, adminAuthorization))
        .body.job;
    },
    async attempts(id) {
      const path = `/jobs/${pathSegment(id, "attempts: id")}/attempts`;
      return (await call<{ attempts: JobAttempt[] }>("GET", path, adminAuthorization)).body.attempts;
    },
    async history(id) {
      const path = `/jobs/${pathSegment(id, "history: id")}/history`;
      return (await call<{ events: JobHistoryEvent[] }>("GET", path, adminAuthorization)).body.events;
    },
    async extensions(id) {
      const path = `/jobs/${pathSegment(id, "extensions: id")}/extensions`;
      return (await call<{ extensions: JobExtensions }>("GET", path, adminAuthorization)).body.extensions;
    },
    async listOperations() {
      return (await call<{ operations: OperationSummary[] }>("GET", "/operations", adminAuthorization)).body.operations;
    },
    async pauseOperation(operationId) {
      const path = `/operations/${pathSegment(operationId, "pauseOperation: operationId")}/pause`;
      return (await call<{ operation: OperationControl }>("POST", path, adminAuthorization)).body.operation;
    },
    async resumeOperation(operationId) {
      const path = `/operations/${pathSegment(operationId, "resumeOperation: operationId")}/resume`;
      return (await call<{ operation: OperationControl }>("POST", path, adminAuthorization)).body.operation;
    },
    async setOperationLimits(operationId, patch) {
      const path = `/operations/${pathSegment(operationId, "setOperationLimits: operationId")}/limits`;
      return (await call<{ operation: OperationControl }>("PATCH", path, adminAuthorization, patch)).body.operation;
    },
    async resetOperationLimits(operationId) {
      const path = `/operations/${pathSegment(operationId, "resetOperationLimits: operationId")}/limits`;
      return (await call<{ operation: OperationControl }>("DELETE", path, adminAuthorization)).body.operation;
    },
    async listPausedKeys() {
      return (await call<{ keys: PausedKey[] }>("GET", "/concurrency-keys/paused", adminAuthorization)).body.keys;
    },
    async pauseConcurrencyKey(key) {
      const path = `/concurrency-keys/${pathSegment(key, "pauseConcurrencyKey: key")}/pause`;
      return (await call<{ key: PausedKey }>("POST", path, adminAuthorization)).body.key;
    },
    async resumeConcurrencyKey(key) {
      const path = `/concurrency-keys/${pathSegment(key, "resumeConcurrencyKey: key")}/resume`;
      return (await call<{ concurrency_key: string; resumed: boolean }>("POST", path, adminAuthorization)).body.resumed;
    },
    async listSchedules() {
      return (await call<{ schedules: Schedule[] }>("GET", "/schedules", adminAuthorization)).body.schedules;
    },
    async getSchedule(name) {
      const path = `/schedules/${pathSegment(name, "getSchedule: name")}`;
      return (await call<{ schedule: Schedule }>("GET", path, adminAuthorization)).body.schedule;
    },
    async createSchedule(definition) {
      return (await call<{ schedule: Schedule }>("POST", "/schedules", adminAuthorization, definition)).body.schedule;
    },
    async updateSchedule(name, patch) {
      const path = `/schedules/${pathSegment(name, "updateSchedule: name")}`;
      return (await call<{ schedule: Schedule }>("PATCH", path, adminAuthorization, patch)).body.schedule;
    },
    async pauseSchedule(name) {
      const path = `/schedules/${pathSegment(name, "pauseSchedule: name")}/pause`;
      return (await call<{ schedule: Schedule }>("POST", path, adminAuthorization)).body.schedule;
    },
    async resumeSchedule(name) {
      const path = `/schedules/${pathSegment(name, "resumeSchedule: name")}/resume`;
      return (await call<{ schedule: Schedule }>("POST", path, adminAuthorization)).body.schedule;
    },
    async deleteSchedule(name) {
      const path = `/schedules/${pathSegment(name, "deleteSchedule: name")}`;
      return (await call<{ schedule: Schedule }>("DELETE", path, adminAuthorization)).body.schedule;
    },
    async runScheduleNow(name) {
      const path = `/schedules/${pathSegment(name, "runScheduleNow: name")}/run-now`;
      const answer = await call<{ job: Job }>("POST", path, adminAuthorization);
      return { job: answer.body.job, created: answer.status === 201 };
    },
    async heartbeat(attempt, heartbeatOptions = {}) {
      // `progress: undefined` is no progress, as JSON would drop it; null is a value.
      const body =
        "progress" in heartbeatOptions && heartbeatOptions.progress !== undefined
          ? { progress: heartbeatOptions.progress }
          : {};
      return callAttempt<HeartbeatAnswer>(attempt, "heartbeat", body);
    },
    async complete(attempt, completeOptions = {}) {
      const body = {
        ...(completeOptions.statusCode === undefined ? {} : { status_code: completeOptions.statusCode }),
        ...(completeOptions.result === undefined ? {} : { result: completeOptions.result }),
      };
      return (await callAttempt<{ job: Job }>(attempt, "complete", body)).job;
    },
    async fail(attempt, failOptions = {}) {
      const body = {
        ...(failOptions.retry === undefined ? {} : { retry: failOptions.retry }),
        ...(failOptions.statusCode === undefined ? {} : { status_code: failOptions.statusCode }),
        ...(failOptions.error === undefined ? {} : { error: failOptions.error }),
      };
      return (await callAttempt<{ job: Job }>(attempt, "fail", body)).job;
    },
  };
  return client;
}

/**
 * The error of a call that got no (whole) answer, naming the call and the cause. fetch (undici) throws a bare
 * `TypeError: fetch failed` and keeps what happened in `cause` (an error with a `code` such as `ECONNREFUSED` and the
 * address, or an `AggregateError` of one per address tried); the message says it as `ECONNREFUSED 127.0.0.1:8081`, and
 * the error keeps the original as its own `cause`.
 */
function networkError(call: string, error: unknown): OpqueueError {
  return new OpqueueError(0, "network_error", `opqueue did not answer ${call}: ${describeCause(error)}`, undefined, {
    cause: error,
  });
}

/** What went wrong under `error`, its innermost causes first found: `ECONNREFUSED 127.0.0.1:8081`, `ENOTFOUND host`, ... */
function describeCause(error: unknown, depth = 0): string {
  if (!(error instanceof Error)) return String(error);
  const inner = (error as { cause?: unknown }).cause;
  if (inner !== undefined && depth < 5) return describeCause(inner, depth + 1);
  if (error instanceof AggregateError && error.errors.length > 0) {
    return [...new Set(error.errors.map((each: unknown) => describeCause(each, depth + 1)))].join(", ");
  }
  const { code, address, port, hostname } = error as {
    code?: unknown;
    address?: unknown;
    port?: unknown;
    hostname?: unknown;
  };
  if (typeof code === "string") {
    if (typeof address === "string") return `${code} ${address}${typeof port === "number" ? `:${port}` : ""}`;
    if (typeof hostname === "string") return `${code} ${hostname}`;
    return error.message.includes(code) ? error.message : `${code}: ${error.message}`;
  }
  return error.message || error.name;
}

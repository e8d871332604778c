/**
 * A job as opqueue holds it: its row, its authority with the evidence it was granted on, when it runs, and how an
 * attempt ends. Types and one pure function: the SQLite thread loads this module without any schema library.
 */
import type { Authority, JobResult, RequestPayload } from "./schemas.js";
import type { JobStatus } from "./statuses.js";

/** The stored authority: the wire form plus the evidence it was granted on. */
export type StoredAuthority = Authority & { assertion?: string };

/** A job as stored. Times are milliseconds since the epoch. */
export interface JobRow {
  /** Creation order; the FIFO tie-break and the list cursor. */
  seq: number;
  id: string;
  operationId: string;
  status: JobStatus;
  attempt: number;
  maxAttempts: number;
  priority: number;
  runAt: number;
  createdAt: number;
  startedAt: number | null;
  finishedAt: number | null;
  heartbeatAt: number | null;
  dedupeKey: string | null;
  concurrencyKey: string | null;
  /** The key its operation's `rate_per_key` limits it by, and the lane claims take turns by (docs/flow-control.md). */
  rateKey: string | null;
  enqueuedByOperationId: string;
  parentJobId: string | null;
  originalRequestId: string;
  userId: string;
  authority: StoredAuthority;
  request: RequestPayload;
  result: JobResult | null;
  /** The W3C `traceparent` the producer sent with the enqueue (docs/tracing.md), or null. */
  traceparent: string | null;
  /** Past this instant the job is never started: it ends `cancelled`, `expired` (docs/api.md, "Expiry"). */
  expiresAt: number | null;
  /** What is enqueued when the job succeeds or dies (docs/chains.md, "Callbacks"), or null. */
  callbacks: JobCallbacks | null;
  /**
   * How many times the job was claimed, never reset (an administrator's retry starts its attempts again, not this): the
   * delivery token of a claim names it, so no token of one claim acts on another (SECURITY.md).
   */
  claimCount: number;
}

/**
 * A callback: a background operation enqueued as a chained job of the job (or chain) it follows when that reaches a
 * terminal state, its body the outcome (docs/chains.md, "Callbacks").
 */
export interface CallbackSpec {
  operation_id: string;
  /** The callback's path parameters and query; its body is the outcome. */
  request?:
    { path_params?: Record<string, unknown> | undefined; query?: Record<string, unknown> | undefined } | undefined;
}

/** A job's callbacks: one for `succeeded`, one for `dead`. */
export interface JobCallbacks {
  on_complete?: CallbackSpec | undefined;
  on_dead?: CallbackSpec | undefined;
}

/**
 * When a job becomes claimable: at a given instant, or a delay after the store's own now (the database's clock on
 * PostgreSQL, so that a node whose clock is off cannot schedule work early or late).
 */
export type RunTime = { at: number } | { delayMs: number };

/** The instant a run time names, given the store's now. */
export function runTimeAt(runTime: RunTime, now: number): number {
  return "at" in runTime ? runTime.at : now + runTime.delayMs;
}

/** The end of one delivery attempt, written only if the job is still `running` with this `attempt`. */
export type JobOutcome = JobAttempt &
  (
    | { status: "succeeded"; result: JobResult }
    | { status: "dead"; result: JobResult }
    /**
     * Back to the queue, due `delayMs` after the store's now; becomes `cancelled`/`cancelled-by-chain` if the chain was
     * cancelled meanwhile.
     */
    | { status: "retrying"; delayMs: number; result: JobResult }
  );

/** One attempt of one job: the key of every conditional write. */
export interface JobAttempt {
  id: string;
  attempt: number;
  /**
   * When the claim being answered started the attempt (the claimed row's `startedAt`). Outcome writes given it also
   * require it to match: `attempt` starts again at 0 when an administrator retries a job, so an outcome held back by
   * a node cut off from the database could otherwise land on a later claim's attempt of the same number.
   */
  startedAt?: number | null;
}

/** One finished delivery attempt of a job. */
export interface JobAttemptRow {
  attempt: number;
  startedAt: number | null;
  finishedAt: number;
  /** The status the attempt left the job in. */
  outcome: JobStatus;
  statusCode: number | null;
  errorBody: string | null;
}

/**
 * How long a running job may go without a heartbeat before its lease has expired: per operation (its timeout plus the
 * lease grace), and for every other operation.
 */
export interface LeaseLimits {
  defaultMs: number;
  byOperation: Record<string, number>;
  /**
   * The operations whose attempts, once their target took them asynchronously, are held to a lease of their own
   * (`operations.*.async_lease_ms`); an asynchronous attempt of any other operation keeps its operation's lease.
   */
  asyncByOperation?: Record<string, number>;
}

/**
 * What a target's call on its attempt (heartbeat, complete, fail: docs/delivery.md, "Long jobs") proves with the
 * delivery token it presents, once its signature checked out.
 */
export interface AttemptToken {
  /** The token's digest (`deliveryTokenHash`), compared with the one an asynchronous attempt is bound to. */
  hash: string;
  /**
   * Its `exp` has passed. Such a token still acts on an attempt taken asynchronously with it (a long job outlives its
   * token), never on an attempt whose target has not answered yet.
   */
  expired: boolean;
  /**
   * The claim it was signed for (`clm`, the job's `claimCount` then); null in a token signed before opqueue named
   * claims, which acts only on a claim made before then (claimCount 0).
   */
  claim: number | null;
}

/** What opqueue keeps of the asynchronous side of a job's attempts (docs/delivery.md, "Long jobs"). */
export interface JobAsyncState {
  /**
   * The latest attempt whose target answered 202 with `x-job-async: 1`: its number, the start of its claim, and when
   * the answer was recorded (the start of its lease); null if no attempt was ever taken asynchronously.
   */
  accepted: { attempt: number; startedAt: number; at: number } | null;
  /** The latest progress a target's heartbeat reported: by which attempt, its JSON value, and when; null if none. */
  progress: { attempt: number; value: unknown; at: number } | null;
}

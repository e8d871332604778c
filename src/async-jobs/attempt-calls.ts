/**
 * A target's calls on an attempt it took asynchronously (docs/delivery.md, "Long jobs"): heartbeat, complete, fail.
 * The caller's delivery token was verified by the route's hook; the store judges, in the write's own transaction,
 * whether that token may still act on that attempt, and writes. This turns the store's answers into the API's, wakes
 * the dispatcher for a retry, and lets telemetry see each written end. Each refusal throws its `ApiError`.
 *
 * Heartbeats keep an attempt's lease alive for as long as they come; its operation's `max_async_ms` bounds the whole:
 * a call on an attempt that has run longer than that, from its claim, ends it as timed out and is refused with 409.
 */
import type { DeliveryCaller } from "../auth/delivery-tokens.js";
import type { Clock } from "../clock.js";
import type { WorkNotifier } from "../work-notifier.js";
import { ApiError } from "../errors.js";
import type { JobRow } from "../job/job.js";
import type { AttemptDecision } from "../job/retry-policy.js";
import type { PerOperationSettings } from "../operations/settings.js";
import type { AsyncAttemptStore, ExternalCallRefusal, JobReadStore } from "../store/store.js";
import type { OpqueueEvents, Telemetry } from "../telemetry/events.js";
import { completeDecision, failDecision, timedOutDecision } from "./decisions.js";
import type { CompleteBody, FailBody } from "./schemas.js";

/** What the calls need from the running service. */
export interface AttemptCallDeps {
  store: Pick<AsyncAttemptStore, "jobHeartbeatExternal" | "jobSetStateExternal"> & Pick<JobReadStore, "jobGet">;
  settings: PerOperationSettings;
  telemetry: Telemetry;
  notifier: WorkNotifier;
  /** The database's clock as this node knows it, against which a retry's Retry-After date would be read. */
  clock: Clock;
  /** Jitter of a retry's backoff; `Math.random` by default. */
  random?: () => number;
}

/** The refusal of a call the store would not write, as the API answers it. */
function refusalError(refusal: ExternalCallRefusal, caller: DeliveryCaller): ApiError {
  const named = `attempt ${caller.attempt} of job "${caller.jobId}"`;
  switch (refusal.kind) {
    case "not_found":
      return new ApiError(
        404,
        "job_not_found",
        `no job has id "${caller.jobId}" (it may have been deleted by retention)`,
      );
    case "not_running": {
      const { job } = refusal;
      const now =
        job.status !== "running"
          ? `the job is ${job.status}`
          : job.attempt !== caller.attempt
            ? `the job runs attempt ${job.attempt} now`
            : "the job runs another claim of that attempt now";
      return new ApiError(409, "job_not_running", `${named} is over: ${now}; stop working on it`);
    }
    case "token_refused":
      return new ApiError(
        401,
        "invalid_delivery_token",
        refusal.reason === "other_token"
          ? `${named} was taken asynchronously with another delivery token; only that one acts on it`
          : `token expired: a delivery token outlives its exp only once its target has taken the attempt asynchronously ` +
              `(answered 202 with x-job-async: 1), and ${named} has not been`,
      );
  }
}

/**
 * Renews the lease of the caller's attempt (and keeps its progress, if given); answers when the lease now expires. An
 * attempt that ran longer than its operation's `max_async_ms` is not renewed: it is ended as timed out (409).
 */
export async function heartbeatAttempt(
  deps: AttemptCallDeps,
  options: { caller: DeliveryCaller; progress?: { value: unknown } },
): Promise<{ leaseExpiresAt: number }> {
  const { caller, progress } = options;
  // The renewal's write does not read the attempt's start: the attempt is read first, one read of a heartbeat that
  // comes every few seconds at most. Any other case (no such job, another attempt, another token) is the store's to
  // judge below, as without the cap.
  const job = await deps.store.jobGet({ id: caller.jobId });
  if (job !== undefined && job.operationId === caller.operationId && runsAttempt(job, caller) && overran(deps, job)) {
    await endOverrun(deps, caller, job);
  }
  const outcome = await deps.store.jobHeartbeatExternal({
    id: caller.jobId,
    attempt: caller.attempt,
    token: caller.token,
    progressJson: progress === undefined ? undefined : JSON.stringify(progress.value),
  });
  if (outcome.kind !== "renewed") throw refusalError(outcome, caller);
  const settings = deps.settings.of(caller.operationId);
  return { leaseExpiresAt: outcome.heartbeatAt + (outcome.async ? settings.asyncLeaseMs : settings.leaseMs) };
}

/** Ends the caller's attempt as succeeded; answers the job as it now is. */
export async function completeAttempt(
  deps: AttemptCallDeps,
  options: { caller: DeliveryCaller; body: CompleteBody },
): Promise<JobRow> {
  return endAttempt(deps, {
    caller: options.caller,
    via: "complete",
    decide: () =>
      completeDecision(options.body, { storeResult: deps.settings.of(options.caller.operationId).storeResult }),
  });
}

/** Ends the caller's attempt as failed (retried, or dead, by the rules of an answer); answers the job as it now is. */
export async function failAttempt(
  deps: AttemptCallDeps,
  options: { caller: DeliveryCaller; body: FailBody },
): Promise<JobRow> {
  const random = deps.random ?? Math.random;
  return endAttempt(deps, {
    caller: options.caller,
    via: "fail",
    decide: (job) =>
      failDecision({
        body: options.body,
        attempt: job.attempt,
        maxAttempts: job.maxAttempts,
        now: deps.clock.now(),
        retry: deps.settings.of(job.operationId).retry,
        random: random(),
      }),
  });
}

/**
 * Reads the job (its attempts left and its claim), decides, and writes the decision (`writeEnd`); an attempt past its
 * operation's `max_async_ms` is ended as timed out instead, and the call refused.
 */
async function endAttempt(
  deps: AttemptCallDeps,
  options: { caller: DeliveryCaller; via: "complete" | "fail"; decide: (job: JobRow) => AttemptDecision },
): Promise<JobRow> {
  const { caller } = options;
  const job = await deps.store.jobGet({ id: caller.jobId });
  if (job === undefined) throw refusalError({ kind: "not_found" }, caller);
  if (job.operationId !== caller.operationId) {
    throw new ApiError(
      401,
      "invalid_delivery_token",
      `the token is for operation "${caller.operationId}", the job runs "${job.operationId}"`,
    );
  }
  if (!runsAttempt(job, caller)) throw refusalError({ kind: "not_running", job }, caller);
  // Past the cap the attempt is over, as an exchange's answer after its timeout is: a complete does not succeed it.
  if (overran(deps, job)) return endOverrun(deps, caller, job);
  return writeEnd(deps, { caller, job, decision: options.decide(job), via: options.via });
}

/** Whether `job` runs the caller's attempt. */
function runsAttempt(job: JobRow, caller: DeliveryCaller): boolean {
  return job.status === "running" && job.attempt === caller.attempt;
}

/** Whether the attempt `job` runs has run longer than its operation's `max_async_ms`, by the database's clock. */
function overran(deps: AttemptCallDeps, job: JobRow): boolean {
  return job.startedAt !== null && deps.clock.now() - job.startedAt > deps.settings.of(job.operationId).maxAsyncMs;
}

/**
 * Ends an attempt that ran past its operation's `max_async_ms` as timed out (retried, or dead on its last attempt, like
 * an exchange past its timeout), under the store's judgement of the token like any end; then refuses the call with
 * 409 `job_not_running`, saying why: the target must stop working on it.
 */
async function endOverrun(deps: AttemptCallDeps, caller: DeliveryCaller, job: JobRow): Promise<never> {
  const random = deps.random ?? Math.random;
  const { maxAsyncMs, retry } = deps.settings.of(job.operationId);
  const decision = timedOutDecision({
    maxAsyncMs,
    attempt: job.attempt,
    maxAttempts: job.maxAttempts,
    now: deps.clock.now(),
    retry,
    random: random(),
  });
  const ended = await writeEnd(deps, { caller, job, decision, via: "max_async_ms" });
  throw new ApiError(
    409,
    "job_not_running",
    `attempt ${caller.attempt} of job "${caller.jobId}" ran longer than its operation's max_async_ms (${maxAsyncMs} ms) and ` +
      `was ended as timed out: the job is ${ended.status} now; stop working on it`,
  );
}

/**
 * Writes the end of the attempt `job` runs under the store's judgement of the token, conditional on that very claim:
 * between the read and the write, a cancel, a rescue or another call may come first, and then nothing is written.
 */
async function writeEnd(
  deps: AttemptCallDeps,
  options: {
    caller: DeliveryCaller;
    job: JobRow;
    decision: AttemptDecision;
    via: OpqueueEvents["async:finished"]["via"];
  },
): Promise<JobRow> {
  const { caller, job, decision } = options;
  const outcome = await deps.store.jobSetStateExternal({
    outcome: { id: job.id, attempt: job.attempt, startedAt: job.startedAt, ...decision },
    token: caller.token,
  });
  if (outcome.kind !== "written") throw refusalError(outcome, caller);
  const ended = outcome.job;
  if (ended.status === "retrying") deps.notifier.notify(ended.runAt);
  // A written outcome leaves the job succeeded, retrying or dead, or cancelled when its chain was (the store decides).
  const endedStatus = ended.status as OpqueueEvents["async:finished"]["outcome"];
  deps.telemetry.emit("async:finished", {
    jobId: ended.id,
    attempt: caller.attempt,
    operationId: ended.operationId,
    via: options.via,
    outcome: endedStatus,
    terminalReason: ended.result?.terminal_reason ?? null,
    statusCode: ended.result?.status_code,
    retryInMs: decision.status === "retrying" ? decision.delayMs : undefined,
    error: ended.result?.error_body?.slice(0, 200) ?? null,
  });
  return ended;
}

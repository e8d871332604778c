/**
 * The rule both engines apply, inside the transaction of a target's call (heartbeat, complete, fail), to the job it
 * names: whether the call may act on the attempt, and if not, why. Pure, so the engines cannot drift apart.
 */
import type { AttemptToken, JobRow } from "../job/job.js";
import type { ExternalCallRefusal } from "./store.js";

/** A job as a target's call finds it, read under the call's lock (or in SQLite's one write transaction). */
export interface ExternalCallTarget {
  job: JobRow;
  /** The job's current attempt (of its current claim) was taken asynchronously. */
  async: boolean;
  /** The digest of the token that attempt is bound to, when it is asynchronous. */
  asyncTokenHash: string | null;
}

/**
 * Why a call naming attempt `attempt` (and, for an outcome, the claim started at `startedAt`) with `token` may not act
 * on `target`, or undefined when it may. Once the target has taken an attempt asynchronously, only the token that
 * attempt was sent with acts on it, expired or not: a token of an earlier claim that reused the attempt's number (after
 * an administrator's retry) is refused. Before that, any valid token for the attempt acts, if unexpired: the target may
 * call before opqueue has recorded its 202. Either way the token must name the job's current claim (`clm`): tokens of
 * two claims of one attempt number differ, and only the current claim's acts.
 */
export function externalCallRefusal(options: {
  target: ExternalCallTarget | undefined;
  attempt: number;
  startedAt?: number | null | undefined;
  token: AttemptToken;
}): ExternalCallRefusal | undefined {
  const { target, attempt, startedAt, token } = options;
  if (target === undefined) return { kind: "not_found" };
  const { job } = target;
  const sameClaim = startedAt === undefined || startedAt === null || startedAt === job.startedAt;
  // The token's claim: a token of an earlier claim that reused the attempt's number (an administrator's retry) names
  // another claim, even within the same second, when the two tokens' other claims are equal.
  const tokenClaim = token.claim === null ? job.claimCount === 0 : token.claim === job.claimCount;
  if (job.status !== "running" || job.attempt !== attempt || !sameClaim || !tokenClaim)
    return { kind: "not_running", job };
  if (target.async) {
    return target.asyncTokenHash === token.hash ? undefined : { kind: "token_refused", job, reason: "other_token" };
  }
  return token.expired ? { kind: "token_refused", job, reason: "expired" } : undefined;
}

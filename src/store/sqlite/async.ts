/**
 * Attempts a target takes asynchronously, on the SQLite engine (docs/delivery.md, "Long jobs"): the mark of the 202,
 * the target's heartbeats, completes and fails, and the read of a job's asynchronous side (statements in
 * sql/async.ts). A target's call reads the job, is judged by the rule both engines share (`externalCallRefusal`), and
 * writes, all inside the caller's transaction: one writer, so a cancel, a rescue or another call cannot come between.
 */
import type { AttemptToken, JobAsyncState, JobAttempt, JobOutcome } from "../../job/job.js";
import { externalCallRefusal, type ExternalCallTarget } from "../external-calls.js";
import type { ExternalHeartbeatOutcome, ExternalSetStateOutcome } from "../store.js";
import { setStateIfRunning } from "./outcomes.js";
import { toAsyncState, toJobRow } from "./rows.js";
import type { Statements } from "./statements.js";

/** Marks the attempt of this claim as taken asynchronously, bound to its token's digest; answers whether it did. */
export function markAsync(s: Statements, params: { job: JobAttempt; tokenHash: string; now: number }): boolean {
  const { job } = params;
  return (
    s.markAsync.run({
      id: job.id,
      attempt: job.attempt,
      started_at: job.startedAt ?? null,
      now: params.now,
      token_hash: params.tokenHash,
    }).changes > 0
  );
}

/** The job a target's call names, as `externalCallRefusal` judges it; undefined if there is none. */
function callTarget(s: Statements, id: string): ExternalCallTarget | undefined {
  const row = s.callTarget.get(id);
  if (row === undefined) return undefined;
  return { job: toJobRow(row), async: row.is_async === 1, asyncTokenHash: row.async_token_hash };
}

/** A target's heartbeat: the lease renewed, and the progress replaced when the heartbeat carries one. */
export function heartbeatExternal(
  s: Statements,
  params: { id: string; attempt: number; token: AttemptToken; progressJson?: string | undefined; now: number },
): ExternalHeartbeatOutcome {
  const target = callTarget(s, params.id);
  const refusal = externalCallRefusal({ target, attempt: params.attempt, token: params.token });
  if (refusal !== undefined || target === undefined) return refusal ?? { kind: "not_found" };
  const { now } = params;
  s.heartbeatExternal.run({
    id: params.id,
    attempt: params.attempt,
    now,
    has_progress: params.progressJson === undefined ? 0 : 1,
    progress: params.progressJson ?? null,
  });
  return { kind: "renewed", heartbeatAt: now, async: target.async };
}

/** A target's complete or fail: the attempt's outcome written, as the dispatcher's would be. */
export function setStateExternal(
  s: Statements,
  params: { outcome: JobOutcome; token: AttemptToken; now: number },
): ExternalSetStateOutcome {
  const { outcome, token } = params;
  const target = callTarget(s, outcome.id);
  const refusal = externalCallRefusal({ target, attempt: outcome.attempt, startedAt: outcome.startedAt, token });
  if (refusal !== undefined) return refusal;
  if (!setStateIfRunning(s, { outcome, now: params.now })) {
    throw new Error(`job ${outcome.id} changed inside the transaction of a target's call`);
  }
  const row = s.getById.get(outcome.id);
  if (!row) throw new Error(`job ${outcome.id} vanished inside the transaction of a target's call`);
  return { kind: "written", job: toJobRow(row) };
}

/** A job's asynchronous side: the mark of its attempt and the progress its target reported. */
export function asyncState(s: Statements, params: { id: string }): JobAsyncState | undefined {
  const row = s.asyncState.get(params.id);
  return row === undefined ? undefined : toAsyncState(row);
}

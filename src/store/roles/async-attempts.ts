/** The store's `AsyncAttemptStore` role; src/store/store.ts composes the roles into `Store`. */
import type { AttemptToken, JobAsyncState, JobOutcome, JobRow } from "../../job/job.js";

/**
 * Why a target's call on an attempt (`jobHeartbeatExternal`, `jobSetStateExternal`) changed nothing; decided in the
 * call's own transaction, by `externalCallRefusal` on both engines.
 */
export type ExternalCallRefusal =
  | { kind: "not_found" }
  /** The job does not run that attempt (of that claim): it ended, was cancelled or rescued, or runs another one. */
  | { kind: "not_running"; job: JobRow }
  /**
   * The attempt runs, but this token may not act on it: the attempt was taken asynchronously with another token
   * (`other_token`), or the token expired while the attempt had not been taken asynchronously (`expired`).
   */
  | { kind: "token_refused"; job: JobRow; reason: "other_token" | "expired" };

/** The result of `jobHeartbeatExternal`. */
export type ExternalHeartbeatOutcome =
  /** The lease was renewed at `heartbeatAt`; `async` says whether the attempt runs asynchronously (which lease holds). */
  { kind: "renewed"; heartbeatAt: number; async: boolean } | ExternalCallRefusal;

/** The result of `jobSetStateExternal`. */
export type ExternalSetStateOutcome =
  /** The outcome was written; the job as it is now. */
  { kind: "written"; job: JobRow } | ExternalCallRefusal;

/**
 * A target's calls on an attempt it runs (docs/delivery.md, "Long jobs"): heartbeat, complete and fail, each
 * authorised by its delivery token in the call's own transaction, and what the dashboard shows of them.
 */
export interface AsyncAttemptStore {
  /**
   * A target's heartbeat on attempt `attempt` of job `id`: renews the lease, and replaces the job's progress with
   * `progressJson` (JSON text) when given. Written only if the job runs that attempt and `token` may act on it (an
   * attempt taken asynchronously: its own token, even expired; otherwise: an unexpired token).
   */
  jobHeartbeatExternal(params: {
    id: string;
    attempt: number;
    token: AttemptToken;
    progressJson?: string | undefined;
  }): Promise<ExternalHeartbeatOutcome>;
  /**
   * A target's complete or fail: writes `outcome` as `jobSetStateIfRunningMany` would, under the same conditions as
   * `jobHeartbeatExternal`, and durably (the target is answered once it is committed).
   */
  jobSetStateExternal(params: { outcome: JobOutcome; token: AttemptToken }): Promise<ExternalSetStateOutcome>;
  /** The asynchronous side of job `id`'s attempts (its latest mark and progress); undefined if there is no such job. */
  jobAsyncStateGet(params: { id: string }): Promise<JobAsyncState | undefined>;
}

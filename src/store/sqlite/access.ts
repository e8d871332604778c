/**
 * Revoked admin tokens, and erasure of a user's data, on the SQLite engine (statements in sql/access.ts), inside the
 * caller's transaction.
 */
import type { AdminTokenCutoff, RevokedAdminToken, StoreParams, UserEraseOutcome } from "../store.js";
import { erasurePassOf, erasureStep, passRestart, waitingIds, type UserJobsLeft } from "../erasure-pass.js";
import { cancelJob } from "./admin.js";
import type { CutoffRow, RevokedTokenRow } from "./sql/access.js";
import type { Statements } from "./statements.js";

const toRevokedToken = (row: RevokedTokenRow): RevokedAdminToken => ({
  jti: row.jti,
  revoked: { at: row.revoked_at, by: row.revoked_by },
});

const toCutoff = (row: CutoffRow): AdminTokenCutoff => ({
  issuedBefore: row.issued_before,
  revoked: { at: row.revoked_at, by: row.revoked_by },
});

export function revoke(s: Statements, params: { jti: string; actor: string; now: number }): RevokedAdminToken {
  s.revokeToken.run({ jti: params.jti, at: params.now, by: params.actor });
  const row = s.revokedToken.get(params.jti);
  if (row === undefined) throw new Error("revoked_admin_tokens: no row for the jti just revoked");
  return toRevokedToken(row);
}

export function raiseCutoff(
  s: Statements,
  params: { issuedBefore: number; actor: string; now: number },
): AdminTokenCutoff {
  s.raiseCutoff.run({ before: params.issuedBefore, at: params.now, by: params.actor });
  const row = s.cutoff.get();
  if (row === undefined) throw new Error("admin_token_cutoff: no row after raising it");
  return toCutoff(row);
}

export function isRevoked(s: Statements, params: { jti: string | undefined; issuedAt: number | undefined }): boolean {
  return s.tokenRevoked.get({ jti: params.jti ?? null, issued_at: params.issuedAt ?? null }) === 1;
}

export function revocationList(
  s: Statements,
  params: { limit: number },
): { tokens: RevokedAdminToken[]; cutoff: AdminTokenCutoff | null } {
  const cutoff = s.cutoff.get();
  return { tokens: s.revokedTokens.all(params.limit).map(toRevokedToken), cutoff: cutoff ? toCutoff(cutoff) : null };
}

/**
 * `userErase` (roles/admin.ts): one page of the subject's walk of the user's jobs (src/store/erasure-pass.ts), its
 * waiting jobs cancelled first when asked, then its finished ones erased.
 */
export function eraseUser(s: Statements, params: StoreParams<"userErase"> & { now: number }): UserEraseOutcome {
  const { userId, limit, actor, role, now, subject, cancelWaiting } = params;
  const jobsLeft = (): UserJobsLeft => {
    const row = s.userJobsLeft.get({ user_id: userId, cancel: cancelWaiting ? 1 : 0 });
    return {
      waiting: row?.waiting ?? 0,
      running: row?.running ?? 0,
      erasable: row?.erasable ?? 0,
      firstLeft: row?.first_left ?? null,
    };
  };
  let pass = erasurePassOf(s.erasurePass.get(subject));
  let page = s.userJobPage.all({ user_id: userId, after: pass.after, limit });
  let left: UserJobsLeft | null = null;
  if (page.length === 0 && pass.after > 0) {
    // Nothing after the cursor: come back to the first job left behind it, if any.
    left = jobsLeft();
    const restart = passRestart(left);
    if (restart !== null) {
      pass = restart;
      page = s.userJobPage.all({ user_id: userId, after: pass.after, limit });
      left = null;
    }
  }
  let cancelled = 0;
  if (cancelWaiting) {
    for (const id of waitingIds(page)) {
      if (cancelJob(s, { id, actor, role, now }, "cancel-many").kind === "cancelled") cancelled++;
    }
  }
  const through = page.at(-1)?.seq;
  const ids = through === undefined ? [] : s.erasableJobs.all({ user_id: userId, after: pass.after, through });
  for (const id of ids) {
    s.eraseJob.run({ id, now });
    s.eraseAttempts.run(id);
  }
  if (left === null && page.length < limit) left = jobsLeft();
  const step = erasureStep({ pass, page, cancelled, cancelWaiting, left });
  s.recordErasure.run({
    at: now,
    actor,
    role,
    subject,
    erased: ids.length,
    cancelled,
    pass_after: step.next.after,
    pass_waiting: step.next.waiting,
    pass_running: step.next.running,
  });
  return { erased: ids.length, cancelled, waiting: step.waiting, running: step.running, more: step.more };
}

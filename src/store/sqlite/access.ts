/**
 * Revoked admin tokens, and erasure of a user's data, on the SQLite engine (statements in sql/access.ts), inside the
 * caller's transaction.
 */
import type { AdminTokenCutoff, RevokedAdminToken, StoreParams, UserEraseOutcome } from "../store.js";
import { cancelMany } from "./admin.js";
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

/** `userErase` (roles/admin.ts): cancels first when asked, then erases finished jobs, within `limit` in all. */
export function eraseUser(s: Statements, params: StoreParams<"userErase"> & { now: number }): UserEraseOutcome {
  const { userId, limit, actor, role, now } = params;
  const cancelled = params.cancelWaiting
    ? cancelMany(s, { filter: { statuses: ["pending", "retrying"], userId }, limit, actor, role, now }).length
    : 0;
  const ids = s.erasableJobs.all({ user_id: userId, limit });
  for (const id of ids) {
    s.eraseJob.run({ id, now });
    s.eraseAttempts.run(id);
  }
  s.recordErasure.run({ at: now, actor, role, subject: params.subject, erased: ids.length, cancelled });
  const left = s.userJobCounts.get(userId) ?? { waiting: 0, running: 0, erasable: 0 };
  return {
    erased: ids.length,
    cancelled,
    waiting: left.waiting,
    running: left.running,
    more: left.erasable > 0 || (params.cancelWaiting && left.waiting > 0),
  };
}

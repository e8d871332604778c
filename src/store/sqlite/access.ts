/** Revoked admin tokens on the SQLite engine (statements in sql/access.ts), inside the caller's transaction. */
import type { AdminTokenCutoff, RevokedAdminToken } from "../store.js";
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

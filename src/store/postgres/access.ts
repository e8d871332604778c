/**
 * Revoked admin tokens on the PostgreSQL engine (revoked_admin_tokens and admin_token_cutoff, migration 0022). Every
 * node reads them on each admin request: one statement, two primary-key probes.
 */
import type { AdminTokenCutoff, RevokedAdminToken } from "../store.js";
import type { PgConnection } from "./connection.js";
import { unstorable } from "./errors.js";
import { requireMs, type PgRow } from "./rows.js";

type Now = Date | "now";

const REVOKE = `WITH added AS (
    INSERT INTO revoked_admin_tokens (jti, revoked_at, revoked_by) VALUES ($1, $2, $3)
    ON CONFLICT (jti) DO NOTHING RETURNING jti, revoked_at, revoked_by
  )
  SELECT * FROM added UNION ALL SELECT jti, revoked_at, revoked_by FROM revoked_admin_tokens WHERE jti = $1`;

const REVOKED_ONE = "SELECT jti, revoked_at, revoked_by FROM revoked_admin_tokens WHERE jti = $1";

// Raised, never lowered: the row that stays is the latest instant.
const RAISE_CUTOFF = `INSERT INTO admin_token_cutoff (id, issued_before, revoked_at, revoked_by) VALUES (1, $1, $2, $3)
  ON CONFLICT (id) DO UPDATE SET issued_before = excluded.issued_before, revoked_at = excluded.revoked_at,
    revoked_by = excluded.revoked_by
  WHERE admin_token_cutoff.issued_before < excluded.issued_before`;

const CUTOFF = "SELECT issued_before, revoked_at, revoked_by FROM admin_token_cutoff WHERE id = 1";

// $2 is null for a token without iat: any cutoff then revokes it.
const IS_REVOKED = `SELECT EXISTS (SELECT 1 FROM revoked_admin_tokens WHERE jti = $1)
  OR EXISTS (SELECT 1 FROM admin_token_cutoff WHERE id = 1 AND ($2::timestamptz IS NULL OR issued_before > $2))
  AS revoked`;

const REVOKED_LIST = `SELECT jti, revoked_at, revoked_by FROM revoked_admin_tokens
  ORDER BY revoked_at DESC, jti LIMIT $1`;

function toRevokedToken(row: PgRow): RevokedAdminToken {
  return { jti: row["jti"] as string, revoked: { at: requireMs(row["revoked_at"]), by: row["revoked_by"] as string } };
}

function toCutoff(row: PgRow): AdminTokenCutoff {
  return {
    issuedBefore: requireMs(row["issued_before"]),
    revoked: { at: requireMs(row["revoked_at"]), by: row["revoked_by"] as string },
  };
}

export async function revoke(
  db: PgConnection,
  params: { jti: string; actor: string; now: Now },
): Promise<RevokedAdminToken> {
  // A revocation of the same jti committed while this one waited is not in this statement's snapshot: read it after.
  const row =
    (await db.query(REVOKE, [params.jti, params.now, params.actor]))[0] ??
    (await db.query(REVOKED_ONE, [params.jti]))[0];
  if (row === undefined) throw new Error("revoked_admin_tokens: no row for the jti just revoked");
  return toRevokedToken(row);
}

export async function raiseCutoff(
  db: PgConnection,
  params: { issuedBefore: number; actor: string; now: Now },
): Promise<AdminTokenCutoff> {
  return db.transaction(async (client) => {
    await client.query(RAISE_CUTOFF, [new Date(params.issuedBefore), params.now, params.actor]);
    const row = (await client.query<PgRow>(CUTOFF)).rows[0];
    if (row === undefined) throw new Error("admin_token_cutoff: no row after raising it");
    return toCutoff(row);
  });
}

export async function isRevoked(
  db: PgConnection,
  params: { jti: string | undefined; issuedAt: number | undefined },
): Promise<boolean> {
  // A jti no row can hold is in no row; only the cutoff is left to ask about.
  const jti = params.jti === undefined || unstorable(params.jti) ? null : params.jti;
  const issuedAt = params.issuedAt === undefined ? null : new Date(params.issuedAt);
  const rows = await db.query(IS_REVOKED, [jti, issuedAt], "opqueue_admin_token_revoked");
  return rows[0]?.["revoked"] === true;
}

export async function revocationList(
  db: PgConnection,
  params: { limit: number },
): Promise<{ tokens: RevokedAdminToken[]; cutoff: AdminTokenCutoff | null }> {
  const [tokens, cutoff] = await Promise.all([db.query(REVOKED_LIST, [params.limit]), db.query(CUTOFF)]);
  return { tokens: tokens.map(toRevokedToken), cutoff: cutoff[0] ? toCutoff(cutoff[0]) : null };
}

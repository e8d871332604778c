/**
 * Revoked admin tokens' statements (docs/api.md, "Revoking admin tokens"; migration 0010): revoked_admin_tokens and
 * the one admin_token_cutoff row, written by the revocation routes and read on each admin request.
 */
import type Database from "better-sqlite3";
import { prepare, preparePluck } from "../prepared.js";

/** A revoked_admin_tokens row. */
export interface RevokedTokenRow {
  jti: string;
  revoked_at: number;
  revoked_by: string;
}

/** The admin_token_cutoff row. */
export interface CutoffRow {
  issued_before: number;
  revoked_at: number;
  revoked_by: string;
}

/** Prepares the revocation statements on `db`. */
export function prepareAccessStatements(db: Database.Database) {
  return {
    revokeToken: prepare<{ jti: string; at: number; by: string }>(
      db,
      `INSERT INTO revoked_admin_tokens (jti, revoked_at, revoked_by) VALUES (:jti, :at, :by)
       ON CONFLICT (jti) DO NOTHING`,
    ),
    revokedToken: prepare<[string], RevokedTokenRow>(db, "SELECT * FROM revoked_admin_tokens WHERE jti = ?"),
    revokedTokens: prepare<[number], RevokedTokenRow>(
      db,
      "SELECT * FROM revoked_admin_tokens ORDER BY revoked_at DESC, jti LIMIT ?",
    ),
    // Raised, never lowered: the row that stays is the latest instant.
    raiseCutoff: prepare<{ before: number; at: number; by: string }>(
      db,
      `INSERT INTO admin_token_cutoff (id, issued_before, revoked_at, revoked_by) VALUES (1, :before, :at, :by)
       ON CONFLICT (id) DO UPDATE SET issued_before = excluded.issued_before, revoked_at = excluded.revoked_at,
         revoked_by = excluded.revoked_by
       WHERE admin_token_cutoff.issued_before < excluded.issued_before`,
    ),
    cutoff: prepare<[], CutoffRow>(db, "SELECT issued_before, revoked_at, revoked_by FROM admin_token_cutoff"),
    // :issued_at is null for a token without iat: any cutoff then revokes it.
    tokenRevoked: preparePluck<{ jti: string | null; issued_at: number | null }, number>(
      db,
      `SELECT EXISTS (SELECT 1 FROM revoked_admin_tokens WHERE jti = :jti)
         OR EXISTS (SELECT 1 FROM admin_token_cutoff WHERE :issued_at IS NULL OR issued_before > :issued_at)`,
    ),
  };
}

/**
 * Revoked admin tokens' statements (docs/api.md, "Revoking admin tokens"; migration 0010): revoked_admin_tokens and
 * the one admin_token_cutoff row, written by the revocation routes and read on each admin request. And erasure of a
 * user's data (docs/api.md, "Erasing a user's data"; the same migration): the jobs it takes, what it removes of each,
 * and its audit row.
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
    // Finished jobs of a user whose data is still there, oldest first.
    erasableJobs: preparePluck<{ user_id: string; limit: number }, string>(
      db,
      `SELECT id FROM jobs WHERE user_id = :user_id AND erased_at IS NULL
         AND status IN ('succeeded', 'dead', 'cancelled') ORDER BY seq LIMIT :limit`,
    ),
    // The request, the result's bodies, the progress and fired callbacks go; status, times and reasons stay.
    eraseJob: prepare<{ id: string; now: number }>(
      db,
      `UPDATE jobs SET request = '{}', progress = NULL, erased_at = :now,
         result = CASE WHEN result IS NULL THEN NULL
                       ELSE json_set(json_remove(result, '$.body', '$.body_format'), '$.error_body', NULL) END,
         callbacks = CASE WHEN callbacks_pending = 0 THEN NULL ELSE callbacks END
       WHERE id = :id`,
    ),
    eraseAttempts: prepare<[string]>(db, "UPDATE job_attempts SET error_body = NULL WHERE job_id = ?"),
    userJobCounts: prepare<[string], { waiting: number; running: number; erasable: number }>(
      db,
      `SELECT coalesce(sum(status IN ('pending', 'retrying')), 0) AS waiting,
              coalesce(sum(status = 'running'), 0) AS running,
              coalesce(sum(status IN ('succeeded', 'dead', 'cancelled') AND erased_at IS NULL), 0) AS erasable
       FROM jobs WHERE user_id = ?`,
    ),
    recordErasure: prepare<Record<string, unknown>>(
      db,
      `INSERT INTO erasures (at, actor, role, subject, erased, cancelled)
       VALUES (:at, :actor, :role, :subject, :erased, :cancelled)`,
    ),
    // :issued_at is null for a token without iat: any cutoff then revokes it.
    tokenRevoked: preparePluck<{ jti: string | null; issued_at: number | null }, number>(
      db,
      `SELECT EXISTS (SELECT 1 FROM revoked_admin_tokens WHERE jti = :jti)
         OR EXISTS (SELECT 1 FROM admin_token_cutoff WHERE :issued_at IS NULL OR issued_before > :issued_at)`,
    ),
  };
}

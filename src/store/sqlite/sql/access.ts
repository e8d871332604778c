/**
 * Revoked admin tokens' statements (docs/api.md, "Revoking admin tokens"; migration 0010): revoked_admin_tokens and
 * the one admin_token_cutoff row, written by the revocation routes and read on each admin request. And erasure of a
 * user's data (docs/api.md, "Erasing a user's data"; the same migration): the jobs it takes, what it removes of each,
 * and its audit row.
 */
import type Database from "better-sqlite3";
import type { ErasurePageJob } from "../../erasure-pass.js";
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

/** An erasures row's cursor (src/store/erasure-pass.ts). */
export interface ErasurePassRow {
  after: number | null;
  waiting: number | null;
  running: number | null;
}

/** The user's jobs counted at once. */
export interface UserJobsLeftRow {
  waiting: number;
  running: number;
  erasable: number;
  first_left: number | null;
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
    // The subject's last call: where its walk of the user's jobs stopped (src/store/erasure-pass.ts).
    erasurePass: prepare<[string], ErasurePassRow>(
      db,
      `SELECT pass_after AS after, pass_waiting AS waiting, pass_running AS running FROM erasures
       WHERE subject = ? ORDER BY id DESC LIMIT 1`,
    ),
    // A page: the user's next jobs after the cursor, in creation order, through jobs_user_seq.
    userJobPage: prepare<{ user_id: string; after: number; limit: number }, ErasurePageJob>(
      db,
      "SELECT seq, id, status FROM jobs WHERE user_id = :user_id AND seq > :after ORDER BY seq LIMIT :limit",
    ),
    // The page's finished jobs whose data is still there.
    erasableJobs: preparePluck<{ user_id: string; after: number; through: number }, string>(
      db,
      `SELECT id FROM jobs WHERE user_id = :user_id AND seq > :after AND seq <= :through AND erased_at IS NULL
         AND status IN ('succeeded', 'dead', 'cancelled')`,
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
    // All of the user's jobs, read by the call that reaches the last one. :cancel: whether waiting jobs are to come
    // back to.
    userJobsLeft: prepare<{ user_id: string; cancel: number }, UserJobsLeftRow>(
      db,
      `SELECT coalesce(sum(status IN ('pending', 'retrying')), 0) AS waiting,
              coalesce(sum(status = 'running'), 0) AS running,
              coalesce(sum(status IN ('succeeded', 'dead', 'cancelled') AND erased_at IS NULL), 0) AS erasable,
              min(CASE WHEN (status IN ('succeeded', 'dead', 'cancelled') AND erased_at IS NULL)
                         OR (:cancel AND status IN ('pending', 'retrying')) THEN seq END) AS first_left
       FROM jobs WHERE user_id = :user_id`,
    ),
    recordErasure: prepare<Record<string, unknown>>(
      db,
      `INSERT INTO erasures (at, actor, role, subject, erased, cancelled, pass_after, pass_waiting, pass_running)
       VALUES (:at, :actor, :role, :subject, :erased, :cancelled, :pass_after, :pass_waiting, :pass_running)`,
    ),
    // :issued_at is null for a token without iat: any cutoff then revokes it.
    tokenRevoked: preparePluck<{ jti: string | null; issued_at: number | null }, number>(
      db,
      `SELECT EXISTS (SELECT 1 FROM revoked_admin_tokens WHERE jti = :jti)
         OR EXISTS (SELECT 1 FROM admin_token_cutoff WHERE :issued_at IS NULL OR issued_before > :issued_at)`,
    ),
  };
}

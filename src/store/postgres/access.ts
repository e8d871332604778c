/**
 * Revoked admin tokens on the PostgreSQL engine (revoked_admin_tokens and admin_token_cutoff, migration 0022). Every
 * node reads them on each admin request: one statement, two primary-key probes. And erasure of a user's data (the
 * same migration).
 */
import type { AdminTokenCutoff, RevokedAdminToken, StoreParams, UserEraseOutcome } from "../store.js";
import { cancelMany } from "./admin.js";
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

// The finished jobs of a user whose data is still there, oldest first, locked: a job an administrator's retry has
// locked (to make it pending again) is skipped, and a job retried before the lock is no longer finished.
// Their request, their result's bodies and fired callbacks go ($2 now); then their progress, their attempts' error
// bodies; then the audit row. Status, times and reasons stay. $1 user, $2 now, $3 limit, $4 actor, $5 role, $6 subject.
const ERASE_USER = `WITH picked AS (
    SELECT j.seq, j.id FROM job_specs j JOIN job_state s ON s.seq = j.seq
    WHERE j.user_id = $1 AND j.erased_at IS NULL AND s.status IN ('succeeded', 'dead', 'cancelled')
    ORDER BY j.seq LIMIT $3 FOR UPDATE OF j, s SKIP LOCKED
  ), specs AS (
    UPDATE job_specs j SET request = '{}'::json, erased_at = $2,
      callbacks = CASE WHEN s.callbacks_pending THEN j.callbacks ELSE NULL END
    FROM picked p, job_state s WHERE j.seq = p.seq AND s.seq = p.seq RETURNING j.seq
  ), state AS (
    UPDATE job_state s SET progress = NULL,
      result = CASE WHEN s.result IS NULL THEN NULL
                    ELSE ((s.result::jsonb - 'body' - 'body_format') || '{"error_body": null}'::jsonb)::json END
    FROM picked p WHERE s.seq = p.seq RETURNING s.seq
  ), attempts AS (
    UPDATE job_attempts a SET error_body = NULL FROM picked p WHERE a.job_id = p.id AND a.error_body IS NOT NULL
    RETURNING 1
  )
  SELECT (SELECT count(*) FROM specs)::int AS erased, (SELECT count(*) FROM state)::int AS state,
    (SELECT count(*) FROM attempts)::int AS attempts`;

const RECORD_ERASURE = `INSERT INTO erasures (at, actor, role, subject, erased, cancelled)
  VALUES ($1, $2, $3, $4, $5, $6)`;

const USER_JOB_COUNTS = `SELECT count(*) FILTER (WHERE s.status IN ('pending', 'retrying'))::int AS waiting,
    count(*) FILTER (WHERE s.status = 'running')::int AS running,
    count(*) FILTER (WHERE s.status IN ('succeeded', 'dead', 'cancelled') AND j.erased_at IS NULL)::int AS erasable
  FROM job_specs j JOIN job_state s ON s.seq = j.seq WHERE j.user_id = $1`;

/** `userErase` (roles/admin.ts): cancels first when asked (its own transaction), then erases and records in one. */
export async function eraseUser(
  db: PgConnection,
  params: StoreParams<"userErase"> & { now: Now },
): Promise<UserEraseOutcome> {
  const { userId, limit, actor, role, now } = params;
  if (unstorable(userId)) {
    db.assertOpen();
    return { erased: 0, cancelled: 0, waiting: 0, running: 0, more: false };
  }
  const cancelled = params.cancelWaiting
    ? (await cancelMany(db, { filter: { statuses: ["pending", "retrying"], userId }, limit, actor, role, now })).length
    : 0;
  const erased = await db.transaction(async (client) => {
    const counts = (await client.query<PgRow>(ERASE_USER, [userId, now, limit])).rows[0];
    const done = Number(counts?.["erased"] ?? 0);
    await client.query(RECORD_ERASURE, [now, actor, role, params.subject, done, cancelled]);
    return done;
  });
  const left = (await db.query(USER_JOB_COUNTS, [userId]))[0] ?? {};
  const waiting = Number(left["waiting"] ?? 0);
  return {
    erased,
    cancelled,
    waiting,
    running: Number(left["running"] ?? 0),
    more: Number(left["erasable"] ?? 0) > 0 || (params.cancelWaiting && waiting > 0),
  };
}

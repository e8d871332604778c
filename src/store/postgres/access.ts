/**
 * Revoked admin tokens on the PostgreSQL engine (revoked_admin_tokens and admin_token_cutoff, migration 0022). Every
 * node reads them on each admin request: one statement, two primary-key probes. And erasure of a user's data (the
 * same migration).
 */
import type { JobStatus } from "../../job/statuses.js";
import {
  erasurePassOf,
  erasureStep,
  passRestart,
  waitingIds,
  type ErasurePageJob,
  type UserJobsLeft,
} from "../erasure-pass.js";
import type { AdminTokenCutoff, RevokedAdminToken, StoreParams, UserEraseOutcome } from "../store.js";
import { cancelWaitingMany } from "./admin.js";
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

// The subject's last call: where its walk of the user's jobs stopped (src/store/erasure-pass.ts).
const ERASURE_PASS = `SELECT pass_after, pass_waiting, pass_running FROM erasures
  WHERE subject = $1 ORDER BY id DESC LIMIT 1`;

// A page: the user's next jobs after the cursor, in creation order. `s.seq > $2` too: without it the planner may
// merge-join job_state's primary key read from its first row, every job before the cursor at every call.
const USER_JOB_PAGE = `SELECT j.seq, j.id, s.status FROM job_specs j JOIN job_state s ON s.seq = j.seq
  WHERE j.user_id = $1 AND j.seq > $2 AND s.seq > $2 ORDER BY j.seq LIMIT $3`;

// The page's finished jobs whose data is still there, locked: a job an administrator's retry has locked (to make it
// pending again) is skipped, and a job retried before the lock is no longer finished. Their request, their result's
// bodies and fired callbacks go; then their progress, their attempts' error bodies. Status, times and reasons stay.
// The attempts are found by an array of ids, which job_attempts_job answers: joined to `picked`, a table without
// statistics (autovacuum off) was read whole at every call. $1 user, $2 now, $3 and $4 the page's seqs (after, through].
const ERASE_PAGE = `WITH picked AS (
    SELECT j.seq, j.id FROM job_specs j JOIN job_state s ON s.seq = j.seq
    WHERE j.user_id = $1 AND j.seq > $3 AND j.seq <= $4 AND j.erased_at IS NULL
      AND s.status IN ('succeeded', 'dead', 'cancelled')
    FOR UPDATE OF j, s SKIP LOCKED
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
    UPDATE job_attempts a SET error_body = NULL
    WHERE a.job_id = ANY (ARRAY(SELECT id FROM picked)) AND a.error_body IS NOT NULL
    RETURNING 1
  )
  SELECT (SELECT count(*) FROM specs)::int AS erased, (SELECT count(*) FROM state)::int AS state,
    (SELECT count(*) FROM attempts)::int AS attempts`;

const RECORD_ERASURE = `INSERT INTO erasures (at, actor, role, subject, erased, cancelled, pass_after, pass_waiting,
    pass_running)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`;

// All of the user's jobs, read by the call that reaches the last one. $2: whether waiting jobs are to come back to.
const USER_JOBS_LEFT = `SELECT count(*) FILTER (WHERE s.status IN ('pending', 'retrying'))::int AS waiting,
    count(*) FILTER (WHERE s.status = 'running')::int AS running,
    count(*) FILTER (WHERE s.status IN ('succeeded', 'dead', 'cancelled') AND j.erased_at IS NULL)::int AS erasable,
    min(j.seq) FILTER (WHERE (s.status IN ('succeeded', 'dead', 'cancelled') AND j.erased_at IS NULL)
      OR ($2::boolean AND s.status IN ('pending', 'retrying'))) AS first_left
  FROM job_specs j JOIN job_state s ON s.seq = j.seq WHERE j.user_id = $1`;

type Query = (sql: string, values: unknown[]) => Promise<PgRow[]>;

async function userJobPage(query: Query, userId: string, after: number, limit: number): Promise<ErasurePageJob[]> {
  return (await query(USER_JOB_PAGE, [userId, after, limit])).map((row) => ({
    seq: Number(row["seq"]),
    id: row["id"] as string,
    status: row["status"] as JobStatus,
  }));
}

async function userJobsLeft(query: Query, userId: string, cancelWaiting: boolean): Promise<UserJobsLeft> {
  const row = (await query(USER_JOBS_LEFT, [userId, cancelWaiting]))[0] ?? {};
  return {
    waiting: Number(row["waiting"] ?? 0),
    running: Number(row["running"] ?? 0),
    erasable: Number(row["erasable"] ?? 0),
    firstLeft: row["first_left"] == null ? null : Number(row["first_left"]),
  };
}

/**
 * `userErase` (roles/admin.ts): one page of the subject's walk of the user's jobs (src/store/erasure-pass.ts). Its
 * waiting jobs are cancelled first when asked (their own statement), then its finished ones erased and the call
 * recorded, in one transaction.
 */
export async function eraseUser(
  db: PgConnection,
  params: StoreParams<"userErase"> & { now: Now },
): Promise<UserEraseOutcome> {
  const { userId, limit, actor, role, now, subject, cancelWaiting } = params;
  if (unstorable(userId)) {
    db.assertOpen();
    return { erased: 0, cancelled: 0, waiting: 0, running: 0, more: false };
  }
  const query: Query = (sql, values) => db.query(sql, values);
  const last = (await db.query(ERASURE_PASS, [subject]))[0];
  let pass = erasurePassOf(
    last && {
      after: last["pass_after"] == null ? null : Number(last["pass_after"]),
      waiting: last["pass_waiting"] as number | null,
      running: last["pass_running"] as number | null,
    },
  );
  let page = await userJobPage(query, userId, pass.after, limit);
  let left: UserJobsLeft | null = null;
  if (page.length === 0 && pass.after > 0) {
    // Nothing after the cursor: come back to the first job left behind it, if any.
    left = await userJobsLeft(query, userId, cancelWaiting);
    const restart = passRestart(left);
    if (restart !== null) {
      pass = restart;
      page = await userJobPage(query, userId, pass.after, limit);
      left = null;
    }
  }
  const waiting = cancelWaiting ? waitingIds(page) : [];
  const cancelled = waiting.length > 0 ? (await cancelWaitingMany(db, { ids: waiting, actor, role, now })).length : 0;
  return db.transaction(async (client) => {
    const inTransaction: Query = async (sql, values) => (await client.query<PgRow>(sql, values)).rows;
    let erased = 0;
    if (page.length > 0) {
      const through = page.at(-1)?.seq;
      erased = Number((await inTransaction(ERASE_PAGE, [userId, now, pass.after, through]))[0]?.["erased"] ?? 0);
    }
    if (left === null && page.length < limit) left = await userJobsLeft(inTransaction, userId, cancelWaiting);
    const step = erasureStep({ pass, page, cancelled, cancelWaiting, left });
    const { next } = step;
    await inTransaction(RECORD_ERASURE, [
      now,
      actor,
      role,
      subject,
      erased,
      cancelled,
      next.after,
      next.waiting,
      next.running,
    ]);
    return { erased, cancelled, waiting: step.waiting, running: step.running, more: step.more };
  });
}

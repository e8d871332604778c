/**
 * Attempts a target takes asynchronously (migration 0008; docs/delivery.md, "Long jobs"): the mark written when it
 * answers 202 with x-job-async: 1, and what its later calls (heartbeat, complete, fail) read and write.
 */
import type Database from "better-sqlite3";
import { prepare } from "../prepared.js";
import type { SqliteAsyncRow, SqliteJobRow } from "../rows.js";
import { TAKEN_ASYNC } from "./common.js";

/** Prepares the asynchronous attempts' statements on `db`. */
export function prepareAsyncStatements(db: Database.Database) {
  return {
    // A target's call on an attempt (migration 0008): the job, whether its current attempt was taken asynchronously,
    // and the token that attempt is bound to. Read in the call's write transaction, then judged (external-calls.ts).
    callTarget: prepare<[string], SqliteJobRow & { is_async: number; async_token_hash: string | null }>(
      db,
      `SELECT *, coalesce(${TAKEN_ASYNC}, 0) AS is_async FROM jobs WHERE id = ?`,
    ),
    // The target answered 202 with x-job-async: 1: the attempt of this claim is marked, bound to its token, and its
    // lease starts now.
    markAsync: prepare<{ id: string; attempt: number; started_at: number | null; now: number; token_hash: string }>(
      db,
      `UPDATE jobs SET async_attempt = attempt, async_started_at = started_at, async_at = :now,
         async_token_hash = :token_hash, heartbeat_at = :now
       WHERE id = :id AND status = 'running' AND attempt = :attempt
         AND (:started_at IS NULL OR started_at = :started_at)`,
    ),
    // A target's heartbeat: the lease renewed, and the progress replaced when the heartbeat carries one.
    heartbeatExternal: prepare<{
      id: string;
      attempt: number;
      now: number;
      has_progress: number;
      progress: string | null;
    }>(
      db,
      `UPDATE jobs SET heartbeat_at = :now,
         progress = CASE WHEN :has_progress THEN :progress ELSE progress END,
         progress_at = CASE WHEN :has_progress THEN :now ELSE progress_at END,
         progress_attempt = CASE WHEN :has_progress THEN attempt ELSE progress_attempt END
       WHERE id = :id AND status = 'running' AND attempt = :attempt`,
    ),
    asyncState: prepare<[string], SqliteAsyncRow>(
      db,
      `SELECT async_attempt, async_started_at, async_at, progress, progress_at, progress_attempt FROM jobs WHERE id = ?`,
    ),
  };
}

/** The asynchronous attempts' statements, prepared. */
export type AsyncStatements = ReturnType<typeof prepareAsyncStatements>;

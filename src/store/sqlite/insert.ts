/**
 * Inserts of the SQLite engine (statements in sql/insert.ts): a batch in one transaction, each insert in its own
 * savepoint, and one insert inside a transaction of the caller's (a chain's callback job, a cron tick's job). Every
 * step of the contract's enqueue (idempotency key, dedupe upsert, spawn cap, cancelled chain) is decided here, on the
 * engine's one connection: one writer, so nothing can come between a step and the next.
 */
import type Database from "better-sqlite3";
import { runTimeAt } from "../../job/job.js";
import { createdJobRow } from "../created-row.js";
import type { Settled } from "../group-commit.js";
import type { JobInsertOutcome, JobInsertParams } from "../store.js";
import { mapError } from "./errors.js";
import { mayUpsert, toJobRow } from "./rows.js";
import type { Statements } from "./statements.js";

/** One insert of a batch: its outcome, or why it failed (the others are unaffected). */
export type InsertSettled = Settled<JobInsertOutcome>;

/**
 * Inserts a batch inside the caller's transaction, each insert in its own savepoint, so one failing insert fails only
 * its own request.
 */
export function insertMany(
  db: Database.Database,
  s: Statements,
  params: { batch: JobInsertParams[]; now: number },
): InsertSettled[] {
  const settled: InsertSettled[] = [];
  const insertInSavepoint = db.transaction((insert: JobInsertParams, now: number) => insertOne(s, { insert, now }));
  for (const insert of params.batch) {
    try {
      settled.push({ ok: true, value: insertInSavepoint(insert, params.now) });
    } catch (error) {
      // Some errors (a full disk, an I/O error) make SQLite roll the whole transaction back: the inserts before
      // this one are gone too, and a later one would run, and commit, on its own. The batch fails whole.
      if (!db.inTransaction) throw error;
      settled.push({ ok: false, error: mapError(error) });
    }
  }
  return settled;
}

/**
 * One insert behind its idempotency key when it has one (docs/api.md, "Idempotency"): a live key answers with the
 * job it holds; a created or upserted job takes the key; a refused insert leaves it untouched.
 */
export function insertOne(s: Statements, params: { insert: JobInsertParams; now: number }): JobInsertOutcome {
  const { insert, now } = params;
  const idempotency = insert.idempotency;
  if (idempotency === undefined) return insertUnkeyed(s, insert, now);
  const held = s.idempotencyKey.get({ scope: idempotency.scope, key: idempotency.key, now });
  const holder = held === undefined ? undefined : s.getById.get(held.job_id);
  if (held !== undefined && holder !== undefined) {
    const kind = held.fingerprint === idempotency.fingerprint ? "idempotent_replay" : "idempotency_conflict";
    return { kind, job: toJobRow(holder) };
  }
  const outcome = insertUnkeyed(s, insert, now);
  if (outcome.kind === "created" || outcome.kind === "deduplicated") {
    s.takeIdempotencyKey.run({
      scope: idempotency.scope,
      key: idempotency.key,
      fingerprint: idempotency.fingerprint,
      job_id: outcome.job.id,
      now,
      expires_at: now + idempotency.windowMs,
    });
  }
  return outcome;
}

/** The dedupe upsert, the spawn cap and the insert (docs/api.md, steps 5 to 7). */
function insertUnkeyed(s: Statements, params: JobInsertParams, now: number): JobInsertOutcome {
  if (params.dedupeKey !== null) {
    const holder = s.dedupeHolder.get(params.dedupeKey);
    if (holder) {
      if (!mayUpsert(holder, params)) return { kind: "dedupe_conflict", holder: toJobRow(holder) };
      const refreshed = s.refreshDeduped.get({
        id: holder.id,
        run_at: runTimeAt(params.runTime, now),
        request: JSON.stringify(params.request),
        expires_at: params.expiry === null ? null : runTimeAt(params.expiry, now),
      });
      if (!refreshed) throw new Error(`dedupe holder ${holder.id} vanished inside its transaction`);
      return { kind: "deduplicated", job: toJobRow(refreshed) };
    }
  }
  let chain: { cancelled_at: number | null } | undefined;
  if (params.onSettled !== undefined) {
    chain = s.startChainWithCallback.get({
      rid: params.originalRequestId,
      now,
      on_settled: JSON.stringify({ ...params.onSettled, job_id: params.id }),
    });
    if (!chain) return { kind: "chain_exists" };
  } else {
    chain = s.chargeChain.get({ rid: params.originalRequestId, cap: params.spawnCap, now });
    if (!chain) return { kind: "spawn_cap_exceeded" };
  }
  const chainCancelled = chain.cancelled_at !== null;
  const job = createdJobRow(params, {
    seq: 0,
    createdAt: now,
    runAt: runTimeAt(params.runTime, now),
    expiresAt: params.expiry === null ? null : runTimeAt(params.expiry, now),
    chainCancelled,
  });
  // The row is built from what was written rather than read back (RETURNING * would cost a third of the insert).
  const info = s.insertJob.run({
    id: params.id,
    operation_id: params.operationId,
    status: job.status,
    max_attempts: params.maxAttempts,
    priority: params.priority,
    run_at: job.runAt,
    created_at: now,
    finished_at: job.finishedAt,
    dedupe_key: params.dedupeKey,
    concurrency_key: params.concurrencyKey,
    rate_key: params.rateKey,
    enqueued_by_operation_id: params.enqueuedByOperationId,
    parent_job_id: params.parentJobId,
    original_request_id: params.originalRequestId,
    user_id: params.userId,
    authority: JSON.stringify(params.authority),
    request: JSON.stringify(params.request),
    result: job.result === null ? null : JSON.stringify(job.result),
    traceparent: params.traceparent,
    expires_at: job.expiresAt,
    callbacks: params.callbacks === null ? null : JSON.stringify(params.callbacks),
  });
  job.seq = Number(info.lastInsertRowid);
  return { kind: "created", job };
}

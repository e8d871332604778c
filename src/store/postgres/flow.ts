/**
 * The PostgreSQL engine's flow control writes and reads (docs/flow-control.md). A pause, a resume or a change of limits
 * takes the operation's advisory lock (sql/flow.ts says why), and what it opens up is announced on the jobs channel so
 * idle nodes claim at once.
 */
import type { LimitsSource, OperationControl, OperationLimits, PausedKey } from "../../flow/limits.js";
import { NO_LIMITS } from "../../flow/limits.js";
import { limitColumns, toOperationControl, type ControlRow } from "../control-rows.js";
import type { PgConnection } from "./connection.js";
import { unstorable } from "./errors.js";
import type { PgRow } from "./rows.js";
import {
  CONFIGURE_LIMITS,
  CONTROL_GET,
  CONTROL_LIST,
  DELETE_IDLE_CONTROLS,
  HELD_OPERATIONS,
  LOCK_HOLDS,
  LOCK_KEY,
  LOCK_OPERATION,
  RELEASE_HOLDS,
  PAUSE,
  PAUSE_KEY,
  PAUSED_KEY_GET,
  PAUSED_KEY_LIST,
  RESUME,
  RESUME_KEY,
  SET_OPERATION_LIMITS,
  UNCONFIGURE_LIMITS,
} from "./sql/flow.js";
import { NOTIFY } from "./sql/jobs.js";

type Now = Date | "now";

/** The limits' values in the order of the statements' $2–$9. */
function limitValues(limits: OperationLimits): Array<number | null> {
  const columns = limitColumns(limits);
  return [
    columns["rate_limit"] ?? null,
    columns["rate_period_ms"] ?? null,
    columns["rate_burst"] ?? null,
    columns["key_rate_limit"] ?? null,
    columns["key_rate_period_ms"] ?? null,
    columns["key_rate_burst"] ?? null,
    columns["max_concurrency"] ?? null,
    columns["concurrency_limit"] ?? 1,
  ];
}

function toPausedKey(row: PgRow): PausedKey {
  return {
    concurrencyKey: row["concurrency_key"] as string,
    paused: { at: Number(row["paused_at"]), by: row["paused_by"] as string },
  };
}

/** An operation's control as it stands in `client`'s transaction; the defaults when it has no row. */
async function controlOf(client: Querier, operationId: string): Promise<OperationControl> {
  const row = (await client.query(CONTROL_GET, [operationId]))[0];
  return row
    ? toOperationControl(row as unknown as ControlRow)
    : { operationId, paused: null, limits: { ...NO_LIMITS }, limitsSource: "config", limitsSet: null };
}

/** The part of a connection or transaction these functions use. */
interface Querier {
  query(text: string, values?: unknown[]): Promise<PgRow[]>;
}

/** Runs `work` in a transaction whose queries answer rows, as `PgConnection.query` does. */
function inTransaction<T>(db: PgConnection, work: (tx: Querier) => Promise<T>): Promise<T> {
  return db.transaction(async (client) =>
    work({ query: async (text, values) => (await client.query<PgRow>(text, values)).rows }),
  );
}

export async function configureLimits(
  db: PgConnection,
  params: { limits: Array<{ operationId: string; limits: OperationLimits }>; now: Now },
): Promise<void> {
  await inTransaction(db, async (tx) => {
    // In name order, as claims take them.
    const sorted = [...params.limits].sort((a, b) =>
      a.operationId < b.operationId ? -1 : a.operationId > b.operationId ? 1 : 0,
    );
    // The configuration's limits may differ from those the holds were worked out under: every held lane goes back to
    // the walk, and the claims hold again those still out of rate. Holds' locks first, as setLimits takes them.
    const held = (await tx.query(HELD_OPERATIONS)).map((row) => row["operation_id"] as string).sort();
    for (const operationId of held) await tx.query(LOCK_HOLDS, [operationId]);
    for (const operationId of held) await tx.query(RELEASE_HOLDS, [operationId]);
    for (const entry of sorted) {
      await tx.query(LOCK_OPERATION, [entry.operationId]);
      await tx.query(CONFIGURE_LIMITS, [entry.operationId, ...limitValues(entry.limits)]);
    }
    await tx.query(UNCONFIGURE_LIMITS, [sorted.map((entry) => entry.operationId)]);
    await tx.query(DELETE_IDLE_CONTROLS);
    await tx.query(NOTIFY, [params.now]);
  });
}

export async function controlList(db: PgConnection): Promise<OperationControl[]> {
  return (await db.query(CONTROL_LIST)).map((row) => toOperationControl(row as unknown as ControlRow));
}

export async function pause(
  db: PgConnection,
  params: { operationId: string; actor: string; now: Now },
): Promise<OperationControl> {
  return inTransaction(db, async (tx) => {
    await tx.query(LOCK_OPERATION, [params.operationId]);
    await tx.query(PAUSE, [params.operationId, params.now, params.actor]);
    return controlOf(tx, params.operationId);
  });
}

export async function resume(db: PgConnection, params: { operationId: string; now: Now }): Promise<OperationControl> {
  return inTransaction(db, async (tx) => {
    await tx.query(LOCK_OPERATION, [params.operationId]);
    await tx.query(RESUME, [params.operationId]);
    const control = await controlOf(tx, params.operationId);
    await tx.query(DELETE_IDLE_CONTROLS);
    await tx.query(NOTIFY, [params.now]);
    return control;
  });
}

export async function setLimits(
  db: PgConnection,
  params: { operationId: string; limits: OperationLimits; source: LimitsSource; actor: string; now: Now },
): Promise<OperationControl> {
  return inTransaction(db, async (tx) => {
    const admin = params.source === "admin";
    // The holds' lock before the operation's: a claim holding lanes has it shared (tried, never waited for) and may
    // wait for the operation's.
    await tx.query(LOCK_HOLDS, [params.operationId]);
    await tx.query(RELEASE_HOLDS, [params.operationId]);
    await tx.query(LOCK_OPERATION, [params.operationId]);
    await tx.query(SET_OPERATION_LIMITS, [
      params.operationId,
      ...limitValues(params.limits),
      params.source,
      admin ? params.now : null,
      admin ? params.actor : null,
    ]);
    const control = await controlOf(tx, params.operationId);
    await tx.query(DELETE_IDLE_CONTROLS);
    await tx.query(NOTIFY, [params.now]);
    return control;
  });
}

export async function pauseKey(db: PgConnection, params: { key: string; actor: string; now: Now }): Promise<PausedKey> {
  return inTransaction(db, async (tx) => {
    await tx.query(LOCK_KEY, [params.key]);
    await tx.query(PAUSE_KEY, [params.key, params.now, params.actor]);
    const row = (await tx.query(PAUSED_KEY_GET, [params.key]))[0];
    if (!row) throw new Error(`paused key ${params.key} vanished inside its transaction`);
    return toPausedKey(row);
  });
}

export async function resumeKey(db: PgConnection, params: { key: string; now: Now }): Promise<boolean> {
  if (unstorable(params.key)) return db.answerIfOpen(false);
  return inTransaction(db, async (tx) => {
    const deleted = await tx.query(`${RESUME_KEY} RETURNING 1`, [params.key]);
    if (deleted.length > 0) await tx.query(NOTIFY, [params.now]);
    return deleted.length > 0;
  });
}

export async function pausedKeyList(db: PgConnection): Promise<PausedKey[]> {
  return (await db.query(PAUSED_KEY_LIST)).map(toPausedKey);
}

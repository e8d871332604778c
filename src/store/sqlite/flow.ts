/**
 * The SQLite engine's flow control writes and reads (docs/flow-control.md): the administrators' and the
 * configuration's writes to operation_controls and paused_keys, and their lists (statements in sql/flow.ts; the gates
 * a claim reads of them are in gates.ts). Everything runs on the engine's one connection, inside the caller's
 * transaction: one writer, so a claim's gates cannot change under it.
 */
import { limitColumns, toOperationControl } from "../control-rows.js";
import {
  NO_LIMITS,
  type LimitsSource,
  type OperationControl,
  type OperationLimits,
  type PausedKey,
} from "../../flow/limits.js";
import type { Statements } from "./statements.js";

function control(s: Statements, operationId: string): OperationControl {
  const row = s.control.get(operationId);
  return row
    ? toOperationControl(row)
    : { operationId, paused: null, limits: { ...NO_LIMITS }, limitsSource: "config", limitsSet: null };
}

/** The configuration's limits, unless an administrator's are in force; operations it no longer names lose its. */
export function configureLimits(s: Statements, limits: Array<{ operationId: string; limits: OperationLimits }>): void {
  for (const entry of limits) s.configureLimits.run({ operation_id: entry.operationId, ...limitColumns(entry.limits) });
  s.unconfigureLimits.run(JSON.stringify(limits.map((entry) => entry.operationId)));
  s.deleteIdleControls.run();
  // The configuration's limits may differ from those the holds were worked out under: every lane goes back to the
  // walk, and the claims hold again those still out of rate.
  for (const operationId of new Set(s.allHeldOperations.all())) releaseHolds(s, operationId);
}

/** Lets every held lane of `operationId` go (its limits changed). */
function releaseHolds(s: Statements, operationId: string): void {
  s.releaseOperation.run(operationId);
  s.deleteOperationHolds.run(operationId);
}

/** Every operation that has a control row. */
export function controlList(s: Statements): OperationControl[] {
  return s.controlList.all().map(toOperationControl);
}

/** Pauses an operation (a second pause keeps the first's stamp). */
export function pause(s: Statements, params: { operationId: string; actor: string; now: number }): OperationControl {
  s.pause.run({ operation_id: params.operationId, at: params.now, by: params.actor });
  return control(s, params.operationId);
}

/** Resumes an operation. */
export function resume(s: Statements, params: { operationId: string }): OperationControl {
  s.resume.run(params.operationId);
  const current = control(s, params.operationId);
  s.deleteIdleControls.run();
  return current;
}

/** Sets an operation's limits, an administrator's or the configuration's, and lets its held lanes go. */
export function setLimits(
  s: Statements,
  params: {
    operationId: string;
    limits: OperationLimits;
    source: LimitsSource;
    actor: string;
    now: number;
  },
): OperationControl {
  const admin = params.source === "admin";
  s.setLimits.run({
    operation_id: params.operationId,
    ...limitColumns(params.limits),
    source: params.source,
    set_at: admin ? params.now : null,
    set_by: admin ? params.actor : null,
  });
  releaseHolds(s, params.operationId);
  const current = control(s, params.operationId);
  s.deleteIdleControls.run();
  return current;
}

/** Pauses a concurrency key (a second pause keeps the first's stamp). */
export function pauseKey(s: Statements, params: { key: string; actor: string; now: number }): PausedKey {
  s.pauseKey.run({ key: params.key, at: params.now, by: params.actor });
  const row = s.pausedKey.get(params.key);
  if (!row) throw new Error(`paused key ${params.key} vanished inside its transaction`);
  return { concurrencyKey: row.concurrency_key, paused: { at: row.paused_at, by: row.paused_by } };
}

/** Resumes a concurrency key; answers whether it was paused. */
export function resumeKey(s: Statements, params: { key: string }): boolean {
  return s.resumeKey.run(params.key).changes > 0;
}

/** The paused concurrency keys. */
export function pausedKeyList(s: Statements): PausedKey[] {
  return s.pausedKeys
    .all()
    .map((row) => ({ concurrencyKey: row.concurrency_key, paused: { at: row.paused_at, by: row.paused_by } }));
}

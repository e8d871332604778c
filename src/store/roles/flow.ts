/** The store's `FlowStore` role; src/store/store.ts composes the roles into `Store`. */
import type { LimitsSource, OperationControl, OperationLimits, PausedKey } from "../../flow/limits.js";

/**
 * Flow control (docs/flow-control.md): operations' pauses and limits, and paused concurrency keys. The
 * claim reads them in `ClaimStore.jobClaimMany`; this is where they are written and listed.
 */
export interface FlowStore {
  /**
   * Writes the configuration's limits of every operation whose limits come from it (`limitsSource` "config"), and
   * puts back to no limits those of the operations it no longer lists. Every node does so when it starts.
   */
  operationLimitsConfigure(params: { limits: Array<{ operationId: string; limits: OperationLimits }> }): Promise<void>;
  /** The flow control of every operation that has any (a pause, limits, or limits set by an administrator). */
  operationControlList(): Promise<OperationControl[]>;
  /** Pauses an operation (kept as it was if already paused); every node stops claiming its jobs at once. */
  operationPause(params: { operationId: string; actor: string }): Promise<OperationControl>;
  /** Resumes an operation; its due jobs are claimed at once. */
  operationResume(params: { operationId: string }): Promise<OperationControl>;
  /** Sets an operation's limits in force, and where they come from. */
  operationLimitsSet(params: {
    operationId: string;
    limits: OperationLimits;
    source: LimitsSource;
    actor: string;
  }): Promise<OperationControl>;
  /** Pauses a concurrency key (kept as it was if already paused): no job with it is claimed. */
  concurrencyKeyPause(params: { key: string; actor: string }): Promise<PausedKey>;
  /** Resumes a concurrency key; answers whether it was paused. */
  concurrencyKeyResume(params: { key: string }): Promise<boolean>;
  /** Every paused concurrency key, by key. */
  pausedKeyList(): Promise<PausedKey[]>;
}

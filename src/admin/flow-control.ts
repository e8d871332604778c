/**
 * Flow control's use cases (docs/flow-control.md), administrators' actions like those of admin-jobs.ts, behind the
 * routes of src/http/routes/flow.ts: pause and resume a background operation or a concurrency key, set and reset an
 * operation's limits, list the paused keys, cancel jobs by filter. Every node reads what these write from the database
 * at its next claim; what they open up (a resume, new limits) wakes the nodes at once, and a running job they cancel
 * has its delivery aborted. One refusal is decided here, as an `ApiError`:
 *
 *   404 operation_not_found   the operationId names no background operation
 */
import { ApiError } from "../errors.js";
import type { JobRow } from "../job/job.js";
import type { OperationRegistry } from "../operations/registry.js";
import type { AdminActor, AdminStore, FlowStore, JobCancelFilter, StoreLifecycle } from "../store/store.js";
import type { WorkNotifier } from "../work-notifier.js";
import type { OperationControl, OperationLimits, PausedKey } from "../flow/limits.js";

/** What flow control's use cases need from the running service. */
export interface FlowControlDeps {
  store: Omit<FlowStore, "operationLimitsConfigure"> & Pick<AdminStore, "jobCancelMany"> & Pick<StoreLifecycle, "now">;
  registry: OperationRegistry;
  notifier: WorkNotifier;
  /** The limits the configuration gives an operation (what a reset puts back). */
  configuredLimits: (operationId: string) => OperationLimits;
}

/** The use cases of the flow control routes. */
export class FlowControl {
  constructor(private readonly deps: FlowControlDeps) {}

  /** Pauses background operation `operationId` (404 if there is none): no node claims its jobs until it is resumed. */
  async pauseOperation(params: { operationId: string; actor: string }): Promise<OperationControl> {
    const operationId = this.backgroundOperation(params.operationId);
    return this.deps.store.operationPause({ operationId, actor: params.actor });
  }

  /** Resumes background operation `operationId` (404 if there is none), waking the nodes to claim its due jobs. */
  async resumeOperation(params: { operationId: string }): Promise<OperationControl> {
    const operationId = this.backgroundOperation(params.operationId);
    const control = await this.deps.store.operationResume({ operationId });
    this.deps.notifier.notify(this.deps.store.now());
    return control;
  }

  /**
   * Sets the limits of background operation `operationId` (404 if there is none) to what `change` makes of those in
   * force, kept across restarts until reset; wakes the nodes.
   */
  async setLimits(params: {
    operationId: string;
    change: (current: OperationLimits) => OperationLimits;
    actor: string;
  }): Promise<OperationControl> {
    const operationId = this.backgroundOperation(params.operationId);
    const current = await this.currentControl(operationId);
    const limits = params.change(current.limits);
    const control = await this.deps.store.operationLimitsSet({
      operationId,
      limits,
      source: "admin",
      actor: params.actor,
    });
    this.deps.notifier.notify(this.deps.store.now());
    return control;
  }

  /** Puts the limits of background operation `operationId` (404 if there is none) back to the configuration's. */
  async resetLimits(params: { operationId: string; actor: string }): Promise<OperationControl> {
    const operationId = this.backgroundOperation(params.operationId);
    const limits = this.deps.configuredLimits(operationId);
    const control = await this.deps.store.operationLimitsSet({
      operationId,
      limits,
      source: "config",
      actor: params.actor,
    });
    this.deps.notifier.notify(this.deps.store.now());
    return control;
  }

  /** Every paused concurrency key, by key. */
  async pausedKeys(): Promise<PausedKey[]> {
    return this.deps.store.pausedKeyList();
  }

  /** Pauses a concurrency key: no job with it is claimed, of any operation, until it is resumed. */
  async pauseKey(params: { key: string; actor: string }): Promise<PausedKey> {
    return this.deps.store.concurrencyKeyPause(params);
  }

  /** Resumes a concurrency key, waking the nodes if it was paused; answers whether it was. */
  async resumeKey(params: { key: string }): Promise<boolean> {
    const resumed = await this.deps.store.concurrencyKeyResume(params);
    if (resumed) this.deps.notifier.notify(this.deps.store.now());
    return resumed;
  }

  /**
   * Cancels up to `limit` jobs matching `filter`, newest first; the delivery of each running one is aborted on
   * whichever node runs it. Returns them.
   */
  async cancelJobs(params: { filter: JobCancelFilter; limit: number } & AdminActor): Promise<JobRow[]> {
    const cancelled = await this.deps.store.jobCancelMany(params);
    for (const { job, wasRunning } of cancelled) if (wasRunning) this.deps.notifier.abort(job.id);
    return cancelled.map(({ job }) => job);
  }

  /** The background operation `id`, or a 404. */
  private backgroundOperation(id: string): string {
    const operation = this.deps.registry.get(id);
    if (!operation?.background) {
      throw new ApiError(404, "operation_not_found", `no background operation has operationId "${id.slice(0, 128)}"`);
    }
    return operation.operationId;
  }

  /** The operation's control as stored, or the configuration's limits when it has none. */
  private async currentControl(operationId: string): Promise<OperationControl> {
    return (
      (await this.deps.store.operationControlList()).find((control) => control.operationId === operationId) ?? {
        operationId,
        paused: null,
        limits: this.deps.configuredLimits(operationId),
        limitsSource: "config",
        limitsSet: null,
      }
    );
  }
}

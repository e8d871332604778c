/**
 * The dispatcher: claim → deliver → complete, with leases.
 *
 * States (`moveTo` is the only way between them; each move names the states it may leave):
 * - `idle`: built, not started; `start` moves to `running`.
 * - `running`: claims as many due jobs as it has free slots (`worker.concurrency`) whenever it is woken:
 *   by `notify`/`wake` (the notifier: an enqueue or retry in this process, or another node's, through the store's
 *   listener), by a delivery ending (a slot and maybe a concurrency key freed), by the timer set to the next due
 *   `run_at`, or by the `worker.poll_ms` fallback. While busy it claims in batches (at least a quarter of
 *   `worker.concurrency`), one claim at a time, which holds the slots it asked for. While deliveries are quick (a
 *   recent average under `CLAIM_AHEAD_MAX_DELIVERY_MS`), it also claims up to `worker.concurrency` jobs ahead
 *   of free slots: they wait in `ready` (running in the database, heartbeated like the deliveries) and start the
 *   moment a delivery ends, so a slot never idles for a claim's round trip. These sizes are kept by `ClaimSizing`
 *   (claim-sizing.ts), as is the gathering: after a claim for another node's work found nothing, a wake-up for another
 *   node's work or a freed slot waits until `worker.claim_gather_ms` after it (`gatherTimer`), while one for work
 *   made in this process, a timer or a full claim goes at once (`wake`).
 * - `paused`: a claim or a heartbeat failed (database trouble), or this process could not send a delivery (out of
 *   file descriptors or memory). No claims until a heartbeat, tried every `poll_ms`, succeeds: a node that cannot
 *   renew its leases, or cannot send, must not take more work. Back to `running` then.
 * - `stopping`: no more claims; in-flight deliveries may finish for up to `shutdown.grace_ms`; the rest are put
 *   back to `retrying`, due at once; queued outcomes are written.
 * - `stopped`.
 *
 * In-flight jobs are heartbeated every `lease.heartbeat_ms` in one statement, one heartbeat at a time. Outcomes go
 * through the completer, whose writes are conditional on (id, running, attempt, started_at), so a rescue or a cancel
 * that came first wins; `delivery:finished` is emitted for the outcomes it wrote.
 *
 * With OTLP export on, each delivery attempt is wrapped in a span (`tracer`): started before the request, ended with
 * the attempt's outcome. Claims are reported by `claim:finished`, which the tracer alone subscribes to.
 *
 * A delivery answered 202 with `x-job-async: 1` ends differently (docs/delivery.md, "Long jobs"): the attempt goes on
 * without this node. It is handed off (hand-off.ts), that is, marked asynchronous in the database (bound to the token
 * it was sent with, its lease starting then), conditional like an outcome; until that write lands the job stays in
 * flight here and is heartbeated, and once it has, this node forgets the job: its slot is free, and the target's own
 * heartbeats, through any node, keep the lease. `delivery:async` is emitted once the mark was written and the slot
 * freed.
 */
import type { Logger } from "pino";
import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import { decideAttempt, type AttemptDecision } from "../job/retry-policy.js";
import type { PerOperationSettings } from "../operations/settings.js";
import type { ClaimStore, StoreLifecycle } from "../store/store.js";
import type { JobAttempt, JobRow } from "../job/job.js";
import { wallClockMs, type OpqueueEvents, type Telemetry } from "../telemetry/events.js";
import { ClaimSizing } from "./claim-sizing.js";
import { Completer, type PendingOutcome } from "./completer.js";
import type { Deliverer } from "./deliverer.js";
import type { DeliverySpan, DeliveryTracer } from "../telemetry/delivery-trace.js";
import type { WorkSource } from "../work-notifier.js";
import { handOff } from "./hand-off.js";
import { putBackOnStop, putBackUnsent } from "./put-back.js";

type State = "idle" | "running" | "paused" | "stopping" | "stopped";

/** Claims due jobs and delivers them. */
export class Dispatcher {
  private state: State = "idle";
  /**
   * Deliveries in progress, by job id and attempt: after a lease this node lost and a rescue, it may claim the same
   * job again while its first delivery has not ended, and the two must not share an entry.
   */
  private readonly inFlight = new Map<string, { job: JobRow; done: Promise<void> }>();
  /** Jobs claimed ahead of free slots, oldest first: each starts when a delivery ends. */
  private ready: JobRow[] = [];
  private readonly completer: Completer<DeliveryReport>;
  /** The size of the next claim, and whether one is worth making now. */
  private readonly sizing: ClaimSizing;
  /** Claims on their way to the database. */
  private readonly claims = new Set<Promise<void>>();
  private wakeRequested = false;
  /** A wake-up since the last claim asked for a claim at once (`wake`), not one that may gather. */
  private wakeNow = false;
  /** A wake-up since the last claim was for another node's work. */
  private wakeElsewhere = false;
  private wakeScheduled = false;
  /**
   * Jobs due now that this process enqueued and told no other node of (`takesOne`) since the last claim began: each
   * holds one of the free slots until a claim takes it.
   */
  private promised = 0;
  private timer: NodeJS.Timeout | undefined;
  private timerDueAt = Number.POSITIVE_INFINITY;
  /** Set while a claim waits for more jobs to gather (`ClaimSizing.gatherWait`); it claims when it fires. */
  private gatherTimer: NodeJS.Timeout | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  /** A heartbeat is on its way: ticks are skipped until it ends, so an older time never lands after a newer one. */
  private heartbeating = false;
  private readonly random: () => number;
  private readonly stopwatch: () => number;

  constructor(
    private readonly options: {
      /** `worker` and `lease` are read; an operation's own settings come from `settings`. */
      config: Pick<Config, "worker" | "lease">;
      settings: PerOperationSettings;
      /** Claims, leases and outcomes; `ping` tells when a paused dispatcher may go on. */
      store: ClaimStore & Pick<StoreLifecycle, "ping">;
      deliverer: Deliverer;
      clock: Clock;
      telemetry: Telemetry;
      logger: Logger;
      /** Jitter source; `Math.random` by default. */
      random?: () => number;
      /**
       * The monotonic milliseconds that time deliveries (whether they are quick enough to claim ahead); `performance.now`
       * by default. A test gives its own, so that what it asserts does not depend on the machine's speed.
       */
      stopwatch?: () => number;
      /** Spans around delivery attempts, while OTLP export is on (docs/tracing.md); none otherwise. */
      tracer?: DeliveryTracer | undefined;
    },
  ) {
    this.random = options.random ?? Math.random;
    this.stopwatch = options.stopwatch ?? (() => performance.now());
    this.sizing = new ClaimSizing({
      concurrency: options.config.worker.concurrency,
      gatherMs: options.config.worker.claim_gather_ms,
    });
    this.completer = new Completer({
      store: options.store,
      logger: options.logger,
      onWritten: (written) => this.written(written),
    });
  }

  /** Deliveries in progress on this node. */
  get inFlightCount(): number {
    return this.inFlight.size;
  }

  /** Jobs this node claimed ahead of free slots, waiting to start. */
  get readyCount(): number {
    return this.ready.length;
  }

  /** Whether a claim for another node's work or a freed slot would wait now for jobs to gather (`ClaimSizing`). */
  get gathering(): boolean {
    return this.sizing.gatherWait(this.stopwatch()) > 0;
  }

  /** Moves to `next` if the dispatcher is in one of `from`; returns whether it moved. */
  private moveTo(next: State, from: readonly State[]): boolean {
    if (!from.includes(this.state)) return false;
    this.state = next;
    return true;
  }

  /** Starts claiming. */
  start(): void {
    if (!this.moveTo("running", ["idle"])) return;
    this.heartbeatTimer = setInterval(() => void this.heartbeat(), this.options.config.lease.heartbeat_ms);
    this.wake();
  }

  /**
   * Asks for a claim soon; many calls within one tick make one claim. `now` for work this process made, a timer, a
   * claim that came back full; the others may wait for more jobs after a claim that caught up
   * (`ClaimSizing.gatherWait`): `elsewhere` for another node's work, `freed` for a slot or an outcome freed.
   */
  wake(why: "now" | "elsewhere" | "freed" = "now"): void {
    if (this.state !== "running") return;
    this.wakeRequested = true;
    if (why === "now") this.wakeNow = true;
    if (why === "elsewhere") this.wakeElsewhere = true;
    if (this.wakeScheduled) return;
    this.wakeScheduled = true;
    setImmediate(() => {
      this.wakeScheduled = false;
      this.claimSome();
    });
  }

  /**
   * A job became claimable at `runAt`, made so by this process or another node: wake if it is due (another node's work
   * may gather), else make sure the timer fires by then.
   */
  notify(runAt: number, from: WorkSource = "here"): void {
    const delay = runAt - this.options.clock.now();
    if (delay <= 0) this.wake(from === "here" ? "now" : "elsewhere");
    else this.armTimer(delay);
  }

  /**
   * Whether this dispatcher will claim one more job due now, enqueued in this process, when `notify` tells of it: it is
   * running and has a free slot no such job holds yet; if so that slot is held for it until the next claim begins. The
   * enqueue then leaves the job unannounced to other nodes (WorkNotifier.takesHere). A slot it turns out not to have
   * (deliveries that slowed, a claim that took other jobs first) leaves the job to the next claim here or to any node's
   * poll, never lost.
   */
  takesOne(): boolean {
    if (this.state !== "running") return false;
    if (this.sizing.slotsFor(this.inFlight.size + this.ready.length) <= this.promised) return false;
    this.promised += 1;
    return true;
  }

  private armTimer(delayMs: number): void {
    if (this.state !== "running" && this.state !== "paused") return;
    const delay = Math.max(0, Math.min(delayMs, this.options.config.worker.poll_ms));
    const dueAt = Date.now() + delay;
    if (this.timer && dueAt >= this.timerDueAt) return;
    clearTimeout(this.timer);
    this.timerDueAt = dueAt;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.timerDueAt = Number.POSITIVE_INFINITY;
      if (this.state === "paused") void this.heartbeat();
      else this.wake();
    }, delay);
  }

  /** Starts a claim for the free slots, if a claim is worth making now; see the states at the top. */
  private claimSome(): void {
    if (!this.wakeRequested || this.state !== "running") return;
    if (!this.wakeNow) {
      const wait = this.sizing.gatherWait(this.stopwatch());
      if (wait > 0) {
        this.gatherTimer ??= setTimeout(() => {
          this.gatherTimer = undefined;
          this.sizing.gathered();
          this.claimSome();
        }, wait);
        return;
      }
    }
    const limit = this.sizing.reserve(this.inFlight.size + this.ready.length);
    if (limit === 0) return;
    const forElsewhere = this.wakeElsewhere;
    this.promised = 0;
    this.wakeRequested = false;
    this.wakeNow = false;
    this.wakeElsewhere = false;
    // This claim takes what a gathering wake-up waited for.
    clearTimeout(this.gatherTimer);
    this.gatherTimer = undefined;
    const claim = this.claim(limit, forElsewhere);
    this.claims.add(claim);
    void claim.finally(() => this.claims.delete(claim));
  }

  private async claim(limit: number, forElsewhere: boolean): Promise<void> {
    const { store, config, telemetry } = this.options;
    // Read only for the tracer's claim span: no clock read, and no payload, without one.
    const traced = telemetry.observes("claim:finished");
    const startTime = traced ? wallClockMs() : 0;
    let jobs: JobRow[];
    try {
      jobs = await store.jobClaimMany({ limit });
    } catch (error) {
      if (traced)
        telemetry.emit("claim:finished", { startTime, endTime: wallClockMs(), limit, jobs: 0, error: String(error) });
      this.pause(error, "claim failed");
      return;
    } finally {
      this.sizing.release(limit);
    }
    this.sizing.claimed({ limit, found: jobs.length, now: this.stopwatch(), forElsewhere });
    // Another node's notification that came while this claim was on its way may be for jobs this claim took (it is sent
    // after they are committed): the claim it asks for goes on, but finding nothing then proves no race lost.
    if (jobs.length > 0) this.wakeElsewhere = false;
    if (traced)
      telemetry.emit("claim:finished", {
        startTime,
        endTime: wallClockMs(),
        limit,
        jobs: jobs.length,
        error: undefined,
      });
    // Claimed jobs are delivered even if a stop began (or another claim failed) meanwhile: they are running in the
    // database now, and a stop waits for the claims on their way back, then for (or requeues) whatever is in flight.
    for (const job of jobs) {
      this.options.telemetry.emit("job:claimed", {
        operationId: job.operationId,
        waitMs: (job.startedAt ?? job.runAt) - job.runAt,
      });
      if (this.inFlight.size < config.worker.concurrency) this.startDelivery(job);
      else this.ready.push(job);
    }
    if (this.state !== "running") return;
    if (jobs.length === limit) {
      this.wake();
      return;
    }
    // Caught up: sleep until the next job is due (or the poll interval, whichever is first), unless a wake-up
    // came meanwhile (which keeps its kind).
    if (this.wakeRequested) {
      this.wakeAgain();
      return;
    }
    const next = await store.jobNextRunAt().catch(() => null);
    this.armTimer(next === null ? config.worker.poll_ms : next - this.options.clock.now());
    if (this.wakeRequested) this.wakeAgain();
  }

  /** Schedules a claim for the wake-ups that came while one was on its way, as they asked (`wake`). */
  private wakeAgain(): void {
    this.wake(this.wakeNow ? "now" : this.wakeElsewhere ? "elsewhere" : "freed");
  }

  private pause(error: unknown, message: string): void {
    if (this.moveTo("paused", ["running"])) {
      this.options.logger.warn({ err: error }, `${message}; pausing claims until a heartbeat succeeds`);
    }
    this.armTimer(this.options.config.worker.poll_ms);
  }

  private async heartbeat(): Promise<void> {
    if (this.state !== "running" && this.state !== "paused" && this.state !== "stopping") return;
    // Two heartbeats at once could commit out of order on a pool of connections, the older time last.
    if (this.heartbeating) return;
    this.heartbeating = true;
    const jobs = [...this.inFlight.values()]
      .map(({ job }) => job)
      .concat(this.ready)
      .map(attemptOf);
    try {
      if (jobs.length > 0 || this.state === "paused") {
        await this.options.store.jobHeartbeatMany({ jobs });
        if (this.state === "paused") await this.options.store.ping();
      }
    } catch (error) {
      this.pause(error, "heartbeat failed");
      return;
    } finally {
      this.heartbeating = false;
    }
    if (this.moveTo("running", ["paused"])) {
      this.options.logger.info("heartbeat succeeded; claiming resumes");
      this.wake();
    }
  }

  private startDelivery(job: JobRow): void {
    const startedAt = this.stopwatch();
    const span: DeliverySpan | undefined = this.options.tracer?.start(job);
    /** A hand-off to report once the slot is free: `delivery:async` says the node holds the job no more. */
    let handedOff: OpqueueEvents["delivery:async"] | undefined;
    const done = this.options.deliverer
      .deliver(job, span)
      .then(async (result) => {
        const durationMs = this.stopwatch() - startedAt;
        if (result.kind === "local-failure") {
          span?.end({ outcome: "not-sent", statusCode: undefined, error: result.error, terminalReason: null });
          await this.giveBack(job, result.error);
          return;
        }
        if (result.kind === "async") {
          this.sizing.deliveryTook(durationMs);
          // The delivery, so its slot and the heartbeats, lasts until the mark is written or found moot.
          const { store, logger } = this.options;
          const stopped = () => this.state === "stopped";
          if (await handOff({ store, logger, attempt: attemptOf(job), tokenHash: result.tokenHash, stopped })) {
            handedOff = { jobId: job.id, attempt: job.attempt, operationId: job.operationId, durationMs };
          }
          return;
        }
        const now = this.options.clock.now();
        const decision: AttemptDecision =
          result.kind === "undeliverable"
            ? { status: "dead", result: { error_body: result.error, terminal_reason: "permanent-status" } }
            : decideAttempt({
                attempt: job.attempt,
                maxAttempts: job.maxAttempts,
                result,
                now,
                retry: this.options.settings.of(job.operationId).retry,
                random: this.random(),
              });
        this.sizing.deliveryTook(durationMs);
        span?.end({
          outcome: decision.status,
          statusCode: decision.result.status_code,
          error: decision.result.error_body,
          terminalReason: decision.result.terminal_reason,
        });
        if (this.state === "stopped") return;
        this.completer.add({
          outcome: { ...attemptOf(job), ...decision },
          report: {
            jobId: job.id,
            attempt: job.attempt,
            operationId: job.operationId,
            outcome: decision.status,
            terminalReason: decision.result.terminal_reason,
            statusCode: decision.result.status_code,
            durationMs,
            retryInMs: decision.status === "retrying" ? decision.delayMs : undefined,
            error: decision.result.error_body === null ? null : decision.result.error_body.slice(0, 200),
          },
        });
      })
      .catch((error: unknown) => {
        // deliver() never throws; a bug here must not leave the slot taken.
        this.options.logger.error({ err: error, jobId: job.id }, "delivery bookkeeping failed");
      })
      .finally(() => {
        this.inFlight.delete(deliveryKey(job));
        if (handedOff) this.options.telemetry.emit("delivery:async", handedOff);
        const next = this.state === "stopped" ? undefined : this.ready.shift();
        if (next) this.startDelivery(next);
        this.wake("freed");
      });
    this.inFlight.set(deliveryKey(job), { job, done });
  }

  /**
   * Graceful stop: no more claims, in-flight deliveries get up to `graceMs` to finish, the rest go back to
   * `retrying` with `run_at` = now, and queued outcomes are written.
   */
  async stop(options: { graceMs: number }): Promise<void> {
    if (!this.moveTo("stopping", ["idle", "running", "paused"])) return;
    clearTimeout(this.timer);
    clearTimeout(this.gatherTimer);
    const logger = this.options.logger;
    // A claim on its way back brings jobs that are running in the database: they join the in-flight ones, and
    // jobs claimed ahead start as slots free, within the same grace.
    await Promise.all([...this.claims]);
    if (this.inFlight.size > 0) {
      logger.info(
        { inFlight: this.inFlight.size, claimedAhead: this.ready.length, graceMs: options.graceMs },
        "waiting for in-flight deliveries",
      );
      let graceTimer: NodeJS.Timeout | undefined;
      await Promise.race([
        this.allDelivered(),
        new Promise<void>((resolve) => {
          graceTimer = setTimeout(resolve, options.graceMs);
        }),
      ]);
      clearTimeout(graceTimer);
    }
    clearInterval(this.heartbeatTimer);
    const unfinished = [...this.inFlight.values()].map(({ job }) => attemptOf(job));
    const unstarted = this.ready.splice(0).map(attemptOf);
    await this.completer.drain(Math.max(1000, options.graceMs));
    const putBack = (jobs: JobAttempt[], errorBody: string) =>
      putBackOnStop({ store: this.options.store, logger, jobs, errorBody });
    await putBack(unfinished, "shutdown: the delivery did not finish within the grace period; outcome unknown");
    await putBack(unstarted, "shutdown: claimed, but not delivered before the grace period ended");
    const abandoned = this.completer.stop();
    if (abandoned > 0) logger.error({ abandoned }, "outcomes not written; their leases will expire and be retried");
    this.moveTo("stopped", ["stopping"]);
    await this.options.deliverer.close().catch(() => undefined);
  }

  /** Resolves once nothing is in flight: each delivery ending may start one claimed ahead. */
  private async allDelivered(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight.values()].map(({ done }) => done));
  }

  /**
   * A delivery this process could not even send (no file descriptor, no memory): not the target's answer, so the job
   * goes back to the queue with its attempt refunded, and this node takes no new work for a while, since more work
   * would only fail the same way.
   */
  private async giveBack(job: JobRow, error: string): Promise<void> {
    const { store, logger, config } = this.options;
    logger.warn(
      { jobId: job.id, attempt: job.attempt, err: error },
      "this process could not send a delivery; the attempt is not counted",
    );
    this.pause(error, "this process is out of resources for deliveries");
    await putBackUnsent({ store, logger, attempt: attemptOf(job), error, delayMs: config.worker.poll_ms });
  }

  /** Outcomes the completer wrote: reported, and their slots and keys are free for a claim. */
  private written(written: Array<PendingOutcome<DeliveryReport>>): void {
    for (const { report } of written) this.options.telemetry.emit("delivery:finished", report);
    this.wake("freed");
  }
}

/** What `delivery:finished` says of an attempt, once its outcome is written. */
type DeliveryReport = OpqueueEvents["delivery:finished"];

function deliveryKey(job: JobRow): string {
  return `${job.id}:${job.attempt}`;
}

function attemptOf(job: JobRow): JobAttempt {
  return { id: job.id, attempt: job.attempt, startedAt: job.startedAt };
}

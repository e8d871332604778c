/**
 * A property test: random sequences of enqueues, admin calls, claims, outcomes, chain cancels, clock moves, and flow
 * control (pauses and resumes of operations and keys, changes of limits), each run on a fresh store. After every step
 * the whole table is read back and compared with the one before: only the transitions of docs/job-states.md may happen,
 * only to the jobs the step was allowed to touch, and
 * the table-wide invariants (one claimable job per dedupe key, one running job per concurrency key, attempts
 * within bounds, finishedAt exactly on terminal jobs, the spawn cap) hold. Each call's answer is also checked
 * against what the previous snapshot says it must be. A claim never takes a job of a paused operation or key, never
 * takes an operation past its max_concurrency or its rate, a key past its concurrency_limit, a rate key past its
 * rate_per_key (the test keeps its own rate buckets, by the same arithmetic); with no gates, it takes as many jobs,
 * and of the same priorities, as the contract's claim order would; and a claim that leaves a slot free leaves no job
 * that every gate would let through.
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import fc from "fast-check";
import { ManualClock } from "../../../src/clock.js";
import type { JobResult, JobStatus } from "../../../src/job/schemas.js";
import type { Store } from "../../../src/store/store.js";
import {
  NO_LIMITS,
  rateAdvance,
  rateAllowance,
  type OperationLimits,
  type RateLimit,
} from "../../../src/flow/limits.js";
import type { JobOutcome, JobRow } from "../../../src/job/job.js";
import { allJobs, jobParams, T0, type Suite } from "./harness.js";

const OPERATIONS = ["opA", "opB"] as const;
const DEDUPE_KEYS = ["d0", "d1", "d2"] as const;
const CONCURRENCY_KEYS = ["c0", "c1"] as const;
const CHAINS = ["chain-0", "chain-1"] as const;
/** Who enqueues: a dedupe upsert only ever refreshes a job of the same user (and kind of authority). */
const USERS = ["u1", "u2"] as const;
const RATE_KEYS = ["r0", "r1"] as const;
/** Limits the flow control actions set: spacings of whole milliseconds, so the test's arithmetic is the engines'. */
const RATE: RateLimit = { limit: 2, periodMs: 100, burst: 2 };
const RATE_PER_KEY: RateLimit = { limit: 1, periodMs: 100, burst: 1 };
/**
 * `PROPERTY_RUNS=<n>` scales the number of runs; `PROPERTY_SEED=<n>` replays a failing run, and with
 * `PROPERTY_PATH=<path>` only its shrunk counterexample (fast-check prints both).
 */
const RUNS = Number(process.env["PROPERTY_RUNS"] ?? 60);
const SEED = process.env["PROPERTY_SEED"] === undefined ? undefined : Number(process.env["PROPERTY_SEED"]);
const PATH = process.env["PROPERTY_PATH"];

const SUCCEEDED: JobResult = { status_code: 200, error_body: null, terminal_reason: null };
const PERMANENT: JobResult = { status_code: 404, error_body: "not found", terminal_reason: "permanent-status" };
const FAILED: JobResult = { status_code: 503, error_body: "busy", terminal_reason: null };
const EXHAUSTED: JobResult = { ...FAILED, terminal_reason: "exhausted" };

type Action =
  | {
      kind: "enqueue";
      operation: number;
      dedupe: number | null;
      concurrency: number | null;
      chain: number;
      user: number;
      delayMs: number;
      /** Whether the run time is given as a delay after the store's now rather than as an instant. */
      relative: boolean;
      priority: number;
      maxAttempts: number;
      rateKey: number | null;
    }
  | { kind: "pause" | "resume"; operation: number; key: number | null }
  | {
      kind: "limits";
      operation: number;
      maxConcurrency: number | null;
      concurrencyLimit: number;
      rate: boolean;
      ratePerKey: boolean;
    }
  | { kind: "cancel"; pick: number; missing: boolean }
  | { kind: "retry"; pick: number; missing: boolean }
  | { kind: "claim"; limit: number }
  | {
      kind: "finish";
      pick: number;
      anyJob: boolean;
      outcome: "succeeded" | "dead" | "retrying";
      stale: boolean;
      delayMs: number;
    }
  | { kind: "chainCancel"; chain: number }
  | { kind: "advance"; ms: number };

const index = (length: number) => fc.integer({ min: 0, max: length - 1 });
/** True about one time in five: a missing id, a stale attempt, a write for a job that is not running. */
const rarely = fc.integer({ min: 0, max: 4 }).map((n) => n === 0);

const actionArb: fc.Arbitrary<Action> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant("enqueue" as const),
      operation: index(OPERATIONS.length),
      dedupe: fc.option(index(DEDUPE_KEYS.length), { nil: null, freq: 3 }),
      concurrency: fc.option(index(CONCURRENCY_KEYS.length), { nil: null, freq: 3 }),
      chain: index(CHAINS.length),
      user: fc.constantFrom(0, 0, 0, 1),
      delayMs: fc.constantFrom(0, 0, 50, 200),
      relative: fc.boolean(),
      priority: fc.integer({ min: 0, max: 2 }),
      maxAttempts: fc.integer({ min: 1, max: 3 }),
      rateKey: fc.option(index(RATE_KEYS.length), { nil: null, freq: 2 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constantFrom("pause" as const, "resume" as const),
      operation: index(OPERATIONS.length),
      key: fc.option(index(CONCURRENCY_KEYS.length), { nil: null, freq: 2 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant("limits" as const),
      operation: index(OPERATIONS.length),
      maxConcurrency: fc.constantFrom(null, 1, 2),
      concurrencyLimit: fc.constantFrom(1, 1, 2),
      rate: fc.boolean(),
      ratePerKey: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("cancel" as const), pick: fc.nat(), missing: rarely }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("retry" as const), pick: fc.nat(), missing: rarely }) },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant("claim" as const), limit: fc.integer({ min: 1, max: 4 }) }) },
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant("finish" as const),
      pick: fc.nat(),
      anyJob: rarely,
      outcome: fc.constantFrom("succeeded" as const, "dead" as const, "retrying" as const, "retrying" as const),
      stale: rarely,
      delayMs: fc.constantFrom(0, 100, 300),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("chainCancel" as const), chain: index(CHAINS.length) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("advance" as const), ms: fc.constantFrom(1, 50, 100, 250) }) },
);

type Snapshot = Map<string, JobRow>;

const isClaimable = (job: JobRow): boolean => job.status === "pending" || job.status === "retrying";
const isTerminal = (status: JobStatus): boolean =>
  status === "succeeded" || status === "dead" || status === "cancelled";

/** Which status may follow which between two snapshots (a job keeping its status is checked separately). */
const NEXT_STATUSES: Record<JobStatus, readonly JobStatus[]> = {
  pending: ["running", "cancelled"],
  retrying: ["running", "cancelled"],
  running: ["succeeded", "retrying", "dead", "cancelled"],
  succeeded: [],
  dead: ["pending"],
  cancelled: ["pending"],
};

async function snapshot(store: Store): Promise<Snapshot> {
  return new Map((await allJobs(store)).map((job) => [job.id, job]));
}

/** Jobs of a snapshot in creation order, for picking one by index. */
const bySeq = (jobs: Iterable<JobRow>): JobRow[] => [...jobs].sort((a, b) => a.seq - b.seq);

/** The claim the contract asks for, computed from a snapshot. */
function expectedClaim(before: Snapshot, now: number, limit: number): string[] {
  const held = new Set<string>();
  for (const job of before.values())
    if (job.status === "running" && job.concurrencyKey !== null) held.add(job.concurrencyKey);
  const candidates = [...before.values()]
    .filter((job) => isClaimable(job) && job.runAt <= now)
    .sort((a, b) => b.priority - a.priority || a.runAt - b.runAt || a.seq - b.seq);
  const chosen: string[] = [];
  for (const job of candidates) {
    if (chosen.length === limit) break;
    if (job.concurrencyKey !== null) {
      if (held.has(job.concurrencyKey)) continue;
      held.add(job.concurrencyKey);
    }
    chosen.push(job.id);
  }
  return chosen;
}

/** The flow control a run has set, as the test keeps it. */
interface FlowModel {
  paused: Set<string>;
  pausedKeys: Set<string>;
  limits: Map<string, OperationLimits>;
  /** Rate buckets by operation and rate key ("" for the operation's own), moved on as the engines do. */
  tats: Map<string, number>;
  /** The largest concurrency_limit set so far: running jobs per key never exceed it. */
  widestKeyLimit: number;
}

/** Whether anything gates claims beyond the contract's one running job per concurrency key. */
function gated(flow: FlowModel): boolean {
  if (flow.paused.size > 0 || flow.pausedKeys.size > 0) return true;
  for (const limits of flow.limits.values()) {
    if (limits.rate || limits.ratePerKey || limits.maxConcurrency !== null || limits.concurrencyLimit > 1) return true;
  }
  return false;
}

/**
 * Checks a claim against the gates as they stood (`before`), and moves the test's buckets on by what it took: no job
 * of a paused operation or key; per operation, no more than its max_concurrency leaves room for and its rate allows;
 * per key, no more than the largest concurrency_limit of the claimed jobs' operations; per rate key, its rate.
 */
function checkGatedClaim(flow: FlowModel, before: Snapshot, claimed: JobRow[], now: number): void {
  const running = (match: (job: JobRow) => boolean) =>
    [...before.values()].filter((job) => job.status === "running" && match(job)).length;
  const count = (values: string[]) => {
    const counts = new Map<string, number>();
    for (const value of values) counts.set(value, (counts.get(value) ?? 0) + 1);
    return counts;
  };
  for (const job of claimed) {
    assert.ok(!flow.paused.has(job.operationId), `job ${job.id} of paused ${job.operationId} claimed`);
    assert.ok(
      job.concurrencyKey === null || !flow.pausedKeys.has(job.concurrencyKey),
      `job ${job.id} of a paused key claimed`,
    );
  }
  for (const [operationId, taken] of count(claimed.map((job) => job.operationId))) {
    const limits = flow.limits.get(operationId) ?? NO_LIMITS;
    if (limits.maxConcurrency !== null) {
      const room = Math.max(0, limits.maxConcurrency - running((job) => job.operationId === operationId));
      assert.ok(taken <= room, `${taken} jobs of ${operationId} claimed with room for ${room}`);
    }
    if (limits.rate) {
      const allowed = rateAllowance(limits.rate, flow.tats.get(`${operationId}/`) ?? null, now);
      assert.ok(taken <= allowed, `${taken} jobs of ${operationId} claimed, its rate allowing ${allowed}`);
      flow.tats.set(`${operationId}/`, rateAdvance(limits.rate, flow.tats.get(`${operationId}/`) ?? null, now, taken));
    }
  }
  const keyed = claimed.filter((job) => job.concurrencyKey !== null);
  for (const [key, taken] of count(keyed.map((job) => job.concurrencyKey as string))) {
    const widest = Math.max(
      ...keyed
        .filter((job) => job.concurrencyKey === key)
        .map((job) => (flow.limits.get(job.operationId) ?? NO_LIMITS).concurrencyLimit),
    );
    const already = running((job) => job.concurrencyKey === key);
    assert.ok(already + taken <= widest, `key ${key}: ${already} running and ${taken} claimed, limit ${widest}`);
  }
  const rateKeyed = claimed.filter((job) => job.rateKey !== null);
  for (const [lane, taken] of count(rateKeyed.map((job) => `${job.operationId}/${job.rateKey}`))) {
    const rate = (flow.limits.get(lane.split("/")[0] as string) ?? NO_LIMITS).ratePerKey;
    if (!rate) continue;
    const allowed = rateAllowance(rate, flow.tats.get(lane) ?? null, now);
    assert.ok(taken <= allowed, `${taken} jobs of ${lane} claimed, its rate allowing ${allowed}`);
    flow.tats.set(lane, rateAdvance(rate, flow.tats.get(lane) ?? null, now, taken));
  }
}

/**
 * Checks that a claim that left a slot free left no job it could have taken (issue 28): given what it took, no other
 * due claimable job passes every gate as they stood (`before`). A claim takes the jobs it finds in order, each one the
 * gates let through, and the gates only close as it takes jobs: a job that passes them at the end passed them when
 * its turn came. Run before `checkGatedClaim` moves the test's buckets on.
 */
function checkNothingLeft(flow: FlowModel, before: Snapshot, claimed: JobRow[], now: number, limit: number): void {
  if (claimed.length >= limit) return;
  const taken = new Set(claimed.map((job) => job.id));
  const running = (match: (job: JobRow) => boolean) =>
    [...before.values()].filter((job) => job.status === "running" && match(job)).length;
  const takenBy = (match: (job: JobRow) => boolean) => claimed.filter(match).length;
  for (const job of before.values()) {
    if (taken.has(job.id) || !isClaimable(job) || job.runAt > now || (job.expiresAt !== null && job.expiresAt <= now))
      continue;
    if (flow.paused.has(job.operationId)) continue;
    const limits = flow.limits.get(job.operationId) ?? NO_LIMITS;
    const sameOperation = (other: JobRow) => other.operationId === job.operationId;
    if (limits.maxConcurrency !== null && running(sameOperation) + takenBy(sameOperation) >= limits.maxConcurrency)
      continue;
    if (
      limits.rate &&
      rateAllowance(limits.rate, flow.tats.get(`${job.operationId}/`) ?? null, now) <= takenBy(sameOperation)
    )
      continue;
    if (limits.ratePerKey && job.rateKey !== null) {
      const sameLane = (other: JobRow) => sameOperation(other) && other.rateKey === job.rateKey;
      if (
        rateAllowance(limits.ratePerKey, flow.tats.get(`${job.operationId}/${job.rateKey}`) ?? null, now) <=
        takenBy(sameLane)
      )
        continue;
    }
    if (job.concurrencyKey !== null) {
      if (flow.pausedKeys.has(job.concurrencyKey)) continue;
      const sameKey = (other: JobRow) => other.concurrencyKey === job.concurrencyKey;
      if (running(sameKey) + takenBy(sameKey) >= limits.concurrencyLimit) continue;
    }
    assert.fail(
      `the claim took ${claimed.length} of ${limit} jobs and left ${job.id} (${job.operationId}, lane ${job.rateKey ?? job.userId}), which every gate let through`,
    );
  }
}

/** The state one run carries between steps. */
interface RunState {
  store: Store;
  clock: ManualClock;
  spawnCap: number;
  cancelledChains: Set<string>;
  flow: FlowModel;
}

/** Performs one action, checks the store's answer, and returns the ids the action may have changed or created. */
async function perform(state: RunState, action: Action, before: Snapshot, step: number): Promise<Set<string>> {
  const { store, clock } = state;
  const now = clock.now();
  const jobs = bySeq(before.values());
  const holderOf = (key: string | null, exceptId?: string) =>
    key === null ? undefined : jobs.find((job) => isClaimable(job) && job.dedupeKey === key && job.id !== exceptId);

  switch (action.kind) {
    case "enqueue": {
      const chain = CHAINS[action.chain] as string;
      const user = USERS[action.user] as string;
      const params = jobParams({
        userId: user,
        authority: { kind: "request", request_id: chain, user_id: user },
        operationId: OPERATIONS[action.operation] as string,
        dedupeKey: action.dedupe === null ? null : (DEDUPE_KEYS[action.dedupe] as string),
        concurrencyKey: action.concurrency === null ? null : (CONCURRENCY_KEYS[action.concurrency] as string),
        originalRequestId: chain,
        runTime: action.relative ? { delayMs: action.delayMs } : { at: now + action.delayMs },
        priority: action.priority,
        maxAttempts: action.maxAttempts,
        spawnCap: state.spawnCap,
        rateKey: action.rateKey === null ? null : (RATE_KEYS[action.rateKey] as string),
        request: { body: { step } },
      });
      const outcome = await store.jobInsert(params);
      const holder = holderOf(params.dedupeKey);
      // Every job here runs under a `request` authority, so the same user means the same authority kind too.
      if (holder && holder.operationId === params.operationId && holder.userId === params.userId) {
        assert.equal(outcome.kind, "deduplicated");
        assert.deepEqual((outcome as { job: JobRow }).job, {
          ...holder,
          runAt: now + action.delayMs,
          request: params.request,
        });
        return new Set([holder.id]);
      }
      if (holder) {
        assert.equal(outcome.kind, "dedupe_conflict");
        assert.deepEqual((outcome as { holder: JobRow }).holder, holder);
        return new Set();
      }
      const createdInChain = jobs.filter((job) => job.originalRequestId === chain).length;
      if (createdInChain >= state.spawnCap) {
        assert.deepEqual(outcome, { kind: "spawn_cap_exceeded" });
        return new Set();
      }
      assert.equal(outcome.kind, "created");
      const created = (outcome as { job: JobRow }).job;
      assert.equal(created.id, params.id);
      assert.equal(created.status, state.cancelledChains.has(chain) ? "cancelled" : "pending");
      assert.equal(created.runAt, now + action.delayMs);
      assert.equal(created.createdAt, now);
      return new Set([params.id]);
    }

    case "cancel": {
      const target = action.missing || jobs.length === 0 ? undefined : jobs[action.pick % jobs.length];
      const outcome = await store.jobCancel({ id: target?.id ?? "no-such-job-id", actor: "admin", role: "admin" });
      if (!target) {
        assert.deepEqual(outcome, { kind: "not_found" });
        return new Set();
      }
      if (isClaimable(target)) {
        assert.equal(outcome.kind, "cancelled");
        const job = (outcome as { job: JobRow }).job;
        assert.equal(job.finishedAt, now);
        assert.deepEqual(job.result, {
          ...(target.result ?? { error_body: null }),
          terminal_reason: "cancelled-by-admin",
        });
        return new Set([target.id]);
      }
      assert.deepEqual(outcome, { kind: target.status === "running" ? "running" : "not_cancellable", job: target });
      return new Set();
    }

    case "retry": {
      const target = action.missing || jobs.length === 0 ? undefined : jobs[action.pick % jobs.length];
      const outcome = await store.jobRetry({ id: target?.id ?? "no-such-job-id", actor: "admin", role: "admin" });
      if (!target) {
        assert.deepEqual(outcome, { kind: "not_found" });
        return new Set();
      }
      if (target.status !== "dead" && target.status !== "cancelled") {
        assert.deepEqual(outcome, { kind: "not_retryable", job: target });
        return new Set();
      }
      const holder = holderOf(target.dedupeKey, target.id);
      if (holder) {
        assert.deepEqual(outcome, { kind: "dedupe_conflict", holder });
        return new Set();
      }
      assert.equal(outcome.kind, "retried");
      const job = (outcome as { job: JobRow }).job;
      assert.deepEqual(
        {
          status: job.status,
          attempt: job.attempt,
          result: job.result,
          startedAt: job.startedAt,
          finishedAt: job.finishedAt,
          runAt: job.runAt,
        },
        { status: "pending", attempt: 0, result: null, startedAt: null, finishedAt: null, runAt: now },
      );
      return new Set([target.id]);
    }

    case "claim": {
      const wasGated = gated(state.flow);
      const claimed = await store.jobClaimMany({ limit: action.limit });
      assert.ok(claimed.length <= action.limit);
      assert.equal(new Set(claimed.map((job) => job.id)).size, claimed.length, "no job claimed twice");
      for (const job of claimed) {
        const previous = before.get(job.id);
        assert.ok(previous && isClaimable(previous) && previous.runAt <= now, `job ${job.id} was claimable and due`);
        assert.equal(job.status, "running");
        assert.equal(job.attempt, previous.attempt + 1);
        assert.equal(job.startedAt, now);
      }
      checkNothingLeft(state.flow, before, claimed, now, action.limit);
      checkGatedClaim(state.flow, before, claimed, now);
      if (!wasGated) {
        // Lanes take turns within a priority, so which jobs may differ from the contract's order; how many, and of
        // which priorities, may not.
        const expected = expectedClaim(before, now, action.limit).map((id) => before.get(id) as JobRow);
        const priorities = (jobs: JobRow[]) => jobs.map((job) => job.priority).sort();
        assert.deepEqual(
          priorities(claimed),
          priorities(expected),
          "the claim takes as many jobs, of the same priorities, as the contract's order",
        );
      }
      return new Set(claimed.map((job) => job.id));
    }

    case "pause":
    case "resume": {
      const operationId = OPERATIONS[action.operation] as string;
      const key = action.key === null ? null : (CONCURRENCY_KEYS[action.key] as string);
      if (action.kind === "pause" && key !== null) {
        const paused = await store.concurrencyKeyPause({ key, actor: "admin" });
        assert.equal(paused.concurrencyKey, key);
        state.flow.pausedKeys.add(key);
      } else if (key !== null) {
        assert.equal(await store.concurrencyKeyResume({ key }), state.flow.pausedKeys.delete(key));
      } else if (action.kind === "pause") {
        const control = await store.operationPause({ operationId, actor: "admin" });
        assert.ok(control.paused);
        state.flow.paused.add(operationId);
      } else {
        const control = await store.operationResume({ operationId });
        assert.equal(control.paused, null);
        state.flow.paused.delete(operationId);
      }
      return new Set();
    }

    case "limits": {
      const operationId = OPERATIONS[action.operation] as string;
      const limits: OperationLimits = {
        rate: action.rate ? RATE : null,
        ratePerKey: action.ratePerKey ? RATE_PER_KEY : null,
        maxConcurrency: action.maxConcurrency,
        concurrencyLimit: action.concurrencyLimit,
      };
      const control = await store.operationLimitsSet({ operationId, limits, source: "admin", actor: "admin" });
      assert.deepEqual(control.limits, limits);
      state.flow.limits.set(operationId, limits);
      state.flow.widestKeyLimit = Math.max(state.flow.widestKeyLimit, action.concurrencyLimit);
      return new Set();
    }

    case "finish": {
      const pool = action.anyJob ? jobs : jobs.filter((job) => job.status === "running");
      if (pool.length === 0) return new Set();
      const target = pool[action.pick % pool.length] as JobRow;
      const attempt = action.stale ? target.attempt + (action.pick % 2 === 0 ? -1 : 1) : target.attempt;
      // As the dispatcher does: a retry of the last allowed attempt is death by exhaustion.
      let outcome: JobOutcome;
      if (action.outcome === "retrying" && attempt >= target.maxAttempts) {
        outcome = { id: target.id, attempt, status: "dead", result: EXHAUSTED };
      } else if (action.outcome === "retrying") {
        outcome = { id: target.id, attempt, status: "retrying", delayMs: action.delayMs, result: FAILED };
      } else {
        outcome = {
          id: target.id,
          attempt,
          status: action.outcome,
          result: action.outcome === "dead" ? PERMANENT : SUCCEEDED,
        };
      }
      const written = await store.jobSetStateIfRunningMany({ outcomes: [outcome] });
      const shouldWrite = target.status === "running" && attempt === target.attempt;
      assert.deepEqual(written, [shouldWrite], "an outcome is written only for the running attempt");
      if (!shouldWrite) return new Set();
      const after = (await store.jobGet({ id: target.id })) as JobRow;
      if (outcome.status !== "succeeded" && state.cancelledChains.has(target.originalRequestId)) {
        // A failure of a job whose chain was cancelled, retryable or not, ends it cancelled-by-chain.
        assert.equal(after.status, "cancelled");
        assert.deepEqual(after.result, { ...outcome.result, terminal_reason: "cancelled-by-chain" });
        assert.equal(after.finishedAt, now);
      } else if (outcome.status !== "retrying") {
        assert.equal(after.status, outcome.status);
        assert.deepEqual(after.result, outcome.result);
        assert.equal(after.finishedAt, now);
      } else {
        assert.equal(after.status, "retrying");
        assert.equal(after.runAt, now + outcome.delayMs);
        assert.deepEqual(after.result, FAILED);
        const keyTaken = holderOf(target.dedupeKey, target.id) !== undefined;
        assert.equal(after.dedupeKey, keyTaken ? null : target.dedupeKey, "re-queued with its key unless it was taken");
      }
      return new Set([target.id]);
    }

    case "chainCancel": {
      const chain = CHAINS[action.chain] as string;
      const returned = await store.chainCancel({ originalRequestId: chain, actor: "admin", role: "admin" });
      state.cancelledChains.add(chain);
      const expected = jobs.filter((job) => job.originalRequestId === chain && isClaimable(job)).map((job) => job.id);
      assert.deepEqual(returned.map((job) => job.id).sort(), [...expected].sort());
      for (const job of returned) {
        assert.equal(job.status, "cancelled");
        assert.equal(job.finishedAt, now);
        assert.equal(job.result?.terminal_reason, "cancelled-by-chain");
      }
      return new Set(expected);
    }

    case "advance":
      clock.advance(action.ms);
      return new Set();
  }
}

/** Checks what changed between two snapshots. */
function checkStep(state: RunState, before: Snapshot, after: Snapshot, touched: Set<string>): void {
  for (const [id, previous] of before) {
    const current = after.get(id);
    assert.ok(current, `job ${id} vanished`);
    if (JSON.stringify(current) === JSON.stringify(previous)) continue;
    assert.ok(touched.has(id), `job ${id} changed but the step was not allowed to touch it`);
    if (current.status === previous.status) {
      assert.ok(isClaimable(previous), `a ${previous.status} job changed without changing status`);
      // Only a dedupe upsert changes a claimable job in place, and only its run time and request.
      assert.deepEqual(
        { ...current, runAt: 0, request: {} },
        { ...previous, runAt: 0, request: {} },
        "a dedupe upsert changes only runAt and request",
      );
    } else {
      assert.ok(
        NEXT_STATUSES[previous.status].includes(current.status),
        `forbidden transition ${previous.status} -> ${current.status} of job ${id}`,
      );
    }
  }
  for (const [id, job] of after) {
    if (before.has(id)) continue;
    assert.ok(touched.has(id), `job ${id} appeared but the step did not create it`);
    assert.equal(job.attempt, 0);
    if (state.cancelledChains.has(job.originalRequestId)) {
      assert.equal(job.status, "cancelled", "a job of a cancelled chain is created cancelled");
      assert.deepEqual(job.result, { error_body: null, terminal_reason: "cancelled-by-chain" });
    } else {
      assert.equal(job.status, "pending", "a new job is pending");
      assert.equal(job.result, null);
    }
  }
}

/** Checks the invariants that hold for the whole table at any time. */
function checkInvariants(state: RunState, after: Snapshot): void {
  const dedupeHolders = new Map<string, string>();
  const runningKeys = new Map<string, string[]>();
  const perChain = new Map<string, number>();
  for (const job of after.values()) {
    perChain.set(job.originalRequestId, (perChain.get(job.originalRequestId) ?? 0) + 1);
    if (isClaimable(job) && job.dedupeKey !== null) {
      const other = dedupeHolders.get(job.dedupeKey);
      assert.equal(other, undefined, `jobs ${other} and ${job.id} both hold dedupe key ${job.dedupeKey}`);
      dedupeHolders.set(job.dedupeKey, job.id);
    }
    if (job.status === "running" && job.concurrencyKey !== null) {
      const others = runningKeys.get(job.concurrencyKey) ?? [];
      others.push(job.id);
      assert.ok(
        others.length <= state.flow.widestKeyLimit,
        `jobs ${others.join(", ")} all run with concurrency key ${job.concurrencyKey}, over ${state.flow.widestKeyLimit}`,
      );
      runningKeys.set(job.concurrencyKey, others);
    }
    assert.ok(
      job.attempt >= 0 && job.attempt <= job.maxAttempts,
      `job ${job.id}: attempt ${job.attempt} of ${job.maxAttempts}`,
    );
    assert.equal(
      job.finishedAt !== null,
      isTerminal(job.status),
      `job ${job.id} is ${job.status} with finishedAt ${job.finishedAt}`,
    );
    assert.equal(job.startedAt === null, job.attempt === 0, `job ${job.id}: startedAt is set exactly once claimed`);
    if (job.status === "pending") assert.equal(job.attempt, 0, `pending job ${job.id} has attempt 0`);
    if (job.status === "pending") assert.equal(job.result, null, `pending job ${job.id} has no result`);
    if (job.status === "running") assert.ok(job.attempt >= 1);
    if (job.status === "succeeded") assert.equal(job.result?.terminal_reason, null);
    if (job.status === "dead") assert.ok(job.result?.terminal_reason, `dead job ${job.id} has a terminal reason`);
    if (job.status === "cancelled") {
      assert.ok(
        job.result?.terminal_reason === "cancelled-by-admin" || job.result?.terminal_reason === "cancelled-by-chain",
        `cancelled job ${job.id} says who cancelled it`,
      );
    }
  }
  for (const [chain, count] of perChain) {
    assert.ok(count <= state.spawnCap, `chain ${chain} created ${count} jobs, over the cap ${state.spawnCap}`);
  }
}

/** Registers the property cases. */
export function propertyCases(suite: Suite): void {
  describe("properties", () => {
    suite.bareCase("random sequences of calls keep the state machine and the invariants", async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: 4, max: 12 }),
          fc.array(actionArb, { minLength: 10, maxLength: 60, size: "max" }),
          async (spawnCap, actions) => {
            const clock = new ManualClock(T0);
            const { store, cleanup } = await suite.options.open(clock);
            try {
              const state: RunState = {
                store,
                clock,
                spawnCap,
                cancelledChains: new Set(),
                flow: {
                  paused: new Set(),
                  pausedKeys: new Set(),
                  limits: new Map(),
                  tats: new Map(),
                  widestKeyLimit: 1,
                },
              };
              let before = await snapshot(store);
              for (const [step, action] of actions.entries()) {
                const touched = await perform(state, action, before, step);
                const after = await snapshot(store);
                try {
                  checkStep(state, before, after, touched);
                  checkInvariants(state, after);
                } catch (error) {
                  throw new Error(`after step ${step} (${JSON.stringify(action)}): ${(error as Error).message}`, {
                    cause: error,
                  });
                }
                before = after;
              }
            } finally {
              await cleanup();
            }
          },
        ),
        {
          numRuns: RUNS,
          ...(SEED === undefined ? {} : { seed: SEED }),
          ...(PATH === undefined ? {} : { path: PATH, endOnFailure: true }),
        },
      );
    });
  });
}

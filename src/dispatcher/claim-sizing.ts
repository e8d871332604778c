/**
 * How many jobs the dispatcher claims, and whether a claim is worth making now. It holds what decides that: the claims
 * on their way to the database and the slots they hold, and the running average of delivery durations that says
 * whether deliveries are quick enough to claim ahead of free slots (the states in dispatcher.ts's header tell why).
 */

/**
 * Claims that may be on their way to the database at once: one. Two claims in flight lock candidates side by side, and
 * each steps over the other's locked rows; with the claims ahead below, a slot does not wait for a claim's round trip
 * anyway. Measured in the PostgreSQL drain (bench/pg-profile.ts, 20,000 jobs), against three in flight: the server's
 * CPU per job 60/58.5/56 against 62.5/61/66 µs in three alternated pairs, the rate and the node's CPU unchanged or
 * better (five more pairs with batches of at least half of `worker.concurrency` showed the same, 57.5 against 65 µs at
 * the median); the SQLite drain unchanged.
 */
const MAX_CLAIMS_IN_FLIGHT = 1;

/**
 * Jobs are claimed ahead of free slots only while deliveries take less than this on average: a job claimed ahead
 * then waits a few milliseconds for its slot, never a slow target's whole timeout (and never holds back work that
 * another, idle node could take).
 */
const CLAIM_AHEAD_MAX_DELIVERY_MS = 100;

/** Weight of the latest delivery in the running average of delivery durations. */
const DURATION_AVERAGE_WEIGHT = 0.05;

/** The size of the dispatcher's next claim, from its slots, its claims in flight and how quick deliveries are. */
export class ClaimSizing {
  private readonly concurrency: number;
  /**
   * Most jobs claimed ahead: as many as `worker.concurrency`, so a claim brings more jobs at a time (half of it before).
   * Measured in the PostgreSQL drain (bench/pg-profile.ts, 20,000 jobs, one claim in flight, three alternated pairs):
   * claims of 52 jobs on average instead of 43, the server's CPU per job 53/58/54.5 against 61.5/54.5/64.5 µs, the node's
   * 72.5/73/74 against 89.5/78.5/80, the rate 10,585/10,278/10,347 against 9,132/9,924/9,450 jobs/s.
   */
  private readonly claimAheadMax: number;
  /** Fewest free slots worth a claim while deliveries are in flight: a quarter of `worker.concurrency`. */
  private readonly minClaimBatch: number;
  /** Running average of delivery durations (ms), from "not quick": claims ahead start after quick deliveries. */
  private averageDeliveryMs = CLAIM_AHEAD_MAX_DELIVERY_MS;
  /** Claims on their way to the database, and the slots they hold. */
  private claimsInFlight = 0;
  private reservedSlots = 0;
  /** `worker.claim_gather_ms`: how long after a wasted claim the next may wait for more jobs (`gatherWait`). */
  private readonly gatherMs: number;
  /** Until when (stopwatch ms) a claim waits for more jobs to gather; undefined when it need not wait. */
  private gatherUntil: number | undefined;

  constructor(options: { concurrency: number; gatherMs: number }) {
    this.concurrency = options.concurrency;
    this.minClaimBatch = Math.max(1, Math.floor(options.concurrency / 4));
    this.claimAheadMax = options.concurrency;
    this.gatherMs = options.gatherMs;
  }

  /**
   * How long (ms) a claim wanted at `now` may wait for more jobs, when nothing asks for it at once (dispatcher.ts's
   * header says which wake-ups do). While jobs arrive about as fast as claims take them, a claim made at each arrival
   * takes one or two jobs, on every node a notification woke, and each costs the database a transaction and most of a
   * claim's work for them. So after a claim for another node's work that found nothing (another node was first: the
   * wake-up was wasted), such a claim waits until `worker.claim_gather_ms` after it, and takes what arrived meanwhile.
   * Once a claim finds a job, or the wait is over, claims go at once again: a node whose last wasted claim was longer
   * ago than that (an idle one) never waits, nor does one with a backlog. Work made in this process is claimed at once:
   * its node is the first to hear of it.
   */
  gatherWait(now: number): number {
    return this.gatherUntil === undefined ? 0 : Math.max(0, this.gatherUntil - now);
  }

  /**
   * A claim that asked for `limit` jobs came back at `now` with `found`; `forElsewhere` when another node's work was
   * among what it was made for.
   */
  claimed(claim: { limit: number; found: number; now: number; forElsewhere: boolean }): void {
    if (claim.found > 0) this.gatherUntil = undefined;
    else if (claim.forElsewhere) this.gatherUntil = claim.now + this.gatherMs;
  }

  /** The wait `gatherWait` asked for is over: the next claim goes at once. */
  gathered(): void {
    this.gatherUntil = undefined;
  }

  /**
   * Reserves the slots of a claim if one is worth making now, with `held` jobs in flight or claimed ahead; returns its
   * limit, or 0 for no claim. A claim that was reserved is `release`d once it is back from the database.
   */
  reserve(held: number): number {
    const busy = held + this.reservedSlots;
    const free = this.slotsFor(held) - this.reservedSlots;
    if (free <= 0) return 0;
    // While busy, claim in batches: a claim per freed slot would cost a transaction per job. An idle node
    // (nothing in flight) claims at once, so a lone job is never held back.
    if (busy > 0 && free < this.minClaimBatch) return 0;
    if (this.claimsInFlight >= MAX_CLAIMS_IN_FLIGHT) return 0;
    this.claimsInFlight += 1;
    this.reservedSlots += free;
    return free;
  }

  /**
   * The slots that jobs in flight or claimed ahead (`held`) leave for claims to fill, the claim on its way included (it
   * holds them until it is back, most often with fewer jobs).
   */
  slotsFor(held: number): number {
    const claimAhead = this.averageDeliveryMs < CLAIM_AHEAD_MAX_DELIVERY_MS ? this.claimAheadMax : 0;
    return this.concurrency + claimAhead - held;
  }

  /** A claim of `limit` is back from the database (with jobs or not): its slots are held by the jobs it brought. */
  release(limit: number): void {
    this.claimsInFlight -= 1;
    this.reservedSlots -= limit;
  }

  /** A delivery took `durationMs`, answered by its target (not one this process could not send). */
  deliveryTook(durationMs: number): void {
    this.averageDeliveryMs += (durationMs - this.averageDeliveryMs) * DURATION_AVERAGE_WEIGHT;
  }
}

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

  constructor(options: { concurrency: number }) {
    this.concurrency = options.concurrency;
    this.minClaimBatch = Math.max(1, Math.floor(options.concurrency / 4));
    this.claimAheadMax = options.concurrency;
  }

  /**
   * Reserves the slots of a claim if one is worth making now, with `held` jobs in flight or claimed ahead; returns its
   * limit, or 0 for no claim. A claim that was reserved is `release`d once it is back from the database.
   */
  reserve(held: number): number {
    const busy = held + this.reservedSlots;
    const claimAhead = this.averageDeliveryMs < CLAIM_AHEAD_MAX_DELIVERY_MS ? this.claimAheadMax : 0;
    const free = this.concurrency + claimAhead - busy;
    if (free <= 0) return 0;
    // While busy, claim in batches: a claim per freed slot would cost a transaction per job. An idle node
    // (nothing in flight) claims at once, so a lone job is never held back.
    if (busy > 0 && free < this.minClaimBatch) return 0;
    if (this.claimsInFlight >= MAX_CLAIMS_IN_FLIGHT) return 0;
    this.claimsInFlight += 1;
    this.reservedSlots += free;
    return free;
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

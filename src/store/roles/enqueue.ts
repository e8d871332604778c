/** The store's `EnqueueStore` role; src/store/store.ts composes the roles into `Store`. */
import type { CallbackSpec, JobRow, RunTime } from "../../job/job.js";
import type { Settled } from "../group-commit.js";

/** What a new job is made of; the store adds status, attempt and times. */
export type JobInsertParams = Pick<
  JobRow,
  | "id"
  | "operationId"
  | "priority"
  | "maxAttempts"
  | "dedupeKey"
  | "concurrencyKey"
  | "rateKey"
  | "enqueuedByOperationId"
  | "parentJobId"
  | "originalRequestId"
  | "userId"
  | "authority"
  | "request"
  | "traceparent"
  | "callbacks"
> & {
  /** When the job becomes claimable; also the new run time of the job a dedupe upsert refreshes. */
  runTime: RunTime;
  /**
   * When the job expires if not started by then: an instant, or a time after the store's now (`delayMs`); null never.
   * A dedupe upsert gives the job it refreshes this expiry too.
   */
  expiry: RunTime | null;
  /** Most jobs one chain may ever create. */
  spawnCap: number;
  /** The producer's idempotency key, remembered with the job it answered (docs/api.md, "Idempotency"). */
  idempotency?: IdempotencyParams | undefined;
  /**
   * The chain's on_settled callback, with the id of the job setting it: only with the chain's first job (otherwise the
   * insert answers `chain_exists` and changes nothing).
   */
  onSettled?: CallbackSpec | undefined;
  /**
   * False when no other node need hear of the job (PostgreSQL's NOTIFY; docs/delivery.md, "Who hears of a new job"):
   * this process claims it itself, or it is due after every node's next poll. Absent or true: announced.
   */
  announce?: boolean | undefined;
};

/** An idempotency key as the store keeps it: per caller, for a window, with the request it came with. */
export interface IdempotencyParams {
  /** Whose key it is: the calling operation and the user of the assertion. */
  scope: string;
  key: string;
  /** A digest of the enqueue body: the same key with another body is refused, not answered. */
  fingerprint: string;
  /** How long the key is remembered after its first use. */
  windowMs: number;
}

/** The result of `jobInsert`, decided atomically with the write (docs/api.md, "Enqueue, step by step", steps 5 to 7). */
export type JobInsertOutcome =
  /** A new job; `cancelled` with `cancelled-by-chain` when its chain was cancelled. */
  | { kind: "created"; job: JobRow }
  /** A claimable job held the dedupe key: its run time and request were refreshed. */
  | { kind: "deduplicated"; job: JobRow }
  /**
   * A claimable job holds the dedupe key for another operation, or runs under another authority (another user, or
   * another kind of authority): an upsert never makes one user's request run under another's. Nothing changed.
   */
  | { kind: "dedupe_conflict"; holder: JobRow }
  /** The chain has already created `spawnCap` jobs; nothing changed. */
  | { kind: "spawn_cap_exceeded" }
  /** The idempotency key was used within its window with the same body: the job that call answered, as it is now. */
  | { kind: "idempotent_replay"; job: JobRow }
  /** The idempotency key was used within its window with another body; nothing changed. */
  | { kind: "idempotency_conflict"; job: JobRow }
  /** `onSettled` was given for a chain that already has jobs; nothing changed. */
  | { kind: "chain_exists" };

/**
 * The producers' door: new jobs, one or a batch, with dedupe, idempotency, the spawn cap and
 * on_settled decided atomically with the write (docs/api.md, "Enqueue, step by step").
 */
export interface EnqueueStore {
  /** Inserts a job or upserts the claimable job holding its dedupe key; concurrent calls are committed together. */
  jobInsert(params: JobInsertParams): Promise<JobInsertOutcome>;
  /**
   * Inserts a batch as `jobInsert` would each of its items, in order, committed together (one transaction, one
   * fsync); each item settles on its own, so one failing item fails only itself.
   */
  jobInsertMany(params: { jobs: JobInsertParams[] }): Promise<Array<Settled<JobInsertOutcome>>>;
}

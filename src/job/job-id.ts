/**
 * Job ids: 20 URL-safe characters (15 bytes, base64url): the creation time in milliseconds (6 bytes, big-endian),
 * then 72 random bits, so ids cannot be guessed or enumerated.
 *
 * The time prefix keeps ids made close together close together in the id index: inserts touch a few hot pages
 * of the B-tree instead of a random page each, which a random id costs on every insert (and on every attempt
 * record). The random bytes are drawn in blocks: one call to the system's generator per 4 KiB, not per id.
 */
import { randomFillSync } from "node:crypto";

const POOL_SIZE = 4096;
const RANDOM_BYTES = 9;
const pool = Buffer.alloc(POOL_SIZE);
let poolOffset = POOL_SIZE;

/** A new job id. */
export function newJobId(now: number = Date.now()): string {
  if (poolOffset + RANDOM_BYTES > POOL_SIZE) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const id = Buffer.allocUnsafe(6 + RANDOM_BYTES);
  id.writeUIntBE(Math.max(0, Math.min(now, 2 ** 48 - 1)), 0, 6);
  pool.copy(id, 6, poolOffset, poolOffset + RANDOM_BYTES);
  poolOffset += RANDOM_BYTES;
  return id.toString("base64url");
}

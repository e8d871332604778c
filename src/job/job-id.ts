/** Job ids: 16 URL-safe characters from 96 random bits, so ids cannot be guessed or enumerated. */
import { randomBytes } from "node:crypto";

/** A new job id. */
export function newJobId(): string {
  return randomBytes(12).toString("base64url");
}

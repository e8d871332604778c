/**
 * HS256 with node:crypto, on the hot paths (every enqueue verifies an assertion, every delivery signs a token).
 * jose goes through WebCrypto, whose asynchronous HMAC costs several times a synchronous one here; the compact
 * JWS arithmetic is small enough to do directly. Asymmetric keys still go through jose.
 */
import { createHmac, timingSafeEqual } from "node:crypto";

/** The base64url encoding of a JSON value. */
export function encodeSegment(value: unknown): string {
  return Buffer.from(JSON.stringify(value), "utf8").toString("base64url");
}

/** Signs `payload` under an already encoded protected header. */
export function signHs256(options: { encodedHeader: string; payload: object; secret: Uint8Array }): string {
  const signingInput = `${options.encodedHeader}.${encodeSegment(options.payload)}`;
  const signature = createHmac("sha256", options.secret).update(signingInput).digest("base64url");
  return `${signingInput}.${signature}`;
}

/**
 * True when the token's third segment is the HS256 signature of its first two under `secret`. The segment must be
 * exactly the canonical base64url of the MAC: a variant that decodes to the same bytes is refused.
 */
export function hasValidHs256Signature(token: string, secret: Uint8Array): boolean {
  const lastDot = token.lastIndexOf(".");
  // The canonical encoding's text is compared, so no other spelling of the same bytes passes, and nothing is
  // decoded. As UTF-8, a non-ASCII character cannot match the ASCII expected (latin1 would fold some onto it).
  const given = Buffer.from(token.slice(lastDot + 1), "utf8");
  const expected = Buffer.from(createHmac("sha256", secret).update(token.slice(0, lastDot)).digest("base64url"), "utf8");
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/**
 * Compact JWS text with node:crypto, on the hot paths (every enqueue verifies an assertion, every delivery signs a
 * token): the canonical spelling of a segment, the text rule of a request id, and HS256 itself.
 * jose goes through WebCrypto, whose asynchronous HMAC costs several times a synchronous one here; the compact
 * JWS arithmetic is small enough to do directly. Asymmetric keys still go through jose.
 */
import { createHmac, timingSafeEqual } from "node:crypto";

/** The base64url encoding of a JSON value. */
export function encodeSegment(value: unknown): string {
  return Buffer.from(JSON.stringify(value), "utf8").toString("base64url");
}

const BASE64URL_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const BASE64URL_TEXT = /^[A-Za-z0-9_-]*$/;

/**
 * True when `segment` is the one spelling RFC 7515 §2 allows: unpadded base64url whose last character leaves no
 * spare bit set. Decoders (Node's, jose's through atob) also take padding, `+` and `/`, whitespace and set spare
 * bits, so the same token would otherwise have many spellings, each a different cache key and log line.
 */
export function isCanonicalSegment(segment: string): boolean {
  if (!BASE64URL_TEXT.test(segment)) return false;
  const tail = segment.length % 4;
  if (tail === 0) return true;
  // One character holds only 6 bits, less than a byte: no encoder ends a segment that way.
  if (tail === 1) return false;
  // A final group of 2 characters carries 1 byte (4 spare bits), of 3 characters 2 bytes (2 spare bits).
  const spareBits = tail === 2 ? 0b1111 : 0b11;
  return (BASE64URL_ALPHABET.indexOf(segment.charAt(segment.length - 1)) & spareBits) === 0;
}

/** The longest request id (`rid`) accepted, in characters (docs/tokens.md, "Enqueue assertion"). */
export const MAX_REQUEST_ID_LENGTH = 255;
const VISIBLE_ASCII = /^[\x21-\x7E]+$/;

/**
 * True when `rid` may be a chain-root request id: 1..255 characters of visible ASCII, neither `.` nor `..`. It
 * travels in the `x-request-id` header and in URL paths (`/chains/{rid}/cancel`), where a control character would
 * split a header and a dot-segment would name another route once normalised.
 */
export function isValidRequestId(rid: string): boolean {
  return rid.length <= MAX_REQUEST_ID_LENGTH && VISIBLE_ASCII.test(rid) && rid !== "." && rid !== "..";
}

/** What a request id must be, for refusal messages. */
export const REQUEST_ID_RULE = `1..${MAX_REQUEST_ID_LENGTH} characters of visible ASCII (%x21-7E), neither "." nor ".."`;

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
  const expected = Buffer.from(
    createHmac("sha256", secret).update(token.slice(0, lastDot)).digest("base64url"),
    "utf8",
  );
  return given.length === expected.length && timingSafeEqual(given, expected);
}

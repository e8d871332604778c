/**
 * The two text rules of docs/tokens.md the client applies before the service would: the one spelling of a token's
 * segment, and what a request id may be. The service has its own implementation; a test of its suite
 * (test/client/wire-agreement.test.ts) runs both on one table of cases.
 */

const BASE64URL_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const BASE64URL_TEXT = /^[A-Za-z0-9_-]*$/;

/**
 * True when `segment` is unpadded base64url whose last character leaves no spare bit set: the one spelling of its
 * bytes (RFC 7515 §2). Decoders also read padding, `+`, `/` and set spare bits, so a token would otherwise have
 * several spellings, each another cache key and log line.
 */
export function isCanonicalSegment(segment: string): boolean {
  if (!BASE64URL_TEXT.test(segment)) return false;
  // Characters come in groups of 4 for 3 bytes; a last group of 2 carries 1 byte (4 spare bits), of 3 carries 2
  // (2 spare bits), and a last group of 1 cannot carry a whole byte.
  const spareBitsOfTail = [0, -1, 0b1111, 0b11][segment.length % 4] as number;
  if (spareBitsOfTail === 0) return true;
  if (spareBitsOfTail < 0) return false;
  return (BASE64URL_ALPHABET.indexOf(segment.charAt(segment.length - 1)) & spareBitsOfTail) === 0;
}

/** The longest request id, in characters. */
const MAX_REQUEST_ID_LENGTH = 255;

/** What a request id must be, for messages. */
export const REQUEST_ID_RULE = `1..${MAX_REQUEST_ID_LENGTH} characters of visible ASCII (%x21-7E), neither "." nor ".."`;

/**
 * True when `rid` may name a chain: it travels in the `x-request-id` header, where a control character would split
 * the header, and in URL paths, where `.` and `..` would name another route once normalised.
 */
export function isValidRequestId(rid: string): boolean {
  if (rid.length === 0 || rid.length > MAX_REQUEST_ID_LENGTH || rid === "." || rid === "..") return false;
  for (let i = 0; i < rid.length; i++) {
    const code = rid.charCodeAt(i);
    if (code < 0x21 || code > 0x7e) return false;
  }
  return true;
}

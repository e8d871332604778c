/**
 * A target's stored 2xx body (docs/chains.md, "Stored results"): the JSON value it answered when it answered JSON and
 * the body arrived whole, else its text. The parse happens once, when the attempt's outcome is written, and its form is
 * stored beside it (`body_format`), so both engines keep and answer the same value and nobody parses again. Pure.
 */
import { jsonValueProblem } from "./payload-rules.js";

/** The fields a stored body adds to a job's result. */
export interface StoredBody {
  /** The parsed JSON value (`body_format: "json"`) or the text (`"text"`). */
  body: unknown;
  body_format: "json" | "text";
  /** Present when the body was cut at 8,192 bytes (so it is text, whatever its content type). */
  body_truncated?: true;
}

/** `application/json`, `application/problem+json` and the like, with or without parameters. */
const JSON_MEDIA_TYPE = /^\s*application\/(?:[\w.!#$&^-]+\+)?json\s*(?:;|$)/i;

/**
 * The stored form of a 2xx body read as `text` (already cut at a UTF-8 boundary). It is JSON when the response said
 * so (`content-type`), was not cut, parses, and holds nothing a stored result could not (nesting past 128 levels, U+0000
 * or a lone surrogate in a string: the same rules as a job's request); anything else is kept as text.
 */
export function storedBody(options: { text: string; contentType: string | undefined; truncated: boolean }): StoredBody {
  const { text, contentType, truncated } = options;
  if (truncated) return { body: text, body_format: "text", body_truncated: true };
  if (contentType !== undefined && JSON_MEDIA_TYPE.test(contentType)) {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      return { body: text, body_format: "text" };
    }
    if (jsonValueProblem({ value, name: "body", maxBytes: Number.POSITIVE_INFINITY }) === undefined) {
      return { body: value, body_format: "json" };
    }
  }
  return { body: text, body_format: "text" };
}

/**
 * A failed validation told in a few words: which of the validator's errors explains it best, where (a JSON pointer
 * relative to the value validated) and what is wrong. Every piece of text taken from the value or the schema is cut,
 * so a message stays short whatever they hold.
 */
import type { ErrorObject } from "ajv";
import { childOf, escapeSegment } from "./json-pointer.js";

/** Longest excerpt of a value, a name or a pattern in a message. */
const MAX_EXCERPT_CHARS = 40;
/** Allowed values an `enum` problem lists before "...". */
const MAX_LISTED_VALUES = 5;
/** Keywords whose failure only says that their subschemas failed; what failed inside says more. */
const COMBINING = new Set(["anyOf", "oneOf", "if"]);

/** Where a value fails its schema, relative to the value, and what is wrong. */
export interface SchemaProblem {
  pointer: string;
  problem: string;
}

/** `text` cut to `max` characters (never inside a surrogate pair), with "..." when cut. */
export function excerpt(text: string, max = MAX_EXCERPT_CHARS): string {
  if (text.length <= max) return text;
  const end = /[\uD800-\uDBFF]/.test(text.charAt(max - 1)) ? max - 1 : max;
  return `${text.slice(0, end)}...`;
}

/** A value as a message names it: short scalars as they are, containers by their kind. */
export function describeValue(value: unknown): string {
  if (value === undefined) return "nothing";
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object") return "an object";
  if (typeof value === "string") return JSON.stringify(excerpt(value));
  return excerpt(String(value));
}

/** The problem to report for a failed validation of `data`, from the validator's `errors`. */
export function schemaProblem(errors: readonly ErrorObject[], data: unknown): SchemaProblem {
  const last = errors.at(-1);
  if (last === undefined) return { pointer: "", problem: "does not match its schema" };
  // Without allErrors, validation stops at its first failure, which is the last error; only a combining keyword
  // collects its branches' errors before its own.
  const combining = COMBINING.has(last.keyword) && !(last.keyword === "oneOf" && last.params["passingSchemas"]);
  const inner = combining ? deepest(errors.slice(0, -1), last.instancePath) : undefined;
  if (inner === undefined) return described(last, data);
  const found = described(inner, data);
  const noAlternative = last.keyword === "if" ? "" : " (none of the alternatives matches)";
  return { pointer: found.pointer, problem: `${found.problem}${noAlternative}` };
}

/** The error deepest in the value among those at or below `under`; the first of equals (the first alternative's). */
function deepest(errors: readonly ErrorObject[], under: string): ErrorObject | undefined {
  let chosen: ErrorObject | undefined;
  let depth = -1;
  for (const error of errors) {
    if (error.instancePath !== under && !error.instancePath.startsWith(`${under}/`)) continue;
    const errorDepth = error.instancePath.split("/").length;
    if (errorDepth > depth) {
      chosen = error;
      depth = errorDepth;
    }
  }
  return chosen;
}

function described(error: ErrorObject, data: unknown): SchemaProblem {
  const { instancePath: pointer, params } = error;
  const named = (key: string) => `${pointer}/${escapeSegment(String(params[key]))}`;
  switch (error.keyword) {
    case "required":
      return { pointer: named("missingProperty"), problem: "is required" };
    case "additionalProperties":
      return { pointer: named("additionalProperty"), problem: "is not allowed: the schema admits no other properties" };
    case "unevaluatedProperties":
      return {
        pointer: named("unevaluatedProperty"),
        problem: "is not allowed: the schema admits no other properties",
      };
    case "type": {
      const types = String(params["type"]).replaceAll(",", " or ");
      return { pointer, problem: `must be ${types}, got ${describeValue(valueAt(data, pointer))}` };
    }
    case "enum":
      return { pointer, problem: `must be one of ${listed(params["allowedValues"])}` };
    case "const":
      return { pointer, problem: `must be ${excerpt(JSON.stringify(params["allowedValue"]) ?? "undefined")}` };
    case "pattern":
      return { pointer, problem: `must match the pattern ${excerpt(String(params["pattern"]))}` };
    case "format":
      return { pointer, problem: `must be a valid "${excerpt(String(params["format"]))}"` };
    default:
      return { pointer, problem: excerpt(error.message ?? `fails "${error.keyword}"`, 2 * MAX_EXCERPT_CHARS) };
  }
}

function listed(values: unknown): string {
  if (!Array.isArray(values)) return "the allowed values";
  const shown = values.slice(0, MAX_LISTED_VALUES).map((value) => excerpt(JSON.stringify(value) ?? "undefined"));
  return `${shown.join(", ")}${values.length > MAX_LISTED_VALUES ? ", ..." : ""}`;
}

/** The value at an Ajv instance path (a JSON pointer, "" for the root). */
function valueAt(data: unknown, pointer: string): unknown {
  if (pointer === "") return data;
  return pointer
    .slice(1)
    .split("/")
    .map((segment) => segment.replaceAll("~1", "/").replaceAll("~0", "~"))
    .reduce<unknown>((node, segment) => childOf(node, segment), data);
}

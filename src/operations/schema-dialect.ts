/**
 * The product's OpenAPI document as a JSON Schema validator reads it: a copy of the whole document (so that every
 * `$ref` still finds its target at the same pointer) in which each schema says in JSON Schema what it means in
 * OpenAPI. Every rule below only ever admits more than a literal reading would: a request check that refuses what the
 * target accepts would be worse than none.
 *
 * - `nullable: true` (OpenAPI 3.0) admits null: "null" joins `type` (and `enum`); on a schema without a plain `type`
 *   (`allOf: [{$ref}]`, `$ref` alone) the schema then applies to every value but null.
 * - A boolean `exclusiveMinimum`/`exclusiveMaximum` (3.0, JSON Schema draft 4) takes its bound's value, as 2020-12
 *   writes it.
 * - A property that is both `required` and `readOnly` is not required: OpenAPI requires it in responses only.
 * - `oneOf` beside a `discriminator` becomes `anyOf`: with overlapping alternatives a request may match two of them,
 *   and the target picks one by the discriminator, which the validator does not read.
 * - 3.0: a `$ref`'s siblings are dropped, as 3.0 ignores them.
 *
 * The same rules hold in a 3.1 document (where `nullable` and boolean bounds are half-converted 3.0); OpenAPI-only
 * keywords (`discriminator`, `xml`, `externalDocs`, `example`, `deprecated`, ...) are left for the validator to ignore.
 */
import type { OpenApiVersion } from "./registry.js";

type JsonObject = Record<string, unknown>;

/**
 * Keys whose value maps names to schemas (or to other OpenAPI objects): below them a key is a name, so a property
 * named "enum" or "nullable" is not taken for the keyword.
 */
const NAME_MAPS = new Set([
  "properties",
  "patternProperties",
  "definitions",
  "$defs",
  "dependentSchemas",
  "schemas",
  "paths",
  "parameters",
  "requestBodies",
  "responses",
  "headers",
  "content",
  "pathItems",
  "callbacks",
  "webhooks",
]);
/** Keywords whose value is data the validator compares with, never a schema: copied as they are. */
const DATA_KEYWORDS = new Set(["enum", "const"]);
/** Keywords besides `type` that could refuse null on their own, so that `nullable` needs the wrapping form. */
const NULL_REFUSING = ["$ref", "$dynamicRef", "allOf", "anyOf", "oneOf", "not", "if", "const"];
/** Keywords that say where a schema is or what it names; they stay on the outside when a schema is wrapped. */
const LOCATING = ["$id", "$anchor", "$dynamicAnchor", "$schema", "$defs", "definitions"];

function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The document with its schemas in JSON Schema terms (see the file's comment); `document` itself is not changed. */
export function jsonSchemaDocument(document: unknown, version: OpenApiVersion): unknown {
  return rewrite({ node: document, version, namesBelow: false, enclosing: new Set() });
}

function rewrite(options: {
  node: unknown;
  version: OpenApiVersion;
  namesBelow: boolean;
  enclosing: Set<object>;
}): unknown {
  const { node, version, namesBelow, enclosing } = options;
  if (typeof node !== "object" || node === null) return node;
  // A value that contains itself (a YAML alias to an enclosing node) has no finite copy; an empty schema admits all.
  if (enclosing.has(node)) return {};
  enclosing.add(node);
  try {
    if (Array.isArray(node)) return node.map((item) => rewrite({ node: item, version, namesBelow: false, enclosing }));
    const copy: JsonObject = {};
    for (const [key, child] of Object.entries(node as JsonObject)) {
      copy[key] =
        !namesBelow && DATA_KEYWORDS.has(key)
          ? child
          : rewrite({ node: child, version, namesBelow: !namesBelow && NAME_MAPS.has(key), enclosing });
    }
    return namesBelow ? copy : asJsonSchema({ copy, original: node as JsonObject, version });
  } finally {
    enclosing.delete(node);
  }
}

/** Applies the rules to one object; those that do not look like a schema pass through unchanged. */
function asJsonSchema(options: { copy: JsonObject; original: JsonObject; version: OpenApiVersion }): JsonObject {
  const { original, version } = options;
  let schema = options.copy;
  if (version === "3.0" && typeof schema["$ref"] === "string") {
    schema = schema["nullable"] === true ? { $ref: schema["$ref"], nullable: true } : { $ref: schema["$ref"] };
  }
  dropReadOnlyRequirements(schema, original);
  numericExclusiveBounds(schema);
  if (Array.isArray(schema["oneOf"]) && schema["discriminator"] !== undefined) {
    const { oneOf, ...rest } = schema;
    schema = { ...rest, anyOf: oneOf };
  }
  return admitNullWhenNullable(schema);
}

/** Reads `readOnly` on the original properties: the rewritten ones may have moved it into a wrapper. */
function dropReadOnlyRequirements(schema: JsonObject, original: JsonObject): void {
  const required = schema["required"];
  const properties = original["properties"];
  if (!Array.isArray(required) || !isObject(properties)) return;
  const readOnly = (name: unknown) =>
    typeof name === "string" &&
    Object.hasOwn(properties, name) &&
    isObject(properties[name]) &&
    (properties[name] as JsonObject)["readOnly"] === true;
  if (required.some(readOnly)) schema["required"] = required.filter((name) => !readOnly(name));
}

function numericExclusiveBounds(schema: JsonObject): void {
  for (const [exclusive, bound] of [
    ["exclusiveMinimum", "minimum"],
    ["exclusiveMaximum", "maximum"],
  ] as const) {
    const flag = schema[exclusive];
    if (typeof flag !== "boolean") continue;
    delete schema[exclusive];
    if (flag && typeof schema[bound] === "number") {
      schema[exclusive] = schema[bound];
      delete schema[bound];
    }
  }
}

function admitNullWhenNullable(schema: JsonObject): JsonObject {
  if (!Object.hasOwn(schema, "nullable")) return schema;
  // Validators that know `nullable` refuse it without a `type`: it goes, whatever its value.
  const { nullable, ...rest } = schema;
  if (nullable !== true) return rest;
  const type = rest["type"];
  const plainType = typeof type === "string" || Array.isArray(type);
  if (plainType && !NULL_REFUSING.some((keyword) => Object.hasOwn(rest, keyword))) {
    const types = Array.isArray(type) ? type : [type];
    rest["type"] = types.includes("null") ? types : [...types, "null"];
    const allowed = rest["enum"];
    if (Array.isArray(allowed) && !allowed.includes(null)) rest["enum"] = [...allowed, null];
    return rest;
  }
  // `if` without `then`: null passes, anything else must pass the schema. Errors then come from inside `else`,
  // which read better than "must match a schema in anyOf".
  const outside: JsonObject = {};
  for (const keyword of LOCATING) {
    if (Object.hasOwn(rest, keyword)) {
      outside[keyword] = rest[keyword];
      delete rest[keyword];
    }
  }
  return { ...outside, if: { type: "null" }, else: rest };
}

/**
 * What an operation of the product's document says its request must be: whether it needs a body, the schema of its
 * JSON body, and its query and path parameters with their schemas. Schemas are named by where they sit in the
 * document (pointer segments), so a validator that holds the whole document resolves their `$ref`s, recursive ones
 * included. Nothing here walks a schema.
 *
 * Read leniently: what cannot be read (a parameter without a name, a ref that does not resolve) is a problem that
 * leaves the operation unchecked, never a refusal to start (docs/api.md, step 4a).
 */
import { childOf, refSegments } from "./json-pointer.js";
import type { OperationDefinition } from "./registry.js";

type JsonObject = Record<string, unknown>;

/** A parameter: its name, whether the request must give it, and where its schema is (undefined: not checked). */
export interface ParameterShape {
  name: string;
  required: boolean;
  schema: readonly string[] | undefined;
}

/** An operation's request as its document declares it. */
export interface RequestShape {
  /** Undefined when the operation declares no requestBody (any body, or none, is let through). */
  body: { required: boolean; schema: readonly string[] | undefined } | undefined;
  query: ParameterShape[];
  path: ParameterShape[];
}

/** Refs followed in a row before giving up: far more than any document needs, and it ends a ref cycle. */
const MAX_REF_HOPS = 32;

function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Reads the request of one operation; a string says why it cannot be read. */
export function requestShapeOf(options: {
  document: unknown;
  definition: OperationDefinition;
  /** Where an object of the document sits (`pointerIndex`). */
  locate: (node: object) => readonly string[] | undefined;
}): RequestShape | string {
  const reader = new ShapeReader(options.document, options.locate);
  try {
    const { query, path } = reader.parameters(options.definition);
    return { body: reader.body(options.definition.operation["requestBody"]), query, path };
  } catch (error) {
    if (error instanceof Unreadable) return error.message;
    throw error;
  }
}

/** What makes a request unreadable; caught by `requestShapeOf`. */
class Unreadable extends Error {}

class ShapeReader {
  constructor(
    private readonly document: unknown,
    private readonly locate: (node: object) => readonly string[] | undefined,
  ) {}

  /** The path item's parameters, overridden by the operation's with the same name and location (OpenAPI's rule). */
  parameters(definition: OperationDefinition): { query: ParameterShape[]; path: ParameterShape[] } {
    const byKey = new Map<string, { location: string; shape: ParameterShape }>();
    for (const list of [definition.pathItem["parameters"], definition.operation["parameters"]]) {
      if (!Array.isArray(list)) continue;
      for (const item of list) {
        const parameter = this.follow(item, "a parameter");
        const name = parameter["name"];
        const location = parameter["in"];
        if (typeof name !== "string" || name === "" || typeof location !== "string") {
          throw new Unreadable("a parameter without a name or an `in`");
        }
        byKey.set(`${location}:${name}`, { location, shape: this.parameter(parameter, name, location) });
      }
    }
    const shapes = [...byKey.values()];
    return {
      query: shapes.filter((entry) => entry.location === "query").map((entry) => entry.shape),
      path: shapes.filter((entry) => entry.location === "path").map((entry) => entry.shape),
    };
  }

  /**
   * A schema is checked only in the style opqueue's delivery writes (docs/delivery.md): query parameters as form
   * fields, exploded (an array as repeated keys); path parameters in the simple style. A parameter described by
   * `content` instead of `schema`, or in another style, has only its presence checked.
   */
  private parameter(parameter: JsonObject, name: string, location: string): ParameterShape {
    const style = parameter["style"];
    const deliveredStyle =
      location === "query"
        ? (style === undefined || style === "form") && parameter["explode"] !== false
        : style === undefined || style === "simple";
    const schema = deliveredStyle && Object.hasOwn(parameter, "schema") ? this.at(parameter, "schema") : undefined;
    // OpenAPI requires every path parameter; step 2 already refuses a missing one.
    return { name, required: location === "path" || parameter["required"] === true, schema };
  }

  body(value: unknown): RequestShape["body"] {
    if (value === undefined) return undefined;
    const requestBody = this.follow(value, "the requestBody");
    const content = requestBody["content"];
    const mediaType = isObject(content) ? jsonMediaType(content) : undefined;
    const media = isObject(content) && mediaType !== undefined ? content[mediaType] : undefined;
    const schema = isObject(media) && Object.hasOwn(media, "schema") ? this.at(media, "schema") : undefined;
    return { required: requestBody["required"] === true, schema };
  }

  /** Where `container[key]` sits in the document. */
  private at(container: JsonObject, key: string): readonly string[] {
    const where = this.locate(container);
    if (where === undefined) throw new Unreadable(`cannot place the ${key} in the document`);
    return [...where, key];
  }

  /** Follows a chain of local `$ref`s to an object. */
  private follow(value: unknown, what: string): JsonObject {
    let node = value;
    for (let hops = 0; isObject(node) && typeof node["$ref"] === "string"; hops++) {
      const ref = node["$ref"];
      const segments = refSegments(ref);
      if (!Array.isArray(segments)) throw new Unreadable(segments.problem);
      if (hops === MAX_REF_HOPS) throw new Unreadable(`$ref "${ref}" does not end (a cycle?)`);
      node = segments.reduce<unknown>((parent, segment) => childOf(parent, segment), this.document);
      if (node === undefined) throw new Unreadable(`$ref "${ref}" does not resolve`);
    }
    if (!isObject(node)) throw new Unreadable(`${what} is not an object`);
    return node;
  }
}

/**
 * The media type whose schema describes the body opqueue sends (always `application/json`): `application/json`
 * itself, else a JSON type (`application/problem+json`), else a wildcard that covers it. Parameters such as
 * `; charset=utf-8` do not matter.
 */
function jsonMediaType(content: JsonObject): string | undefined {
  const essence = (mediaType: string) => (mediaType.split(";")[0] ?? "").trim().toLowerCase();
  const ranked = [
    (type: string) => type === "application/json",
    (type: string) => /^application\/[^/]+\+json$/.test(type),
    (type: string) => type === "application/*",
    (type: string) => type === "*/*",
  ];
  for (const matches of ranked) {
    const found = Object.keys(content).find((mediaType) => matches(essence(mediaType)));
    if (found !== undefined) return found;
  }
  return undefined;
}

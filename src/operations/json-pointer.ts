/**
 * JSON pointers (RFC 6901) into the product's OpenAPI document: the local `$ref`s that name them, one step down a
 * pointer, and where each object of a parsed document sits.
 */

/** The decoded segments of a local JSON-pointer `$ref` (RFC 6901 in a URI fragment), or why it is not one. */
export function refSegments(ref: string): string[] | { problem: string } {
  if (!ref.startsWith("#")) {
    return {
      problem:
        `$ref "${ref}" points outside this document; only local refs ("#/components/...") are supported, ` +
        "so bundle the document into one file first",
    };
  }
  let pointer: string;
  try {
    pointer = decodeURIComponent(ref.slice(1));
  } catch {
    return { problem: `$ref "${ref}" is not a valid URI fragment` };
  }
  if (pointer === "") return [];
  if (!pointer.startsWith("/")) return { problem: `$ref "${ref}" is not a JSON pointer (it must start with "#/")` };
  // Order matters (RFC 6901 §4): "~01" must become "~1", not "/".
  return pointer
    .slice(1)
    .split("/")
    .map((segment) => segment.replaceAll("~1", "/").replaceAll("~0", "~"));
}

/** One step down a JSON pointer; own properties only, so "constructor" or "__proto__" never resolve by accident. */
export function childOf(node: unknown, segment: string): unknown {
  if (Array.isArray(node)) return /^(0|[1-9]\d*)$/.test(segment) ? node[Number(segment)] : undefined;
  return typeof node === "object" && node !== null && Object.hasOwn(node, segment)
    ? (node as Record<string, unknown>)[segment]
    : undefined;
}

/** One segment written into a pointer: "~" and "/" escaped (RFC 6901 §3). */
export function escapeSegment(segment: string): string {
  return segment.replaceAll("~", "~0").replaceAll("/", "~1");
}

/** The pointer of `segments`: "" for the root, else "/a/b". */
export function formatPointer(segments: readonly string[]): string {
  return segments.map((segment) => `/${escapeSegment(segment)}`).join("");
}

/**
 * Where each object and array of `root` sits, as pointer segments. An object the parser shares between places (a YAML
 * alias) keeps its first place: every place holds the same content. A value that contains itself (a YAML alias to an
 * enclosing node) is not entered twice, so the walk ends.
 */
export function pointerIndex(root: unknown): Map<object, readonly string[]> {
  const index = new Map<object, readonly string[]>();
  const visit = (node: unknown, at: readonly string[]) => {
    if (typeof node !== "object" || node === null || index.has(node)) return;
    index.set(node, at);
    const entries = Array.isArray(node) ? node.map((item, i) => [String(i), item] as const) : Object.entries(node);
    for (const [key, child] of entries) visit(child, [...at, key]);
  };
  visit(root, []);
  return index;
}

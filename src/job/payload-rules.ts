/**
 * The rules every job's request must follow, whoever makes it (an enqueue, a cron entry): how deep it may nest, what
 * text it may hold, how large it may be, and which path parameters would reach another route. Pure functions, shared by
 * the enqueue's step 2 and the config's start-up checks.
 */

/** Largest request payload: UTF-8 bytes of `JSON.stringify(request)`. */
export const MAX_PAYLOAD_BYTES = 16_384;
/**
 * Deepest nesting of `request` (the request object itself is level 1). JSON.parse takes any depth, but
 * JSON.stringify recurses: a few thousand levels (10 KB of `[`) would overflow the stack in the size check,
 * the store or the response, as a 500.
 */
export const MAX_PAYLOAD_DEPTH = 128;
/**
 * Why `request` cannot be stored or delivered as it is (too deep, unstorable text, too large), in that order, or
 * undefined. `text` is what is scanned for unstorable text: the request, or the whole body it came in.
 */
export function payloadProblem(
  request: unknown,
  text: unknown = request,
): { code: "invalid_request" | "payload_too_large"; message: string } | undefined {
  if (nestsDeeperThan(request, MAX_PAYLOAD_DEPTH)) {
    return { code: "invalid_request", message: `request is nested more than ${MAX_PAYLOAD_DEPTH} levels deep` };
  }
  if (hasUnstorableText(text)) {
    return {
      code: "invalid_request",
      message: "a string in the body holds U+0000 or a lone UTF-16 surrogate, which cannot be stored",
    };
  }
  const payloadBytes = Buffer.byteLength(JSON.stringify(request ?? {}), "utf8");
  if (payloadBytes > MAX_PAYLOAD_BYTES) {
    return {
      code: "payload_too_large",
      message: `the request payload is ${payloadBytes} bytes of JSON; at most ${MAX_PAYLOAD_BYTES} are allowed`,
    };
  }
  return undefined;
}

/**
 * Why a JSON value a caller hands opqueue to keep (a heartbeat's progress, a complete's result) cannot be kept, or
 * undefined: nested too deep, unstorable text, or more than `maxBytes` of JSON, in that order (as for a request).
 */
export function jsonValueProblem(options: {
  value: unknown;
  /** How the message names it. */
  name: string;
  maxBytes: number;
}): { code: "invalid_request" | "payload_too_large"; message: string } | undefined {
  const { value, name, maxBytes } = options;
  if (nestsDeeperThan(value, MAX_PAYLOAD_DEPTH)) {
    return { code: "invalid_request", message: `${name} is nested more than ${MAX_PAYLOAD_DEPTH} levels deep` };
  }
  if (hasUnstorableText(value)) {
    return {
      code: "invalid_request",
      message: `a string in ${name} holds U+0000 or a lone UTF-16 surrogate, which cannot be stored`,
    };
  }
  const bytes = Buffer.byteLength(JSON.stringify(value) ?? "null", "utf8");
  if (bytes > maxBytes) {
    return { code: "payload_too_large", message: `${name} is ${bytes} bytes of JSON; at most ${maxBytes} are allowed` };
  }
  return undefined;
}

/**
 * Why `pathParams` cannot fill the path template `path` (whose parameters are `names`), or undefined: a parameter is
 * missing (or null), or its text would make an empty or dot segment.
 */
export function pathParamsProblem(options: {
  path: string;
  names: string[];
  pathParams: Record<string, unknown>;
}): { code: "missing_path_param" | "invalid_path_param"; message: string } | undefined {
  const { path, names, pathParams } = options;
  // Own members only: a template's {constructor} must not find Object.prototype's.
  const valueOf = (name: string) => (Object.hasOwn(pathParams, name) ? pathParams[name] : undefined);
  const missing = names.filter((name) => valueOf(name) === undefined || valueOf(name) === null);
  if (missing.length > 0) {
    return {
      code: "missing_path_param",
      message: `request.path_params lacks ${missing.map((name) => `"${name}"`).join(", ")}, needed by ${path}`,
    };
  }
  const unsafe = names.find((name) => isUnsafePathValue(valueOf(name)));
  if (unsafe !== undefined) {
    return {
      code: "invalid_path_param",
      message:
        `request.path_params.${unsafe} is ${JSON.stringify(jsonText(valueOf(unsafe)))}: an empty, "." or ".." value ` +
        `would make ${path} another route once the URL is normalised`,
    };
  }
  return undefined;
}

/**
 * A path parameter is delivered as `encodeURIComponent(String(value))`, which leaves `.` alone: a value whose text is
 * empty, `.` or `..` becomes an empty or dot segment, and URL parsers and proxies normalise `/users/../welcome` into
 * `/welcome`, another operation. Checked on the text that would be sent, so `[]` (text "") counts as empty.
 */
export function isUnsafePathValue(value: unknown): boolean {
  const text = jsonText(value);
  return text === "" || text === "." || text === "..";
}

/**
 * The text of the path parameter `name` as delivery sends it (before `encodeURIComponent`): `String(value)` of the
 * parameter's own value, "" when there is none (or it is null).
 */
export function pathParamText(pathParams: Record<string, unknown> | undefined, name: string): string {
  const value = pathParams !== undefined && Object.hasOwn(pathParams, name) ? pathParams[name] : undefined;
  return value === undefined || value === null ? "" : jsonText(value);
}

/**
 * `String(value)` of a JSON value, read as data: an object is "[object Object]" and an array its items' texts joined
 * by commas (null items empty), as `String` gives them, without calling anything the value holds. `String` itself
 * would call an own `toString` or `valueOf` member, and a JSON object such as `{"toString": 1}` makes it throw.
 */
export function jsonText(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (Array.isArray(value))
    return value.map((item: unknown) => (item === null || item === undefined ? "" : jsonText(item))).join(",");
  return typeof value === "object" ? "[object Object]" : String(value as string | number | boolean);
}

/** True when `value` nests arrays/objects deeper than `max` levels; iterative, so no depth can overflow the stack. */
export function nestsDeeperThan(value: unknown, max: number): boolean {
  const pending: Array<{ node: unknown; depth: number }> = [{ node: value, depth: 1 }];
  for (let item = pending.pop(); item !== undefined; item = pending.pop()) {
    if (typeof item.node !== "object" || item.node === null) continue;
    if (item.depth > max) return true;
    for (const child of Object.values(item.node)) pending.push({ node: child, depth: item.depth + 1 });
  }
  return false;
}

/**
 * U+0000, or a surrogate that is not half of a pair (with the u flag a pair is one code point, never Cs). JSON's
 * escapes can carry both, but PostgreSQL stores neither in text or json, so both engines refuse them alike.
 */
// eslint-disable-next-line no-control-regex -- matching U+0000 is the point
const UNSTORABLE = /[\u0000\p{Cs}]/u;

/** True when a string (key or value) anywhere in `value` holds text no engine can store; iterative. */
export function hasUnstorableText(value: unknown): boolean {
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const node = pending.pop();
    if (typeof node === "string") {
      if (UNSTORABLE.test(node)) return true;
    } else if (typeof node === "object" && node !== null) {
      for (const [key, child] of Object.entries(node)) {
        if (UNSTORABLE.test(key)) return true;
        pending.push(child);
      }
    }
  }
  return false;
}

/**
 * Redaction (docs/api.md, "Redaction"): `operations.<id>.redact` names JSON pointers into a job's request
 * (`/body/password`, `/query/token`; a `*` segment matches every member of an object or array) whose values are
 * stored and delivered but never shown. Every answer that carries a job's or a schedule's request (the API, and so
 * the dashboard and the client) shows `"[redacted]"` in their place; opqueue logs no request.
 */
import type { RequestPayload } from "./schemas.js";

/** What a redacted value is shown as. */
export const REDACTED = "[redacted]";

/** The parts of a request a pointer may start at. */
const PARTS = ["body", "query", "path_params"];

/** A pointer's segments, `*` standing for every member of an object or an array. */
export type RedactPath = readonly string[];

/**
 * The segments of a redaction pointer (RFC 6901, `~1` for `/` and `~0` for `~` within a name), or why it is not one:
 * it must start with `/body`, `/query` or `/path_params`.
 */
export function parseRedactPointer(pointer: string): RedactPath | string {
  if (!pointer.startsWith("/")) return "a JSON pointer starts with /";
  const segments = pointer
    .slice(1)
    .split("/")
    .map((segment) => segment.replace(/~1/g, "/").replace(/~0/g, "~"));
  if (/~[^01]|~$/.test(pointer)) return "~ in a JSON pointer is written ~0, and / within a name ~1";
  if (!PARTS.includes(segments[0] ?? ""))
    return `a redaction pointer starts with ${PARTS.map((p) => `/${p}`).join(", ")}`;
  return Object.freeze(segments);
}

/** `value` with every value at `path` replaced by `REDACTED`; the parts on the way copied, the rest shared. */
function redactAt(value: unknown, path: RedactPath, depth: number): unknown {
  if (depth === path.length) return REDACTED;
  if (typeof value !== "object" || value === null) return value;
  const segment = path[depth] as string;
  if (Array.isArray(value)) {
    if (segment === "*") return value.map((item) => redactAt(item, path, depth + 1));
    if (!/^(0|[1-9][0-9]*)$/.test(segment) || Number(segment) >= value.length) return value;
    const copy = [...value];
    copy[Number(segment)] = redactAt(copy[Number(segment)], path, depth + 1);
    return copy;
  }
  const record = value as Record<string, unknown>;
  if (segment === "*") {
    return Object.fromEntries(Object.entries(record).map(([key, item]) => [key, redactAt(item, path, depth + 1)]));
  }
  if (!Object.hasOwn(record, segment)) return value;
  return { ...record, [segment]: redactAt(record[segment], path, depth + 1) };
}

/** `request` as it may be shown: the values at `paths` replaced by `REDACTED`. The request itself is not changed. */
export function redactRequest(request: RequestPayload, paths: readonly RedactPath[]): RequestPayload {
  let shown: unknown = request;
  for (const path of paths) shown = redactAt(shown, path, 0);
  return shown as RequestPayload;
}

/** `sent` with each `REDACTED` at a pointer of `path` put back to what `stored` holds there. */
function restoreAt(sent: unknown, stored: unknown, path: RedactPath, depth: number): unknown {
  if (depth === path.length) return sent === REDACTED && stored !== undefined ? stored : sent;
  if (typeof sent !== "object" || sent === null || typeof stored !== "object" || stored === null) return sent;
  const segment = path[depth] as string;
  if (Array.isArray(sent)) {
    if (!Array.isArray(stored)) return sent;
    return sent.map((item, index) =>
      segment === "*" || segment === String(index) ? restoreAt(item, stored[index], path, depth + 1) : item,
    );
  }
  const record = sent as Record<string, unknown>;
  const kept = stored as Record<string, unknown>;
  return Object.fromEntries(
    Object.entries(record).map(([key, item]) => [
      key,
      segment === "*" || segment === key
        ? restoreAt(item, Object.hasOwn(kept, key) ? kept[key] : undefined, path, depth + 1)
        : item,
    ]),
  );
}

/**
 * A request sent back by someone who read it redacted (a schedule's edit): each `REDACTED` left at a redacted pointer
 * is the value `stored` holds there, so an edit does not overwrite a secret with its placeholder.
 */
export function restoreRedacted(
  sent: RequestPayload,
  stored: RequestPayload,
  paths: readonly RedactPath[],
): RequestPayload {
  let restored: unknown = sent;
  for (const path of paths) restored = restoreAt(restored, stored, path, 0);
  return restored as RequestPayload;
}

/** What shows a request: by the redaction pointers of its operation. */
export interface RequestRedaction {
  /** `request` of a job (or schedule) of `operationId`, as it may be shown. */
  shown(operationId: string, request: RequestPayload): RequestPayload;
  /** `sent`, a request for `operationId` read redacted and sent back, with the placeholders put back from `stored`. */
  restored(operationId: string, sent: RequestPayload, stored: RequestPayload): RequestPayload;
}

/** Shows every request whole: for bodies sent to the product itself (a job's callback), never to a person. */
export const UNREDACTED: RequestRedaction = {
  shown: (_operationId, request) => request,
  restored: (_operationId, sent) => sent,
};

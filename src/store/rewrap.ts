/**
 * Re-encryption of stored payloads under the newest key (docs/encryption.md, "Rotating keys"), a page at a time while
 * the service runs: every payload sealed with an older key is sealed again with the first key of `encryption.keys`,
 * and every payload still in clear (written before encryption was turned on) is sealed. Each write is conditional on
 * the text read, so a row changed meanwhile is left as its writer left it (sealed with the newest key already).
 */
import { mapResultPayloads, PayloadCipher } from "./payload-cipher.js";
import type { PayloadStore, PayloadTable } from "./store.js";

/** The tables in the order a pass takes them. */
const ORDER: PayloadTable[] = ["jobs", "attempts", "schedules", "chains"];

/** Where a pass is: a table and the last key done in it. */
export interface RewrapCursor {
  table: PayloadTable;
  after: string | null;
}

/** A cursor as the API carries it: `table:key`, or `table:` for a table's start. */
export function formatCursor(cursor: RewrapCursor): string {
  return `${cursor.table}:${cursor.after ?? ""}`;
}

/** A cursor of `formatCursor`, or undefined when `text` is not one. */
export function parseCursor(text: string): RewrapCursor | undefined {
  const colon = text.indexOf(":");
  const table = text.slice(0, colon) as PayloadTable;
  if (colon < 0 || !ORDER.includes(table)) return undefined;
  const after = text.slice(colon + 1);
  return { table, after: after === "" ? null : after };
}

/** `sealed` again under the first key when another sealed it; as it is otherwise. */
function reseal(sealed: string, cipher: PayloadCipher): string {
  return PayloadCipher.keyIdOf(sealed) === cipher.currentKeyId ? sealed : cipher.seal(cipher.open(sealed));
}

/** A request (or a job spec's request) under the first key: sealed if in clear, sealed again if under another. */
function requestUnderCurrentKey(value: unknown, cipher: PayloadCipher): unknown {
  if (PayloadCipher.isSealed(value)) return reseal(value, cipher);
  return typeof value === "object" && value !== null && !Array.isArray(value) ? cipher.seal(value) : value;
}

/** Every `request` within a job spec (callbacks, a chain's on_settled) under the first key. */
function specsUnderCurrentKey(value: unknown, cipher: PayloadCipher): unknown {
  if (Array.isArray(value)) return value.map((item) => specsUnderCurrentKey(item, cipher));
  if (typeof value !== "object" || value === null) return value;
  return Object.fromEntries(
    Object.entries(value).map(([key, item]) => [
      key,
      key === "request" ? requestUnderCurrentKey(item, cipher) : specsUnderCurrentKey(item, cipher),
    ]),
  );
}

/** A result under the first key: each payload it holds (`mapResultPayloads`) sealed if in clear, sealed again if under another. */
function resultUnderCurrentKey(value: unknown, cipher: PayloadCipher): unknown {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return value;
  return mapResultPayloads(value as Record<string, unknown>, (payload) =>
    PayloadCipher.isSealed(payload) ? reseal(payload, cipher) : cipher.seal(payload),
  );
}

/** A column's stored text under the first key; the same text when nothing in it changes. */
function columnUnderCurrentKey(table: PayloadTable, column: string, text: string, cipher: PayloadCipher): string {
  // An attempt's error body is stored as text, not JSON: its sealed form is the bare string.
  if (table === "attempts") return PayloadCipher.isSealed(text) ? reseal(text, cipher) : cipher.seal(text);
  const value = JSON.parse(text) as unknown;
  let changed: unknown;
  if (column === "request") changed = requestUnderCurrentKey(value, cipher);
  // A progress is any JSON value, sealed whole (a string in clear is sealed too).
  else if (column === "progress") changed = PayloadCipher.isSealed(value) ? reseal(value, cipher) : cipher.seal(value);
  else if (column === "result") changed = resultUnderCurrentKey(value, cipher);
  else changed = specsUnderCurrentKey(value, cipher);
  const next = JSON.stringify(changed);
  return next === JSON.stringify(value) ? text : next;
}

/**
 * One page of a pass: up to `limit` rows from `cursor` (the first table's start when null) put under the first key.
 * Returns the columns it rewrote, the rows it read, and the cursor to go on from (null: the pass is done).
 */
export async function rewrapPage(options: {
  store: PayloadStore;
  cipher: PayloadCipher;
  cursor: RewrapCursor | null;
  limit: number;
}): Promise<{ rewrapped: number; examined: number; cursor: RewrapCursor | null }> {
  const { store, cipher, limit } = options;
  const cursor = options.cursor ?? { table: ORDER[0] as PayloadTable, after: null };
  const page = await store.payloadPage({ table: cursor.table, after: cursor.after, limit });
  const changes = page.rows.flatMap((row) =>
    row.columns.flatMap(({ column, text }) => {
      if (text === null) return [];
      const to = columnUnderCurrentKey(cursor.table, column, text, cipher);
      return to === text ? [] : [{ key: row.key, column, from: text, to }];
    }),
  );
  const rewrapped = await store.payloadRewrite({ table: cursor.table, changes });
  const nextTable = ORDER[ORDER.indexOf(cursor.table) + 1];
  const next: RewrapCursor | null =
    page.next !== null
      ? { table: cursor.table, after: page.next }
      : nextTable
        ? { table: nextTable, after: null }
        : null;
  return { rewrapped, examined: page.rows.length, cursor: next };
}

/** The store's `PayloadStore` role; src/store/store.ts composes the roles into `Store`. */

/** The tables whose columns hold payloads, and the key a page goes by in each. */
export type PayloadTable = "jobs" | "attempts" | "schedules" | "chains";

/** One row's payload columns as stored: each column's JSON text, or null (a column without a value). */
export interface StoredPayloadRow {
  /** The row's key: a job's seq, an attempt's id (as text), a schedule's name, a chain's original request id. */
  key: string;
  /**
   * Each payload column (`request`, `result`, `callbacks`, `progress`, `error_body`, `on_settled`) with its stored
   * text. A list of pairs, not a record by column: the encrypting store opens what sits under a payload's name, and
   * must not open these.
   */
  columns: Array<{ column: string; text: string | null }>;
}

/**
 * Payload columns read and written as they are stored, for `opqueue rewrap` (docs/encryption.md, "Rotating keys"):
 * the encrypting store passes these through untouched, as their names are none of the payloads' own.
 */
export interface PayloadStore {
  /**
   * Up to `limit` rows of `table` after key `after` (null: from the first), in key order, with their payload columns'
   * stored text; `next` is the last row's key, or null once the table has no row after the page.
   */
  payloadPage(params: {
    table: PayloadTable;
    after: string | null;
    limit: number;
  }): Promise<{ rows: StoredPayloadRow[]; next: string | null }>;
  /**
   * Replaces each column's stored text with `to` where it still is `from` (a row changed or deleted since it was read
   * is left as it now is); returns how many columns were replaced.
   */
  payloadRewrite(params: {
    table: PayloadTable;
    changes: Array<{ key: string; column: string; from: string; to: string }>;
  }): Promise<number>;
}

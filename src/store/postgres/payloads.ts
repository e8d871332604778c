/**
 * Payload columns read and written as stored, on the PostgreSQL engine (roles/payloads.ts): for `opqueue rewrap`.
 * Each table's page goes by its key; each write is conditional on the text read (json has no equality: compared as
 * text, which json keeps as it was written).
 */
import type { PayloadTable, StoredPayloadRow } from "../store.js";
import type { PgConnection } from "./connection.js";
import type { PgRow } from "./rows.js";

/**
 * Each table's page statement ($1 the key after which it starts, $2 limit), whether its key is a number, and its
 * payload columns' conditional writes ($1 key, $2 the text read, $3 the new text).
 */
const TABLES: Record<PayloadTable, { page: string; numeric: boolean; columns: Record<string, string> }> = {
  jobs: {
    numeric: true,
    page: `SELECT j.seq::text AS key, j.request::text AS request, s.result::text AS result,
        j.callbacks::text AS callbacks, s.progress::text AS progress
      FROM job_specs j JOIN job_state s ON s.seq = j.seq
      WHERE j.seq > $1::bigint ORDER BY j.seq LIMIT $2`,
    columns: {
      request: "UPDATE job_specs SET request = $3::json WHERE seq = $1::bigint AND request::text = $2",
      result: "UPDATE job_state SET result = $3::json WHERE seq = $1::bigint AND result::text = $2",
      callbacks: "UPDATE job_specs SET callbacks = $3::json WHERE seq = $1::bigint AND callbacks::text = $2",
      progress: "UPDATE job_state SET progress = $3::json WHERE seq = $1::bigint AND progress::text = $2",
    },
  },
  attempts: {
    numeric: true,
    page: `SELECT id::text AS key, error_body FROM job_attempts
      WHERE id > $1::bigint ORDER BY id LIMIT $2`,
    columns: {
      error_body: "UPDATE job_attempts SET error_body = $3 WHERE id = $1::bigint AND error_body = $2",
    },
  },
  schedules: {
    numeric: false,
    page: `SELECT name AS key, request::text AS request FROM schedules
      WHERE name > $1::text ORDER BY name LIMIT $2`,
    columns: {
      request: "UPDATE schedules SET request = $3::json WHERE name = $1 AND request::text = $2",
    },
  },
  chains: {
    numeric: false,
    page: `SELECT original_request_id AS key, on_settled::text AS on_settled FROM chains
      WHERE original_request_id > $1::text ORDER BY original_request_id LIMIT $2`,
    columns: {
      on_settled: "UPDATE chains SET on_settled = $3::json WHERE original_request_id = $1 AND on_settled::text = $2",
    },
  },
};

export async function page(
  db: PgConnection,
  params: { table: PayloadTable; after: string | null; limit: number },
): Promise<{ rows: StoredPayloadRow[]; next: string | null }> {
  const spec = TABLES[params.table];
  // Before every key: seqs and ids start at 1, names and request ids are never empty.
  const found = await db.query(spec.page, [params.after ?? (spec.numeric ? "0" : ""), params.limit]);
  const rows = found.map((row: PgRow) => ({
    key: row["key"] as string,
    columns: Object.keys(spec.columns).map((column) => ({ column, text: (row[column] as string | null) ?? null })),
  }));
  return { rows, next: rows.length < params.limit ? null : (rows.at(-1)?.key ?? null) };
}

export async function rewrite(
  db: PgConnection,
  params: { table: PayloadTable; changes: Array<{ key: string; column: string; from: string; to: string }> },
): Promise<number> {
  const spec = TABLES[params.table];
  if (params.changes.length === 0) return db.answerIfOpen(0);
  return db.transaction(async (client) => {
    let replaced = 0;
    for (const change of params.changes) {
      const sql = spec.columns[change.column];
      if (sql === undefined) throw new Error(`${params.table} has no payload column ${change.column}`);
      replaced += (await client.query(sql, [change.key, change.from, change.to])).rowCount ?? 0;
    }
    return replaced;
  });
}

/**
 * Payload columns read and written as stored, on the SQLite engine (roles/payloads.ts), inside the caller's
 * transaction: for `opqueue rewrap`. Each table's page goes by its key; each write is conditional on the text read.
 */
import type Database from "better-sqlite3";
import type { PayloadTable, StoredPayloadRow } from "../store.js";

/** Each table: its key column, its key's type in SQL, and its payload columns. */
const TABLES: Record<PayloadTable, { table: string; key: string; numeric: boolean; columns: string[] }> = {
  jobs: { table: "jobs", key: "seq", numeric: true, columns: ["request", "result", "callbacks", "progress"] },
  attempts: { table: "job_attempts", key: "id", numeric: true, columns: ["error_body"] },
  schedules: { table: "schedules", key: "name", numeric: false, columns: ["request"] },
  chains: { table: "chains", key: "original_request_id", numeric: false, columns: ["on_settled"] },
};

/** The page and rewrite statements of each table, prepared once per connection. */
export class PayloadStatements {
  private readonly pages = new Map<PayloadTable, Database.Statement>();
  private readonly writes = new Map<string, Database.Statement>();

  constructor(private readonly db: Database.Database) {}

  page(params: { table: PayloadTable; after: string | null; limit: number }): {
    rows: StoredPayloadRow[];
    next: string | null;
  } {
    const spec = TABLES[params.table];
    let statement = this.pages.get(params.table);
    if (statement === undefined) {
      statement = this.db.prepare(
        `SELECT ${spec.key} AS key, ${spec.columns.join(", ")} FROM ${spec.table}
         WHERE ${spec.key} > :after ORDER BY ${spec.key} LIMIT :limit`,
      );
      this.pages.set(params.table, statement);
    }
    // Before every key: seqs and ids start at 1, names and request ids are never empty. A bound, not an OR, so the
    // page is a seek on the key's index.
    const after = spec.numeric ? Number(params.after ?? 0) : (params.after ?? "");
    const found = statement.all({ after, limit: params.limit }) as Array<Record<string, unknown>>;
    const rows = found.map((row) => ({
      key: String(row["key"]),
      columns: spec.columns.map((column) => ({
        column,
        text: row[column] === null || row[column] === undefined ? null : String(row[column]),
      })),
    }));
    return { rows, next: rows.length < params.limit ? null : (rows.at(-1)?.key ?? null) };
  }

  rewrite(params: {
    table: PayloadTable;
    changes: Array<{ key: string; column: string; from: string; to: string }>;
  }): number {
    const spec = TABLES[params.table];
    let replaced = 0;
    for (const change of params.changes) {
      if (!spec.columns.includes(change.column))
        throw new Error(`${params.table} has no payload column ${change.column}`);
      const name = `${params.table}.${change.column}`;
      let statement = this.writes.get(name);
      if (statement === undefined) {
        statement = this.db.prepare(
          `UPDATE ${spec.table} SET ${change.column} = :to WHERE ${spec.key} = :key AND ${change.column} = :from`,
        );
        this.writes.set(name, statement);
      }
      const key = spec.numeric ? Number(change.key) : change.key;
      replaced += statement.run({ key, from: change.from, to: change.to }).changes;
    }
    return replaced;
  }
}

/**
 * Numbered, forward-only migration files, one folder per engine (`migrations/<engine>/NNNN_name.sql`).
 * Reading them is shared; applying them is each engine's own business.
 */
import { readdirSync, readFileSync } from "node:fs";

/** One migration file. */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

// Two folders up from src/store/ (or dist/store/) is the package root, where migrations/ lives.
const MIGRATIONS_ROOT = new URL("../../migrations/", import.meta.url);

/** The migrations of one engine, in version order. */
export function readMigrations(engine: "sqlite" | "postgres"): Migration[] {
  const folder = new URL(`${engine}/`, MIGRATIONS_ROOT);
  const migrations = readdirSync(folder)
    .map((file) => /^(\d{4})_([a-z0-9_]+)\.sql$/.exec(file))
    .filter((match): match is RegExpExecArray => match !== null)
    .map((match) => ({
      version: Number(match[1]),
      name: match[2] ?? "",
      sql: readFileSync(new URL(match[0], folder), "utf8"),
    }))
    .sort((a, b) => a.version - b.version);
  migrations.forEach((migration, index) => {
    if (migration.version !== index + 1) {
      throw new Error(`migrations/${engine}: expected version ${index + 1}, found ${migration.version}`);
    }
  });
  return migrations;
}

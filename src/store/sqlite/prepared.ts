/** Prepared statements typed by what they bind and what a row is: the engine's statements are made with these. */
import type Database from "better-sqlite3";

/** Parameters a statement binds: positional, or named. */
export type Binds = unknown[] | object;

/** What a statement is called with: its positional parameters, or one object of named ones. */
type Args<P extends Binds> = P extends unknown[] ? P : [P];

/** The part of a prepared statement the engine uses, typed by what it binds and what a row is. */
export interface Prepared<P extends Binds, R> {
  get(...params: Args<P>): R | undefined;
  all(...params: Args<P>): R[];
  run(...params: Args<P>): Database.RunResult;
}

/** Prepares `sql`. */
export function prepare<P extends Binds = unknown[], R = unknown>(db: Database.Database, sql: string): Prepared<P, R> {
  return db.prepare(sql) as unknown as Prepared<P, R>;
}

/** Prepares `sql` to answer its first column alone (better-sqlite3's `pluck`). */
export function preparePluck<P extends Binds = unknown[], R = unknown>(
  db: Database.Database,
  sql: string,
): Prepared<P, R> {
  return db.prepare(sql).pluck() as unknown as Prepared<P, R>;
}

/**
 * The `database` setting, read in one place: `sqlite:PATH` (the embedded engine, one process), `sqlite::memory:` (a
 * throwaway database), or `postgres://…` / `postgresql://…` (any number of nodes).
 */

/** Which engine a database URL names, and what it needs to open it. */
export type DatabaseUrl = { engine: "sqlite"; path: string } | { engine: "postgres"; url: string };

/** The engine and target of `url`; undefined for a URL no engine serves (or a `sqlite:` without a path). */
export function parseDatabaseUrl(url: string): DatabaseUrl | undefined {
  if (url.startsWith("sqlite:")) {
    const path = url.slice("sqlite:".length);
    return path === "" ? undefined : { engine: "sqlite", path };
  }
  if (url.startsWith("postgres://") || url.startsWith("postgresql://")) return { engine: "postgres", url };
  return undefined;
}

/** `url` with its password hidden, for logs and messages. */
export function redactDatabaseUrl(url: string): string {
  return url.replace(/(\/\/[^:/@]+:)[^@]*@/, "$1***@");
}

/** Opens the engine named by a database URL. */
import type { Clock } from "../clock.js";
import { SqliteStore } from "./sqlite/sqlite-store.js";
import type { Store } from "./store.js";

/** Thrown for a database URL no engine serves. */
export class UnsupportedDatabaseError extends Error {
  override readonly name = "UnsupportedDatabaseError";
}

/** Opens and migrates the store for `url` (`sqlite:PATH`, `sqlite::memory:`; PostgreSQL comes later). */
export async function openStore(options: { url: string; clock: Clock }): Promise<Store> {
  const { url, clock } = options;
  if (url.startsWith("sqlite:")) {
    const path = url.slice("sqlite:".length);
    return SqliteStore.open({ path: path === ":memory:" ? ":memory:" : path, clock });
  }
  throw new UnsupportedDatabaseError(
    `database "${url.replace(/\/\/[^@/]*@/, "//***@")}": only SQLite is available in this version of opqueue`,
  );
}

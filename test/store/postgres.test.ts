/**
 * The PostgreSQL engine: the conformance suite, each test in its own schema of the server named by
 * OPQUEUE_TEST_DATABASE_URL (skipped, with that reason, when it is not set).
 */
import { test } from "node:test";
import { POSTGRES_SKIP, openPostgresStore } from "../helpers/postgres.js";
import { runStoreConformance } from "./conformance/index.js";

if (POSTGRES_SKIP) {
  test("PostgreSQL store conformance", { skip: POSTGRES_SKIP }, () => undefined);
} else {
  runStoreConformance({
    engine: "postgres",
    open: async (clock) => {
      const { store, cleanup } = await openPostgresStore(clock);
      return { store, cleanup };
    },
  });
}

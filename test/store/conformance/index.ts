/**
 * The store conformance suite: one set of cases that every engine behind `Store` must pass. An engine's test
 * file calls `runStoreConformance` with a way to open a fresh store; a case it cannot run is skipped by name,
 * with the reason, never silently.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { adminCases } from "./admin.js";
import { chainCases } from "./chains.js";
import { asyncJobCases } from "./async-attempts.js";
import { claimCases } from "./claims.js";
import { completeCases } from "./claims-outcomes.js";
import { flowCases } from "./flow.js";
import { Suite, type StoreConformanceOptions } from "./harness.js";
import { insertCases } from "./enqueue.js";
import { listCases } from "./job-reads.js";
import { producerCases } from "./producers.js";
import { maintenanceCases } from "./upkeep.js";
import { propertyCases } from "./properties.js";
import { scheduleCases } from "./schedules.js";

export type { OpenedStore, StoreConformanceOptions } from "./harness.js";

/** Registers every conformance case for one engine, each on a fresh store. */
export function runStoreConformance(options: StoreConformanceOptions): void {
  const suite = new Suite(options);
  describe(`store conformance: ${options.engine}`, () => {
    insertCases(suite);
    adminCases(suite);
    claimCases(suite);
    completeCases(suite);
    flowCases(suite);
    producerCases(suite);
    chainCases(suite);
    listCases(suite);
    maintenanceCases(suite);
    scheduleCases(suite);
    asyncJobCases(suite);
    propertyCases(suite);

    test("every skipped case names a case of the suite", () => {
      const unknown = Object.keys(options.skip ?? {}).filter((name) => !suite.names.has(name));
      assert.deepEqual(unknown, [], "skips must name existing cases exactly");
    });
  });
}

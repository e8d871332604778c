/**
 * The store conformance suite: one set of cases that every engine behind `Store` must pass. An engine's test
 * file calls `runStoreConformance` with a way to open a fresh store; a case it cannot run is skipped by name,
 * with the reason, never silently.
 *
 * The cases are organised by the store's role interfaces (src/store/roles/), one file per role and in this order:
 * StoreLifecycle (lifecycle.ts), EnqueueStore (enqueue.ts), ClaimStore (claims.ts: taking jobs; claims-outcomes.ts:
 * ending attempts), AsyncAttemptStore (async-attempts.ts), ChainStore (chains.ts), ScheduleStore (schedules.ts),
 * FlowStore (flow.ts), JobReadStore (job-reads.ts), AdminStore (admin.ts;
 * its erasure in erasure.ts), AccessStore (access.ts), PayloadStore (payloads.ts),
 * UpkeepStore (upkeep.ts) and ListenStore
 * (listening.ts); then the property test across roles (properties.ts). OnlineBackup, SQLite's alone, is tested through
 * its route (test/http/backup.test.ts, test/cli-backup.test.ts). A case lives with the role of the method it pins,
 * whatever else it calls to get there.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { accessCases } from "./access.js";
import { adminCases } from "./admin.js";
import { asyncAttemptCases } from "./async-attempts.js";
import { chainCases } from "./chains.js";
import { claimOutcomeCases } from "./claims-outcomes.js";
import { claimCases } from "./claims.js";
import { enqueueCases } from "./enqueue.js";
import { erasureCases } from "./erasure.js";
import { flowCases } from "./flow.js";
import { Suite, type StoreConformanceOptions } from "./harness.js";
import { jobReadCases } from "./job-reads.js";
import { lifecycleCases } from "./lifecycle.js";
import { listenCases } from "./listening.js";
import { payloadCases } from "./payloads.js";
import { propertyCases } from "./properties.js";
import { scheduleCases } from "./schedules.js";
import { upkeepCases } from "./upkeep.js";

export type { OpenedStore, StoreConformanceOptions } from "./harness.js";

/** Registers every conformance case for one engine, each on a fresh store. */
export function runStoreConformance(options: StoreConformanceOptions): void {
  const suite = new Suite(options);
  describe(`store conformance: ${options.engine}`, () => {
    lifecycleCases(suite);
    enqueueCases(suite);
    claimCases(suite);
    claimOutcomeCases(suite);
    asyncAttemptCases(suite);
    chainCases(suite);
    scheduleCases(suite);
    flowCases(suite);
    jobReadCases(suite);
    adminCases(suite);
    erasureCases(suite);
    accessCases(suite);
    payloadCases(suite);
    upkeepCases(suite);
    listenCases(suite);
    propertyCases(suite);

    test("every skipped case names a case of the suite", () => {
      const unknown = Object.keys(options.skip ?? {}).filter((name) => !suite.names.has(name));
      assert.deepEqual(unknown, [], "skips must name existing cases exactly");
    });
  });
}

/**
 * Every statement of the SQLite engine, prepared once per connection: the statements of each concern, whose text is in
 * sql/<concern>.ts (the names the PostgreSQL engine's sql/ uses), gathered into one object the concern modules share.
 */
import type Database from "better-sqlite3";
import { prepareAccessStatements } from "./sql/access.js";
import { prepareAsyncStatements } from "./sql/async.js";
import { prepareClaimStatements } from "./sql/claim.js";
import { prepareFlowStatements } from "./sql/flow.js";
import { prepareInsertStatements } from "./sql/insert.js";
import { prepareJobsStatements } from "./sql/jobs.js";
import { prepareMaintenanceStatements } from "./sql/maintenance.js";
import { prepareOutcomeStatements } from "./sql/outcomes.js";
import { prepareScheduleStatements } from "./sql/schedules.js";

/** Prepares the engine's statements on `db`. */
export function prepareStatements(db: Database.Database) {
  return {
    ...prepareFlowStatements(db),
    ...prepareScheduleStatements(db),
    ...prepareJobsStatements(db),
    ...prepareInsertStatements(db),
    ...prepareClaimStatements(db),
    ...prepareOutcomeStatements(db),
    ...prepareAsyncStatements(db),
    ...prepareMaintenanceStatements(db),
    ...prepareAccessStatements(db),
  };
}

/** The engine's prepared statements. */
export type Statements = ReturnType<typeof prepareStatements>;

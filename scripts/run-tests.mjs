#!/usr/bin/env node
// Runs every test file (test/**/*.test.ts) with node's test runner through tsx: first everything on SQLite, then,
// when OPQUEUE_TEST_DATABASE_URL is set, the engine-parameterised suites (API, delivery, maintenance, telemetry)
// again on PostgreSQL (OPQUEUE_TEST_ENGINE=postgres: one fresh schema per service). The PostgreSQL store
// conformance suite runs in the first pass (test/store/postgres.test.ts), or is skipped with its reason.
// Usage: npm test [-- FILTER...]  (only files whose path contains one of the filters)
import { spawn } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";

/** Suites that build their service with test/helpers/service.ts and so run on either engine. */
const ENGINE_SUITES = ["test/http/", "test/delivery/", "test/maintenance/", "test/telemetry/", "test/client/", "test/demo/"];
/** Suites that are about one process on one SQLite file, whatever the engine variable says. */
const SQLITE_ONLY = ["test/delivery/crash.test.ts"];

function findTests(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return findTests(path);
    return name.endsWith(".test.ts") ? [path] : [];
  });
}

function run(files, env) {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ["--import", "tsx", "--test", "--test-reporter=spec", "--test-concurrency=2", ...files],
      { stdio: "inherit", env: { ...process.env, ...env } },
    );
    child.on("exit", (code, signal) => resolve(signal ? 1 : (code ?? 1)));
  });
}

const filters = process.argv.slice(2);
const files = findTests("test")
  .filter((file) => filters.length === 0 || filters.some((filter) => file.includes(filter)))
  .sort();
if (files.length === 0) {
  console.error(`no test files match ${filters.join(" ")}`);
  process.exit(1);
}
const postgres = Boolean(process.env.OPQUEUE_TEST_DATABASE_URL);
if (!postgres) {
  console.log("PostgreSQL suites skipped: OPQUEUE_TEST_DATABASE_URL is not set (SQLite suites run).");
}
console.log(`\n== ${files.length} test files on SQLite${postgres ? " (and the PostgreSQL store suite)" : ""}`);
let failed = (await run(files, { OPQUEUE_TEST_ENGINE: "sqlite" })) !== 0;
if (postgres) {
  const engineFiles = files.filter(
    (file) => ENGINE_SUITES.some((prefix) => file.startsWith(prefix)) && !SQLITE_ONLY.includes(file),
  );
  if (engineFiles.length > 0) {
    console.log(`\n== ${engineFiles.length} API and worker test files again on PostgreSQL`);
    failed = (await run(engineFiles, { OPQUEUE_TEST_ENGINE: "postgres" })) !== 0 || failed;
  }
}
process.exit(failed ? 1 : 0);

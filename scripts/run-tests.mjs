#!/usr/bin/env node
// Runs every test file (test/**/*.test.ts) with node's test runner through tsx: first every file with
// OPQUEUE_TEST_ENGINE=sqlite, then, when OPQUEUE_TEST_DATABASE_URL is set, the files that build their services with
// test/helpers/service.ts again with OPQUEUE_TEST_ENGINE=postgres (one fresh schema per service).
//
// Every test file must be placed in PLACES below, which says how it meets the engines: a new folder (or file) that is
// not placed stops the run, so nothing runs on SQLite alone without saying why.
//
// Usage: npm test [-- FILTER...]  (only files whose path contains one of the filters)
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * How each test folder or file meets the engines, by path prefix (the longest prefix that matches decides):
 * - "both": built on test/helpers/service.ts, so it runs on SQLite, then again on PostgreSQL;
 * - "own": opens the engines itself (the conformance suite per engine, the multi-node suites on PostgreSQL, skipped
 *   with their reason without OPQUEUE_TEST_DATABASE_URL);
 * - "none": needs no database;
 * - "sqlite": SQLite only, for the reason given.
 */
const PLACES = {
  "test/http/": { engines: "both" },
  "test/dispatcher/": { engines: "both" },
  "test/maintenance/": { engines: "both" },
  "test/schedules/": { engines: "both" },
  "test/chains/": { engines: "both" },
  "test/async-jobs/": { engines: "both" },
  "test/telemetry/": { engines: "both" },
  "test/telemetry/trace-context.test.ts": { engines: "none" },
  "test/client/": { engines: "both" },
  "test/client/wire-agreement.test.ts": { engines: "none" },
  "test/client/readme.test.ts": { engines: "none" },
  "test/demo/": { engines: "both" },
  "test/store/": { engines: "own" },
  "test/multinode/": { engines: "own" },
  "test/auth/": { engines: "none" },
  "test/job/": { engines: "none" },
  "test/operations/": { engines: "none" },
  "test/config/": { engines: "none" },
  "test/did-you-mean.test.ts": { engines: "none" },
  "test/readme.test.ts": { engines: "none" },
  "test/dispatcher/crash.test.ts": {
    engines: "sqlite",
    reason: "kill -9 of one process holding one SQLite file; test/multinode/ kills PostgreSQL nodes",
  },
  "test/cli.test.ts": {
    engines: "sqlite",
    reason: "the opqueue command on SQLite files (lock, migrate, token); serve on PostgreSQL is test/multinode/'s",
  },
  "test/cli-startup.test.ts": { engines: "own" },
  "test/cli-backup.test.ts": {
    engines: "sqlite",
    reason:
      "the online backup and restore of SQLite files by the opqueue command; its PostgreSQL case (a clear refusal) reads OPQUEUE_TEST_DATABASE_URL itself",
  },
  "test/deploy/systemd.test.ts": {
    engines: "sqlite",
    reason:
      "runs the systemd unit's command and stops it with SIGTERM; a node's shutdown on PostgreSQL is test/multinode/'s",
  },
  "test/deploy/upgrade.test.ts": { engines: "own" },
  "test/deploy/install.test.ts": {
    engines: "sqlite",
    reason:
      "packs both packages, installs them outside the repository and runs the installed serve on a SQLite file; test/client/ and test/multinode/ cover the client and serve on PostgreSQL",
  },
  "test/deploy/nginx.test.ts": {
    engines: "sqlite",
    reason:
      "runs the nginx example in front of a node; what goes through the proxy is tested on both engines by test/http/",
  },
  "test/ui/": {
    engines: "sqlite",
    reason: "drives the dashboard in Chromium; the API it calls is tested on both engines by test/http/",
  },
};

function findTests(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return findTests(path);
    return name.endsWith(".test.ts") ? [path] : [];
  });
}

/** The entry of PLACES for `file`: the longest prefix that matches. */
function placeOf(file) {
  const prefix = Object.keys(PLACES)
    .filter((candidate) => file.startsWith(candidate))
    .sort((a, b) => b.length - a.length)[0];
  return prefix === undefined ? undefined : PLACES[prefix];
}

/** Where scripts/test-record.mjs writes each case's outcome and duration, one file per pass. */
const records = mkdtempSync(join(tmpdir(), "opqueue-test-records-"));

function run(files, env) {
  const recordFile = join(records, `${env.OPQUEUE_TEST_ENGINE}.jsonl`);
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "--test",
        "--test-reporter=spec",
        "--test-reporter-destination=stdout",
        "--test-reporter=./scripts/test-record.mjs",
        `--test-reporter-destination=${recordFile}`,
        "--test-concurrency=2",
        ...files,
      ],
      { stdio: "inherit", env: { ...process.env, ...env } },
    );
    child.on("exit", (code, signal) => resolve(signal ? 1 : (code ?? 1)));
  });
}

const allFiles = findTests("test").sort();
const unplaced = allFiles.filter((file) => placeOf(file) === undefined);
if (unplaced.length > 0) {
  console.error(
    `scripts/run-tests.mjs: these test files have no place in PLACES; say how they meet the engines:\n  ${unplaced.join("\n  ")}`,
  );
  process.exit(1);
}
const filters = process.argv.slice(2);
const files = allFiles.filter((file) => filters.length === 0 || filters.some((filter) => file.includes(filter)));
if (files.length === 0) {
  console.error(`no test files match ${filters.join(" ")}`);
  process.exit(1);
}
const postgres = Boolean(process.env.OPQUEUE_TEST_DATABASE_URL);
if (!postgres) {
  console.log("PostgreSQL suites skipped: OPQUEUE_TEST_DATABASE_URL is not set (SQLite suites run).");
}
const sqliteOnly = files.filter((file) => placeOf(file).engines === "sqlite");
for (const file of sqliteOnly) console.log(`SQLite only: ${file}: ${placeOf(file).reason}`);
console.log(
  `\n== ${files.length} test files on SQLite${postgres ? " (and the PostgreSQL store and multi-node suites)" : ""}`,
);
let failed = (await run(files, { OPQUEUE_TEST_ENGINE: "sqlite" })) !== 0;
if (postgres) {
  const engineFiles = files.filter((file) => placeOf(file).engines === "both");
  if (engineFiles.length > 0) {
    console.log(`\n== ${engineFiles.length} API and worker test files again on PostgreSQL`);
    failed = (await run(engineFiles, { OPQUEUE_TEST_ENGINE: "postgres" })) !== 0 || failed;
  }
}

// The end of the log: the slowest cases, then every failure of either pass (a CI log is read from its tail).
const cases = readdirSync(records).flatMap((name) =>
  readFileSync(join(records, name), "utf8")
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line)),
);
rmSync(records, { recursive: true, force: true });
const where = (c) => `${c.file.replace(`${process.cwd()}/`, "")}${c.line > 1 ? `:${c.line}` : ""} [${c.engine}]`;
console.log("\n== the 20 slowest cases");
for (const c of [...cases].sort((a, b) => b.ms - a.ms).slice(0, 20)) {
  console.log(`${String((c.ms / 1000).toFixed(1)).padStart(7)} s  ${where(c)}  ${c.name}`);
}
const failures = cases.filter((c) => !c.ok && !c.skipped);
console.log(`\n== ${cases.length} cases, ${failures.length} failed`);
for (const c of failures) console.log(`FAILED ${where(c)}  ${c.name}\n    ${c.error.split("\n").join("\n    ")}`);
if (failed && failures.length === 0) console.log("a test process failed outside any case: see the log above");
process.exit(failed ? 1 : 0);

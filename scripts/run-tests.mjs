#!/usr/bin/env node
// Runs every test file (test/**/*.test.ts) with node's test runner through tsx.
// Usage: npm test [-- FILTER...]  (only files whose path contains one of the filters)
import { spawn } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";

function findTests(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return findTests(path);
    return name.endsWith(".test.ts") ? [path] : [];
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
if (!process.env.OPQUEUE_TEST_DATABASE_URL) {
  console.log("PostgreSQL suites skipped: OPQUEUE_TEST_DATABASE_URL is not set (SQLite suites run).");
}
const child = spawn(
  process.execPath,
  ["--import", "tsx", "--test", "--test-reporter=spec", "--test-concurrency=2", ...files],
  { stdio: "inherit" },
);
child.on("exit", (code, signal) => process.exit(signal ? 1 : (code ?? 1)));

/**
 * docs/api.md's error table lists every `code` the service can answer, under its status, and nothing else (issue 29,
 * item 6). The codes are gathered from the source mechanically: `ERROR_CODES` (the only codes `ApiError` can carry, as
 * its type says) and every code literal the source writes where an error is raised or answered (`new ApiError(status,
 * "code"`, `code: "code"`), so an answer sent some other way is caught too.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ERROR_CODES } from "../../src/errors.js";
import { MAX_BULK_CANCEL } from "../../src/flow/schemas.js";
import { ADMIN_ACTIONS } from "../../src/job/statuses.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
/** The demo's product app answers its own errors (`mailbox_full`, `busy`): they are the example target's, not opqueue's. */
const NOT_OPQUEUE = new Set([join("src", "demo")]);

/** Every `.ts` file under `dir` (relative to the repository), but those of `NOT_OPQUEUE`. */
function sourceFiles(dir: string): string[] {
  if (NOT_OPQUEUE.has(dir)) return [];
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith(".ts") ? [path] : [];
  });
}

/** `status code` pairs of the table under `## Errors` in docs/api.md. */
function documentedCodes(): string[] {
  const text = readFileSync(join(ROOT, "docs", "api.md"), "utf8");
  const section = text.slice(text.indexOf("\n## Errors\n"), text.indexOf("\n## ", text.indexOf("\n## Errors\n") + 1));
  assert.ok(section.length > 100, "docs/api.md has its Errors section");
  return [...section.matchAll(/^\| (\d{3}) \| `([a-z_]+)` \|/gm)].map(([, status, code]) => `${status} ${code}`);
}

test("docs/api.md's error table lists exactly the codes of ERROR_CODES, each under its status", () => {
  const inSource = Object.entries(ERROR_CODES).flatMap(([status, codes]) => codes.map((code) => `${status} ${code}`));
  const documented = documentedCodes();
  assert.equal(new Set(documented).size, documented.length, "no code is listed twice");
  assert.deepEqual(
    inSource.filter((pair) => !documented.includes(pair)),
    [],
    "codes the service answers that the table does not list",
  );
  assert.deepEqual(
    documented.filter((pair) => !inSource.includes(pair)),
    [],
    "codes the table lists that the service never answers",
  );
});

test("every code the source raises or answers is one of ERROR_CODES, under the status it is raised with", () => {
  const known = new Map<string, string[]>();
  for (const [status, codes] of Object.entries(ERROR_CODES))
    for (const code of codes) known.set(code, [...(known.get(code) ?? []), status]);
  const found = new Map<string, Set<string>>();
  for (const file of sourceFiles("src")) {
    const text = readFileSync(join(ROOT, file), "utf8");
    for (const [, status, code] of text.matchAll(/new ApiError\(\s*(\d{3}),\s*"([a-z_]+)"/g)) {
      assert.ok(
        known.get(String(code))?.includes(String(status)),
        `${file}: ${status} ${code} is in ERROR_CODES under ${status}`,
      );
      found.set(String(code), (found.get(String(code)) ?? new Set()).add(file));
    }
    for (const [, code] of text.matchAll(/\bcode: "([a-z_]+)"/g)) {
      assert.ok(known.has(String(code)), `${file}: code "${code}" is in ERROR_CODES`);
      found.set(String(code), (found.get(String(code)) ?? new Set()).add(file));
    }
  }
  // The walk sees the raising code, not only the list: most codes are written at the place that refuses.
  assert.ok(found.size >= 25, `the source raises ${found.size} codes by literal`);
});

test("docs/api.md's History lists every administrator's action, and its Limits table bulk cancel's bounds", () => {
  const text = readFileSync(join(ROOT, "docs", "api.md"), "utf8");
  const historyRow = text.split("\n").find((line) => line.startsWith("| `admin` | `at`, `actor`, `role`, `action` |"));
  assert.ok(historyRow, "the History table has its admin row");
  for (const action of ADMIN_ACTIONS) assert.ok(historyRow.includes(`\`${action}\``), `History lists ${action}`);
  const limitsRow = text.split("\n").find((line) => line.startsWith("| bulk cancel"));
  assert.ok(limitsRow, "the Limits table has a bulk cancel row");
  assert.ok(limitsRow.includes(MAX_BULK_CANCEL.toLocaleString("en-US")), `bulk cancel's bound is ${MAX_BULK_CANCEL}`);
});

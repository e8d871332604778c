/**
 * The README is a newcomer's first page: it opens with the two commands, its status says what works in three lines
 * and leaves the figures to BENCHMARKS.md, and every file it links to exists.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const ROOT = new URL("../", import.meta.url);
const README = readFileSync(new URL("README.md", ROOT), "utf8");

test("the README opens with the two commands: npm install && npm start, npm install && npm test", () => {
  const firstBlock = /```sh\n([\s\S]*?)```/.exec(README)?.[1] ?? "";
  assert.match(firstBlock, /^npm install && npm start\b/m);
  assert.match(firstBlock, /^npm install && npm test\b/m);
  assert.ok(README.indexOf("```sh") < README.indexOf("\n## "), "before any section");
});

test("the status block is three lines that link to BENCHMARKS.md, without benchmark figures", () => {
  const lines = README.split("\n");
  const start = lines.findIndex((line) => line.startsWith("> **Status.**"));
  assert.ok(start >= 0, "the README has a status block");
  const end = lines.findIndex((line, index) => index > start && !line.startsWith(">"));
  const block = lines.slice(start, end);
  assert.ok(block.length <= 3, `the status block has ${block.length} lines`);
  const text = block.join(" ");
  assert.match(text, /\(BENCHMARKS\.md\)/);
  assert.doesNotMatch(text, /\d[\d,.]*\s*(jobs\/s|µs|ms|×)/, "figures belong to BENCHMARKS.md");
});

test("every relative link of the README names a file or folder of the repository", () => {
  const targets = [...README.matchAll(/\]\(([^)\s]+)\)/g)]
    .map((match) => (match[1] as string).split("#")[0] as string)
    .filter((target) => target !== "" && !/^[a-z]+:/.test(target));
  assert.ok(targets.length > 10);
  const missing = targets.filter((target) => !existsSync(fileURLToPath(new URL(target, ROOT))));
  assert.deepEqual(missing, []);
});

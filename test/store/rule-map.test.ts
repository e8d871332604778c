/**
 * docs/rules.md, the map of every rule both store engines implement, held against the code: every conformance case it
 * names is registered by the suite, every file it names exists and holds the names it gives for it, every rule says
 * where it lives on both engines and names a case, and its table gives, for every PL/pgSQL function, the last migration
 * that restates it. No database: every file is read as text. docs/rules.md's "Notation" says what is parsed.
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";

const ROOT = new URL("../../", import.meta.url);
const MAP = "docs/rules.md";
const CONFORMANCE_DIR = "test/store/conformance/";
const MIGRATIONS_DIR = "migrations/postgres/";
const FUNCTIONS_DIR = "migrations/postgres/current/functions/";

function read(path: string): string {
  return readFileSync(new URL(path, ROOT), "utf8");
}

/** A file the map names for a rule, and the names it says are found in it. */
interface Place {
  line: number;
  path: string;
  names: string[];
}

/** One rule of the map (a `###` section) as parsed. */
interface Rule {
  line: number;
  title: string;
  /** The labels of its place lines: SQLite, PostgreSQL, Shared. */
  labels: Set<string>;
  places: Place[];
  cases: Array<{ line: number; name: string }>;
}

/** A row of the table of PL/pgSQL functions. */
interface FunctionRow {
  line: number;
  name: string;
  migration: string;
}

const PLACE_LINE = /^- (SQLite|PostgreSQL|Shared):(.*)$/;
const CASES_LINE = /^- Pinned by:\s*$/;
const CASE_ITEM = /^ {2}- `([^`]+)`\s*$/;
const FUNCTION_ROW = /^\| `(opqueue_\w+)` \| `([^`]+)` \|\s*$/;

/** The rules of the map, the problems of its form, and its table of PL/pgSQL functions. */
function parseMap(text: string): { rules: Rule[]; functions: FunctionRow[]; problems: string[] } {
  const lines = text.split("\n");
  const rules: Rule[] = [];
  const functions: FunctionRow[] = [];
  const problems: string[] = [];
  let rule: Rule | undefined;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? "";
    const at = i + 1;
    const row = FUNCTION_ROW.exec(line);
    if (row) functions.push({ line: at, name: row[1] ?? "", migration: row[2] ?? "" });
    if (line.startsWith("#")) {
      rule = line.startsWith("### ")
        ? { line: at, title: line.slice(4), labels: new Set(), places: [], cases: [] }
        : undefined;
      if (rule) rules.push(rule);
      continue;
    }
    const place = PLACE_LINE.exec(line);
    if (place) {
      if (!rule) {
        problems.push(`${MAP}:${at}: a place line outside a rule`);
        continue;
      }
      rule.labels.add(place[1] ?? "");
      // The item goes on over the indented lines after it that are not cases.
      let item = place[2] ?? "";
      while (i + 1 < lines.length && /^ {2}\S/.test(lines[i + 1] ?? "") && !CASE_ITEM.test(lines[i + 1] ?? "")) {
        i += 1;
        item += ` ${lines[i]}`;
      }
      for (const group of item.split(";")) {
        const [path, ...names] = [...group.matchAll(/`([^`]+)`/g)].map((match) => match[1] ?? "");
        if (path === undefined || !path.includes("/")) {
          problems.push(`${MAP}:${at}: a place must start with a file path in backticks: "${group.trim()}"`);
          continue;
        }
        rule.places.push({ line: at, path, names });
      }
      continue;
    }
    if (CASES_LINE.test(line)) {
      if (!rule) {
        problems.push(`${MAP}:${at}: "Pinned by:" outside a rule`);
        continue;
      }
      while (i + 1 < lines.length && CASE_ITEM.test(lines[i + 1] ?? "")) {
        i += 1;
        rule.cases.push({ line: i + 1, name: CASE_ITEM.exec(lines[i] ?? "")?.[1] ?? "" });
      }
      continue;
    }
    // A misspelt label would hide its places from every check.
    if (rule && /^- [\w ]+:/.test(line))
      problems.push(`${MAP}:${at}: an item of a rule with an unknown label: ${line}`);
  }
  return { rules, functions, problems };
}

/**
 * Every case name the conformance suite registers (`suite.case` and `suite.bareCase`, the name on the same line or the
 * next), read from its source. Fails if a registration's name is not a plain string literal, which could not be read.
 */
function registeredCases(): Set<string> {
  const names = new Set<string>();
  for (const file of readdirSync(new URL(CONFORMANCE_DIR, ROOT)).filter((name) => name.endsWith(".ts"))) {
    const source = read(`${CONFORMANCE_DIR}${file}`);
    const calls = source.match(/\bsuite\.(?:case|bareCase)\(/g)?.length ?? 0;
    const literals = [...source.matchAll(/\bsuite\.(?:case|bareCase)\(\s*(["'])((?:\\.|(?!\1)[^\\\n])*)\1\s*,/g)];
    assert.equal(
      literals.length,
      calls,
      `${CONFORMANCE_DIR}${file}: every suite.case and suite.bareCase should name its case with a string literal`,
    );
    for (const literal of literals) names.add((literal[2] ?? "").replace(/\\(.)/g, "$1"));
  }
  return names;
}

/** Whether `name` occurs in `text` as a whole word (identifiers, SQL names). */
function mentions(text: string, name: string): boolean {
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  return new RegExp(`(?<![\\w$])${escaped}(?![\\w$])`).test(text);
}

const map = parseMap(read(MAP));

test("the rule map reads as its notation says, and every rule has places on both engines and a case", () => {
  const problems = [...map.problems];
  assert.ok(map.rules.length > 0, `${MAP} has no rules (### sections)`);
  for (const rule of map.rules) {
    for (const label of ["SQLite", "PostgreSQL"]) {
      if (!rule.labels.has(label)) problems.push(`${MAP}:${rule.line}: "${rule.title}" has no ${label}: line`);
    }
    if (rule.cases.length === 0) problems.push(`${MAP}:${rule.line}: "${rule.title}" names no case (Pinned by:)`);
  }
  assert.deepEqual(problems, []);
});

test("every conformance case the rule map names is registered by the suite", () => {
  const registered = registeredCases();
  assert.ok(registered.size > 0, `no cases found under ${CONFORMANCE_DIR}`);
  const missing = map.rules.flatMap((rule) =>
    rule.cases.filter((c) => !registered.has(c.name)).map((c) => `${MAP}:${c.line}: no case "${c.name}"`),
  );
  assert.deepEqual(missing, [], "each case must be named exactly as suite.case registers it");
});

test("every file the rule map names exists and holds the names it gives for it", () => {
  const problems: string[] = [];
  const texts = new Map<string, string | null>();
  const textOf = (path: string): string | null => {
    if (!texts.has(path)) texts.set(path, existsSync(new URL(path, ROOT)) ? read(path) : null);
    return texts.get(path) ?? null;
  };
  for (const place of map.rules.flatMap((rule) => rule.places)) {
    const text = textOf(place.path);
    if (text === null) {
      problems.push(`${MAP}:${place.line}: no file ${place.path}`);
      continue;
    }
    for (const name of place.names) {
      if (!mentions(text, name)) problems.push(`${MAP}:${place.line}: ${place.path} does not mention ${name}`);
    }
  }
  assert.deepEqual(problems, []);
});

test("the rule map's table gives every PL/pgSQL function and the last migration that restates it", () => {
  const problems: string[] = [];
  const migrations = readdirSync(new URL(MIGRATIONS_DIR, ROOT))
    .filter((name) => /^\d{4}_.*\.sql$/.test(name))
    .sort()
    .map((name) => ({ path: `${MIGRATIONS_DIR}${name}`, text: read(`${MIGRATIONS_DIR}${name}`) }));
  for (const row of map.functions) {
    const definition = new RegExp(`CREATE\\s+(?:OR\\s+REPLACE\\s+)?FUNCTION\\s+${row.name}\\s*\\(`, "i");
    const last = migrations.filter((migration) => definition.test(migration.text)).at(-1);
    if (last === undefined) problems.push(`${MAP}:${row.line}: no migration creates ${row.name}`);
    else if (last.path !== row.migration)
      problems.push(`${MAP}:${row.line}: ${row.name} was last restated by ${last.path}, not ${row.migration}`);
  }
  const current = readdirSync(new URL(FUNCTIONS_DIR, ROOT))
    .filter((name) => name.endsWith(".sql"))
    .map((name) => name.slice(0, -".sql".length))
    .sort();
  assert.deepEqual(
    map.functions.map((row) => row.name).sort(),
    current,
    `${MAP}'s table must list exactly the functions of ${FUNCTIONS_DIR}`,
  );
  assert.deepEqual(problems, []);
});

/**
 * docs/configuration.md is the reference of the configuration file; `ConfigSchema` (src/config/schema.ts) is what opqueue
 * accepts. These tests hold the two together, so that a key added, renamed or removed in the schema fails here until
 * the reference says so, and the reference can never document a key that does not exist.
 *
 * Notation, the same in the doc's tables and here: keys joined by `.`, `*` for any key of a map
 * (`operations.*.max_attempts`), `[]` for any item of a list (`cron[].name`).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parse as parseYaml } from "yaml";
import { ConfigSchema, parseConfig } from "../../src/config.js";
import { OperationRegistry } from "../../src/operations/registry.js";
import { checkConfigAgainstRegistry } from "../../src/schedules/config-entries.js";

const DOC_URL = new URL("../../docs/configuration.md", import.meta.url);
/** The folder the doc's example files are written for: `openapi: ./product.openapi.yaml` resolves there. */
const DEMO_DIR = fileURLToPath(new URL("../../examples/demo/", import.meta.url));

/** The parts of a JSON Schema (as TypeBox builds it) that say where keys are. */
interface SchemaNode {
  properties?: Record<string, SchemaNode>;
  patternProperties?: Record<string, SchemaNode>;
  additionalProperties?: boolean | SchemaNode;
  items?: SchemaNode;
  anyOf?: SchemaNode[];
}

/**
 * Every key path of `schema` below `prefix`: each object key (leaf or not), each map as `prefix.*`, each list's
 * items under `prefix[]`. Unions are walked branch by branch, so a key that only one branch has (`secret` of an HS256
 * key, `public_key` of an EdDSA one) is still found. A list item or a union is not a key itself: it adds no path.
 */
function schemaPaths(schema: SchemaNode, prefix = ""): Set<string> {
  const paths = new Set<string>();
  const add = (path: string, child: SchemaNode) => {
    paths.add(path);
    for (const below of schemaPaths(child, path)) paths.add(below);
  };
  for (const [key, child] of Object.entries(schema.properties ?? {}))
    add(prefix === "" ? key : `${prefix}.${key}`, child);
  // A map's values: TypeBox writes Type.Record as patternProperties; `additionalProperties: false` is no map.
  const mapValues = [
    ...Object.values(schema.patternProperties ?? {}),
    ...(typeof schema.additionalProperties === "object" ? [schema.additionalProperties] : []),
  ];
  for (const child of mapValues) add(`${prefix}.*`, child);
  if (schema.items) for (const below of schemaPaths(schema.items, `${prefix}[]`)) paths.add(below);
  for (const branch of schema.anyOf ?? []) for (const below of schemaPaths(branch, prefix)) paths.add(below);
  return paths;
}

/** The table cells of one Markdown row, trimmed (the outer pipes dropped). */
function cells(row: string): string[] {
  return row
    .trim()
    .replace(/^\|/, "")
    .replace(/\|$/, "")
    .split("|")
    .map((cell) => cell.trim());
}

/**
 * The key paths the doc documents: the first cell of every row of every table whose first column is headed `key`
 * (other tables, such as the environment's, head it otherwise). Such a cell must be one path in backticks.
 */
function documentedPaths(markdown: string): string[] {
  const paths: string[] = [];
  let inKeyTable = false;
  let header = true;
  for (const line of markdown.split("\n")) {
    if (!line.trimStart().startsWith("|")) {
      inKeyTable = false;
      header = true;
      continue;
    }
    const first = cells(line)[0] ?? "";
    if (header) {
      // A table's first line is its header; the next is the |---| separator.
      inKeyTable = first === "key";
      header = false;
      continue;
    }
    if (!inKeyTable || /^:?-+:?$/.test(first)) continue;
    const match = /^`([^`]+)`$/.exec(first);
    assert.ok(match, `docs/configuration.md: a row of a key table must start with one key in backticks: ${line}`);
    paths.push(match[1] as string);
  }
  return paths;
}

/** The YAML blocks of the doc: each is a whole configuration file. */
function yamlBlocks(markdown: string): string[] {
  return [...markdown.matchAll(/^```yaml\n([\s\S]*?)^```$/gm)].map((match) => match[1] as string);
}

const doc = readFileSync(DOC_URL, "utf8");
const inSchema = schemaPaths(ConfigSchema as SchemaNode);
const inDoc = documentedPaths(doc);

test("the walker finds keys of every shape in ConfigSchema", () => {
  // Guards the walker itself: were it to stop descending somewhere, the checks below would pass on too little.
  for (const path of [
    "listen.request_timeout_ms", // an object's key
    "triggers.*", // a map's values
    "operations.*.retry.base_ms", // keys below a map
    "cron[].name", // keys of a list's items
    "auth.keys[].secret_env", // a key of one branch of a union
    "auth.keys[].public_key", // ... and of the other
    "auth.delivery_key.private_key", // a union that is not in a list
    "retention.terminal_days", // a union of scalars, itself a leaf
  ]) {
    assert.ok(inSchema.has(path), `the walker missed ${path}`);
  }
  assert.ok(!inSchema.has("cron[]") && !inSchema.has("on_behalf_of[]"), "a list's items are not keys of their own");
});

test("docs/configuration.md documents every key of ConfigSchema", () => {
  const documented = new Set(inDoc);
  const missing = [...inSchema].filter((path) => !documented.has(path));
  assert.deepEqual(missing, [], `keys of ConfigSchema without a row in docs/configuration.md: ${missing.join(", ")}`);
});

test("every key docs/configuration.md documents exists in ConfigSchema, once", () => {
  const unknown = inDoc.filter((path) => !inSchema.has(path));
  assert.deepEqual(
    unknown,
    [],
    `rows of docs/configuration.md for keys ConfigSchema does not have: ${unknown.join(", ")}`,
  );
  const twice = inDoc.filter((path, index) => inDoc.indexOf(path) !== index);
  assert.deepEqual(twice, [], `keys documented twice: ${twice.join(", ")}`);
});

test("the example files of docs/configuration.md pass opqueue's start-up checks", () => {
  const blocks = yamlBlocks(doc);
  assert.ok(blocks.length >= 2, "the doc shows a minimal and a complete example");
  // The complete example reads its secrets and keys from the environment; parseConfig only checks they are set.
  const env = {
    OPQUEUE_ENQUEUE_SECRET: "a".repeat(32),
    OPQUEUE_ADMIN_ISSUER_KEY: "(a PEM public key)",
    OPQUEUE_DELIVERY_KEY: "(a PEM private key)",
  };
  for (const block of blocks) {
    const config = parseConfig({ raw: parseYaml(block), baseDir: DEMO_DIR, env });
    checkConfigAgainstRegistry({ config, registry: OperationRegistry.fromFile(config.openapi) });
  }
});

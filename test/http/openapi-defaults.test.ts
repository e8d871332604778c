/**
 * The served OpenAPI document marks no defaulted field as required: a field the docs and the configuration give a
 * default may be left out, so a request schema that requires it refuses what the docs promise (issue 29, item 6). The
 * walk covers every request body and parameter of every route, through every nested object, union and array.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { startTestService } from "../helpers/service.js";

type SchemaNode = Record<string, unknown>;

/** The places under `schema` (an OpenAPI schema, its `$ref`s resolved in `doc`) where a required property has a default. */
function requiredDefaults(schema: unknown, at: string, doc: SchemaNode, seen = new Set<unknown>()): string[] {
  if (schema === null || typeof schema !== "object" || seen.has(schema)) return [];
  seen.add(schema);
  const node = schema as SchemaNode;
  const found: string[] = [];
  if (typeof node["$ref"] === "string") {
    const target = node["$ref"]
      .replace(/^#\//, "")
      .split("/")
      .reduce<unknown>((part, key) => (part as SchemaNode | undefined)?.[key], doc);
    assert.ok(target !== undefined, `${at}: $ref ${node["$ref"]} resolves`);
    found.push(...requiredDefaults(target, at, doc, seen));
  }
  const properties = (node["properties"] ?? {}) as Record<string, SchemaNode>;
  const required = new Set((node["required"] ?? []) as string[]);
  for (const [name, property] of Object.entries(properties)) {
    if (required.has(name) && property["default"] !== undefined)
      found.push(`${at}.${name} (default ${JSON.stringify(property["default"])})`);
    found.push(...requiredDefaults(property, `${at}.${name}`, doc, seen));
  }
  for (const key of ["anyOf", "oneOf", "allOf", "prefixItems"]) {
    const list = node[key];
    if (Array.isArray(list))
      list.forEach((item, index) => found.push(...requiredDefaults(item, `${at}.${key}[${index}]`, doc, seen)));
  }
  for (const key of ["items", "additionalProperties", "not"])
    found.push(...requiredDefaults(node[key], `${at}.${key}`, doc, seen));
  return found;
}

test("the served OpenAPI document requires no request field or parameter that has a default", async (t) => {
  const s = await startTestService();
  t.after(() => s.close());
  const res = await s.inject({ method: "GET", url: "/openapi.json" });
  assert.equal(res.statusCode, 200);
  const doc = res.json() as SchemaNode & { paths: Record<string, Record<string, SchemaNode>> };

  const found: string[] = [];
  let bodies = 0;
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, operation] of Object.entries(item)) {
      if (typeof operation !== "object" || operation === null || !("responses" in operation)) continue;
      const where = `${method.toUpperCase()} ${path}`;
      for (const parameter of (operation["parameters"] ?? []) as SchemaNode[]) {
        const schema = parameter["schema"] as SchemaNode | undefined;
        if (parameter["required"] === true && schema?.["default"] !== undefined) {
          found.push(`${where} ${String(parameter["in"])} parameter ${String(parameter["name"])}`);
        }
        found.push(
          ...requiredDefaults(schema, `${where} ${String(parameter["in"])} ${String(parameter["name"])}`, doc),
        );
      }
      const content = ((operation["requestBody"] as SchemaNode | undefined)?.["content"] ?? {}) as Record<
        string,
        SchemaNode
      >;
      for (const [type, media] of Object.entries(content)) {
        bodies += 1;
        found.push(...requiredDefaults(media["schema"], `${where} body (${type})`, doc));
      }
    }
  }
  assert.ok(bodies >= 10, `the walk saw the request bodies (${bodies})`);
  assert.deepEqual(found, [], "defaulted fields marked required");
});

test("PATCH /operations/{id}/limits takes a rate without period_ms, which defaults to 1000, as docs/flow-control.md says", async (t) => {
  const s = await startTestService();
  t.after(() => s.close());
  const token = await s.adminToken();
  const res = await s.inject({
    method: "PATCH",
    url: "/operations/sendWelcomeEmail/limits",
    token,
    payload: { rate: { limit: 9 }, rate_per_key: { limit: 2, burst: 4 } },
  });
  assert.equal(res.statusCode, 200, res.body);
  const limits = (res.json() as { operation: { limits: Record<string, unknown> } }).operation.limits;
  assert.deepEqual(limits["rate"], { limit: 9, period_ms: 1000, burst: 9 });
  assert.deepEqual(limits["rate_per_key"], { limit: 2, period_ms: 1000, burst: 4 });
});

/**
 * The request schemas of step 4a (src/operations/request-schemas.ts) without a service: how each part of a request is
 * read against an OpenAPI document's declarations, where a literal JSON Schema reading would refuse what the target
 * accepts, and which operations get no check at all. test/http/enqueue-request-schemas.test.ts covers the HTTP side.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { parse as parseYaml } from "yaml";
import { parseConfig } from "../../src/config.js";
import { OperationRegistry } from "../../src/operations/registry.js";
import { RequestSchemas, type RequestSchema } from "../../src/operations/request-schemas.js";
import { PerOperationSettings } from "../../src/operations/settings.js";

/** The request schemas of a document whose every operation is a background one; `operations` as in the config. */
function compile(yaml: string, operations: Record<string, unknown> = {}): RequestSchemas {
  const config = parseConfig({
    raw: {
      openapi: "/unused.yaml",
      target: { base_url: "http://127.0.0.1:9", audience: "product" },
      auth: {
        keys: [{ kid: "k1", alg: "HS256", secret: "a".repeat(32) }],
        delivery_key: { kid: "q1", alg: "HS256", secret: "b".repeat(32) },
      },
      operations,
    },
    baseDir: "/",
  });
  const registry = OperationRegistry.fromDocument(parseYaml(yaml));
  return RequestSchemas.compile({ registry, settings: new PerOperationSettings(config) });
}

/** A 3.1 document of one background operation `op` at POST /things/{id}, with `operation` laid into it. */
function oneOperation(operation: string, components = "{}"): string {
  return `
openapi: "3.1.0"
info: { title: t, version: "1" }
paths:
  /things/{id}:
    post:
      operationId: op
      tags: [background]
${operation.replace(/^/gm, "      ")}
components: ${components}
`;
}

function schemaOf(schemas: RequestSchemas, operationId = "op"): RequestSchema {
  const schema = schemas.get(operationId);
  assert.ok(schema, `${operationId} has checks`);
  return schema;
}

describe("which operations are checked", () => {
  it("compiles nothing for an operation that declares nothing, or opts out, or is not a background one", () => {
    const schemas = compile(
      `
openapi: "3.1.0"
info: { title: t, version: "1" }
paths:
  /a: { post: { operationId: bare, tags: [background] } }
  /b:
    post:
      operationId: optedOut
      tags: [background]
      requestBody: { required: true, content: { application/json: { schema: { type: object } } } }
  /c:
    post:
      operationId: foreground
      requestBody: { required: true, content: { application/json: { schema: { type: object } } } }
  /d:
    post:
      operationId: headersOnly
      tags: [background]
      parameters: [{ name: x-trace, in: header, required: true, schema: { type: string } }]
`,
      { optedOut: { validate_request: false } },
    );
    for (const operationId of ["bare", "optedOut", "foreground", "headersOnly"])
      assert.equal(schemas.get(operationId), undefined, operationId);
    assert.deepEqual(schemas.warnings, []);
  });

  it("warns once per operation whose schemas cannot be compiled, and checks the others", () => {
    const schemas = compile(`
openapi: "3.0.3"
info: { title: t, version: "1" }
paths:
  /a:
    post:
      operationId: fileUpload
      tags: [background]
      requestBody: { content: { application/json: { schema: { type: file } } } }
  /b:
    post:
      operationId: badPattern
      tags: [background]
      parameters: [{ name: q, in: query, schema: { type: string, pattern: "([" } }]
  /c:
    post:
      operationId: fine
      tags: [background]
      parameters: [{ name: q, in: query, required: true, schema: { type: string } }]
`);
    assert.equal(schemas.warnings.length, 2, schemas.warnings.join("\n"));
    assert.match(
      schemas.warnings[0] ?? "",
      /^openapi: operation "fileUpload": requests are not checked against its schemas: cannot compile #\/paths\/~1a\/post\/requestBody/,
    );
    assert.match(schemas.warnings[1] ?? "", /operation "badPattern"/);
    assert.equal(schemas.get("fileUpload"), undefined);
    assert.ok(schemaOf(schemas, "fine").problem({}));
  });
});

describe("the body", () => {
  it("takes the schema of the JSON media type, parameters and +json types included", () => {
    const schemas = compile(
      oneOperation(`
parameters: [{ name: id, in: path, required: true }]
requestBody:
  content:
    text/plain: { schema: { type: string } }
    application/merge-patch+json; charset=utf-8: { schema: { type: object } }`),
    );
    assert.equal(schemaOf(schemas).problem({ body: {} }), undefined);
    assert.match(schemaOf(schemas).problem({ body: "text" }) ?? "", /^\/request\/body: must be object/);
  });

  it("checks only the presence of a body whose media types hold no JSON one", () => {
    const schemas = compile(
      oneOperation(`requestBody: { required: true, content: { multipart/form-data: { schema: { type: object } } } }`),
    );
    assert.equal(schemaOf(schemas).problem({ body: "anything" }), undefined);
    assert.match(schemaOf(schemas).problem({}) ?? "", /^\/request\/body: is required/);
  });

  it("ignores formats it does not know, and OpenAPI's own keywords", () => {
    const schemas = compile(
      oneOperation(`
requestBody:
  content:
    application/json:
      schema:
        type: object
        properties:
          phone: { type: string, format: phone, example: "+1 555", deprecated: true, xml: { name: tel } }
        externalDocs: { url: "https://example.com" }`),
    );
    assert.equal(schemaOf(schemas).problem({ body: { phone: "call me" } }), undefined);
  });

  it("reads oneOf beside a discriminator as anyOf, as alternatives may overlap", () => {
    const schemas = compile(
      oneOperation(
        `
requestBody:
  content:
    application/json:
      schema:
        oneOf: [{ $ref: "#/components/schemas/Cat" }, { $ref: "#/components/schemas/Pet" }]
        discriminator: { propertyName: kind }`,
        `{ schemas: { Pet: { type: object, required: [kind] }, Cat: { type: object, required: [kind], properties: { kind: { const: cat } } } } }`,
      ),
    );
    assert.equal(schemaOf(schemas).problem({ body: { kind: "cat" } }), undefined);
    assert.match(
      schemaOf(schemas).problem({ body: {} }) ?? "",
      /^\/request\/body\/kind: is required \(none of the alternatives matches\)/,
    );
  });

  it("does not take an inherited property for a required one", () => {
    const schemas = compile(
      oneOperation(`requestBody: { content: { application/json: { schema: { required: [toString] } } } }`),
    );
    assert.match(schemaOf(schemas).problem({ body: {} }) ?? "", /^\/request\/body\/toString: is required/);
  });

  it("still checks a pattern that only parses without Unicode mode", () => {
    const schemas = compile(
      oneOperation(
        `requestBody: { content: { application/json: { schema: { type: string, pattern: "^[a-z\\\\_]+$" } } } }`,
      ),
    );
    assert.deepEqual(schemas.warnings, []);
    assert.equal(schemaOf(schemas).problem({ body: "snake_case" }), undefined);
    assert.match(schemaOf(schemas).problem({ body: "Camel" }) ?? "", /must match the pattern/);
  });

  it("ends on a schema a YAML alias makes contain itself", () => {
    const schemas = compile(
      oneOperation(`
requestBody:
  content:
    application/json:
      schema: &node { type: object, properties: { n: { type: integer }, next: *node } }`),
    );
    assert.match(schemaOf(schemas).problem({ body: { n: "x" } }) ?? "", /^\/request\/body\/n: must be integer/);
  });
});

describe("parameters", () => {
  it("reads a path parameter as the text delivery sends, a text with commas as a simple-style array too", () => {
    const schemas = compile(
      oneOperation(
        `parameters: [{ name: id, in: path, required: true, schema: { type: array, items: { type: integer } } }]`,
      ),
    );
    const schema = schemaOf(schemas);
    assert.equal(schema.problem({ path_params: { id: [1, 2] } }), undefined);
    assert.equal(schema.problem({ path_params: { id: "3,4" } }), undefined);
    assert.equal(schema.problem({ path_params: { id: 5 } }), undefined);
    assert.match(schema.problem({ path_params: { id: "5,x" } }) ?? "", /^\/request\/path_params\/id/);
  });

  it("reads a query object as itself, else as the JSON text it is sent as", () => {
    const schemas = compile(
      oneOperation(`
parameters:
  - { name: filter, in: query, schema: { type: object, required: [a] } }
  - { name: raw, in: query, schema: { type: string } }`),
    );
    const schema = schemaOf(schemas);
    assert.equal(schema.problem({ query: { filter: { a: 1 }, raw: { any: "thing" } } }), undefined);
    assert.match(schema.problem({ query: { filter: { b: 1 } } }) ?? "", /^\/request\/query\/filter\/a: is required/);
  });

  it("checks only the presence of a parameter described by content or in a style delivery does not write", () => {
    const schemas = compile(
      oneOperation(`
parameters:
  - { name: ids, in: query, required: true, style: pipeDelimited, schema: { type: array, items: { type: integer } } }
  - { name: where, in: query, content: { application/json: { schema: { type: object } } } }`),
    );
    const schema = schemaOf(schemas);
    assert.equal(schema.problem({ query: { ids: "1|2", where: "text" } }), undefined);
    assert.match(schema.problem({ query: { where: {} } }) ?? "", /^\/request\/query\/ids: is required/);
  });

  it("lets the operation's parameter override the path item's of the same name and location", () => {
    const schemas = compile(`
openapi: "3.1.0"
info: { title: t, version: "1" }
paths:
  /things:
    parameters: [{ name: n, in: query, required: true, schema: { type: integer } }]
    post:
      operationId: op
      tags: [background]
      parameters: [{ name: n, in: query, schema: { type: string } }]
`);
    assert.equal(schemaOf(schemas).problem({ query: { n: "text" } }), undefined);
    assert.equal(schemaOf(schemas).problem({}), undefined);
  });
});

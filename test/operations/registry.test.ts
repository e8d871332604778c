import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ConfigError, parseConfig, type Config } from "../../src/config.js";
import { OperationRegistry } from "../../src/operations/registry.js";
import { checkConfigAgainstRegistry } from "../../src/schedules/config-entries.js";

const tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), "opqueue-registry-"));
after(() => fs.rmSync(tmpDir, { recursive: true, force: true }));

function writeTemp(name: string, text: string): string {
  const file = path.join(tmpDir, name);
  fs.writeFileSync(file, text);
  return file;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** Asserts that `fn` throws a ConfigError whose message matches every pattern. */
function assertConfigError(fn: () => unknown, ...patterns: RegExp[]): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof ConfigError, `expected a ConfigError, got ${String(error)}`);
    for (const pattern of patterns) assert.match(error.message, pattern);
    return true;
  });
}

const YAML_30 = `
openapi: 3.0.3
info: { title: product, version: "1" }
paths:
  /users:
    parameters:
      - { name: trace, in: header, schema: { type: string } }
    post:
      operationId: createUser
      tags: [users]
      responses: { "201": { description: created } }
    get:
      summary: no operationId, so it cannot be enqueued
      responses: { "200": { description: ok } }
  /users/{userId}/emails/{emailId}:
    put:
      operationId: sendWelcomeEmail
      tags: [emails, background]
      responses: { "204": { description: sent } }
  x-internal: { note: an extension, not a path }
`;

const JSON_31 = JSON.stringify({
  openapi: "3.1.0",
  info: { title: "product", version: "1" },
  paths: {
    "/reports": {
      post: { operationId: "buildReport", tags: ["background"], responses: { "202": { description: "queued" } } },
    },
  },
});

/** A minimal valid document with the given paths. */
function doc(paths: Record<string, unknown>, components: Record<string, unknown> = {}): unknown {
  return { openapi: "3.1.0", info: { title: "t", version: "1" }, paths, components };
}

describe("OperationRegistry.fromFile", () => {
  it("indexes the operations of a YAML OpenAPI 3.0 document by operationId", () => {
    const registry = OperationRegistry.fromFile(writeTemp("product.yaml", YAML_30));
    assert.deepEqual(registry.get("sendWelcomeEmail"), {
      operationId: "sendWelcomeEmail",
      method: "PUT",
      path: "/users/{userId}/emails/{emailId}",
      pathParams: ["userId", "emailId"],
      tags: ["emails", "background"],
      background: true,
    });
    assert.deepEqual(registry.get("createUser"), {
      operationId: "createUser",
      method: "POST",
      path: "/users",
      pathParams: [],
      tags: ["users"],
      background: false,
    });
  });

  it("skips operations without an operationId and ignores extension keys", () => {
    const registry = OperationRegistry.fromFile(writeTemp("skip.yaml", YAML_30));
    assert.deepEqual(
      registry.all().map((op) => `${op.method} ${op.path}`),
      ["POST /users", "PUT /users/{userId}/emails/{emailId}"],
    );
  });

  it("reads a JSON OpenAPI 3.1 document", () => {
    const registry = OperationRegistry.fromFile(writeTemp("product.json", JSON_31));
    assert.equal(registry.get("buildReport")?.method, "POST");
    assert.equal(registry.get("buildReport")?.background, true);
    assert.equal(registry.get("createUser"), undefined);
  });

  it("throws a ConfigError naming a file that cannot be read", () => {
    const missing = path.join(tmpDir, "nope.yaml");
    assertConfigError(() => OperationRegistry.fromFile(missing), /cannot read/, new RegExp(escapeRegExp(missing)));
  });

  it("throws a ConfigError naming a file that is neither YAML nor JSON", () => {
    const file = writeTemp("broken.yaml", "openapi: [3.1.0\npaths: {");
    assertConfigError(() => OperationRegistry.fromFile(file), /not valid YAML or JSON/, /broken\.yaml/);
  });

  it("throws a ConfigError naming a YAML file that is not an OpenAPI document", () => {
    const file = writeTemp("other.yaml", "name: just some config\nvalues: [1, 2]\n");
    assertConfigError(() => OperationRegistry.fromFile(file), /other\.yaml/, /not an OpenAPI document/);
  });

  it("throws a ConfigError for a plain-text file", () => {
    const file = writeTemp("notes.txt", "hello world\n");
    assertConfigError(() => OperationRegistry.fromFile(file), /notes\.txt/, /not an OpenAPI document/);
  });
});

describe("OperationRegistry.fromDocument validation", () => {
  it("accepts every HTTP method and upper-cases it", () => {
    const methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
    const item = Object.fromEntries(methods.map((m) => [m, { operationId: `op_${m}` }]));
    const registry = OperationRegistry.fromDocument(doc({ "/x": item }));
    assert.deepEqual(
      registry.all().map((op) => op.method),
      methods.map((m) => m.toUpperCase()),
    );
  });

  it("rejects a Swagger 2.0 document", () => {
    assertConfigError(
      () => OperationRegistry.fromDocument({ swagger: "2.0", paths: {} }, "s.yaml"),
      /s\.yaml/,
      /Swagger 2\.0/,
    );
  });

  it("rejects an unsupported openapi version", () => {
    assertConfigError(
      () => OperationRegistry.fromDocument({ openapi: "3.2.0", paths: {} }),
      /3\.2\.0/,
      /not supported/,
    );
    assertConfigError(() => OperationRegistry.fromDocument({ openapi: "3.10.0", paths: {} }), /not supported/);
  });

  it("rejects an openapi version written as a YAML number, saying to quote it", () => {
    assertConfigError(() => OperationRegistry.fromDocument({ openapi: 3.1, paths: {} }), /quote it/);
  });

  it("rejects a document without a paths object", () => {
    assertConfigError(() => OperationRegistry.fromDocument({ openapi: "3.0.0" }), /paths: must be an object/);
  });

  it("rejects a document that is not an object", () => {
    assertConfigError(() => OperationRegistry.fromDocument(["openapi"]), /not an OpenAPI document/);
  });

  it("rejects a path that does not start with a slash", () => {
    assertConfigError(
      () => OperationRegistry.fromDocument(doc({ users: { get: { operationId: "a" } } })),
      /must start with "\/"/,
    );
  });

  it("rejects duplicate operationIds, naming both operations", () => {
    const document = doc({
      "/a": { get: { operationId: "same" } },
      "/b": { post: { operationId: "same" } },
    });
    assertConfigError(
      () => OperationRegistry.fromDocument(document, "dup.yaml"),
      /dup\.yaml/,
      /"same" is used twice/,
      /GET \/a/,
      /POST \/b/,
    );
  });

  it("rejects an operationId that is not a non-empty string", () => {
    assertConfigError(
      () => OperationRegistry.fromDocument(doc({ "/a": { get: { operationId: 7 } } })),
      /operationId: must be a non-empty string/,
    );
    assertConfigError(
      () => OperationRegistry.fromDocument(doc({ "/a": { get: { operationId: null } } })),
      /non-empty string/,
    );
  });

  it("rejects tags that are not a list of strings", () => {
    assertConfigError(
      () => OperationRegistry.fromDocument(doc({ "/a": { get: { operationId: "a", tags: "background" } } })),
      /tags: must be a list of strings/,
    );
  });
});

describe("OperationRegistry $ref resolution", () => {
  it("follows a $ref to a path item, and a chain of component refs", () => {
    const document = doc(
      { "/users/{userId}": { $ref: "#/components/pathItems/UserAlias" } },
      {
        pathItems: {
          UserAlias: { $ref: "#/components/pathItems/User" },
          User: {
            parameters: [{ $ref: "#/components/parameters/UserId" }],
            delete: {
              operationId: "deleteUser",
              tags: ["background"],
              parameters: [{ $ref: "#/components/parameters/Verbose" }],
            },
          },
        },
        parameters: {
          UserId: { $ref: "#/components/parameters/BaseId" },
          BaseId: { name: "userId", in: "path", required: true },
          Verbose: { name: "verbose", in: "query" },
        },
      },
    );
    const registry = OperationRegistry.fromDocument(document);
    assert.deepEqual(registry.get("deleteUser"), {
      operationId: "deleteUser",
      method: "DELETE",
      path: "/users/{userId}",
      pathParams: ["userId"],
      tags: ["background"],
      background: true,
    });
  });

  it("follows path-item refs written in a YAML file, decoding ~1 in JSON pointers", () => {
    const file = writeTemp(
      "refs.yaml",
      `
openapi: 3.1.0
info: { title: t, version: "1" }
paths:
  /a/{id}:
    $ref: "#/components/pathItems/a~1b"
components:
  pathItems:
    a/b:
      get: { operationId: readA, tags: [background] }
`,
    );
    assert.equal(OperationRegistry.fromFile(file).get("readA")?.path, "/a/{id}");
  });

  it("lays fields beside a path-item $ref over the referenced item", () => {
    const document = doc(
      { "/a": { $ref: "#/components/pathItems/A", post: { operationId: "localPost" } } },
      { pathItems: { A: { get: { operationId: "sharedGet" } } } },
    );
    const registry = OperationRegistry.fromDocument(document);
    assert.deepEqual(
      registry
        .all()
        .map((op) => op.operationId)
        .sort(),
      ["localPost", "sharedGet"],
    );
  });

  it("reports a $ref cycle between path items instead of overflowing the stack", () => {
    const document = doc(
      { "/a": { $ref: "#/components/pathItems/A" } },
      { pathItems: { A: { $ref: "#/components/pathItems/B" }, B: { $ref: "#/components/pathItems/A" } } },
    );
    assertConfigError(
      () => OperationRegistry.fromDocument(document, "cycle.yaml"),
      /cycle\.yaml/,
      /\$ref cycle/,
      /pathItems\/A -> #\/components\/pathItems\/B -> #\/components\/pathItems\/A/,
    );
  });

  it("reports a parameter that refers to itself as a $ref cycle", () => {
    const document = doc(
      { "/a": { get: { operationId: "a", parameters: [{ $ref: "#/components/parameters/P" }] } } },
      { parameters: { P: { $ref: "#/components/parameters/P" } } },
    );
    assertConfigError(
      () => OperationRegistry.fromDocument(document),
      /paths\["\/a"\]\.get\.parameters\.0/,
      /\$ref cycle/,
    );
  });

  it("reports a $ref to a missing component, naming the ref", () => {
    const document = doc({ "/a": { $ref: "#/components/pathItems/Missing" } }, { pathItems: {} });
    assertConfigError(
      () => OperationRegistry.fromDocument(document),
      /"#\/components\/pathItems\/Missing" does not resolve/,
      /no "Missing" in #\/components\/pathItems/,
    );
  });

  it("does not resolve refs through inherited properties", () => {
    const document = doc({ "/a": { $ref: "#/components/constructor" } });
    assertConfigError(() => OperationRegistry.fromDocument(document), /does not resolve/);
  });

  it("reports a non-local $ref as unsupported", () => {
    const document = doc({ "/a": { $ref: "./other.yaml#/paths/~1a" } });
    assertConfigError(() => OperationRegistry.fromDocument(document), /points outside this document/, /bundle/);
  });

  it("reports a $ref that resolves to something other than a path item", () => {
    const document = doc({ "/a": { $ref: "#/info/title" } });
    assertConfigError(() => OperationRegistry.fromDocument(document), /must be a path item object/);
  });

  it("leaves recursive schemas alone, since they are legal OpenAPI", () => {
    const document = doc(
      { "/tree": { post: { operationId: "saveTree", requestBody: { $ref: "#/components/requestBodies/Tree" } } } },
      {
        requestBodies: { Tree: { content: { "application/json": { schema: { $ref: "#/components/schemas/Node" } } } } },
        schemas: {
          Node: {
            type: "object",
            properties: { children: { type: "array", items: { $ref: "#/components/schemas/Node" } } },
          },
        },
      },
    );
    assert.equal(OperationRegistry.fromDocument(document).get("saveTree")?.method, "POST");
  });
});

/** The document of the product the cross-check tests run against. */
const PRODUCT = OperationRegistry.fromDocument(
  doc({
    "/users": { post: { operationId: "createUser", tags: ["users"] } },
    "/imports": { post: { operationId: "importUsers", tags: ["users"] } },
    "/users/{userId}/emails": { post: { operationId: "sendWelcomeEmail", tags: ["background"] } },
    "/emails/sent": { post: { operationId: "recordEmailSent", tags: ["background", "emails"] } },
    "/reports": { post: { operationId: "buildReport", tags: ["background"] } },
  }),
  "product.yaml",
);

const CRON_NIGHTLY = {
  name: "nightly",
  schedule: "0 3 * * *",
  timezone: "UTC",
  operation_id: "buildReport",
  user_id: "system",
};

/** A valid config for PRODUCT, with top-level keys replaced by `overrides`. */
function configWith(overrides: Record<string, unknown> = {}): Config {
  return parseConfig({
    raw: {
      openapi: "./product.yaml",
      target: { base_url: "http://127.0.0.1:3000", audience: "product" },
      auth: {
        keys: [{ kid: "k1", alg: "HS256", secret: "a".repeat(32) }],
        delivery_key: { kid: "q1", alg: "HS256", secret: "b".repeat(32) },
      },
      triggers: {
        createUser: ["sendWelcomeEmail"],
        sendWelcomeEmail: ["recordEmailSent"],
        "cron:nightly": ["buildReport"],
      },
      on_behalf_of: ["importUsers"],
      operations: { sendWelcomeEmail: { max_attempts: 8 } },
      cron: [CRON_NIGHTLY],
      ...overrides,
    },
    baseDir: tmpDir,
  });
}

function check(overrides: Record<string, unknown> = {}): { warnings: string[] } {
  return checkConfigAgainstRegistry({ config: configWith(overrides), registry: PRODUCT });
}

describe("checkConfigAgainstRegistry errors", () => {
  it("accepts a consistent config without warnings", () => {
    assert.deepEqual(check(), { warnings: [] });
  });

  it("rejects a trigger target that is not an operation of the document", () => {
    assertConfigError(
      () => check({ triggers: { createUser: ["sendX"], "cron:nightly": ["buildReport"] } }),
      /^config: triggers\.createUser: target "sendX" is not an operation of the OpenAPI document$/,
    );
  });

  it("rejects a trigger target without the background tag", () => {
    assertConfigError(
      () => check({ triggers: { importUsers: ["createUser"], "cron:nightly": ["buildReport"] } }),
      /^config: triggers\.importUsers: target "createUser"/,
      /lacks the "background" tag/,
    );
  });

  it("rejects a cron entry whose request lacks a path parameter of its target, or has one that would reach another route", () => {
    const nightlyWelcome = { ...CRON_NIGHTLY, operation_id: "sendWelcomeEmail" };
    const triggers = { "cron:nightly": ["sendWelcomeEmail"] };
    assertConfigError(
      () => check({ cron: [{ ...nightlyWelcome, request: {} }], triggers }),
      /^config: cron\.0\.request: request\.path_params lacks "userId"/,
    );
    assertConfigError(
      () => check({ cron: [{ ...nightlyWelcome, request: { path_params: { userId: ".." } } }], triggers }),
      /^config: cron\.0\.request: request\.path_params\.userId is "\.\."/,
    );
    assert.deepEqual(
      check({ cron: [{ ...nightlyWelcome, request: { path_params: { userId: "system" } } }], triggers }),
      {
        warnings: [],
      },
    );
  });

  it("rejects a cron entry whose request is larger than an enqueued one may be", () => {
    assertConfigError(
      () => check({ cron: [{ ...CRON_NIGHTLY, request: { body: "x".repeat(17_000) } }] }),
      /^config: cron\.0\.request: the request payload is \d+ bytes of JSON; at most 16384/,
    );
  });

  it("rejects a cron operation_id that is not an operation of the document", () => {
    assertConfigError(
      () =>
        check({ cron: [{ ...CRON_NIGHTLY, operation_id: "buildX" }], triggers: { "cron:nightly": ["buildReport"] } }),
      /^config: cron\.0\.operation_id: "buildX" \(cron entry "nightly"\) is not an operation of the OpenAPI document$/,
    );
  });

  it("rejects a cron operation_id without the background tag", () => {
    assertConfigError(
      () =>
        check({
          cron: [{ ...CRON_NIGHTLY, operation_id: "createUser" }],
          triggers: { "cron:nightly": ["buildReport"] },
        }),
      /^config: cron\.0\.operation_id: /,
      /lacks the "background" tag/,
    );
  });

  it("rejects a cron entry whose name has no cron:{name} key in triggers", () => {
    assertConfigError(
      () => check({ triggers: { createUser: ["sendWelcomeEmail"] } }),
      /^config: cron\.0\.name: cron entry "nightly" has no "cron:nightly" key in triggers/,
    );
  });

  it("rejects a cron entry whose operation_id its trigger-map entry does not allow", () => {
    assertConfigError(
      () => check({ triggers: { "cron:nightly": ["recordEmailSent"] } }),
      /^config: cron\.0\.operation_id: "buildReport" is not allowed by triggers\."cron:nightly"/,
    );
  });

  it("rejects two cron entries with the same name", () => {
    assertConfigError(
      () => check({ cron: [CRON_NIGHTLY, { ...CRON_NIGHTLY, schedule: "0 4 * * *" }] }),
      /^config: cron\.1\.name: "nightly" is already the name of cron\.0/,
    );
  });

  it("rejects a cron schedule that croner cannot parse", () => {
    assertConfigError(
      () => check({ cron: [{ ...CRON_NIGHTLY, schedule: "61 * * * *" }] }),
      /^config: cron\.0\.schedule: "61 \* \* \* \*" is not a valid cron expression/,
    );
  });

  it("rejects a cron schedule with fewer than 5 or more than 6 fields", () => {
    for (const schedule of ["0 3 * *", "0 0 3 * * * 2026", "@daily"]) {
      assertConfigError(
        () => check({ cron: [{ ...CRON_NIGHTLY, schedule }] }),
        /^config: cron\.0\.schedule: /,
        /5 or 6 space-separated fields/,
      );
    }
  });

  it("accepts a 6-field schedule with seconds and a non-UTC zone", () => {
    assert.deepEqual(check({ cron: [{ ...CRON_NIGHTLY, schedule: "30 0 3 * * 1-5", timezone: "Europe/Paris" }] }), {
      warnings: [],
    });
  });

  it("rejects a timezone that is not an IANA zone", () => {
    for (const timezone of ["Nope/Zone", "+01:00"]) {
      assertConfigError(
        () => check({ cron: [{ ...CRON_NIGHTLY, timezone }] }),
        new RegExp(`^config: cron\\.0\\.timezone: "${escapeRegExp(timezone)}" is not a valid IANA time zone`),
      );
    }
  });
});

describe("checkConfigAgainstRegistry warnings", () => {
  it("warns about a trigger-map key that is neither an operation nor a configured cron entry", () => {
    const { warnings } = check({
      triggers: {
        createUser: ["sendWelcomeEmail"],
        ghostCaller: ["recordEmailSent"],
        "cron:weekly": ["buildReport"],
        "cron:nightly": ["buildReport"],
      },
    });
    assert.equal(warnings.length, 2);
    assert.match(warnings[0] ?? "", /^config: triggers\.ghostCaller: "ghostCaller" is neither an operation/);
    assert.match(warnings[1] ?? "", /^config: triggers\.cron:weekly: /);
  });

  it("warns about an operations override naming no operation", () => {
    const { warnings } = check({
      operations: { sendWelcomeEmail: { max_attempts: 8 }, sendWelcomEmail: { timeout_ms: 10 } },
    });
    assert.deepEqual(warnings, [
      'config: operations.sendWelcomEmail: names no operation of the OpenAPI document (did you mean "sendWelcomeEmail"?); ' +
        "the override is unused",
    ]);
  });

  it("warns about an on_behalf_of entry naming no operation", () => {
    const { warnings } = check({ on_behalf_of: ["importUsers", "importUsrs"] });
    assert.deepEqual(warnings, [
      'config: on_behalf_of.1: "importUsrs" names no operation of the OpenAPI document (did you mean "importUsers"?)',
    ]);
  });
});

/**
 * The product's OpenAPI document, reduced to what opqueue needs: every operation by operationId, with its
 * method, path template and tags. Also the start-up check of the config's names of operations against it
 * (docs/configuration.md); the check of the config's cron entries is schedules/config-entries.ts.
 *
 * `$ref`s are followed only where the registry reads: path items, operations and their parameters. The rest of
 * the document (schemas above all) is never walked, so a legitimately recursive schema is not mistaken for a
 * broken ref cycle, and a document that is valid OpenAPI loads even if opqueue could not resolve every ref in it.
 * The request schemas (`request-schemas.ts`) read the schemas later, from the document kept here, and a schema they
 * cannot use only goes unchecked.
 */
import { readFileSync } from "node:fs";
import { resolve as resolvePath } from "node:path";
import { parse as parseYaml } from "yaml";
import { ConfigError, type Config } from "../config.js";
import { didYouMean } from "../did-you-mean.js";
import { childOf, formatPointer, refSegments } from "./json-pointer.js";

/** One operation of the product's API. */
export interface Operation {
  operationId: string;
  /** Upper case: GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS, TRACE. */
  method: string;
  /** The path template as written, e.g. "/users/{userId}/emails". */
  path: string;
  /** Names of the {params} in the template, in order. */
  pathParams: string[];
  tags: string[];
  /** The tags include "background": only such operations may be enqueued. */
  background: boolean;
}

/**
 * What the document says of one operation, refs followed: its operation object and the path item holding it (whose
 * `parameters` apply to it too). The request schemas read its request from them (`request-shape.ts`).
 */
export interface OperationDefinition {
  operation: Readonly<Record<string, unknown>>;
  pathItem: Readonly<Record<string, unknown>>;
}

/** The OpenAPI versions opqueue reads; their schemas differ in dialect (JSON Schema 2020-12 from 3.1 on). */
export type OpenApiVersion = "3.0" | "3.1";

/** The tag that marks an operation as a target opqueue may enqueue. */
const BACKGROUND_TAG = "background";
/** The operation fields of a Path Item Object, in the order OpenAPI lists them. */
const HTTP_METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"] as const;
const SUPPORTED_VERSIONS = ["3.0", "3.1"] as const;

type JsonObject = Record<string, unknown>;

function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function describeValue(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "a list";
  return typeof value === "object" ? "an object" : `${typeof value} ${JSON.stringify(value)}`;
}

/** `{name}` segments of a path template; `[^{}/]` keeps a stray brace from swallowing the rest of the path. */
function pathParamsOf(path: string): string[] {
  return [...path.matchAll(/\{([^{}/]+)\}/g)].map((match) => match[1] ?? "");
}

/** A `$ref` already being followed, to detect cycles whatever spelling of the pointer they use. */
interface RefVisit {
  key: string;
  ref: string;
}

/** Reads one parsed document into operations; every problem becomes a `ConfigError` naming the source. */
class DocumentReader {
  private readonly operations = new Map<string, Operation>();
  private readonly definitions = new Map<string, OperationDefinition>();

  constructor(
    private readonly root: unknown,
    private readonly source: string,
  ) {}

  read(): {
    operations: Map<string, Operation>;
    definitions: Map<string, OperationDefinition>;
    version: OpenApiVersion;
  } {
    const { paths, version } = this.checkHeader();
    for (const [path, item] of Object.entries(paths)) {
      // Specification extensions ("x-...") may sit beside the paths; they are not paths.
      if (path.startsWith("x-")) continue;
      this.readPathItem(path, item);
    }
    return { operations: this.operations, definitions: this.definitions, version };
  }

  private fail(where: string, problem: string): ConfigError {
    const at = where === "" ? "" : `${where}: `;
    return new ConfigError(`config: openapi: ${this.source}: ${at}${problem}`);
  }

  private checkHeader(): { paths: JsonObject; version: OpenApiVersion } {
    const doc = this.root;
    if (!isObject(doc))
      throw this.fail("", `is not an OpenAPI document (it holds ${describeValue(doc)}, not an object)`);
    if (doc["swagger"] !== undefined) {
      throw this.fail("", "is a Swagger 2.0 document; convert it to OpenAPI 3.0 or 3.1");
    }
    const version = this.checkVersion(doc["openapi"]);
    const paths = doc["paths"];
    if (!isObject(paths)) throw this.fail("paths", `must be an object of path items (got ${describeValue(paths)})`);
    return { paths, version };
  }

  private checkVersion(version: unknown): OpenApiVersion {
    if (version === undefined) throw this.fail("", 'is not an OpenAPI document (no "openapi" version field)');
    if (typeof version === "number") {
      // YAML reads `openapi: 3.1` as a number, which the OpenAPI schema rejects; say how to fix it.
      throw this.fail(
        "openapi",
        `must be a version string such as "3.1.0", not the number ${version} (quote it in YAML)`,
      );
    }
    const supported =
      typeof version === "string"
        ? SUPPORTED_VERSIONS.find((v) => version === v || version.startsWith(`${v}.`))
        : undefined;
    if (supported === undefined) {
      throw this.fail("openapi", `version ${JSON.stringify(version)} is not supported (need 3.0.x or 3.1.x)`);
    }
    return supported;
  }

  private readPathItem(path: string, value: unknown): void {
    const where = `paths[${JSON.stringify(path)}]`;
    if (!path.startsWith("/")) throw this.fail(where, 'a path must start with "/"');
    const item = this.resolve(value, where);
    if (!isObject(item)) throw this.fail(where, `must be a path item object (got ${describeValue(item)})`);
    this.checkParameters(item["parameters"], `${where}.parameters`);
    for (const method of HTTP_METHODS) {
      if (item[method] === undefined) continue;
      const read = this.readOperation({ path, method, value: item[method], where: `${where}.${method}` });
      if (read)
        this.add(read.operation, `${where}.${method}.operationId`, { operation: read.definition, pathItem: item });
    }
  }

  private readOperation(options: {
    path: string;
    method: string;
    value: unknown;
    where: string;
  }): { operation: Operation; definition: JsonObject } | undefined {
    const { path, method, where } = options;
    const op = this.resolve(options.value, where);
    if (!isObject(op)) throw this.fail(where, `must be an operation object (got ${describeValue(op)})`);
    this.checkParameters(op["parameters"], `${where}.parameters`);
    // Only an absent operationId is skipped: nothing can name such an operation, so nothing can enqueue it.
    if (!Object.hasOwn(op, "operationId")) return undefined;
    const operationId = op["operationId"];
    if (typeof operationId !== "string" || operationId === "") {
      throw this.fail(`${where}.operationId`, `must be a non-empty string (got ${describeValue(operationId)})`);
    }
    const tags = this.readTags(op["tags"], `${where}.tags`);
    const operation = {
      operationId,
      method: method.toUpperCase(),
      path,
      pathParams: pathParamsOf(path),
      tags,
      background: tags.includes(BACKGROUND_TAG),
    };
    return { operation, definition: op };
  }

  private readTags(value: unknown, where: string): string[] {
    if (value === undefined) return [];
    if (!Array.isArray(value) || !value.every((tag): tag is string => typeof tag === "string")) {
      throw this.fail(where, `must be a list of strings (got ${describeValue(value)})`);
    }
    return [...value];
  }

  /** Parameters do not feed the registry (path params come from the template), but a broken ref is a broken document. */
  private checkParameters(value: unknown, where: string): void {
    if (value === undefined) return;
    if (!Array.isArray(value)) throw this.fail(where, `must be a list (got ${describeValue(value)})`);
    value.forEach((parameter, index) => {
      const resolved = this.resolve(parameter, `${where}.${index}`);
      if (!isObject(resolved)) {
        throw this.fail(`${where}.${index}`, `must be a parameter object (got ${describeValue(resolved)})`);
      }
    });
  }

  private add(operation: Operation, where: string, definition: OperationDefinition): void {
    const existing = this.operations.get(operation.operationId);
    if (existing) {
      throw this.fail(
        where,
        `operationId "${operation.operationId}" is used twice ` +
          `(${existing.method} ${existing.path} and ${operation.method} ${operation.path}); operationIds must be unique`,
      );
    }
    this.operations.set(operation.operationId, operation);
    this.definitions.set(operation.operationId, definition);
  }

  /**
   * Follows a chain of `$ref`s to the value it names. Fields beside a `$ref` (allowed on 3.1 path items, undefined
   * behaviour in 3.0) are laid over the referenced object, the nearest ref winning.
   */
  private resolve(value: unknown, where: string, visiting: readonly RefVisit[] = []): unknown {
    if (!isObject(value) || !Object.hasOwn(value, "$ref")) return value;
    const { $ref: ref, ...siblings } = value;
    if (typeof ref !== "string") throw this.fail(where, `$ref must be a string (got ${describeValue(ref)})`);
    const segments = refSegments(ref);
    if (!Array.isArray(segments)) throw this.fail(where, segments.problem);
    const key = JSON.stringify(segments);
    if (visiting.some((visit) => visit.key === key)) {
      const chain = [...visiting.map((visit) => visit.ref), ref].join(" -> ");
      throw this.fail(where, `$ref cycle: ${chain}`);
    }
    const target = this.resolve(this.lookup(segments, ref, where), where, [...visiting, { key, ref }]);
    return isObject(target) && Object.keys(siblings).length > 0 ? { ...target, ...siblings } : target;
  }

  private lookup(segments: string[], ref: string, where: string): unknown {
    let node: unknown = this.root;
    for (const [index, segment] of segments.entries()) {
      node = childOf(node, segment);
      if (node === undefined) {
        const parent = formatPointer(segments.slice(0, index));
        throw this.fail(where, `$ref "${ref}" does not resolve: there is no "${segment}" in #${parent}`);
      }
    }
    return node;
  }
}

/** The operations of the product's OpenAPI document, indexed by operationId. */
export class OperationRegistry {
  private constructor(
    private readonly byId: ReadonlyMap<string, Operation>,
    private readonly definitions: ReadonlyMap<string, OperationDefinition>,
    /** The parsed document, as read: the request schemas compile from it (`request-schemas.ts`). */
    readonly document: unknown,
    /** The document's OpenAPI version, which says its schemas' dialect. */
    readonly version: OpenApiVersion,
  ) {}

  /** Reads a YAML or JSON OpenAPI 3.0/3.1 file; throws `ConfigError` naming the file on any problem. */
  static fromFile(path: string): OperationRegistry {
    const absolute = resolvePath(path);
    let text: string;
    try {
      text = readFileSync(absolute, "utf8");
    } catch (error) {
      throw new ConfigError(`config: openapi: cannot read ${absolute}: ${(error as Error).message}`);
    }
    let doc: unknown;
    try {
      // JSON is YAML, so one parser reads both.
      doc = parseYaml(text);
    } catch (error) {
      throw new ConfigError(`config: openapi: ${absolute} is not valid YAML or JSON: ${(error as Error).message}`);
    }
    return OperationRegistry.fromDocument(doc, absolute);
  }

  /** Builds the registry from a parsed document; `source` names it in error messages. Throws `ConfigError`. */
  static fromDocument(doc: unknown, source = "OpenAPI document"): OperationRegistry {
    const { operations, definitions, version } = new DocumentReader(doc, source).read();
    return new OperationRegistry(operations, definitions, doc, version);
  }

  /** The operation with this operationId, if the document has one. */
  get(operationId: string): Operation | undefined {
    return this.byId.get(operationId);
  }

  /** What the document says of the operation with this operationId, refs followed. */
  definitionOf(operationId: string): OperationDefinition | undefined {
    return this.definitions.get(operationId);
  }

  /** Every operation with an operationId, in document order. */
  all(): Operation[] {
    return [...this.byId.values()];
  }
}

/** The operationIds of the document. */
export function operationIds(registry: OperationRegistry): string[] {
  return registry.all().map((operation) => operation.operationId);
}

/** ` (did you mean "..."?)` for an operationId the document lacks, or "". */
function suggestOperation(registry: OperationRegistry, operationId: string): string {
  return didYouMean(operationId, operationIds(registry));
}

/** Throws unless `operationId` names a `background` operation; `subject` says what named it. */
export function requireBackgroundOperation(options: {
  registry: OperationRegistry;
  operationId: string;
  key: string;
  subject: string;
}): void {
  const { registry, operationId, key, subject } = options;
  const operation = registry.get(operationId);
  if (!operation) {
    throw new ConfigError(
      `config: ${key}: ${subject} is not an operation of the OpenAPI document${suggestOperation(registry, operationId)}`,
    );
  }
  if (!operation.background) {
    throw new ConfigError(
      `config: ${key}: ${subject} (${operation.method} ${operation.path}) lacks the "${BACKGROUND_TAG}" tag, ` +
        "so it cannot be enqueued",
    );
  }
}

function checkTriggerTargets(config: Config, registry: OperationRegistry): void {
  for (const [caller, targets] of Object.entries(config.triggers)) {
    for (const target of targets) {
      requireBackgroundOperation({
        registry,
        operationId: target,
        key: `triggers.${caller}`,
        subject: `target "${target}"`,
      });
    }
  }
}

function unknownOperationWarnings(config: Config, registry: OperationRegistry): string[] {
  const overrides = Object.keys(config.operations)
    .filter((operationId) => registry.get(operationId) === undefined)
    .map(
      (operationId) =>
        `config: operations.${operationId}: names no operation of the OpenAPI document` +
        `${suggestOperation(registry, operationId)}; the override is unused`,
    );
  const onBehalfOf = config.on_behalf_of.flatMap((operationId, index) =>
    registry.get(operationId) === undefined
      ? [
          `config: on_behalf_of.${index}: "${operationId}" names no operation of the OpenAPI document${suggestOperation(registry, operationId)}`,
        ]
      : [],
  );
  return [...overrides, ...onBehalfOf];
}

/**
 * The operations' half of the start-up cross-check (docs/configuration.md), the cron entries' half being in
 * schedules/config-entries.ts, whose `checkConfigAgainstRegistry` runs both: throws `ConfigError` (naming the key) for a
 * trigger target that is not a `background` operation of the document; returns warnings for operation overrides and
 * `on_behalf_of` entries that name none, so are merely unused.
 */
export function checkOperationNames(options: { config: Config; registry: OperationRegistry }): {
  warnings: string[];
} {
  const { config, registry } = options;
  checkTriggerTargets(config, registry);
  return { warnings: unknownOperationWarnings(config, registry) };
}

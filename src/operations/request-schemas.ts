/**
 * Step 4a of enqueueJob (docs/api.md, "Enqueue, step by step"): the request checked against the target operation's
 * own schemas, so that a request the target would refuse with 400 is refused at once with 422
 * `request_schema_mismatch`, instead of becoming a job that dies on delivery.
 *
 * What is checked, and how each part is read:
 * - `path_params`: each declared path parameter, as the text delivery sends (`String(value)`, which is how the target
 *   reads it); a text with commas may also be read as a simple-style array.
 * - `query`: each declared query parameter. A required one must be sent: `null` and `[]` are not. A value is read as
 *   the text delivery sends (scalars as strings, arrays as repeated keys), coerced as the target's own validator
 *   would: `5` and `"5"` both pass `type: integer`, and so do `true` and `"true"` for `type: boolean`. An object is
 *   read as itself, else as the JSON text it is sent as.
 * - `body`: the JSON requestBody schema, as is (no coercion). A required requestBody needs a body; a body for an
 *   operation that declares none is let through.
 *
 * Compiled once at start-up, per operation; an operation with nothing to check, or opted out
 * (`validate_request: false`), has no entry, so its enqueue costs one map lookup. A schema that cannot be compiled
 * leaves its operation unchecked, with a warning, never a refusal to start or a 5xx.
 */
import { Ajv, type ErrorObject, type Options, type ValidateFunction } from "ajv";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { ApiError } from "../errors.js";
import { jsonText } from "../job/payload-rules.js";
import type { RequestPayload } from "../job/schemas.js";
import { escapeSegment, pointerIndex } from "./json-pointer.js";
import type { OpenApiVersion, OperationRegistry } from "./registry.js";
import { requestShapeOf, type RequestShape } from "./request-shape.js";
import { jsonSchemaDocument } from "./schema-dialect.js";
import { excerpt, schemaProblem, type SchemaProblem } from "./schema-problem.js";
import type { PerOperationSettings } from "./settings.js";

// ajv-formats is CommonJS with a default export; under NodeNext its default arrives wrapped.
const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default;

/** The id the document is known by to the validators: its schemas' `#/components/...` refs resolve against it. */
const DOCUMENT_ID = "https://opqueue.invalid/openapi.json";
/** Longest pointer in a message; the rest of it is cut. */
const MAX_POINTER_CHARS = 160;
/** Longest message (docs/api.md promises under 600 characters); with the cuts above, only a guard. */
const MAX_MESSAGE_CHARS = 596;
/** Longest compile error in a start-up warning. */
const MAX_WARNING_DETAIL_CHARS = 300;

/** One parameter's check: whether it must be sent, and its validator when it has a schema. */
interface ParameterCheck {
  name: string;
  required: boolean;
  validate: ValidateFunction | undefined;
}

/** A mismatch before it is worded: where, what, and which declaration says so. */
interface Mismatch extends SchemaProblem {
  source: string;
}

/** The compiled request checks of one operation (step 4a). */
export class RequestSchema {
  constructor(
    private readonly operationId: string,
    private readonly checks: {
      path: ParameterCheck[];
      query: ParameterCheck[];
      body: { required: boolean; validate: ValidateFunction | undefined } | undefined;
    },
  ) {}

  /** Throws 422 `request_schema_mismatch` naming the first mismatch of `request`. */
  check(request: RequestPayload): void {
    const problem = this.problem(request);
    if (problem !== undefined) throw new ApiError(422, "request_schema_mismatch", problem);
  }

  /** The first mismatch of `request` in words (path parameters, then query, then body), or undefined. */
  problem(request: RequestPayload): string | undefined {
    const mismatch =
      this.pathMismatch(request.path_params) ?? this.queryMismatch(request.query) ?? this.bodyMismatch(request);
    if (mismatch === undefined) return undefined;
    const message =
      `${excerpt(mismatch.pointer, MAX_POINTER_CHARS)}: ${mismatch.problem} ` +
      `(${mismatch.source} of operation "${excerpt(this.operationId)}")`;
    return excerpt(message, MAX_MESSAGE_CHARS);
  }

  private pathMismatch(pathParams: Record<string, unknown> | undefined): Mismatch | undefined {
    for (const { name, validate } of this.checks.path) {
      const value = pathParams !== undefined && Object.hasOwn(pathParams, name) ? pathParams[name] : undefined;
      // Absent or null: step 2 refuses it when the path template needs it.
      if (validate === undefined || value === undefined || value === null) continue;
      const text = jsonText(value);
      const readings = text.includes(",") ? [text, text.split(",")] : [text];
      const problem = firstProblem(validate, readings);
      if (problem)
        return at(`/request/path_params/${escapeSegment(name)}`, problem, `path parameter "${excerpt(name)}"`);
    }
    return undefined;
  }

  private queryMismatch(query: Record<string, unknown> | undefined): Mismatch | undefined {
    for (const { name, required, validate } of this.checks.query) {
      const value = query !== undefined && Object.hasOwn(query, name) ? query[name] : undefined;
      const pointer = `/request/query/${escapeSegment(name)}`;
      const source = `query parameter "${excerpt(name)}"`;
      const sent = sentQueryValue(value);
      if (sent === undefined) {
        if (!required) continue;
        const problem = value === undefined ? "is required" : "is required, and null values are not sent";
        return { pointer, problem, source };
      }
      if (validate === undefined) continue;
      // An object is sent as its JSON text: a target that parses it reads the object, another reads the text.
      const readings =
        sent.kept === undefined && typeof value === "object" ? [structuredClone(value), sent.text] : [sent.text];
      const problem = firstProblem(validate, readings);
      if (problem) return at(pointer, { ...problem, pointer: originalIndex(problem.pointer, sent.kept) }, source);
    }
    return undefined;
  }

  private bodyMismatch(request: RequestPayload): Mismatch | undefined {
    const body = this.checks.body;
    if (body === undefined) return undefined;
    const source = "the request body schema";
    if (request.body === undefined) {
      return body.required
        ? { pointer: "/request/body", problem: "is required", source: "the request body" }
        : undefined;
    }
    if (body.validate === undefined) return undefined;
    const problem = firstProblem(body.validate, [request.body]);
    return problem ? at("/request/body", problem, source) : undefined;
  }
}

function at(prefix: string, problem: SchemaProblem, source: string): Mismatch {
  return { pointer: `${prefix}${problem.pointer}`, problem: problem.problem, source };
}

/**
 * The problem of the first reading of a value when no reading passes, else undefined. A validator that throws (a
 * format check's bug, say) has checked nothing: the request passes rather than the enqueue failing with a 5xx.
 */
function firstProblem(validate: ValidateFunction, readings: readonly unknown[]): SchemaProblem | undefined {
  let first: SchemaProblem | undefined;
  for (const reading of readings) {
    let errors: ErrorObject[];
    try {
      if (validate(reading)) return undefined;
      errors = validate.errors ?? [];
    } catch {
      return undefined;
    }
    first ??= schemaProblem(errors, reading);
  }
  return first;
}

/**
 * What delivery sends for a query value (docs/delivery.md): its text, an array's items as repeated keys (null
 * items dropped; `kept` holds the original index of each item sent), or undefined when nothing is sent.
 */
function sentQueryValue(value: unknown): { text: string | string[]; kept: number[] | undefined } | undefined {
  const textOf = (item: unknown) => (typeof item === "object" ? JSON.stringify(item) : String(item));
  if (value === undefined || value === null) return undefined;
  if (!Array.isArray(value)) return { text: textOf(value), kept: undefined };
  const kept = value.flatMap((item: unknown, index) => (item === null || item === undefined ? [] : [index]));
  if (kept.length === 0) return undefined;
  return { text: kept.map((index) => textOf(value[index])), kept };
}

/** A pointer into the items sent, turned into one into the array given (which may hold null items). */
function originalIndex(pointer: string, kept: number[] | undefined): string {
  const match = /^\/(\d+)(\/.*)?$/.exec(pointer);
  if (kept === undefined || !match) return pointer;
  return `/${kept[Number(match[1])] ?? match[1]}${match[2] ?? ""}`;
}

/**
 * Patterns are read as JSON Schema says, with Unicode semantics (`u`), but a product's pattern that only parses
 * without it (`[\w\-]`, common in documents) still checks rather than leaving its operation unchecked.
 */
const lenientRegExp = Object.assign(
  (pattern: string, flags: string) => {
    try {
      return new RegExp(pattern, flags);
    } catch (error) {
      if (!flags.includes("u")) throw error;
      return new RegExp(pattern, flags.replace("u", ""));
    }
  },
  { code: "lenientRegExp" },
);

/** One validator over the whole document: `coerceTypes` for parameters, which reach the target as text. */
function documentValidator(options: { document: unknown; version: OpenApiVersion; coerceTypes: false | "array" }): Ajv {
  const ajvOptions: Options = {
    // Unknown keywords (OpenAPI's own) and formats are ignored; the document is not a schema, so not checked as one.
    strict: false,
    validateSchema: false,
    logger: false,
    allErrors: false,
    // `required: ["toString"]` must not be met by Object.prototype.
    ownProperties: true,
    coerceTypes: options.coerceTypes,
    useDefaults: false,
    removeAdditional: false,
    code: { regExp: lenientRegExp },
  };
  const ajv = options.version === "3.1" ? new Ajv2020(ajvOptions) : new Ajv(ajvOptions);
  addFormats(ajv);
  ajv.addSchema(options.document as object, DOCUMENT_ID);
  return ajv;
}

/** Whether a shape asks anything of a request. */
function checksSomething(shape: RequestShape): boolean {
  const { body, query, path } = shape;
  return (
    body?.required === true ||
    body?.schema !== undefined ||
    query.some((parameter) => parameter.required || parameter.schema !== undefined) ||
    path.some((parameter) => parameter.schema !== undefined)
  );
}

/** Compiles the schema at `segments`; throws an Error naming it. */
function compileAt(ajv: Ajv, segments: readonly string[]): ValidateFunction {
  const fragment = segments.map((segment) => `/${encodeURIComponent(escapeSegment(segment))}`).join("");
  try {
    return ajv.compile({ $ref: `${DOCUMENT_ID}#${fragment}` });
  } catch (error) {
    const pointer = segments.map((segment) => `/${escapeSegment(segment)}`).join("");
    throw new Error(
      `cannot compile #${pointer}: ${excerpt(String((error as Error).message), MAX_WARNING_DETAIL_CHARS)}`,
    );
  }
}

/** The request checks of every background operation, compiled at start-up. */
export class RequestSchemas {
  private constructor(
    private readonly byOperation: ReadonlyMap<string, RequestSchema>,
    /** One line per operation left unchecked for want of a usable schema, for the start-up log. */
    readonly warnings: readonly string[],
  ) {}

  /** Compiles the checks of every background operation that has something to check and is not opted out. */
  static compile(options: { registry: OperationRegistry; settings: PerOperationSettings }): RequestSchemas {
    const { registry, settings } = options;
    const warnings: string[] = [];
    const unchecked = (operationId: string, why: string) =>
      warnings.push(`openapi: operation "${operationId}": requests are not checked against its schemas: ${why}`);
    let index: Map<object, readonly string[]> | undefined;
    const shapes = new Map<string, RequestShape>();
    for (const operation of registry.all()) {
      const definition = registry.definitionOf(operation.operationId);
      if (!operation.background || !definition || !settings.of(operation.operationId).validateRequest) continue;
      index ??= pointerIndex(registry.document);
      const located = index;
      const shape = requestShapeOf({ document: registry.document, definition, locate: (node) => located.get(node) });
      if (typeof shape === "string") unchecked(operation.operationId, shape);
      else if (checksSomething(shape)) shapes.set(operation.operationId, shape);
    }
    if (shapes.size === 0) return new RequestSchemas(new Map(), warnings);

    let validators: { body: Ajv; parameters: Ajv };
    try {
      const document = jsonSchemaDocument(registry.document, registry.version);
      validators = {
        body: documentValidator({ document, version: registry.version, coerceTypes: false }),
        parameters: documentValidator({ document, version: registry.version, coerceTypes: "array" }),
      };
    } catch (error) {
      const why = `the document cannot be read as JSON Schema: ${excerpt((error as Error).message, MAX_WARNING_DETAIL_CHARS)}`;
      for (const operationId of shapes.keys()) unchecked(operationId, why);
      return new RequestSchemas(new Map(), warnings);
    }
    const byOperation = new Map<string, RequestSchema>();
    for (const [operationId, shape] of shapes) {
      try {
        byOperation.set(operationId, compileShape(operationId, shape, validators));
      } catch (error) {
        unchecked(operationId, (error as Error).message);
      }
    }
    return new RequestSchemas(byOperation, warnings);
  }

  /** The checks of `operationId`; undefined when it has none, is opted out, or its schemas could not be compiled. */
  get(operationId: string): RequestSchema | undefined {
    return this.byOperation.get(operationId);
  }
}

function compileShape(
  operationId: string,
  shape: RequestShape,
  validators: { body: Ajv; parameters: Ajv },
): RequestSchema {
  const parameter = (declared: RequestShape["query"][number]): ParameterCheck => ({
    name: declared.name,
    required: declared.required,
    validate: declared.schema === undefined ? undefined : compileAt(validators.parameters, declared.schema),
  });
  const { body } = shape;
  return new RequestSchema(operationId, {
    // Path parameters are required by the template, which step 2 checks: only their schemas are left.
    path: shape.path.filter((declared) => declared.schema !== undefined).map(parameter),
    query: shape.query.filter((declared) => declared.required || declared.schema !== undefined).map(parameter),
    body: body && {
      required: body.required,
      validate: body.schema === undefined ? undefined : compileAt(validators.body, body.schema),
    },
  });
}

/**
 * Request validation. Bodies are validated strictly (no coercion, no removal of unknown fields, so unknown
 * fields are refused as docs/api.md, "Enqueue, step by step" says); query strings and path parameters are strings on
 * the wire, so they are coerced (a single `status` becomes an array). Every route of the API refuses query parameters
 * it does not declare (`strictQueryStrings`).
 */
import type { FastifyRequest, FastifySchemaCompiler, RouteOptions } from "fastify";
import { Ajv } from "ajv";
import addFormatsModule from "ajv-formats";

// ajv-formats is CommonJS with a default export; under NodeNext its default arrives wrapped.
const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default;

/** RFC 3339 §5.6 `date-time`: `T` between date and time, and `Z` or an offset with its colon (`+01:00`). */
const RFC3339_DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:[Zz]|[+-](\d{2}):(\d{2}))$/;

/**
 * Whether `text` is an RFC 3339 date-time, every field in its range. ajv-formats' own check is looser: it takes a
 * space for the `T` and an offset without its colon (`+0100`), neither of which RFC 3339's grammar allows. A leap
 * second (`:60`) passes here; the enqueue refuses it later, as a time Date cannot represent.
 */
export function isRfc3339DateTime(text: string): boolean {
  const match = RFC3339_DATE_TIME.exec(text);
  if (!match) return false;
  const [year, month, day, hour, minute, second, offsetHour, offsetMinute] = match
    .slice(1)
    .map((part) => Number(part ?? 0)) as [number, number, number, number, number, number, number, number];
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const daysInMonth = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1];
  if (daysInMonth === undefined || day < 1 || day > daysInMonth) return false;
  return hour <= 23 && minute <= 59 && second <= 60 && offsetHour <= 23 && offsetMinute <= 59;
}

function createAjv(coerceTypes: boolean | "array"): Ajv {
  const ajv = new Ajv({ allErrors: false, coerceTypes, removeAdditional: false, useDefaults: false, strict: false });
  addFormats(ajv, ["uri"]);
  ajv.addFormat("date-time", { type: "string", validate: isRfc3339DateTime });
  return ajv;
}

type Validator = ReturnType<Ajv["compile"]>;

/**
 * One validator per schema for the whole process: the routes' schemas are the same for every service a process builds
 * (a test run builds hundreds), and compiling them, with Ajv's own meta-schema, is most of a service's start-up. The
 * key is the schema's JSON, since Fastify hands each service its own copy of a route's schema.
 */
class CompiledSchemas {
  #ajv: Ajv | undefined;
  readonly #compiled = new Map<string, Validator>();

  constructor(private readonly coerceTypes: boolean | "array") {}

  compile(schema: object): Validator {
    const key = JSON.stringify(schema);
    let validator = this.#compiled.get(key);
    if (validator === undefined) {
      this.#ajv ??= createAjv(this.coerceTypes);
      validator = this.#ajv.compile(schema);
      this.#compiled.set(key, validator);
    }
    return validator;
  }
}

const strictSchemas = new CompiledSchemas(false);
const coercingSchemas = new CompiledSchemas("array");

/** Fastify's schema compiler for this service: bodies strict, query strings and path parameters coerced. */
export function createValidatorCompiler(): FastifySchemaCompiler<unknown> {
  return ({ schema, httpPart }) => (httpPart === "body" ? strictSchemas : coercingSchemas).compile(schema as object);
}

/** A validator of request bodies as the routes' own (strict, formats as above), for parts a route checks itself. */
export function compileBodyValidator(schema: object): Validator {
  return strictSchemas.compile(schema);
}

/** Whether `schema` is an object schema that admits no property it does not list. */
function isStrictObjectSchema(schema: unknown): boolean {
  if (typeof schema !== "object" || schema === null) return false;
  const { type, additionalProperties } = schema as { type?: unknown; additionalProperties?: unknown };
  return type === "object" && additionalProperties === false;
}

/**
 * With `attachValidation` a route answers its own validation problems (POST /jobs, in the contract's order); a query
 * string's is not its to answer: refused here, as on every other route.
 */
async function refuseAttachedQueryProblem(request: FastifyRequest): Promise<void> {
  if (request.validationError?.validationContext === "querystring") throw request.validationError;
}

/**
 * The `onRoute` hook every opqueue listener installs before its routes (server.ts): every route the service's OpenAPI
 * document lists refuses a query parameter it does not declare with 400 `invalid_request` (docs/api.md, "Errors"), so
 * that a mistyped filter (`?statuss=dead`) or a parameter the route has not (`/admin/backup?to=...`) is never silently
 * ignored. A route without a querystring schema gets an empty strict one (which adds no parameter to the document); a
 * route that declares one must declare it strict, or the service does not start. Only the routes left out of the
 * document (`hide`: the dashboard's files, /openapi.json, the key set) read no query string and ignore it, as static
 * files do.
 */
export function strictQueryStrings(route: RouteOptions): void {
  const schema = (route.schema ??= {});
  if (schema.hide) return;
  const declared = schema.querystring ?? (schema as { query?: unknown }).query;
  if (declared === undefined) {
    schema.querystring = { type: "object", properties: {}, additionalProperties: false };
  } else if (!isStrictObjectSchema(declared)) {
    const methods = Array.isArray(route.method) ? route.method.join(",") : route.method;
    throw new Error(
      `route ${methods} ${route.url}: its querystring schema must be an object with additionalProperties: false ` +
        "(every route refuses unknown query parameters, docs/api.md)",
    );
  }
  if (route.attachValidation) {
    const own =
      route.preHandler === undefined ? [] : Array.isArray(route.preHandler) ? route.preHandler : [route.preHandler];
    route.preHandler = [refuseAttachedQueryProblem, ...own] as RouteOptions["preHandler"];
  }
}

/**
 * Request validation. Bodies are validated strictly (no coercion, no removal of unknown fields, so unknown
 * fields are refused as CONTRACT §3 says); query strings and path parameters are strings on the wire, so they
 * are coerced (a single `status` becomes an array).
 */
import type { FastifySchemaCompiler } from "fastify";
import { Ajv } from "ajv";
import addFormatsModule from "ajv-formats";

// ajv-formats is CommonJS with a default export; under NodeNext its default arrives wrapped.
const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default;

function createAjv(coerceTypes: boolean | "array"): Ajv {
  const ajv = new Ajv({ allErrors: false, coerceTypes, removeAdditional: false, useDefaults: false, strict: false });
  addFormats(ajv, ["date-time", "uri"]);
  return ajv;
}

/** Fastify's schema compiler for this service: one strict and one coercing validator. */
export function createValidatorCompiler(): FastifySchemaCompiler<unknown> {
  const strict = createAjv(false);
  const coercing = createAjv("array");
  return ({ schema, httpPart }) => (httpPart === "body" ? strict : coercing).compile(schema as object);
}

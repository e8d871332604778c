/**
 * Validation against the schema, and the one message a failure gives: Ajv fills the defaults in place, and its first
 * complaint becomes a `ConfigError` naming the key, with a "did you mean" for a misspelt one.
 */
import type { TSchema } from "@sinclair/typebox";
import { Ajv, type ErrorObject } from "ajv";
import { didYouMean } from "../did-you-mean.js";
import { ConfigError } from "./config-error.js";
import { ConfigSchema, type Config } from "./schema.js";

// verbose: each error carries the schema it broke, whose known keys an unknown key is compared with ("did you mean").
const configAjv = new Ajv({ useDefaults: true, allErrors: false, strict: false, coerceTypes: false, verbose: true });
configAjv.addFormat("uri", (value: string) => URL.canParse(value));
const validateConfig = configAjv.compile<Config>(ConfigSchema as TSchema);

function describeError(error: ErrorObject): string {
  const key = error.instancePath === "" ? "(top level)" : error.instancePath.slice(1).replaceAll("/", ".");
  if (error.keyword === "additionalProperties") {
    const unknown = String(error.params["additionalProperty"]);
    const known = Object.keys((error.parentSchema as { properties?: object } | undefined)?.properties ?? {});
    return `${key === "(top level)" ? "" : `${key}: `}unknown key "${unknown}"${didYouMean(unknown, known)}`;
  }
  if (error.keyword === "required") {
    const missing = String(error.params["missingProperty"]);
    const where = key === "(top level)" ? missing : `${key}.${missing}`;
    // Ajv checks required keys before unknown ones: a misspelt required key first shows as missing.
    const known = Object.keys((error.parentSchema as { properties?: object } | undefined)?.properties ?? {});
    const given = typeof error.data === "object" && error.data !== null ? Object.keys(error.data) : [];
    const misspelt = given.find((name) => !known.includes(name) && didYouMean(name, [missing]) !== "");
    if (misspelt !== undefined) {
      return `${key === "(top level)" ? "" : `${key}: `}unknown key "${misspelt}"${didYouMean(misspelt, [missing])}; ${where} is required`;
    }
    return `${where}: is required`;
  }
  return `${key}: ${error.message ?? "is invalid"}`;
}

/**
 * The one error to report. For a union (`auth.delivery_key`: a key or a list of keys) Ajv lists every branch's
 * complaint, and one about the value's type only says which branch it is not ("must be object" of a list): the first
 * complaint about the content names the real problem, else the type complaint deepest inside the value (the list's
 * item that is not a key). Elsewhere there is one error, which this keeps.
 */
function reportedError(errors: ErrorObject[]): ErrorObject | undefined {
  const aboutContent = errors.find((error) => error.keyword !== "type" && error.keyword !== "anyOf");
  if (aboutContent) return aboutContent;
  return errors.reduce<ErrorObject | undefined>(
    (deepest, error) =>
      deepest === undefined || error.instancePath.length > deepest.instancePath.length ? error : deepest,
    undefined,
  );
}

/**
 * Checks `raw` against the schema, filling in every default in place; throws `ConfigError` on the first problem.
 */
export function validateAgainstSchema(raw: Record<string, unknown>): Config {
  if (!validateConfig(raw)) {
    const reported = reportedError(validateConfig.errors ?? []);
    throw new ConfigError(`config: ${reported ? describeError(reported) : "is invalid"}`);
  }
  return raw as Config;
}

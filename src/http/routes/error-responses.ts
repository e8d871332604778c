/** The error responses a route documents in the served OpenAPI: `{code, message}` for each status given. */
import { ErrorBody } from "../../job/schemas.js";

/** The route schema's `response` entries for `statuses`, each an `ErrorBody`. */
export function errorResponses(...statuses: number[]): Record<number, typeof ErrorBody> {
  return Object.fromEntries(statuses.map((status) => [status, ErrorBody]));
}

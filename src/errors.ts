/**
 * The error codes of docs/api.md, "Errors" and the one error type that carries them to the client. Code that decides a
 * request's fate throws `ApiError`; the HTTP error handler turns it into `{code, message}`.
 */

/** Every `code` an error response can carry, by status. */
export const ERROR_CODES = {
  400: ["invalid_request", "payload_too_large", "invalid_on_behalf_of", "missing_path_param", "invalid_path_param"],
  401: ["invalid_assertion", "unauthenticated", "invalid_delivery_token"],
  403: [
    "trigger_not_allowed",
    "on_behalf_of_not_allowed",
    "chain_mismatch",
    "site_admin_required",
    "insufficient_role",
  ],
  404: ["job_not_found", "not_found", "operation_not_found", "chain_not_found", "schedule_not_found", "api_disabled"],
  409: [
    "job_running",
    "job_not_cancellable",
    "job_not_retryable",
    "dedupe_conflict",
    "job_not_waiting",
    "chain_exists",
    "schedule_exists",
    "schedule_read_only",
    "job_not_running",
    "schedule_limit_reached",
  ],
  413: ["body_too_large"],
  415: ["unsupported_media_type"],
  422: ["unknown_operation", "operation_not_background", "request_schema_mismatch", "idempotency_key_reused"],
  429: ["spawn_cap_exceeded"],
  500: ["internal"],
  503: ["unavailable"],
} as const;

type Codes = typeof ERROR_CODES;
/** A status that has error codes. */
export type ErrorStatus = keyof Codes;
/** An error code. */
export type ErrorCode = Codes[ErrorStatus][number];

/** A refusal with the status and `code` of the contract and a message that helps the caller fix it. */
export class ApiError<S extends ErrorStatus = ErrorStatus> extends Error {
  override readonly name = "ApiError";
  constructor(
    readonly statusCode: S,
    readonly code: Codes[S][number],
    message: string,
    /** Extra response headers, such as `Retry-After`. */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

/**
 * Typed errors of the client: one class per `code` of docs/api.md, "Errors", so callers can `catch` what they handle
 * (`if (error instanceof SpawnCapExceededError)`), and the status and message the service gave.
 */
import type { ErrorCode } from "./wire.js";

/** Any refusal by the service (or a transport failure, with status 0). */
export class OpqueueError extends Error {
  override name = "OpqueueError";
  constructor(
    /** HTTP status; 0 when no response arrived. */
    readonly status: number,
    /** The contract's error code, or `network_error`. */
    readonly code: string,
    message: string,
    /** Seconds the service asked to wait (503 `unavailable`). */
    readonly retryAfterSeconds?: number,
    /** `cause`: for `network_error`, what fetch threw (its own `cause` says what the network did). */
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

// Typed as OpqueueError's class, so each one's declaration is a line, not a copy of Error's whole static side.
function define(name: string): typeof OpqueueError {
  const errorClass = class extends OpqueueError {
    override name = name;
  };
  Object.defineProperty(errorClass, "name", { value: name });
  return errorClass;
}

/** 400 invalid_request. */
export const InvalidRequestError = define("InvalidRequestError");
/** 400 payload_too_large. */
export const PayloadTooLargeError = define("PayloadTooLargeError");
/** 400 invalid_on_behalf_of. */
export const InvalidOnBehalfOfError = define("InvalidOnBehalfOfError");
/** 400 missing_path_param. */
export const MissingPathParamError = define("MissingPathParamError");
/** 400 invalid_path_param: a path parameter whose text is empty, `.` or `..`. */
export const InvalidPathParamError = define("InvalidPathParamError");
/** 401 invalid_assertion. */
export const InvalidAssertionError = define("InvalidAssertionError");
/** 401 unauthenticated. */
export const UnauthenticatedError = define("UnauthenticatedError");
/**
 * 401 invalid_delivery_token: a target's heartbeat, complete or fail with a delivery token that is missing, invalid, for
 * another job, expired before its attempt was taken asynchronously, or not the token its asynchronous attempt is bound to.
 */
export const InvalidDeliveryTokenError = define("InvalidDeliveryTokenError");
/** 403 trigger_not_allowed. */
export const TriggerNotAllowedError = define("TriggerNotAllowedError");
/** 403 on_behalf_of_not_allowed. */
export const OnBehalfOfNotAllowedError = define("OnBehalfOfNotAllowedError");
/** 403 chain_mismatch. */
export const ChainMismatchError = define("ChainMismatchError");
/** 403 site_admin_required: the admin token carries no role. */
export const SiteAdminRequiredError = define("SiteAdminRequiredError");
/** 403 insufficient_role: the admin token's role is below the call's, or an operator acts outside its `ops`. */
export const InsufficientRoleError = define("InsufficientRoleError");
/** 404 job_not_found. */
export const JobNotFoundError = define("JobNotFoundError");
/** 404 not_found. */
export const NotFoundError = define("NotFoundError");
/** 404 operation_not_found: no background operation has that operationId (flow control calls). */
export const OperationNotFoundError = define("OperationNotFoundError");
/** 404 chain_not_found: no job was ever enqueued into that chain. */
export const ChainNotFoundError = define("ChainNotFoundError");
/** 404 schedule_not_found: no schedule (nor config entry) has that name. */
export const ScheduleNotFoundError = define("ScheduleNotFoundError");
/** 404 api_disabled: the node called is worker-only (`serve --no-api`); call a node that serves the API. */
export const ApiDisabledError = define("ApiDisabledError");
/** 409 job_running: cancel a running job with `{ abort: true }`. */
export const JobRunningError = define("JobRunningError");
/** 409 job_not_cancellable. */
export const JobNotCancellableError = define("JobNotCancellableError");
/** 409 job_not_retryable. */
export const JobNotRetryableError = define("JobNotRetryableError");
/** 409 dedupe_conflict. */
export const DedupeConflictError = define("DedupeConflictError");
/** 409 job_not_waiting. */
export const JobNotWaitingError = define("JobNotWaitingError");
/** 409 chain_exists: on_settled comes with a chain's first job. */
export const ChainExistsError = define("ChainExistsError");
/** 409 schedule_exists: a schedule or a config entry already has that name. */
export const ScheduleExistsError = define("ScheduleExistsError");
/** 409 schedule_read_only: a config entry cannot be changed, paused, resumed or deleted through the API. */
export const ScheduleReadOnlyError = define("ScheduleReadOnlyError");
/**
 * 409 job_not_running: the attempt a heartbeat, complete or fail names is over (the job ended, was cancelled, was
 * rescued and runs another attempt, or ran past its operation's max_async_ms, which this call ended): stop working on it.
 */
export const JobNotRunningError = define("JobNotRunningError");
/** 409 schedule_limit_reached: the service has `limits.max_schedules` schedules already; delete one first. */
export const ScheduleLimitReachedError = define("ScheduleLimitReachedError");
/** 413 body_too_large. */
export const BodyTooLargeError = define("BodyTooLargeError");
/** 415 unsupported_media_type. */
export const UnsupportedMediaTypeError = define("UnsupportedMediaTypeError");
/** 422 unknown_operation. */
export const UnknownOperationError = define("UnknownOperationError");
/** 422 operation_not_background. */
export const OperationNotBackgroundError = define("OperationNotBackgroundError");
/** 422 idempotency_key_reused: the idempotency key was used, within its window, with another request. */
export const IdempotencyKeyReusedError = define("IdempotencyKeyReusedError");
/** 422 request_schema_mismatch: the request breaks the target operation's own schemas; the message names where. */
export const RequestSchemaMismatchError = define("RequestSchemaMismatchError");
/** 429 spawn_cap_exceeded. */
export const SpawnCapExceededError = define("SpawnCapExceededError");
/** 500 internal: the service failed; its log says why. */
export const InternalError = define("InternalError");
/** 503 unavailable (after the client's own retries). */
export const UnavailableError = define("UnavailableError");

// Typed by the codes of the wire, so a code the service can send and the client has no class for fails to compile.
const BY_CODE: Record<ErrorCode, typeof OpqueueError> = {
  invalid_request: InvalidRequestError,
  payload_too_large: PayloadTooLargeError,
  invalid_on_behalf_of: InvalidOnBehalfOfError,
  missing_path_param: MissingPathParamError,
  invalid_path_param: InvalidPathParamError,
  invalid_assertion: InvalidAssertionError,
  unauthenticated: UnauthenticatedError,
  invalid_delivery_token: InvalidDeliveryTokenError,
  trigger_not_allowed: TriggerNotAllowedError,
  on_behalf_of_not_allowed: OnBehalfOfNotAllowedError,
  chain_mismatch: ChainMismatchError,
  site_admin_required: SiteAdminRequiredError,
  insufficient_role: InsufficientRoleError,
  job_not_found: JobNotFoundError,
  not_found: NotFoundError,
  operation_not_found: OperationNotFoundError,
  chain_not_found: ChainNotFoundError,
  schedule_not_found: ScheduleNotFoundError,
  api_disabled: ApiDisabledError,
  job_running: JobRunningError,
  job_not_cancellable: JobNotCancellableError,
  job_not_retryable: JobNotRetryableError,
  dedupe_conflict: DedupeConflictError,
  job_not_waiting: JobNotWaitingError,
  chain_exists: ChainExistsError,
  schedule_exists: ScheduleExistsError,
  schedule_read_only: ScheduleReadOnlyError,
  job_not_running: JobNotRunningError,
  schedule_limit_reached: ScheduleLimitReachedError,
  body_too_large: BodyTooLargeError,
  unsupported_media_type: UnsupportedMediaTypeError,
  unknown_operation: UnknownOperationError,
  operation_not_background: OperationNotBackgroundError,
  idempotency_key_reused: IdempotencyKeyReusedError,
  request_schema_mismatch: RequestSchemaMismatchError,
  spawn_cap_exceeded: SpawnCapExceededError,
  internal: InternalError,
  unavailable: UnavailableError,
};

/** The typed error for a response's status and `{code, message}`. */
export function errorFor(options: {
  status: number;
  code: string;
  message: string;
  retryAfterSeconds?: number;
}): OpqueueError {
  const ErrorClass = BY_CODE[options.code as ErrorCode] ?? OpqueueError;
  return new ErrorClass(options.status, options.code, options.message, options.retryAfterSeconds);
}

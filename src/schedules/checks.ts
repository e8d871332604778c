/**
 * The checks of a schedule created or changed through the API (docs/schedules.md, "Checks"; the config file's entries
 * are checked at start-up, config-entries.ts), in the enqueue's order (docs/api.md, "Enqueue, step by step"), so a
 * schedule is held to what an enqueue of its job would be; the first that fails answers:
 *
 *   400 invalid_request      an unknown time zone, an expression croner cannot read in it, or not 5 or 6 fields; a
 *                            request nested too deep or holding text no engine can store (anywhere in the definition)
 *   400 payload_too_large    more than 16,384 bytes of JSON in `request`
 *   400 missing_path_param / invalid_path_param   the target's path template and `request.path_params`
 *   422 unknown_operation / operation_not_background
 *   403 trigger_not_allowed  the trigger map does not let the schedule's caller enqueue the target
 *   422 request_schema_mismatch   `request` breaks the target's own schemas (docs/api.md, step 4a)
 *
 * The target and trigger checks (`scheduleTargetError`) are made again by the scheduler at every tick of a schedule
 * and by every run now, on the node that makes them: a target the trigger map stops allowing is no longer enqueued.
 */
import type { Config } from "../config.js";
import { checkTarget } from "../enqueue/target.js";
import { ApiError } from "../errors.js";
import { pathParamsProblem, payloadProblem } from "../job/payload-rules.js";
import type { OperationRegistry } from "../operations/registry.js";
import type { RequestSchemas } from "../operations/request-schemas.js";
import { SCHEDULE_TRIGGER_KEY, triggerKeyOf, type ScheduleSource } from "./callers.js";
import { expressionProblem, timezoneProblem } from "./expression.js";
import type { ScheduleFields } from "./schedule.js";

/**
 * Why this node would not enqueue a job of schedule `name` for `operationId`, as the error the API answers (422 for
 * an operation the OpenAPI document lacks or that is not `background`, 403 `trigger_not_allowed`); undefined when
 * it would.
 */
export function scheduleTargetError(options: {
  config: Pick<Config, "triggers">;
  registry: OperationRegistry;
  source: ScheduleSource;
  name: string;
  operationId: string;
}): ApiError | undefined {
  const { config, registry, operationId } = options;
  const allowed = checkTarget({
    target: registry.get(operationId),
    operationId,
    triggers: config.triggers,
    caller: triggerKeyOf(options),
    triggerHint:
      options.source === "api" ? ` (add it to triggers."${SCHEDULE_TRIGGER_KEY}" to let schedules enqueue it)` : "",
  });
  return allowed.ok ? undefined : allowed.error;
}

/** Runs every check of a schedule created or changed through the API; throws the `ApiError` of the first that fails. */
export function checkScheduleFields(options: {
  fields: ScheduleFields;
  config: Pick<Config, "triggers">;
  registry: OperationRegistry;
  requestSchemas: RequestSchemas;
}): void {
  const { fields, registry } = options;
  const zone = timezoneProblem(fields.timezone);
  if (zone) throw new ApiError(400, "invalid_request", `timezone: ${zone}`);
  const expression = expressionProblem(fields.schedule, fields.timezone);
  if (expression) throw new ApiError(400, "invalid_request", `schedule: ${expression}`);
  // Text no engine can store is refused wherever it is in the definition, as the enqueue refuses it anywhere in its body.
  const payload = payloadProblem(fields.request, fields);
  if (payload) throw new ApiError(400, payload.code, payload.message);
  const target = registry.get(fields.operationId);
  if (target) {
    const path = pathParamsProblem({
      path: `${target.method} ${target.path}`,
      names: target.pathParams,
      pathParams: fields.request.path_params ?? {},
    });
    if (path) throw new ApiError(400, path.code, path.message);
  }
  const refusal = scheduleTargetError({
    ...options,
    source: "api",
    name: fields.name,
    operationId: fields.operationId,
  });
  if (refusal) throw refusal;
  // Step 4a, as the enqueue makes it: a request the target's schemas refuse would make every tick's job die.
  options.requestSchemas.get(fields.operationId)?.check(fields.request);
}

/**
 * Steps 3 and 4 of an enqueue for its target (docs/api.md, "Enqueue, step by step"): the operation must be in the
 * product's OpenAPI document and tagged `background` (422), and the trigger map must let the caller enqueue it (403).
 * One check for every way a job comes to be: an enqueue, each of its callbacks, a schedule's definition and its ticks.
 */
import type { Config } from "../config.js";
import { didYouMean } from "../did-you-mean.js";
import { ApiError } from "../errors.js";
import type { Operation } from "../operations/registry.js";

/**
 * Whether `caller` may enqueue `operationId` (whose operation is `target`, undefined when the document lacks it): the
 * operation when it may, else the error to answer. `prefix` starts each message (a callback's field); `triggerHint`
 * ends a trigger refusal's.
 */
export function checkTarget(options: {
  target: Operation | undefined;
  operationId: string;
  triggers: Config["triggers"];
  caller: string;
  prefix?: string;
  triggerHint?: string;
}): { ok: true; target: Operation } | { ok: false; error: ApiError } {
  const refused = (error: ApiError) => ({ ok: false, error }) as const;
  const { target, operationId, caller } = options;
  const prefix = options.prefix ?? "";
  // Own keys only: a caller named "constructor" or "__proto__" must not find Object.prototype's members.
  const allowed = Object.hasOwn(options.triggers, caller) ? options.triggers[caller] : undefined;
  if (!target) {
    // Suggested only among what the caller may enqueue: the answer never tells it of another operation.
    const suggestion = didYouMean(operationId, allowed ?? []);
    return refused(
      new ApiError(
        422,
        "unknown_operation",
        `${prefix}operation "${operationId}" is not in the product's OpenAPI document${suggestion}`,
      ),
    );
  }
  if (!target.background) {
    return refused(
      new ApiError(
        422,
        "operation_not_background",
        `${prefix}operation "${operationId}" does not carry the "background" tag, so it cannot be enqueued`,
      ),
    );
  }
  if (!(allowed ?? []).includes(target.operationId)) {
    const hint = options.triggerHint ?? "";
    return refused(
      new ApiError(
        403,
        "trigger_not_allowed",
        `${prefix}the trigger map does not let "${caller}" enqueue "${target.operationId}"${hint}`,
      ),
    );
  }
  return { ok: true, target };
}

/**
 * The config file's cron entries checked at start-up (docs/configuration.md), each problem a `ConfigError` naming the
 * entry's key. Against the OpenAPI document (`checkCronEntries`): unique names, a time zone and an expression croner
 * reads in it (expression.ts, as for schedules created through the API), a `background` target their `cron:{name}`
 * trigger key allows, and a request any enqueue would take; a request the target's own schemas refuse is only warned
 * of (`cronRequestWarnings`). Against the database (`checkCronEntriesAgainstSchedules`): no stored schedule has an
 * entry's name. checks.ts holds the checks of schedules created through the API.
 *
 * Also the start-up cross-check as a whole, `checkConfigAgainstRegistry`: operations/ checks the config's other names
 * of operations, but sits below this folder and knows nothing of cron, so both halves meet here.
 */
import { ConfigError, type Config, type CronConfig } from "../config.js";
import { closestName, didYouMean } from "../did-you-mean.js";
import { pathParamsProblem, payloadProblem } from "../job/payload-rules.js";
import {
  checkOperationNames,
  operationIds,
  requireBackgroundOperation,
  type OperationRegistry,
} from "../operations/registry.js";
import type { RequestSchemas } from "../operations/request-schemas.js";
import type { ScheduleStore } from "../store/store.js";
import { cronCaller, SCHEDULE_TRIGGER_KEY } from "./callers.js";
import { expressionProblem, timezoneProblem } from "./expression.js";

function checkTimezone(entry: CronConfig, key: string): void {
  const problem = timezoneProblem(entry.timezone);
  if (problem) throw new ConfigError(`config: ${key}: ${problem}`);
}

function checkSchedule(entry: CronConfig, key: string): void {
  const problem = expressionProblem(entry.schedule, entry.timezone);
  if (problem) throw new ConfigError(`config: ${key}: ${problem}`);
}

/** For a trigger key the map lacks, the key it has that looks like a misspelling of it; or "". */
function misspeltTriggerKey(config: Config, wanted: string): string {
  const near = closestName(wanted, Object.keys(config.triggers));
  return near === undefined ? "" : `; triggers has "${near}": is it misspelt?`;
}

function checkCronTrigger(entry: CronConfig, index: number, config: Config): void {
  const caller = cronCaller(entry.name);
  const allowed = Object.hasOwn(config.triggers, caller) ? config.triggers[caller] : undefined;
  if (allowed === undefined) {
    throw new ConfigError(
      `config: cron.${index}.name: cron entry "${entry.name}" has no "${caller}" key in triggers ` +
        `(add triggers."${caller}": [${entry.operation_id}])${misspeltTriggerKey(config, caller)}`,
    );
  }
  if (!allowed.includes(entry.operation_id)) {
    throw new ConfigError(
      `config: cron.${index}.operation_id: "${entry.operation_id}" is not allowed by triggers."${caller}" ` +
        `([${allowed.join(", ")}])`,
    );
  }
}

/**
 * A cron entry's request follows the rules of any enqueued request (size, nesting, storable text, path parameters),
 * checked once at start-up: each tick's job would otherwise go dead without reaching its target.
 */
function checkCronRequest(entry: CronConfig, index: number, registry: OperationRegistry): void {
  const payload = payloadProblem(entry.request);
  if (payload) throw new ConfigError(`config: cron.${index}.request: ${payload.message}`);
  const operation = registry.get(entry.operation_id);
  if (!operation) return;
  const path = pathParamsProblem({
    path: `${operation.method} ${operation.path}`,
    names: operation.pathParams,
    pathParams: entry.request.path_params ?? {},
  });
  if (path) throw new ConfigError(`config: cron.${index}.request: ${path.message}`);
}

/** Throws `ConfigError` for the first problem of the first cron entry that has one, its checks in the order above. */
export function checkCronEntries(options: { config: Config; registry: OperationRegistry }): void {
  const { config, registry } = options;
  const firstIndexByName = new Map<string, number>();
  config.cron.forEach((entry, index) => {
    const earlier = firstIndexByName.get(entry.name);
    if (earlier !== undefined) {
      throw new ConfigError(
        `config: cron.${index}.name: "${entry.name}" is already the name of cron.${earlier}; cron names must be unique`,
      );
    }
    firstIndexByName.set(entry.name, index);
    checkTimezone(entry, `cron.${index}.timezone`);
    checkSchedule(entry, `cron.${index}.schedule`);
    requireBackgroundOperation({
      registry,
      operationId: entry.operation_id,
      key: `cron.${index}.operation_id`,
      subject: `"${entry.operation_id}" (cron entry "${entry.name}")`,
    });
    checkCronTrigger(entry, index, config);
    checkCronRequest(entry, index, registry);
  });
}

/** Warnings for trigger keys that name no caller: neither an operation, nor a cron entry's caller, nor schedules'. */
function triggerKeyWarnings(config: Config, registry: OperationRegistry): string[] {
  const cronCallers = new Set([...config.cron.map((entry) => cronCaller(entry.name)), SCHEDULE_TRIGGER_KEY]);
  return Object.keys(config.triggers)
    .filter((caller) => registry.get(caller) === undefined && !cronCallers.has(caller))
    .map(
      (caller) =>
        `config: triggers.${caller}: "${caller}" is neither an operation of the OpenAPI document, ` +
        `nor cron:{name} of a cron entry, nor ${SCHEDULE_TRIGGER_KEY} (schedules), so no caller can use this entry` +
        didYouMean(caller, [...operationIds(registry), ...cronCallers]),
    );
}

/**
 * The start-up cross-check of docs/configuration.md: throws `ConfigError` (naming the key) when the config asks for
 * something the document cannot give, the trigger targets checked first, then the cron entries; returns warnings for
 * entries that are merely unused.
 */
export function checkConfigAgainstRegistry(options: { config: Config; registry: OperationRegistry }): {
  warnings: string[];
} {
  const { config, registry } = options;
  const operationNames = checkOperationNames(options);
  checkCronEntries(options);
  return { warnings: [...triggerKeyWarnings(config, registry), ...operationNames.warnings] };
}

/**
 * Start-up warnings for cron entries whose request its target's schemas refuse: each tick's job would be refused by
 * the target. Warnings, not refusals: the schemas are the product's, and the product may accept more than they say.
 */
export function cronRequestWarnings(options: {
  config: Pick<Config, "cron">;
  requestSchemas: RequestSchemas;
}): string[] {
  return options.config.cron.flatMap((entry, index) => {
    const problem = options.requestSchemas.get(entry.operation_id)?.problem(entry.request);
    return problem === undefined ? [] : [`config: cron.${index}.request: its target would refuse it: ${problem}`];
  });
}

/**
 * Refuses to start with a config entry whose name a stored schedule has (created through a node whose config lacked the
 * entry): names are unique, and which of the two `cron:{name}` would mean is for an operator to say. Throws
 * `ConfigError` naming the entry.
 */
export async function checkCronEntriesAgainstSchedules(options: {
  config: Pick<Config, "cron">;
  store: Pick<ScheduleStore, "scheduleList">;
}): Promise<void> {
  const { config, store } = options;
  if (config.cron.length === 0) return;
  const stored = new Set((await store.scheduleList()).map((row) => row.name));
  const index = config.cron.findIndex((entry) => stored.has(entry.name));
  if (index === -1) return;
  const name = config.cron[index]?.name ?? "";
  throw new ConfigError(
    `config: cron.${index}.name: "${name}" is also the name of a schedule created through the API (GET /schedules/${name}); ` +
      `names are unique: rename the entry, or delete the schedule first (DELETE /schedules/${name} on a node whose ` +
      "config lacks the entry)",
  );
}

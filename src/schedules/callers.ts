/**
 * The names cron's jobs call as: every config entry and every schedule created through the API enqueues as
 * `cron:{name}`, and the trigger map says what each may enqueue, under its own key for a config entry, under the one
 * key `cron:*` for the schedules. The config file's `cron` section itself is src/config/cron.ts: config owns the
 * file's format, this folder what the entries mean.
 */

/** The calling operation of cron entry `name`: its key in the trigger map, and its jobs' `enqueued_by_operation_id`. */
export function cronCaller(name: string): string {
  return `cron:${name}`;
}

/**
 * The trigger-map key whose targets schedules created through the API may enqueue (docs/schedules.md, "Who may
 * schedule what"): every such schedule calls as `cron:{name}`, and this one key speaks for all of them.
 */
export const SCHEDULE_TRIGGER_KEY = "cron:*";

/** Where a schedule's definition comes from: the config file, or the API. */
export type ScheduleSource = "config" | "api";

/**
 * The trigger-map key that speaks for a schedule's caller: a config entry's own `cron:{name}` (start-up requires it),
 * the one `cron:*` for every schedule created through the API.
 */
export function triggerKeyOf(options: { source: ScheduleSource; name: string }): string {
  return options.source === "config" ? cronCaller(options.name) : SCHEDULE_TRIGGER_KEY;
}

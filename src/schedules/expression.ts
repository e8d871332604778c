/**
 * When a cron entry or a schedule ticks: its cron expression (5 fields, or 6 with seconds first) read in an IANA time
 * zone. The same rules for the config file's entries (checked at start-up) and for schedules created through the API
 * (checked by the routes): croner computes tick times, and nothing else of it is used.
 */
import { Cron } from "croner";

/** The fields an expression may have: minute hour day-of-month month day-of-week, with seconds first or not. */
const FIELD_COUNTS = [5, 6];

/** Why `timezone` is not an IANA time zone, or undefined. */
export function timezoneProblem(timezone: string): string | undefined {
  const problem = `"${timezone}" is not a valid IANA time zone (e.g. "UTC", "Europe/Paris")`;
  // Newer V8 accepts UTC offsets such as "+01:00"; they are not IANA zones and ignore DST, so refuse them everywhere.
  if (/^[+-]\d/.test(timezone)) return problem;
  try {
    // Checked apart from croner, which may take a zone it cannot honour and fail only when computing a tick.
    new Intl.DateTimeFormat(undefined, { timeZone: timezone });
  } catch {
    return problem;
  }
  return undefined;
}

/** Why `schedule` is not a cron expression of 5 or 6 fields that croner reads in `timezone`, or undefined. */
export function expressionProblem(schedule: string, timezone: string): string | undefined {
  // Exactly 5 or 6 fields: croner also takes nicknames such as "@daily", which docs/delivery.md, "Cron" does not promise.
  const fields = schedule.trim().split(/\s+/).length;
  if (!FIELD_COUNTS.includes(fields)) {
    return (
      `"${schedule}" must have 5 or 6 space-separated fields ` +
      `([seconds] minute hour day-of-month month day-of-week), got ${fields}`
    );
  }
  try {
    // Paused and with no callback, croner only parses: no timer is started.
    new Cron(schedule, { paused: true, timezone }).stop();
  } catch (error) {
    return `"${schedule}" is not a valid cron expression: ${(error as Error).message}`;
  }
  return undefined;
}

/** The first tick strictly after `after` (ms since the epoch), or null if the expression never fires again. */
export function nextTickAfter(options: { schedule: string; timezone: string; after: number }): number | null {
  const next = new Cron(options.schedule, { timezone: options.timezone, paused: true }).nextRun(
    new Date(options.after),
  );
  return next ? next.getTime() : null;
}

/**
 * The jobs a cron entry or a schedule enqueues (docs/delivery.md, "Cron"; docs/schedules.md): one per tick, and one per
 * run now. Both call as `cron:{name}` under the cron authority; they differ in their chain (`original_request_id`)
 * and their run time.
 */
import type { Config, CronConfig } from "../config.js";
import { newJobId } from "../job/job-id.js";
import type { RunTime } from "../job/job.js";
import type { PerOperationSettings } from "../operations/settings.js";
import type { JobInsertParams } from "../store/store.js";
import { cronCaller } from "./callers.js";

/** What a schedule's job is built from. */
interface JobSource {
  config: Pick<Config, "limits">;
  settings: PerOperationSettings;
  entry: CronConfig;
}

function scheduleJob(source: JobSource, chain: { originalRequestId: string; runTime: RunTime }): JobInsertParams {
  const { config, settings, entry } = source;
  const caller = cronCaller(entry.name);
  return {
    id: newJobId(),
    operationId: entry.operation_id,
    priority: entry.priority ?? 0,
    runTime: chain.runTime,
    maxAttempts: settings.of(entry.operation_id).maxAttempts,
    dedupeKey: entry.dedupe_key === undefined ? caller : entry.dedupe_key,
    concurrencyKey: entry.concurrency_key ?? null,
    rateKey: null,
    enqueuedByOperationId: caller,
    parentJobId: null,
    originalRequestId: chain.originalRequestId,
    userId: entry.user_id,
    authority: { kind: "cron", cron_job_name: entry.name, user_id: entry.user_id },
    request: entry.request,
    spawnCap: config.limits.spawn_cap,
    traceparent: null,
    expiry: null,
    callbacks: null,
  };
}

/** The job a tick enqueues: due at the tick, in the chain `cron:{name}:{tick}`. */
export function cronTickJob(options: JobSource & { tickAt: number }): JobInsertParams {
  const { tickAt } = options;
  return scheduleJob(options, {
    originalRequestId: `${cronCaller(options.entry.name)}:${new Date(tickAt).toISOString()}`,
    runTime: { at: tickAt },
  });
}

/**
 * The job an administrator's run now enqueues: due at once (by the store's clock), in a chain of its own,
 * `cron:{name}:manual:{at}`, which no tick's chain can be.
 */
export function cronRunNowJob(options: JobSource & { at: number }): JobInsertParams {
  return scheduleJob(options, {
    originalRequestId: `${cronCaller(options.entry.name)}:manual:${new Date(options.at).toISOString()}`,
    runTime: { delayMs: 0 },
  });
}

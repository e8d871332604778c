/**
 * The clock check: how far this node's clock is from the database's. On PostgreSQL the database's clock decides what
 * is due and what has expired, so a node's skew no longer changes what happens; it still misleads its logs and tokens
 * (delivery tokens carry this node's `iat`/`exp`), so it is measured, exposed as a metric, and warned about.
 */
import type { Logger } from "pino";
import type { StoreLifecycle } from "../store/store.js";
import type { Telemetry } from "../telemetry/events.js";

/** A skew beyond this is logged as a warning. */
export const CLOCK_SKEW_WARN_MS = 1000;
/** How often the skew is measured (and the store's estimate of the database's clock refreshed). */
export const CLOCK_CHECK_INTERVAL_MS = 30_000;

/** Measures the offset once; returns it (database minus node, ms). */
export async function checkClock(options: {
  store: Pick<StoreLifecycle, "clockOffset">;
  telemetry: Telemetry;
  logger: Logger;
}): Promise<number> {
  const offsetMs = await options.store.clockOffset();
  options.telemetry.emit("clock:measured", { offsetMs });
  if (Math.abs(offsetMs) > CLOCK_SKEW_WARN_MS) {
    options.logger.warn(
      { offsetMs: Math.round(offsetMs) },
      "this node's clock differs from the database's by more than a second: the database's clock decides what is " +
        "due and expired, but delivery tokens and logs carry this node's time; check its time synchronisation (NTP)",
    );
  }
  return offsetMs;
}

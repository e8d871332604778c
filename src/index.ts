/**
 * `opqueue`: the service as a library, for embedding and tests. Most users run the `opqueue` command instead;
 * product code uses the package `@opqueue/client` (also served here as `opqueue/client`).
 */
export { createService, type Service, type Worker } from "./service.js";
export { buildApp, type AppOptions } from "./http/app.js";
export { loadConfigFile, parseConfig, ConfigError, type Config } from "./config.js";
export { openStore } from "./store/open-store.js";
export type { Store } from "./store/store.js";
export type { JobRow } from "./job/job.js";
export { mintToken } from "./auth/tokens.js";
export { ManualClock, systemClock, type Clock } from "./clock.js";
export { VERSION } from "./version.js";

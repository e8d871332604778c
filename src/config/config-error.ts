/** `ConfigError` in a file of its own: every part of src/config/ throws it, and none may import src/config.ts. */

/** A problem with the configuration; the CLI prints its message and exits with code 2. */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
}

/** The package version, read once from package.json (one folder above both src/ and dist/). */
import { readFileSync } from "node:fs";

/** opqueue's version, as in package.json. */
export const VERSION: string = (
  JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string }
).version;

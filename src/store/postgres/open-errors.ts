/**
 * What opening the PostgreSQL engine makes of a failure: a mistake in the `database` URL that no wait can mend is a
 * `StoreSetupError` naming the setting, the value and the fix (the CLI prints it on one line and exits 2); a database
 * that cannot serve *yet* is a `StoreUnavailableError`, which `serve` waits out (docs/deploying.md, "Start-up").
 *
 * Mistakes, refused at once:
 * - 3D000 the database does not exist; 28000 the role does not exist (or no pg_hba.conf line lets it in); 28P01 a wrong
 *   password, or a password the server asks for and the URL lacks;
 * - ENOTFOUND, a host name that does not resolve (a DNS server that does not answer, EAI_AGAIN, is waited for);
 * - 42501, a role that may not create opqueue's schema or tables.
 * Waited for: a refused or unreachable address, a server starting up (57P03) or out of connections, a connection
 * timeout: everything `isUnavailable` (errors.ts) names.
 */
import { redactDatabaseUrl } from "../../database-url.js";
import { StoreSetupError } from "../store.js";
import { mapError } from "./errors.js";

/** `host:port` of a URL, for messages. */
function serverOf(url: string): string {
  const parsed = new URL(url);
  return `${parsed.hostname || "localhost"}:${parsed.port || "5432"}`;
}

/** The name in the first pair of double quotes of a server message (`database "x" does not exist`). */
function quoted(message: string): string | undefined {
  return /"([^"]*)"/.exec(message)?.[1];
}

/** The mistake `error` shows in the URL, or undefined when it is none of those named at the top of this file. */
export function setupMistake(error: unknown, url: string): StoreSetupError | undefined {
  const err = error as { code?: string; message?: string; hostname?: string };
  const message = err.message ?? "";
  const at = (problem: string) => new StoreSetupError(`database ${redactDatabaseUrl(url)}: ${problem}`);
  const server = serverOf(url);
  const user = decodeURIComponent(new URL(url).username) || "(the default role)";
  switch (err.code) {
    case "3D000": {
      const name = quoted(message) ?? "";
      return at(
        `PostgreSQL at ${server} has no database "${name}": create it (createdb ${name}), or name an existing database in the URL`,
      );
    }
    case "28000":
      if (/^role "/.test(message)) {
        const role = quoted(message) ?? user;
        return at(
          `PostgreSQL at ${server} has no role "${role}": create it (CREATE ROLE ${role} LOGIN), or name an existing role in the URL`,
        );
      }
      return at(
        `PostgreSQL at ${server} refused the connection (${message}): add a line to its pg_hba.conf that lets this host in`,
      );
    case "28P01":
      return at(
        `PostgreSQL at ${server} refused the password of role "${quoted(message) ?? user}": correct the password in the URL`,
      );
    case "42501":
      return at(
        `role "${user}" lacks a privilege opqueue needs to create its schema and tables (${message}): GRANT CREATE ON ` +
          `DATABASE ${new URL(url).pathname.slice(1) || "(the database)"} TO ${user}, or give it a schema of its own with ?schema=NAME`,
      );
    case "ENOTFOUND":
      return at(
        `the host name "${err.hostname ?? new URL(url).hostname}" does not resolve (ENOTFOUND): correct the host in the URL`,
      );
    default:
      if (/client password must be a string/.test(message)) {
        return at(
          `PostgreSQL at ${server} asks role "${user}" for a password, and the URL gives none: add it (postgres://USER:PASSWORD@HOST/DB)`,
        );
      }
      return undefined;
  }
}

/** The error opening throws: the URL's mistake, else what the engine makes of any other error (`mapError`). */
export function openError(error: unknown, url: string): unknown {
  return setupMistake(error, url) ?? mapError(error);
}

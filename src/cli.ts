#!/usr/bin/env node
/**
 * The `opqueue` command: serve | migrate | token | revoke | erase | rewrap | backup | restore | demo. Exit codes: 0 done, 1 failed at run time,
 * 2 bad configuration or usage.
 */
import { randomBytes } from "node:crypto";
import { statSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs, type ParseArgsConfig } from "node:util";
import { isValidRequestId, REQUEST_ID_RULE } from "./auth/hs256.js";
import { ADMIN_ROLES, mintToken, type AdminRole } from "./auth/tokens.js";
import { BackupError, downloadBackup } from "./backup.js";
import { systemClock } from "./clock.js";
import { ConfigError, loadConfigFile, type Config } from "./config.js";
import { runDemo } from "./demo/demo.js";
import { dashboardUrl, signInLink } from "./http/routes/ui.js";
import { parseDatabaseUrl, redactDatabaseUrl } from "./database-url.js";
import { didYouMean } from "./did-you-mean.js";
import { OperationRegistry } from "./operations/registry.js";
import { createLogger, serve, stopOnSignals } from "./serve.js";
import { openStore, UnsupportedDatabaseError } from "./store/open-store.js";
import { BackupFileError, restoreBackupFile } from "./store/sqlite/backup-file.js";
import { StoreLockedError, StoreSetupError, StoreUnavailableError } from "./store/store.js";
import { VERSION } from "./version.js";

const USAGE = `opqueue ${VERSION}: a durable background job queue

Usage:
  opqueue serve   [--config FILE] [--no-worker] [--no-api]
  opqueue migrate [--config FILE]
  opqueue token   [--config FILE] --sub USER [--op OP (--rid RID | --job JOB)] [--ttl SECONDS]
                  [--role viewer|operator|admin [--ops OP,...] | --site-admin]
                  (an admin token's jti and the dashboard's sign-in link go to stderr)
  opqueue revoke  [--config FILE] (--jti JTI | --issued-before INSTANT|now) [--url URL] [--token TOKEN]
  opqueue erase   [--config FILE] --user-id USER [--cancel-waiting] [--limit N] [--url URL] [--token TOKEN]
  opqueue rewrap  [--config FILE] [--limit N] [--url URL] [--token TOKEN]
  opqueue backup  [--config FILE] --to FILE [--url URL] [--token TOKEN]
  opqueue restore [--config FILE] --from FILE
  opqueue demo
  opqueue --version

The config file may also be named by OPQUEUE_CONFIG. OPQUEUE_DATABASE_URL, OPQUEUE_PORT and OPQUEUE_HOST
override the file.`;

const CONFIG_HELP = `  --config FILE   the config file (YAML or JSON); OPQUEUE_CONFIG names it too. Every key: docs/configuration.md`;

/** Each command's own help, printed by \`opqueue COMMAND --help\`. */
const COMMAND_HELP: Record<string, string> = {
  serve: `Usage: opqueue serve [--config FILE] [--no-worker] [--no-api]

Runs the service: the HTTP API and the worker (dispatcher, lease rescuer, cron, retention), until SIGTERM or SIGINT.
Listens at once (/healthz answers 200), then opens and migrates the database, waiting while it cannot serve yet
(/readyz answers 503 naming what it waits for); a database URL no wait can mend exits 2.

${CONFIG_HELP}
  --no-worker     the API only (a node that answers requests and claims nothing)
  --no-api        the worker only; it still serves /healthz, /readyz and /metrics on listen.ops_port if set`,
  migrate: `Usage: opqueue migrate [--config FILE]

Applies the database's pending migrations and exits (serve migrates too).

${CONFIG_HELP}`,
  token: `Usage: opqueue token [--config FILE] --sub USER [--op OP (--rid RID | --job JOB)] [--ttl SECONDS]
                    [--role viewer|operator|admin [--ops OP,...] | --site-admin]

Mints a token with the first HS256 key of auth.keys, for local use, and prints it. An admin token (no --op) gets a
random jti, printed on stderr with the dashboard's sign-in link: opqueue revoke --jti JTI cuts it off.

${CONFIG_HELP}
  --sub USER      the acting user (an admin token's subject)
  --op OP         makes an enqueue assertion for the calling operation OP: an operationId of the product's OpenAPI
                  document, or cron:NAME for a schedule
  --rid RID       the chain's request id of a root call: 1..255 visible ASCII characters, globally unique
  --job JOB       the job whose delivery makes a chained call
  --role ROLE     an admin token with this role: viewer (reads), operator (also cancels, retries, runs now, pauses,
                  sets limits), admin (everything). docs/api.md, "Roles"
  --ops OP,...    with --role operator: the operations its actions are limited to
  --site-admin    an admin token with site_admin: true (the same as --role admin)
  --ttl SECONDS   lifetime (default: 300 for an assertion, its most; 3600 for an admin token, at most 86400)`,
  backup: `Usage: opqueue backup [--config FILE] --to FILE [--url URL] [--token TOKEN]

Copies the database of a running SQLite node without stopping it (GET /admin/backup: SQLite's online backup, made
between the service's other work), checks the copy (integrity, opqueue schema) and renames it onto FILE.
A PostgreSQL node has no such copy: back it up with pg_dump.

${CONFIG_HELP}
  --to FILE       where the copy goes (replaced whole, or left as it was if anything fails)
  --url URL       the service (default: listen.host and listen.port of the config)
  --token TOKEN   a site admin token (default: one minted with the first HS256 key of auth.keys, valid 60 s)`,
  restore: `Usage: opqueue restore [--config FILE] --from FILE

Puts a backup in place of the config's SQLite database, for a node that is stopped: refused while a service holds
the database. Checks the backup first (integrity, opqueue schema, a schema version no newer than this opqueue's);
serve migrates it on its next start.

${CONFIG_HELP}
  --from FILE     the backup (only read)`,
  revoke: `Usage: opqueue revoke [--config FILE] (--jti JTI | --issued-before INSTANT|now) [--url URL] [--token TOKEN]

Revokes admin tokens through a running service (POST /admin/revocations), stored in the database: every node refuses
them from its next request on. Keys need not change.

${CONFIG_HELP}
  --jti JTI             the admin token with this jti (opqueue token prints it)
  --issued-before T     every admin token issued before T (an ISO 8601 instant, or now), and every one without iat
  --url URL             the service (default: listen.host and listen.port of the config)
  --token TOKEN         an admin token with role admin (default: one minted with the first HS256 key of auth.keys,
                        valid 60 s)`,
  erase: `Usage: opqueue erase [--config FILE] --user-id USER [--cancel-waiting] [--limit N] [--url URL] [--token TOKEN]

Erases one user's data through a running service (POST /admin/erasures, called until nothing is left): the requests,
results and error bodies of the user's finished jobs, on every node. Waiting jobs keep theirs unless --cancel-waiting
cancels them first; running ones are erased by a later run, once finished. The audit names the user by a digest.

${CONFIG_HELP}
  --user-id USER        the user whose data goes
  --cancel-waiting      first cancel the user's waiting (pending, retrying) jobs, whose data then goes too
  --limit N             jobs per call, 1 to 1000 (default 100)
  --url URL             the service (default: listen.host and listen.port of the config)
  --token TOKEN         an admin token with role admin (default: one minted with the first HS256 key of auth.keys,
                        valid 60 s)`,
  rewrap: `Usage: opqueue rewrap [--config FILE] [--limit N] [--url URL] [--token TOKEN]

Re-encrypts every stored payload under the first key of encryption.keys through a running service
(POST /admin/encryption/rewrap, called until its pass is done), and encrypts those still in clear. Run it after
moving a new key first on every node; then the older keys can go (docs/encryption.md, "Rotating keys").

${CONFIG_HELP}
  --limit N             rows per call, 1 to 1000 (default 200)
  --url URL             the service (default: listen.host and listen.port of the config)
  --token TOKEN         an admin token with role admin (default: one minted with the first HS256 key of auth.keys,
                        valid 60 s)`,
  demo: `Usage: opqueue demo

Runs the demo (npm start): the service on SQLite and the example product, signing a user up every 5 seconds.`,
};

/** A mistake in how the command was called: printed with the usage. */
class UsageError extends Error {}

/** A value of the command line that cannot work: printed alone, on one line, exit 2. */
class CommandError extends Error {}

/** A command that could not be done at run time (a service that cannot be reached or refuses): printed alone, exit 1. */
class RunError extends Error {}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  const help = command === undefined ? undefined : COMMAND_HELP[command];
  if (help !== undefined && (rest.includes("--help") || rest.includes("-h"))) {
    console.log(help);
    return;
  }
  switch (command) {
    case "serve":
      return serveCommand(rest);
    case "migrate":
      return migrateCommand(rest);
    case "token":
      return tokenCommand(rest);
    case "revoke":
      return revokeCommand(rest);
    case "erase":
      return eraseCommand(rest);
    case "rewrap":
      return rewrapCommand(rest);
    case "backup":
      return backupCommand(rest);
    case "restore":
      return restoreCommand(rest);
    case "demo":
      return demoCommand(rest);
    case "--version":
    case "-v":
      console.log(VERSION);
      return;
    case undefined:
    case "help":
    case "--help":
    case "-h":
      console.log(USAGE);
      return;
    default:
      throw new UsageError(`unknown command "${command}"${didYouMean(command, Object.keys(COMMAND_HELP))}`);
  }
}

function parse<const T extends NonNullable<ParseArgsConfig["options"]>>(args: string[], options: T) {
  try {
    return parseArgs<{ args: string[]; options: T; strict: true; allowPositionals: false }>({
      args,
      options,
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

async function serveCommand(args: string[]): Promise<void> {
  const values = parse(args, {
    config: { type: "string" },
    "no-worker": { type: "boolean" },
    "no-api": { type: "boolean" },
  });
  const { config } = loadConfigFile({ path: values.config });
  const logger = createLogger();
  if (values["no-api"] && values["no-worker"])
    throw new UsageError("serve: --no-api and --no-worker leave nothing to run");
  const running = await serve({ config, api: !values["no-api"], worker: !values["no-worker"], logger });
  stopOnSignals(running, logger);
}

async function migrateCommand(args: string[]): Promise<void> {
  const values = parse(args, { config: { type: "string" } });
  const { config } = loadConfigFile({ path: values.config, secrets: "none" });
  const store = await openStore({
    url: config.database,
    clock: systemClock,
    onWarning: (message) => console.error(`opqueue: ${message}`),
  });
  await store.close();
  console.log(`migrated ${redactDatabaseUrl(config.database)}`);
}

async function tokenCommand(args: string[]): Promise<void> {
  const values = parse(args, {
    config: { type: "string" },
    sub: { type: "string" },
    op: { type: "string" },
    rid: { type: "string" },
    job: { type: "string" },
    "site-admin": { type: "boolean" },
    role: { type: "string" },
    ops: { type: "string" },
    ttl: { type: "string" },
  });
  if (!values.sub) throw new UsageError("token: --sub USER is required");
  const role = values.role as AdminRole | undefined;
  if (role !== undefined && !(ADMIN_ROLES as readonly string[]).includes(role)) {
    throw new UsageError(`token: --role takes ${ADMIN_ROLES.join(", ")}`);
  }
  if (values.op !== undefined && (role !== undefined || values["site-admin"])) {
    throw new UsageError("token: --role and --site-admin make an admin token; --op makes an enqueue assertion");
  }
  if (role !== undefined && values["site-admin"]) throw new UsageError("token: give --role or --site-admin, not both");
  const operations = values.ops?.split(",").map((op) => op.trim());
  if (operations !== undefined && role !== "operator") {
    throw new UsageError("token: --ops limits an operator: give it with --role operator");
  }
  if (operations?.some((op) => op === "")) throw new UsageError("token: --ops takes operationIds separated by commas");
  // The service would refuse the assertion with 401; saying so here names the flag at fault.
  if (values.rid !== undefined && !isValidRequestId(values.rid)) {
    throw new UsageError(`token: --rid must be ${REQUEST_ID_RULE}`);
  }
  if (values.op && !values.rid && !values.job) {
    throw new UsageError("token: an enqueue assertion (--op) needs --rid (a root call) or --job (a chained call)");
  }
  let ttlSeconds: number | undefined;
  if (values.ttl !== undefined) {
    ttlSeconds = Number(values.ttl);
    if (!Number.isInteger(ttlSeconds) || ttlSeconds <= 0)
      throw new UsageError("token: --ttl takes a positive number of seconds");
  }
  const { config } = loadConfigFile({ path: values.config, secrets: "minting" });
  if (values.op) checkCallingOperation(values.op, config);
  const admin = values.op === undefined;
  // Hex, not base64url: a jti that began with "-" (one in 64 did) was read by `revoke --jti JTI` as another option.
  const jti = admin ? randomBytes(16).toString("hex") : undefined;
  const token = await mintToken({
    auth: config.auth,
    clock: systemClock,
    sub: values.sub,
    ...(values.op ? { op: values.op } : {}),
    ...(values.rid ? { rid: values.rid } : {}),
    ...(values.job ? { job: values.job } : {}),
    ...(values["site-admin"] ? { siteAdmin: true } : {}),
    ...(role !== undefined ? { role } : {}),
    ...(operations !== undefined ? { operations } : {}),
    ...(jti !== undefined ? { jti } : {}),
    ...(ttlSeconds !== undefined ? { ttlSeconds } : {}),
  });
  console.log(token);
  // On stderr, so that `$(opqueue token ...)` still captures the bare token.
  if (jti !== undefined) console.error(`jti: ${jti} (opqueue revoke --jti ${jti} cuts this token off)`);
  if (role !== undefined || values["site-admin"]) {
    console.error(`Sign-in link: ${signInLink(dashboardUrl(config.listen), token)}`);
  }
}

/** The lifetime of the admin token `revoke` and `erase` mint: each request's is checked once, when it arrives. */
const ADMIN_CALL_TOKEN_TTL_S = 60;

/**
 * A caller of a running service's admin API, for `revoke` and `erase`: the service at `--url` (else the config's
 * listen address), with `--token` (else an admin token minted with the first HS256 key, valid a minute). Returns a
 * function that POSTs a body to a path and answers the parsed 200, or throws `RunError` saying what went wrong.
 */
async function adminCaller(
  command: string,
  values: { config?: string | undefined; url?: string | undefined; token?: string | undefined },
): Promise<(path: string, body: unknown) => Promise<unknown>> {
  const { config } = loadConfigFile({ path: values.config, secrets: values.token === undefined ? "minting" : "none" });
  if (values.url === undefined && config.listen.port === 0) {
    throw new UsageError(
      `${command}: listen.port is 0 (any free port), so the service's address is unknown: give --url`,
    );
  }
  const base = values.url ?? dashboardUrl(config.listen);
  const mint = () =>
    mintToken({
      auth: config.auth,
      clock: systemClock,
      sub: `opqueue-${command}`,
      role: "admin",
      ttlSeconds: ADMIN_CALL_TOKEN_TTL_S,
    });
  return async (path, body) => {
    const url = new URL(path, base).href;
    let response: Response;
    try {
      response = await fetch(url, {
        method: "POST",
        headers: { authorization: `Bearer ${values.token ?? (await mint())}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    } catch (error) {
      throw new RunError(`${command}: cannot reach ${url}: ${(error as Error).cause ?? (error as Error).message}`);
    }
    const text = await response.text();
    if (!response.ok) throw new RunError(`${command}: ${url} answered ${response.status}: ${text.slice(0, 500)}`);
    return JSON.parse(text) as unknown;
  };
}

async function revokeCommand(args: string[]): Promise<void> {
  const values = parse(args, {
    config: { type: "string" },
    jti: { type: "string" },
    "issued-before": { type: "string" },
    url: { type: "string" },
    token: { type: "string" },
  });
  const given = [values.jti, values["issued-before"]].filter((value) => value !== undefined);
  if (given.length !== 1) throw new UsageError("revoke: give --jti JTI or --issued-before INSTANT (one of them)");
  let issuedBefore: string | undefined;
  if (values["issued-before"] !== undefined) {
    const text = values["issued-before"];
    const instant = text === "now" ? Date.now() : Date.parse(text);
    if (Number.isNaN(instant)) throw new UsageError("revoke: --issued-before takes an ISO 8601 instant, or now");
    issuedBefore = new Date(instant).toISOString();
  }
  const call = await adminCaller("revoke", values);
  const answer = (await call(
    "/admin/revocations",
    values.jti !== undefined ? { jti: values.jti } : { issued_before: issuedBefore },
  )) as {
    token?: { jti: string; revoked_at: string; revoked_by: string };
    cutoff?: { issued_before: string; revoked_at: string; revoked_by: string };
  };
  if (answer.token) {
    console.log(`revoked jti ${answer.token.jti} (at ${answer.token.revoked_at} by ${answer.token.revoked_by})`);
  } else if (answer.cutoff) {
    console.log(
      `revoked every admin token issued before ${answer.cutoff.issued_before} (at ${answer.cutoff.revoked_at} by ` +
        `${answer.cutoff.revoked_by})`,
    );
  }
}

/** Calls of `rewrap` at most: 200,000,000 rows at the most a call reads. */
const MAX_REWRAP_CALLS = 200_000;

async function rewrapCommand(args: string[]): Promise<void> {
  const values = parse(args, {
    config: { type: "string" },
    limit: { type: "string" },
    url: { type: "string" },
    token: { type: "string" },
  });
  const limit = values.limit === undefined ? 200 : Number(values.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new UsageError("rewrap: --limit takes 1 to 1000");
  const call = await adminCaller("rewrap", values);
  let rewrapped = 0;
  let examined = 0;
  let cursor: string | null = null;
  for (let calls = 0; calls < MAX_REWRAP_CALLS; calls++) {
    const answer = (await call("/admin/encryption/rewrap", { limit, ...(cursor === null ? {} : { cursor }) })) as {
      rewrapped: number;
      examined: number;
      key_id: string;
      cursor: string | null;
    };
    rewrapped += answer.rewrapped;
    examined += answer.examined;
    cursor = answer.cursor;
    if (cursor === null) {
      console.log(`rewrote ${rewrapped} stored payload(s) of ${examined} row(s) under key ${answer.key_id}`);
      return;
    }
  }
  throw new RunError(`rewrap: the pass did not end after ${MAX_REWRAP_CALLS} calls; run it again`);
}

/** Calls of `erase` at most: 1,000,000 jobs at the default limit, far more than one user has. */
const MAX_ERASE_CALLS = 10_000;

async function eraseCommand(args: string[]): Promise<void> {
  const values = parse(args, {
    config: { type: "string" },
    "user-id": { type: "string" },
    "cancel-waiting": { type: "boolean" },
    limit: { type: "string" },
    url: { type: "string" },
    token: { type: "string" },
  });
  const userId = values["user-id"];
  if (!userId) throw new UsageError("erase: --user-id USER is required");
  const limit = values.limit === undefined ? 100 : Number(values.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new UsageError("erase: --limit takes 1 to 1000");
  const call = await adminCaller("erase", values);
  let erased = 0;
  let cancelled = 0;
  for (let calls = 0; calls < MAX_ERASE_CALLS; calls++) {
    const answer = (await call("/admin/erasures", {
      user_id: userId,
      cancel_waiting: values["cancel-waiting"] === true,
      limit,
    })) as { subject: string; erased: number; cancelled: number; waiting: number; running: number; more: boolean };
    erased += answer.erased;
    cancelled += answer.cancelled;
    if (answer.more) continue;
    console.log(
      `erased the data of ${erased} job(s) of the user (subject ${answer.subject}), cancelled ${cancelled}; ` +
        `${answer.waiting} waiting and ${answer.running} running job(s) left` +
        (answer.running > 0 ? ": run again once the running ones have finished" : ""),
    );
    return;
  }
  throw new RunError(`erase: still more to erase after ${MAX_ERASE_CALLS} calls; run it again`);
}

/**
 * Refuses an enqueue assertion whose calling operation the service would never know: `--op` must be an operation of
 * the product's OpenAPI document, or `cron:NAME` (a schedule's calls).
 */
function checkCallingOperation(op: string, config: Config): void {
  if (op.startsWith("cron:")) return;
  const ids = OperationRegistry.fromFile(config.openapi)
    .all()
    .map((operation) => operation.operationId);
  if (ids.includes(op)) return;
  throw new CommandError(
    `token: --op "${op}" is not an operation of the product's OpenAPI document (openapi: ${config.openapi})` +
      `${didYouMean(op, ids)}; give an operationId of that document, or cron:NAME for a schedule`,
  );
}

/** The lifetime of the admin token `backup` mints: it is checked once, when the request arrives. */
const BACKUP_TOKEN_TTL_S = 60;

async function backupCommand(args: string[]): Promise<void> {
  const values = parse(args, {
    config: { type: "string" },
    to: { type: "string" },
    url: { type: "string" },
    token: { type: "string" },
  });
  if (!values.to) throw new UsageError("backup: --to FILE is required");
  // A token given is sent as it is: no key is read then.
  const { config } = loadConfigFile({ path: values.config, secrets: values.token === undefined ? "minting" : "none" });
  const to = resolve(values.to);
  const database = parseDatabaseUrl(config.database);
  // Renamed onto the live file, the copy would take its place while the service went on writing to the old one.
  if (database?.engine === "sqlite" && resolve(database.path) === to) {
    throw new UsageError(`backup: --to names the database itself (${to}); write the copy elsewhere`);
  }
  if (statSync(to, { throwIfNoEntry: false })?.isDirectory())
    throw new UsageError(`backup: --to ${to} is a folder; name a file`);
  if (values.url === undefined && config.listen.port === 0) {
    throw new UsageError("backup: listen.port is 0 (any free port), so the service's address is unknown: give --url");
  }
  const url = values.url ?? new URL("/", dashboardUrl(config.listen)).href;
  const token =
    values.token ??
    (await mintToken({
      auth: config.auth,
      clock: systemClock,
      sub: "opqueue-backup",
      siteAdmin: true,
      ttlSeconds: BACKUP_TOKEN_TTL_S,
    }));
  const backup = await downloadBackup({ url, token, to });
  console.log(
    `backed up ${backup.endpoint} to ${to}: ${backup.bytes} bytes, ${backup.jobs} jobs, schema version ` +
      `${backup.schemaVersion}, integrity ok`,
  );
}

async function restoreCommand(args: string[]): Promise<void> {
  const values = parse(args, { config: { type: "string" }, from: { type: "string" } });
  if (!values.from) throw new UsageError("restore: --from FILE is required");
  const { config } = loadConfigFile({ path: values.config, secrets: "none" });
  const database = parseDatabaseUrl(config.database);
  if (database?.engine === "postgres") {
    throw new BackupError("restore: this config's database is PostgreSQL; restore a pg_dump of it with pg_restore", 2);
  }
  if (database?.engine !== "sqlite" || database.path === ":memory:") {
    throw new BackupError(`restore: the database ${redactDatabaseUrl(config.database)} is no file to restore into`, 2);
  }
  const from = resolve(values.from);
  if (!statSync(from, { throwIfNoEntry: false })?.isFile())
    throw new UsageError(`restore: --from ${from} is not a file`);
  const restored = restoreBackupFile({ from, to: database.path });
  console.log(
    `restored ${database.path} from ${from} (${restored.bytes} bytes, ${restored.jobs} jobs, schema version ` +
      `${restored.schemaVersion})${restored.replaced ? ", replacing the database that was there and its -wal and -shm files" : ""}` +
      (restored.schemaVersion < restored.latestSchemaVersion
        ? `; serve migrates it to version ${restored.latestSchemaVersion} when it starts`
        : ""),
  );
}

/** `npm start`: the service on SQLite with the bundled example product. */
async function demoCommand(args: string[]): Promise<void> {
  parse(args, {});
  await runDemo();
}

/**
 * The exit code of an error the command expects, printed as its one-line message: 2 for a mistake of configuration or
 * usage, 1 for a failure at run time. Undefined for anything else: a bug, printed with its stack.
 */
function expectedExitCode(error: unknown): number | undefined {
  if (error instanceof ConfigError || error instanceof CommandError) return 2;
  if (error instanceof UnsupportedDatabaseError || error instanceof StoreSetupError) return 2;
  if (error instanceof BackupError) return error.exitCode;
  if (error instanceof RunError) return 1;
  if (error instanceof BackupFileError || error instanceof StoreLockedError || error instanceof StoreUnavailableError)
    return 1;
  return undefined;
}

main(process.argv.slice(2)).catch((error: unknown) => {
  if (error instanceof UsageError) {
    console.error(`opqueue: ${error.message}\n\n${USAGE}`);
    process.exit(2);
  }
  const exitCode = expectedExitCode(error);
  if (exitCode !== undefined) {
    const message = (error as Error).message;
    // The store names the `database` setting; the environment variable may be what set it.
    const fromEnv =
      error instanceof StoreSetupError && process.env["OPQUEUE_DATABASE_URL"]
        ? " (database is set by OPQUEUE_DATABASE_URL)"
        : "";
    console.error(
      `opqueue: ${error instanceof StoreUnavailableError ? `the database is unavailable: ${message}` : message}${fromEnv}`,
    );
    process.exit(exitCode);
  }
  if ((error as NodeJS.ErrnoException).code === "EADDRINUSE") {
    console.error(
      `opqueue: ${(error as Error).message}: another program uses that port; set OPQUEUE_PORT or listen.port`,
    );
    process.exit(1);
  }
  console.error("opqueue: failed:", error);
  process.exit(1);
});

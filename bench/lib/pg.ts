/** The local PostgreSQL server the benchmarks use: fresh schemas, clean-up, and what to record about the server. */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { readProcStat, type CpuRoot } from "./cpu.js";

/** The database every PostgreSQL scenario uses (each system in a fresh schema). */
export const PG_URL = process.env["BENCH_DATABASE_URL"] ?? "postgres://postgres@127.0.0.1:5432/postgres";

/** A connected client for the harness's own statements (schema creation, bulk inserts, counts). */
export async function adminClient(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: PG_URL, application_name: "bench-harness" });
  await client.connect();
  return client;
}

/**
 * Writes PostgreSQL's dirty buffers out now (CHECKPOINT), so what the previous scenario wrote (a million-job backlog,
 * the peers' tables) is not flushed during the next one's measurements. Best effort: an unreachable server or a
 * role without the right to checkpoint only leaves the flush to PostgreSQL's own schedule.
 */
export async function checkpoint(): Promise<void> {
  try {
    const client = await adminClient();
    try {
      await client.query("CHECKPOINT");
    } finally {
      await client.end();
    }
  } catch {
    // Nothing to settle, or not allowed to: the scenario runs all the same.
  }
}

/** A fresh schema name: `prefix_` plus random hex (lower case, as opqueue's `?schema=` requires). */
export function freshSchema(prefix: string): string {
  return `${prefix}_${randomBytes(5).toString("hex")}`;
}

/** The opqueue database URL of a schema, with the node's application name. */
export function opqueueUrl(schema: string, applicationName = "bench-opqueue"): string {
  const url = new URL(PG_URL);
  url.searchParams.set("schema", schema);
  url.searchParams.set("application_name", applicationName);
  return url.toString();
}

/** Every schema these benchmarks create starts with one of these prefixes, so leftovers can be found. */
export const SCHEMA_PREFIXES = ["bench_opq", "bench_gw", "bench_boss", "bench_bmq"];

/** Drops a schema and everything in it. */
export async function dropSchema(schema: string): Promise<void> {
  const client = await adminClient();
  try {
    // Connections still open in the schema (a process that did not stop) would hold locks; end them first.
    await client.query("DROP SCHEMA IF EXISTS " + pg.escapeIdentifier(schema) + " CASCADE");
  } finally {
    await client.end();
  }
}

/** Drops schemas left behind by an interrupted run. */
export async function dropLeftoverSchemas(): Promise<string[]> {
  const client = await adminClient();
  try {
    const like = SCHEMA_PREFIXES.map((prefix) => `nspname LIKE '${prefix}\\_%'`).join(" OR ");
    const { rows } = await client.query<{ nspname: string }>(`SELECT nspname FROM pg_namespace WHERE ${like}`);
    for (const { nspname } of rows) await client.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(nspname)} CASCADE`);
    return rows.map((row) => row.nspname);
  } finally {
    await client.end();
  }
}

/**
 * Refuses to measure while something holds back the server's oldest snapshot: a session idle in a transaction (a
 * test or a psql left open), a long transaction, a prepared transaction, a replication slot. While one does, no row
 * version dead since it began can be pruned or vacuumed, so every claim and insert steps over all of them, and the
 * figures measure that instead of opqueue (a session left idle in a transaction for half an hour made a capacity
 * check read 0.25 of the model instead of 0.46, and the server's CPU per job 560 µs instead of 300).
 */
export async function assertNoHeldSnapshot(): Promise<void> {
  const client = await adminClient();
  try {
    const { rows } = await client.query<{ holder: string }>(
      `SELECT format('session %s (%s, %s for %s s: %s)', pid, coalesce(nullif(application_name, ''), 'no name'),
          state, floor(extract(epoch FROM now() - xact_start)), left(query, 60)) AS holder
        FROM pg_stat_activity
        WHERE pid <> pg_backend_pid() AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
          AND xact_start < now() - interval '10 seconds'
      UNION ALL
      SELECT format('prepared transaction %L', gid) FROM pg_prepared_xacts
      UNION ALL
      SELECT format('replication slot %L', slot_name) FROM pg_replication_slots
        WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL`,
    );
    if (rows.length > 0) {
      throw new Error(
        `PostgreSQL at ${new URL(PG_URL).host}: ${rows.map((row) => row.holder).join("; ")} holds back the ` +
          "server's oldest snapshot, so dead rows pile up and every figure would measure that. End it " +
          "(SELECT pg_terminate_backend(pid), ROLLBACK PREPARED, pg_drop_replication_slot) and run again.",
      );
    }
  } finally {
    await client.end();
  }
}

/** The server's version and the settings that decide durability and capacity. */
export async function serverInfo(): Promise<Record<string, string>> {
  const client = await adminClient();
  try {
    const info: Record<string, string> = {};
    info["version"] =
      (await client.query<{ server_version: string }>("SHOW server_version")).rows[0]?.server_version ?? "?";
    for (const name of [
      "synchronous_commit",
      "fsync",
      "full_page_writes",
      "wal_level",
      "shared_buffers",
      "max_connections",
    ]) {
      const { rows } = await client.query<Record<string, string>>(`SHOW ${name}`);
      info[name] = rows[0]?.[name] ?? "?";
    }
    return info;
  } finally {
    await client.end();
  }
}

/** Waits until a connection with this application_name is open (a worker-only node has no HTTP to poll). */
export async function waitForApplication(applicationName: string, timeoutMs = 30_000): Promise<void> {
  const client = await adminClient();
  try {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const { rows } = await client.query("SELECT 1 FROM pg_stat_activity WHERE application_name = $1", [
        applicationName,
      ]);
      if (rows.length > 0) return;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    throw new Error(`no connection named ${applicationName} within ${timeoutMs} ms`);
  } finally {
    await client.end();
  }
}

/**
 * The local server's processes, for reading their CPU: the postmaster (the parent of this connection's backend) and
 * every process under it. Null, with the reason, when the server is not a process of this machine (or /proc does not
 * show it): its CPU cannot be read here.
 */
export async function postgresServer(): Promise<{ root: CpuRoot } | { root: null; reason: string }> {
  const client = await adminClient();
  try {
    const { rows } = await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
    const backend = readProcStat(`/proc/${rows[0]?.pid ?? 0}/stat`);
    const postmaster = backend ? readProcStat(`/proc/${backend.ppid}/stat`) : null;
    if (!backend || backend.comm !== "postgres" || !postmaster || postmaster.comm !== "postgres") {
      return {
        root: null,
        reason: `the PostgreSQL server at ${new URL(PG_URL).host} is not a process this machine's /proc shows`,
      };
    }
    return { root: { pid: backend.ppid, scope: "tree" } };
  } finally {
    await client.end();
  }
}

/**
 * What PostgreSQL nodes doing nothing cost the server (issue 31; docs/performance.md, "What nodes cost doing
 * nothing"): `npx tsx bench/idle-nodes.ts [--nodes 3] [--seconds 20] [--set chains.check_ms=60000 ...]`.
 *
 * Starts `--nodes` serve processes on one fresh schema with no job, waits 3 s for their start-up, and reads over
 * `--seconds`: the server's CPU (the postmaster and every process under it, as `npm run bench` reads it), the
 * transactions committed in the database and the WAL written (`pg_stat_database`, `pg_stat_wal`), each per second and
 * per node. What they do is their polls, leases and maintenance passes; `--set path=value` (repeatable) changes a
 * setting of their config for an experiment, so each pass's share can be read by turning it down. `--opqueue-dir DIR`
 * runs the build in DIR (its dist/cli.js) instead of this checkout's: an earlier commit, measured the same way.
 */
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Context, SIZES } from "./lib/context.js";
import { SystemCpu } from "./lib/cpu.js";
import { requireBuild, useOpqueueBuild } from "./lib/opqueue.js";
import { adminClient } from "./lib/pg.js";
import { OpqueueDb } from "./scenarios/common.js";

const { values } = parseArgs({
  options: {
    nodes: { type: "string", default: "3" },
    seconds: { type: "string", default: "20" },
    set: { type: "string", multiple: true },
    "opqueue-dir": { type: "string" },
  },
});
const nodes = Number(values.nodes);
const seconds = Number(values.seconds);

/** `raw` with each `path=value` of --set written in (a number when it reads as one). */
function withSettings(raw: Record<string, unknown>, settings: string[]): Record<string, unknown> {
  for (const setting of settings) {
    const [path = "", text = ""] = setting.split("=");
    const keys = path.split(".");
    let at = raw;
    for (const key of keys.slice(0, -1)) at = (at[key] ??= {}) as Record<string, unknown>;
    at[keys.at(-1) ?? ""] = Number.isFinite(Number(text)) ? Number(text) : text;
  }
  return raw;
}

/** The database's committed transactions and the server's WAL bytes so far. */
async function counters(): Promise<{ commits: number; walBytes: number }> {
  const client = await adminClient();
  try {
    const row = (
      await client.query<{ commits: string; wal: string }>(
        `SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS commits,
           (SELECT wal_bytes FROM pg_stat_wal) AS wal`,
      )
    ).rows[0];
    return { commits: Number(row?.commits ?? 0), walBytes: Number(row?.wal ?? 0) };
  } finally {
    await client.end();
  }
}

async function main(): Promise<void> {
  if (values["opqueue-dir"] !== undefined) {
    requireBuild(values["opqueue-dir"], "--opqueue-dir");
    useOpqueueBuild(values["opqueue-dir"]);
  }
  const ctx = new Context("quick", SIZES.quick, ["postgres"], { peers: false });
  try {
    const server = await ctx.postgresServer();
    if (server.root === null) throw new Error(`the server's CPU cannot be read: ${server.reason}`);
    const db = await OpqueueDb.create(ctx, "postgres", "idle-nodes", await ctx.targetOrigin());
    writeFileSync(db.setup.configPath, JSON.stringify(withSettings(db.setup.raw, values.set ?? []), null, 2));
    const serves = await db.startIdleNodes(nodes);
    try {
      const cpu = new SystemCpu({ system: [], database: server.root });
      const cpuBefore = cpu.read().databaseMs ?? 0;
      const before = await counters();
      await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
      const cpuMs = (cpu.read().databaseMs ?? 0) - cpuBefore;
      const after = await counters();
      // The two reads of the counters are two transactions of this script's own.
      const commits = after.commits - before.commits - 1;
      const perSecond = (value: number) => value / seconds;
      const figures = {
        nodes,
        seconds,
        settings: values.set ?? [],
        serverCpuMsPerSecond: perSecond(cpuMs),
        serverCpuMsPerSecondPerNode: perSecond(cpuMs) / nodes,
        commitsPerSecondPerNode: perSecond(commits) / nodes,
        walBytesPerSecondPerNode: perSecond(after.walBytes - before.walBytes) / nodes,
      };
      console.log(JSON.stringify(figures, null, 2));
    } finally {
      for (const serve of serves) await serve.stop();
    }
  } finally {
    await ctx.close();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);

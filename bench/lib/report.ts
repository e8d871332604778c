/**
 * BENCHMARKS.md, generated from a results file: how the figures were produced (command, date, machine, versions,
 * settings), the goals table, then one table per scenario with each figure as median (min–max) of its runs.
 * The generator owns the whole file, including the method section below. Section 6, flow control, is measured apart
 * (bench/flow.ts and bench/drain-compare.ts) and comes from the newest bench/results/flow-*.json.
 */
import { batchRatios, evaluateGoals, goalEngineLabel } from "./goals.js";
import { jobsPerRun, SIZES, type Sizes } from "./context.js";
import { newestFlowSection } from "./flow-report.js";
import { ROOT } from "./ipc.js";
import { serverCpuMedian } from "./cpu.js";
import {
  NODE_COUNTS,
  nodesSystem,
  type Engine,
  type Figure,
  type Results,
  type ScenarioId,
  type ScenarioResult,
} from "./results.js";
import { formatNumber, formatSummary } from "./stats.js";

const METHOD = `## How these figures are made

- **Processes.** opqueue always runs as a real \`node dist/cli.js serve\` child process with a generated config
  (\`OPQUEUE_LOG_LEVEL=warn\`, \`limits.spawn_cap\` 2,000,000,000, \`worker.concurrency\` 64: at most 64 deliveries in
  flight, and up to 32 jobs claimed ahead of free slots while deliveries are quick, as README's "Claims" says,
  much as graphile-worker's batched local queue fetches ahead). The load generator
  (\`bench/lib/loadgen.ts\`: an undici keep-alive pool, one request in flight per connection, a closed loop like
  autocannon), the no-op target (\`bench/peers/target.ts\`: node:http answering 204) and every reference server or
  worker (\`bench/peers/\`) each run in a process of their own. All share one 2-vCPU machine, so the load generator
  and the target take CPU from the system measured, equally for every system.
- **Durability stays on.** opqueue on SQLite: WAL with \`synchronous=FULL\`, a temporary file. On PostgreSQL: the
  server's \`synchronous_commit=on\`, a fresh \`?schema=\` per database, dropped afterwards. graphile-worker and pg-boss
  run on the same local PostgreSQL server, each in a fresh schema, with the server's durable defaults. BullMQ
  (\`bench/lib/bullmq.ts\`) runs on a fresh Redis server of the harness's own per row, with its production guide's
  settings (AOF on, \`maxmemory-policy noeviction\`): "AOF always" fsyncs before answering, as durable as opqueue;
  "AOF everysec", the guide's suggestion, may lose the last second of acknowledged jobs to a power cut; and on its
  PostgreSQL backend (new in BullMQ 6) in a fresh schema of the same server. No goal names BullMQ; its rows are for
  comparison.
- **Enqueue (1).** 32 clients POST \`/jobs\` for \`buildReport\` with \`delay_ms\` one hour (nothing is delivered), each
  with a valid assertion minted for that request (its own chain), as a product whose every request enqueues a job
  would send; the full mode adds rows reusing 256 assertions in turn (opqueue remembers verified tokens, so the
  difference is the verification's cost). References: a bare Fastify route that parses the body and answers 201
  (the HTTP limit); Fastify routes that validate the same body (opqueue's own TypeBox schema) and call
  graphile-worker's \`addJob\`, pg-boss's \`send\` or BullMQ's \`Queue.add\`. The reference routes do not verify an
  assertion.
- **Drain (2).** The jobs are inserted in bulk straight into the database (SQL matching
  \`migrations/*/0001_init.sql\`; peers through their batch insert APIs). opqueue needs a fresh serve process per run
  (SQLite's file is locked by a running node), so its jobs are inserted due a few seconds ahead; the node starts,
  enqueues and delivers a batch of warm-up jobs over HTTP (to another path, not counted), and then the measured jobs
  fall due. Peer workers live in one process for all their runs, after one unmeasured warm-up drain. The rate is
  counted at the target between the first and the last arrival; "incl. ramp-up" counts from the due time (opqueue)
  or the worker's start call (peers) instead of the first arrival.
  References: the load generator sending the same request straight to the target with 64 connections (the
  delivery limit); graphile-worker 0.17 with \`concurrency: 64, maxPoolSize: 65\` (it warns below the concurrency),
  otherwise default, and "batched" adding its performance guide's \`localQueue: {size: 500}, completeJobBatchDelay: 0,
  failJobBatchDelay: 0\`; pg-boss 10 with its defaults and 8 \`work()\` loops × \`batchSize\` 64 at its minimum
  polling interval (0.5 s), which bounds it near 1,000 jobs/s; BullMQ with one \`Worker\` of \`concurrency\` 64 and
  its defaults (finished jobs kept). Peer tasks POST the same request to the same target
  over an undici pool of 64 keep-alive connections with a fixed bearer token (opqueue also signs a JWT per delivery).
- **Latency (3).** One probe process enqueues over HTTP at 100 jobs/s (a fresh assertion each) and is also the
  target, so latency (arrival − send) is read on one clock. Two nodes: \`serve --no-worker\` takes the enqueues, \`serve --no-api\` delivers.
- **Backlog (4).** Scenarios 2 and 1 on a database already holding the backlog (pending, due in an hour), with the
  serve process's peak RSS (VmHWM from /proc). Each run is measured in turns with the same run on a database without
  the backlog (the rows "no backlog"), each turn in the order the last one reversed, and the goals divide by those.
- **Deep backlog (8).** Scenario 4 over ten times the jobs not yet due (10,000,000 in the full mode).
- **Core (5).** The built store in its own process: \`jobInsert\` from 32 concurrent callers, then claim 64 /
  complete 64 until empty; peers: \`addJob\` / \`send\` / \`add\` 32 at a time, then no-op handlers until the queue
  is empty.
- **Batch enqueue (7).** 8 clients POST \`/jobs/batch\` with 500 jobs each (scenario 1's \`buildReport\` body, due in
  an hour), one request in flight per connection, each request with a freshly minted assertion; opqueue answers 200
  with one result per item, in order. The rate counts the items answered 201, read from every answer arriving within
  the measured window (every enqueue rate counts the answers arriving in it); each run gets the whole warm-up, since
  one batch can take a good part of a second on a loaded machine. Latencies are per request. Measured in turns with
  opqueue's single-job enqueue as in scenario 1 (32 clients, a database of its own), so the batch ÷ single-job ratio
  compares figures of the same turns, and with a Fastify route that validates the same body (opqueue's own
  \`BatchEnqueueBody\` schema: 1 to 1,000 enqueue bodies) and calls BullMQ's \`Queue.addBulk\` once with all of
  it, on a Redis server of its own with AOF always. The goals are SQLite's; PostgreSQL's ratios are shown beside.
- **Several nodes (9).** PostgreSQL only: scenario 2's drain by one node and by several serve processes draining
  together (1, 3 and 6 in the full mode), each node count on a schema of its own, in turns. The nodes start and warm
  up first (each through its own API), with nothing due; then the measured jobs are inserted due 1.5 s later. The CPU
  of every node and of the server is read between the first and the last arrival at the target: the server's part is
  what issue 31's several-node goal compares (wake-ups, \`SKIP LOCKED\` misses, lane walks and heartbeats all count).
- **CPU per job, all processes** (enqueue, drain, batch, several nodes). The CPU time (user + system, every thread) of every process
  of a system, read from \`/proc/<pid>/stat\` (clock ticks of \`getconf CLK_TCK\`) when the measured window opens and
  when it closes, divided by the jobs done in it, and split into the system's own processes and its database server.
  Its own: the opqueue serve node, or the peer's route or worker process (tsx's esbuild helper, which only compiled
  the peer's TypeScript, left out). Its database server: for a PostgreSQL row, every process of the local server
  (the postmaster and every child of it; a backend that exits within the window still counts, through the time the
  postmaster has reaped); for BullMQ on Redis, that row's own redis-server. opqueue on SQLite and the bare route have no
  server. The load generator and the target are left out: they are the same for every system. Windows: enqueue and
  batch, the load generator's measured window, announced as it opens and closes, per job answered 201 within it;
  drain, the rate's window, from the first arrival at the target to the last, announced by the target, so nobody's
  start-up or first fetch before it, nor the last outcome writes after it, is counted. The node CPU and main
  thread columns of the drain keep their own window (from the end of the warm-up until the target has every job).
  The PostgreSQL server is shared, but systems are measured one at a time, so its CPU within a system's window is
  that system's, with nothing subtracted: a little of it is other work (the idle processes of the other systems, such
  as opqueue nodes polling once a second and pg-boss's maintenance, and anything else using the server). Its idle CPU
  over a quiet window, read once per run, is given under "This run" to judge by. Each column is the median of its own
  runs, so the two parts need not add up to the total. A tick is 10 ms (CLK_TCK 100, as usual) and each process
  read may be off by one, so over the quick mode's short windows (a fraction of a second for a fast peer's drain)
  these figures are coarse.
- Each figure is the median of the runs, with (min–max). Ratios of the goals use medians of the same run.
  The enqueue and drain scenarios, whose ratios are goals, measure in turns: every system's first run, then every
  system's second, and so on (their servers and workers started once beforehand), so a change in the machine's
  speed during the scenario reaches opqueue and its references alike. The machine may be shared with other work:
  the load average is recorded per scenario.

What bounds these figures on this machine, and the speed-ups tried that did not pay:
[docs/performance.md](docs/performance.md).

Reproduce: \`npm run bench\` (quick) or \`npm run bench -- --full\`; \`--only enqueue,drain,batch\` and
\`--engine sqlite|postgres\` narrow a run (narrowed runs do not rewrite this file; \`--report FILE.json\` regenerates
it and the chart from a results file).`;

const METRIC_NAMES: Record<string, string> = {
  rate: "rate",
  rate_from_start: "rate incl. ramp-up",
  p50: "p50",
  p95: "p95",
  p99: "p99",
  max: "max",
  peak_rss: "peak RSS",
  cpu_per_job: "node CPU per job",
  cpu_main_per_job: "main thread CPU per job",
  enqueue_rate: "enqueue rate",
  enqueue_p50: "enqueue p50",
  enqueue_p99: "enqueue p99",
  enqueue_peak_rss: "enqueue peak RSS",
  drain_rate: "drain rate",
  drain_rate_from_start: "drain rate incl. ramp-up",
  drain_peak_rss: "drain peak RSS",
  drain_cpu_per_job: "drain node CPU per job",
  drain_cpu_main_per_job: "drain main thread CPU per job",
  drain_cpu_all_per_job: "drain CPU per job, node and database",
  drain_cpu_db_per_job: "of which its database server",
  cpu_all_per_job: "CPU per job, all processes",
  cpu_system_per_job: "of which its own processes",
  cpu_db_per_job: "of which its database server",
};

/** Where a scenario names a metric otherwise: an enqueue's CPU is per enqueued job. */
const SCENARIO_METRIC_NAMES: Record<string, Record<string, string>> = {
  enqueue: { cpu_all_per_job: "CPU per enqueued job, all processes" },
  batch: { cpu_all_per_job: "CPU per enqueued job, all processes" },
};

const TITLES: Record<string, string> = {
  enqueue: "1. Enqueue over HTTP",
  drain: "2. Drain",
  latency: "3. Enqueue-to-target latency",
  backlog: "4. Backlog",
  core: "5. Core: the store alone",
  batch: "7. Batch enqueue over HTTP",
  "deep-backlog": "8. Deep backlog",
  nodes: "9. Several nodes (PostgreSQL)",
};

/** Section 6 (flow control) comes from its own results file and goes between these scenarios and the later ones. */
const BEFORE_FLOW = new Set(["enqueue", "drain", "latency", "backlog", "core"]);

function scenarioTable(scenario: ScenarioResult): string {
  const columns: Array<{ metric: string; unit: string }> = [];
  for (const figure of scenario.figures) {
    if (!columns.some((c) => c.metric === figure.metric)) columns.push({ metric: figure.metric, unit: figure.unit });
  }
  const rows: Array<{ label: string; figures: Figure[] }> = [];
  for (const figure of scenario.figures) {
    let row = rows.find((r) => r.label === figure.label);
    if (!row) rows.push((row = { label: figure.label, figures: [] }));
    row.figures.push(figure);
  }
  const name = (metric: string) => SCENARIO_METRIC_NAMES[scenario.id]?.[metric] ?? METRIC_NAMES[metric] ?? metric;
  const header = `| system | ${columns.map((c) => `${name(c.metric)} (${c.unit})`).join(" | ")} |`;
  const rule = `|---|${columns.map(() => "---:").join("|")}|`;
  const body = rows.map((row) => {
    const cells = columns.map((c) => formatSummary(row.figures.find((f) => f.metric === c.metric)?.summary));
    const label = row.figures.some((f) => !f.reference) ? `**${row.label}**` : row.label;
    return `| ${label} | ${cells.join(" | ")} |`;
  });
  return [header, rule, ...body].join("\n");
}

function settingsList(settings: Record<string, string | number>): string {
  return Object.entries(settings)
    .map(([key, value]) => `${key}: ${typeof value === "number" ? formatNumber(value) : value}`)
    .join("; ");
}

/** The core scenario's jobs per run; results files written before the peers had a number of their own say `enqueueJobs`. */
function coreJobs(core: Sizes["core"] | { enqueueJobs: number }): string {
  return jobsPerRun("jobs" in core ? core : { jobs: core.enqueueJobs });
}

/** The "This run" line on the idle PostgreSQL server's CPU. */
function idlePostgresLine(idle: NonNullable<Results["idlePostgres"]>): string {
  if ("error" in idle) return `- **Idle PostgreSQL server:** not read (${idle.error}).`;
  const percentOfCore = (idle.cpuMs / idle.windowMs) * 100;
  return (
    `- **Idle PostgreSQL server:** ${formatNumber(idle.cpuMs)} ms of CPU over a quiet ${formatNumber(idle.windowMs / 1000)} s ` +
    `(${formatNumber(percentOfCore)} % of one core), read once before the first scenario counting CPU, with nothing of this run ` +
    `running (${idle.busyCoresBefore.toFixed(2)} cores busy with other work just before). The CPU per job figures subtract nothing: ` +
    "a PostgreSQL row's database part holds this idle share of its window too."
  );
}

/** The batch scenario's ratios per engine, as the goals compute them (SQLite's are goals; PostgreSQL's are not). */
function batchRatioLines(results: Results): string[] {
  return (["sqlite", "postgres"] as Engine[]).flatMap((engine) => {
    const [single, bulk] = batchRatios(results, engine);
    if (!Number.isFinite(single) && !Number.isFinite(bulk)) return [];
    const ratio = (value: number) => (Number.isFinite(value) ? `${value.toFixed(2)} ×` : "–");
    const goals = engine === "sqlite" ? " (goals in the table above)" : " (no goal)";
    return [
      `- ${goalEngineLabel(engine)}: batch ÷ single-job enqueue ${ratio(single)}, ÷ Fastify + BullMQ addBulk ${ratio(bulk)}${goals}; ratios of medians.`,
    ];
  });
}

/**
 * What one PostgreSQL core carries, from this run's figures: the server's CPU per job to enqueue it (single jobs, 32
 * clients; batches of 500) and to drain it (claim, delivery's outcome, the sweeper's read), summed, and the jobs per
 * second one core's million microseconds make of that. Retention is not part of the run (see the line under the table).
 */
function capacityLines(results: Results): string[] {
  const db = (scenario: ScenarioId, system: string) => serverCpuMedian(results, scenario, system) ?? Number.NaN;
  const enqueues: Array<[string, number]> = [
    ["single-job enqueue (`POST /jobs`, 32 clients)", db("enqueue", "opqueue-postgres")],
    ["batch enqueue (500 jobs a request)", db("batch", "opqueue-postgres-batch")],
  ];
  // Drained by one node (section 2), and by several together (section 9) when this run measured them.
  const drains: Array<[string, number]> = [
    ["one node", db("drain", "opqueue-postgres")],
    ...NODE_COUNTS.full
      .filter((nodes) => nodes > 1)
      .map((nodes): [string, number] => [`${nodes} nodes`, db("nodes", nodesSystem(nodes))]),
  ];
  const rows = enqueues.flatMap(([enqueuedBy, enqueue]) =>
    drains
      .filter(([, drain]) => Number.isFinite(enqueue) && Number.isFinite(drain))
      .map(([drainedBy, drain]) => ({ enqueuedBy, enqueue, drainedBy, drain })),
  );
  if (rows.length === 0) return [];
  return [
    "## Capacity of one PostgreSQL core",
    "",
    "The database server's CPU per job through its life, from this run's medians (sections 1, 2, 7 and 9: the server's",
    "part of each), and what one core, a million µs each second, carries at that price. docs/performance.md",
    '("Sizing a deployment") says how to use it.',
    "",
    "| jobs enqueued by | drained by | enqueue (µs) | drain: claim, outcome, sweeper (µs) | in all (µs) | jobs/s per core |",
    "|---|---|---:|---:|---:|---:|",
    ...rows.map(
      ({ enqueuedBy, enqueue, drainedBy, drain }) =>
        `| ${enqueuedBy} | ${drainedBy} | ${formatNumber(enqueue)} | ${formatNumber(drain)} | ` +
        `${formatNumber(enqueue + drain)} | ${formatNumber(1_000_000 / (enqueue + drain))} |`,
    ),
    "",
    "- Retention's deletes of the finished jobs add about 10 µs per job, and a vacuum after them 2–3 µs (`npx tsx",
    "  bench/pg-profile.ts --store --retention`, measured apart from this run): about 5 % less than the table says.",
    ...capacityCheckLines(results),
    "",
  ];
}

/** The model checked against a server held to a share of a core (bench/capacity.ts), when it was run. */
function capacityCheckLines(results: Results): string[] {
  const check = results.capacityCheck;
  if (!check)
    return ["- Checked against a server held to part of a core: not in this run (`npx tsx bench/capacity.ts`)."];
  const list = (values: number[]) => values.map(formatNumber).join(", ");
  const percents = (values: number[]) => values.map((v) => `${formatNumber(v * 100)} %`).join(", ");
  const checks = [...check.checks].sort((a, b) => a.cores - b.cores || a.shape.localeCompare(b.shape));
  return [
    "- **Checked** against the same server held to a share of one core (a CFS quota on its processes, period " +
      `${check.periodUs / 1000} ms), driven until it saturated by nodes that enqueue over HTTP, due at once, and drain ` +
      "the jobs meanwhile, in 32 users' lanes, one chain per request; the rate runs from the first enqueue to the last " +
      `arrival (${check.commands.map((command) => `\`${command}\``).join("; ")}). Two cores cannot saturate a whole ` +
      "server core beside the nodes, the load generator and the target. Two models: the sum of the parts, the row of " +
      "the table above with as many nodes as the check starts (one node's when section 9 was not measured), whose two " +
      "figures are each measured alone, in one lane, one chain, so that it leaves out what the parts cost each other " +
      '(docs/performance.md, "The model checked", says how much); and, where the check was run with `--whole-life`, ' +
      "the whole life's: each run first made once more with the server free (no quota), in the same turns, its CPU " +
      "per job read over the whole life of every job at once, and a share of a core divided by it. The goal is read " +
      "against the whole life's.",
    `- ${check.idle.nodes} nodes with nothing to do cost the server ${formatNumber(check.idle.serverMsPerSecond)} ms ` +
      "of CPU a second (polls, heartbeats, maintenance passes), before any job.",
    "",
    "| share of a core | jobs enqueued by | nodes | sum of parts (µs a job) | its rate (jobs/s) | whole life, server " +
      "free (µs a job, each run) | its rate (jobs/s) | measured (jobs/s, each run) | median ÷ sum of parts | median ÷ " +
      "whole life | server's µs a job, measured | share used |",
    "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ...checks.map(
      (c) =>
        `| ${c.cores} | ${c.shape === "batch" ? "batches of 500" : "single jobs"} | ${c.nodes} | ` +
        `${formatNumber(c.enqueueUs + c.drainUs)} | ${formatNumber(c.predicted)} | ` +
        `${c.wholeLife ? list(c.wholeLife.runs.map((r) => r.serverUsPerJob)) : "-"} | ` +
        `${c.wholeLife ? formatNumber(c.wholeLife.predicted) : "-"} | ${list(c.runs.map((r) => r.rate))} | ` +
        `${c.ratio.toFixed(2)} | ${c.wholeLife ? c.wholeLife.ratio.toFixed(2) : "-"} | ` +
        `${list(c.runs.map((r) => r.serverUsPerJob))} | ${percents(c.runs.map((r) => r.saturation))} |`,
    ),
  ];
}

/** The whole BENCHMARKS.md for a results file. */
export function benchmarksMarkdown(results: Results, resultsFile: string): string {
  const goals = evaluateGoals(results);
  const sizes = results.sizes ?? SIZES[results.mode];
  const lines: string[] = [];
  lines.push("# opqueue benchmarks", "");
  lines.push(
    `<!-- Generated by \`${results.command}\` (bench/run.ts; the text is in bench/lib/report.ts) from ${resultsFile}. ` +
      "Edits by hand are overwritten by the next run. -->",
    "",
  );
  lines.push(
    "opqueue against what a user would otherwise run: pg-boss, graphile-worker and BullMQ (as libraries, and behind a",
    "Fastify route), and against the machine's own limits (a bare Fastify route; the load generator hitting the target).",
    `Chart: [bench/results/throughput.svg](bench/results/throughput.svg). Raw figures: [${resultsFile}](${resultsFile}).`,
    "",
  );
  lines.push("## This run", "");
  const m = results.machine;
  const v = results.versions;
  const pgInfo = results.postgres;
  lines.push(
    `- **Command:** \`${results.command}\` on ${results.date}, ${results.mode} mode, ${formatNumber(results.totalSeconds)} s in all` +
      (results.git
        ? `; opqueue built from commit ${results.git.commit}${results.git.srcDirty ? " with uncommitted changes in src/" : ""}.`
        : ".") +
      (results.reruns?.length
        ? ` Rerun afterwards and merged in: ${results.reruns.map((command) => `\`${command}\``).join(", ")}.`
        : ""),
    results.mode === "quick"
      ? `- **Quick-mode sizes** (the full mode uses the issue's): enqueue ${sizes.runs} runs × ${sizes.enqueue.durationMs / 1000} s; ` +
          `drain ${jobsPerRun(sizes.drain)} jobs (full: ${jobsPerRun(SIZES.full.drain)}); ` +
          `latency ${sizes.latency.jobs} jobs (full: ${SIZES.full.latency.jobs.toLocaleString("en-US")}); ` +
          `backlog ${sizes.backlog.rows.toLocaleString("en-US")} jobs (full: ${SIZES.full.backlog.rows.toLocaleString("en-US")}); ` +
          `deep backlog ${(sizes.deepBacklog?.rows ?? 0).toLocaleString("en-US")} jobs (full: ${SIZES.full.deepBacklog.rows.toLocaleString("en-US")}); ` +
          `core ${coreJobs(sizes.core)} jobs (full: ${coreJobs(SIZES.full.core)}); ` +
          (sizes.batch
            ? `batch ${sizes.runs} runs × ${sizes.batch.durationMs / 1000} s (full: ${SIZES.full.batch.durationMs / 1000} s); `
            : "") +
          `${sizes.runs} runs per figure.`
      : `- **Sizes:** enqueue ${sizes.runs} runs × ${sizes.enqueue.durationMs / 1000} s; drain ${jobsPerRun(sizes.drain)} jobs; ` +
          `latency ${sizes.latency.jobs.toLocaleString("en-US")} jobs; backlog ${sizes.backlog.rows.toLocaleString("en-US")} jobs; ` +
          (sizes.deepBacklog ? `deep backlog ${sizes.deepBacklog.rows.toLocaleString("en-US")} jobs; ` : "") +
          `core ${coreJobs(sizes.core)} jobs; ` +
          (sizes.batch ? `batch ${sizes.runs} runs × ${sizes.batch.durationMs / 1000} s; ` : "") +
          `${sizes.runs} runs per figure.`,
    `- **Machine:** ${m["nproc"]} vCPUs (${m["cpu"]}), ${m["memory_gib"]} GiB, Linux ${m["kernel"]}; load average at start ${m["loadavg_at_start"]}.`,
    `- **Versions:** Node ${v["node"]}, opqueue ${v["opqueue"]}, SQLite ${v["sqlite"]} (better-sqlite3 ${v["better-sqlite3"]}), ` +
      `PostgreSQL ${pgInfo["version"] ?? "?"} (pg ${v["pg"]}), Fastify ${v["fastify"]}, undici ${v["undici"]}, ` +
      `graphile-worker ${v["graphile-worker"]}, pg-boss ${v["pg-boss"]}` +
      (v["bullmq"] ? `, BullMQ ${v["bullmq"]} (ioredis ${v["ioredis"]}, Redis ${v["redis"]}).` : "."),
    `- **PostgreSQL settings:** ${[
      "synchronous_commit",
      "fsync",
      "full_page_writes",
      "wal_level",
      "shared_buffers",
      "max_connections",
    ]
      .map((key) => `${key}=${pgInfo[key] ?? "?"}`)
      .join(", ")}.`,
    `- **opqueue settings:** ${Object.entries(results.settings)
      .map(([k, value]) => `${k} ${value}`)
      .join("; ")}.`,
  );
  if (results.idlePostgres) lines.push(idlePostgresLine(results.idlePostgres));
  if (results.filters.only.length > 0 || results.filters.engines.length < 2) {
    lines.push(
      `- **Narrowed run:** scenarios ${results.filters.only.join(", ") || "all"}, engines ${results.filters.engines.join(", ")}.`,
    );
  }
  lines.push("");
  lines.push("## Goals", "");
  lines.push(
    "Ratios of medians from this run, or a median itself where the goal is a bound; the capacity rows come from",
    '`bench/capacity.ts`, merged into this run\'s results (section "Capacity of one PostgreSQL core"). A goal falling',
    "short is reported as such.",
    "",
  );
  lines.push("| scenario | engine | goal | measured | target | met |", "|---|---|---|---:|---|---|");
  for (const goal of goals) {
    const measured = Number.isFinite(goal.value)
      ? goal.unit === "×"
        ? `${goal.value.toFixed(2)} ×`
        : `${formatNumber(goal.value)} ${goal.unit}`
      : "–";
    const met = goal.met === null ? "not measured" : goal.met ? "met" : "**not met**";
    lines.push(
      `| ${goal.scenario} | ${goalEngineLabel(goal.engine)} | ${goal.goal} | ${measured} | ${goal.target} | ${met} |`,
    );
  }
  lines.push("");
  const section = (scenario: ScenarioResult) => {
    lines.push(`## ${TITLES[scenario.id] ?? scenario.title}`, "");
    const busy =
      scenario.busyCoresBefore !== undefined
        ? `${scenario.busyCoresBefore.toFixed(2)} cores busy with other work just before; `
        : "";
    lines.push(
      `${settingsList(scenario.settings)}.`,
      "",
      `*Load:* ${busy}load average ${scenario.loadavgStart.map((x) => x.toFixed(2)).join(" ")} at the start, ` +
        `${scenario.loadavgEnd.map((x) => x.toFixed(2)).join(" ")} at the end (this run's own processes included); ${formatNumber(scenario.seconds)} s.`,
      "",
    );
    lines.push(scenarioTable(scenario), "");
    if (scenario.id === "batch") lines.push(...batchRatioLines(results), "");
    if (scenario.notes.length > 0) {
      lines.push(...scenario.notes.map((note) => `- ${note}`), "");
    }
  };
  results.scenarios.filter((scenario) => BEFORE_FLOW.has(scenario.id)).forEach(section);
  // Measured by bench/flow.ts, not by this run: kept from the newest flow results file so a full run does not drop it.
  const flow = newestFlowSection(ROOT);
  if (flow) lines.push(flow.trimEnd(), "");
  results.scenarios.filter((scenario) => !BEFORE_FLOW.has(scenario.id)).forEach(section);
  lines.push(...capacityLines(results));
  lines.push(METHOD, "");
  return lines.join("\n");
}

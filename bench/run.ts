/**
 * The benchmark harness: `npm run bench` (quick, at most 5 minutes) or `npm run bench -- --full` (the issue's sizes,
 * at most 30 minutes). Runs the scenarios of bench/scenarios/ in order, shows a live line per scenario on stderr,
 * writes the figures to bench/results/<date>.json (quick: <date>-quick.json), BENCHMARKS.md and
 * bench/results/throughput.svg, and prints a summary on stdout.
 *
 * Options:
 *   --full                 the issue's sizes
 *   --only a,b             only these scenarios (enqueue, drain, latency, backlog, core, batch, deep-backlog,
 *                          nodes)
 *   --engine sqlite|postgres  only this opqueue engine (references still run)
 *   --profile DIR          serve processes write CPU profiles (--cpu-prof) into DIR
 *   --serve-node-args="A B"  more Node arguments for serve processes, say "--trace-gc-nvp" or "--require
 *                          ./gc-watch.cjs" (for finding where a scenario's time goes; the figures are then not the
 *                          code's alone); each serve process's standard output is kept in a file of a directory
 *                          the run names on stderr
 *   --skip-peers           measure opqueue only (no references)
 *   --opqueue-dir DIR      opqueue's serve processes run DIR's build (DIR/dist/cli.js, built beforehand) instead of this
 *                          checkout's: an older commit measured by this harness (bench/enqueue-compare.ts). Only with
 *                          --only enqueue and --skip-peers, whose requests and config any build takes; results record
 *                          DIR's commit
 *   --quiet SECONDS        before each scenario, wait up to SECONDS for other work on the machine to settle
 *                          (under half a core busy over 1 s); PostgreSQL is checkpointed before each scenario either way
 *   --out FILE             where a narrowed run writes its results (default: a file under /tmp)
 *   --report FILE.json     regenerate BENCHMARKS.md and the chart from a results file, and exit
 *   --merge-into FILE.json after a narrowed run (say, one scenario rerun because other work disturbed it), replace
 *                          the figures it measured in FILE (same scenario, system and metric), note the rerun, and
 *                          regenerate BENCHMARKS.md and the chart from FILE
 * A narrowed run (--only, --engine, --profile, --serve-node-args, --opqueue-dir or --skip-peers) never rewrites
 * BENCHMARKS.md or the chart.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { throughputSvg } from "./lib/chart.js";
import { Context, ENGINE_LABEL, SIZES } from "./lib/context.js";
import { idleCpuMs } from "./lib/cpu.js";
import { evaluateGoals } from "./lib/goals.js";
import { ROOT } from "./lib/ipc.js";
import { keepServeOutput, requireBuild, useOpqueueBuild } from "./lib/opqueue.js";
import { assertNoHeldSnapshot, checkpoint, dropLeftoverSchemas } from "./lib/pg.js";
import { benchmarksMarkdown } from "./lib/report.js";
import {
  describeEnvironment,
  sampleBusyCores,
  SCENARIOS,
  type Engine,
  type Results,
  type ScenarioId,
  type ScenarioResult,
} from "./lib/results.js";
import { formatSummary } from "./lib/stats.js";
import { runBacklog, runDeepBacklog } from "./scenarios/backlog.js";
import { runBatch } from "./scenarios/batch.js";
import { runCore } from "./scenarios/core.js";
import { runDrain } from "./scenarios/drain.js";
import { runEnqueue } from "./scenarios/enqueue.js";
import { runLatency } from "./scenarios/latency.js";
import { runNodes } from "./scenarios/nodes.js";

const RUNNERS: Record<ScenarioId, (ctx: Context) => Promise<ScenarioResult>> = {
  enqueue: runEnqueue,
  drain: runDrain,
  latency: runLatency,
  backlog: runBacklog,
  core: runCore,
  batch: runBatch,
  "deep-backlog": runDeepBacklog,
  nodes: runNodes,
};

/** The scenarios that report CPU per job of every process of a system (and so the idle server's CPU beside). */
const CPU_SCENARIOS: ScenarioId[] = ["enqueue", "drain", "batch"];

/** The PostgreSQL server's CPU over a quiet window as long as an enqueue run's (see Results.idlePostgres). */
async function idlePostgres(ctx: Context, busyCoresBefore: number): Promise<NonNullable<Results["idlePostgres"]>> {
  const server = await ctx.postgresServer();
  if (server.root === null) return { error: server.reason };
  const windowMs = ctx.sizes.enqueue.durationMs;
  return { windowMs, cpuMs: await idleCpuMs(server.root, windowMs), busyCoresBefore };
}

const { values } = parseArgs({
  options: {
    full: { type: "boolean", default: false },
    only: { type: "string", multiple: true },
    engine: { type: "string", multiple: true },
    profile: { type: "string" },
    "serve-node-args": { type: "string" },
    "skip-peers": { type: "boolean", default: false },
    "opqueue-dir": { type: "string" },
    quiet: { type: "string" },
    out: { type: "string" },
    report: { type: "string" },
    "merge-into": { type: "string" },
  },
});

/** `base` with the figures `rerun` measured put in place of the old ones, and a note per scenario rerun. */
function mergeResults(base: Results, rerun: Results): Results {
  if (base.mode !== rerun.mode) throw new Error(`cannot merge a ${rerun.mode} run into a ${base.mode} run`);
  const at = new Date().toISOString().slice(11, 16);
  for (const scenario of rerun.scenarios) {
    const old = base.scenarios.find((s) => s.id === scenario.id);
    if (!old) {
      base.scenarios.push(scenario);
      continue;
    }
    const systems = [...new Set(scenario.figures.map((f) => f.label))];
    const remeasured = new Set(scenario.figures.map((f) => f.system));
    if (old.figures.every((f) => remeasured.has(f.system))) {
      // Every system of the scenario was measured again: its load and duration are the rerun's too.
      old.loadavgStart = scenario.loadavgStart;
      old.loadavgEnd = scenario.loadavgEnd;
      old.busyCoresBefore = scenario.busyCoresBefore;
      old.seconds = scenario.seconds;
    }
    for (const figure of scenario.figures) {
      const index = old.figures.findIndex((f) => f.system === figure.system && f.metric === figure.metric);
      if (index >= 0) old.figures[index] = figure;
      else old.figures.push(figure);
    }
    old.notes = old.notes.filter((note) => !systems.some((label) => note.startsWith(label)));
    old.notes.push(
      ...scenario.notes,
      `${systems.join(", ")} re-measured at ${at} UTC from commit ${rerun.git?.commit ?? "?"}${rerun.git?.srcDirty ? " (with uncommitted changes)" : ""} (\`${rerun.command}\`; load average then ${scenario.loadavgStart.map((x) => x.toFixed(2)).join(" ")}, ` +
        `${scenario.busyCoresBefore?.toFixed(2) ?? "?"} cores busy elsewhere before)`,
    );
  }
  base.reruns = [...(base.reruns ?? []), `${rerun.command} (${Math.round(rerun.totalSeconds)} s)`];
  return base;
}

function gitState(dir = ROOT): { commit: string; srcDirty: boolean } {
  try {
    const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: dir, encoding: "utf8" }).trim();
    const dirty = execFileSync("git", ["status", "--porcelain", "--", "src", "migrations"], {
      cwd: dir,
      encoding: "utf8",
    }).trim();
    return { commit, srcDirty: dirty !== "" };
  } catch {
    return { commit: "?", srcDirty: false };
  }
}

/** Writes BENCHMARKS.md and the chart from results. */
function writeReport(results: Results, resultsPath: string): void {
  const relativePath = relative(ROOT, resultsPath);
  writeFileSync(join(ROOT, "BENCHMARKS.md"), benchmarksMarkdown(results, relativePath));
  writeFileSync(join(ROOT, "bench/results/throughput.svg"), throughputSvg(results));
}

function printSummary(results: Results): void {
  const out: string[] = ["", `opqueue benchmarks, ${results.mode} mode, ${Math.round(results.totalSeconds)} s`];
  for (const scenario of results.scenarios) {
    out.push("", `${scenario.title}:`);
    for (const figure of scenario.figures) {
      out.push(
        `  ${figure.label.padEnd(58)} ${figure.metric.padEnd(22)} ${formatSummary(figure.summary, figure.unit)}`,
      );
    }
    for (const note of scenario.notes) out.push(`  note: ${note}`);
  }
  const idle = results.idlePostgres;
  if (idle) {
    out.push(
      "",
      "error" in idle
        ? `Idle PostgreSQL server: not read (${idle.error})`
        : `Idle PostgreSQL server: ${idle.cpuMs.toFixed(0)} ms of CPU over a quiet ${(idle.windowMs / 1000).toFixed(1)} s`,
    );
  }
  const goals = evaluateGoals(results);
  const unmeasured = goals.filter((goal) => goal.met === null).length;
  out.push("", `Goals${unmeasured > 0 ? ` (${unmeasured} not measured in this run, not shown)` : ""}:`);
  for (const goal of goals.filter((g) => g.met !== null)) {
    const value = Number.isFinite(goal.value)
      ? goal.unit === "×"
        ? `${goal.value.toFixed(2)} ×`
        : `${goal.value.toFixed(1)} ${goal.unit}`
      : "–";
    const met = goal.met ? "met" : "NOT MET";
    out.push(
      `  ${ENGINE_LABEL[goal.engine].padEnd(10)} ${goal.goal.padEnd(40)} ${value.padStart(10)}  (${goal.target})  ${met}`,
    );
  }
  console.log(out.join("\n"));
}

async function main(): Promise<void> {
  if (values.report) {
    const results = JSON.parse(readFileSync(values.report, "utf8")) as Results;
    writeReport(results, values.report);
    printSummary(results);
    return;
  }
  requireBuild(ROOT, "this checkout");
  const mode = values.full ? "full" : "quick";
  const only = (values.only ?? []).flatMap((value) => value.split(",")).filter(Boolean);
  for (const id of only)
    if (!SCENARIOS.includes(id as ScenarioId)) throw new Error(`unknown scenario ${id} (${SCENARIOS.join(", ")})`);
  const engines = (values.engine ?? []).flatMap((value) => value.split(",")).filter(Boolean) as Engine[];
  for (const engine of engines)
    if (engine !== "sqlite" && engine !== "postgres") throw new Error(`unknown engine ${engine}`);
  if (
    values["merge-into"] !== undefined &&
    (values["opqueue-dir"] !== undefined || values["serve-node-args"] !== undefined || values.profile !== undefined)
  ) {
    throw new Error(
      "--merge-into takes a run of this checkout's code alone: not with --opqueue-dir, --serve-node-args or --profile",
    );
  }
  if (values["serve-node-args"] !== undefined) {
    const dir = join(tmpdir(), `opqueue-serve-output-${process.pid}`);
    keepServeOutput(dir);
    process.stderr.write(`serve processes' standard output: ${dir}\n`);
  }
  const opqueueDir = values["opqueue-dir"] === undefined ? undefined : resolve(values["opqueue-dir"]);
  if (opqueueDir !== undefined) {
    if (only.join() !== "enqueue" || !values["skip-peers"])
      throw new Error("--opqueue-dir goes with --only enqueue --skip-peers");
    requireBuild(opqueueDir, "--opqueue-dir");
    useOpqueueBuild(opqueueDir);
  }
  const narrowed =
    only.length > 0 ||
    engines.length > 0 ||
    values.profile !== undefined ||
    values["serve-node-args"] !== undefined ||
    opqueueDir !== undefined ||
    values["skip-peers"];
  const started = performance.now();
  // Read now, when dist/ was just built (`npm run bench` builds first): src/ edited while the run goes on does not
  // change the code measured.
  const git = gitState(opqueueDir);

  if (engines.length === 0 || engines.includes("postgres")) await assertNoHeldSnapshot();
  const leftovers = await dropLeftoverSchemas();
  if (leftovers.length > 0) process.stderr.write(`dropped ${leftovers.length} schemas left by an earlier run\n`);
  const environment = await describeEnvironment();
  if (environment.postgres["synchronous_commit"] !== "on" || environment.postgres["fsync"] !== "on") {
    throw new Error(
      `PostgreSQL is not durable (synchronous_commit=${environment.postgres["synchronous_commit"]}, fsync=${environment.postgres["fsync"]})`,
    );
  }
  if (values.profile) mkdirSync(values.profile, { recursive: true });
  const ctx = new Context(mode, SIZES[mode], engines.length > 0 ? engines : ["sqlite", "postgres"], {
    profileDir: values.profile,
    serveNodeArgs: values["serve-node-args"]?.split(" ").filter((arg) => arg !== "") ?? [],
    peers: !values["skip-peers"],
  });
  const stop = () => {
    process.stderr.write("\ninterrupted: cleaning up\n");
    void ctx.close().finally(() => process.exit(130));
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);

  const command = `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(" ")}` : ""}`;
  process.stderr.write(
    `${command}: ${mode} mode, engines ${ctx.engines.join(", ")}, load average ${environment.machine["loadavg_at_start"]}\n`,
  );
  const scenarios: ScenarioResult[] = [];
  let idle: Results["idlePostgres"];
  try {
    for (const id of SCENARIOS) {
      if (only.length > 0 && !only.includes(id)) continue;
      const quietUntil = performance.now() + Number(values.quiet ?? 0) * 1000;
      await checkpoint();
      let busy = await sampleBusyCores();
      while (busy > 0.5 && performance.now() < quietUntil) {
        process.stderr.write(`${id}: waiting for the machine to settle (${busy.toFixed(2)} cores busy elsewhere)\r`);
        busy = await sampleBusyCores(2000);
      }
      if (idle === undefined && CPU_SCENARIOS.includes(id)) {
        process.stderr.write(
          `${id}: reading the idle PostgreSQL server's CPU (${ctx.sizes.enqueue.durationMs / 1000} s)\n`,
        );
        idle = await idlePostgres(ctx, busy);
      }
      try {
        scenarios.push(await RUNNERS[id](ctx));
      } catch (error) {
        process.stderr.write(`\n${id} failed: ${(error as Error).stack ?? String(error)}\n`);
        scenarios.push({
          id,
          title: id,
          settings: {},
          figures: [],
          notes: [`failed: ${(error as Error).message}`],
          loadavgStart: [],
          loadavgEnd: [],
          seconds: 0,
        });
      }
    }
  } finally {
    await ctx.close();
  }

  const date = new Date().toISOString().slice(0, 10);
  const results: Results = {
    date,
    sizes: ctx.sizes,
    git,
    mode,
    command,
    filters: { only, engines: ctx.engines },
    ...environment,
    settings: {
      SQLite: "WAL, synchronous=FULL (a temporary file)",
      PostgreSQL: "synchronous_commit on, database_pool_size 10, a fresh schema",
      "worker.concurrency": "64",
      "limits.spawn_cap": "2,000,000,000",
      "log level": "warn",
    },
    ...(idle ? { idlePostgres: idle } : {}),
    scenarios,
    totalSeconds: Math.round((performance.now() - started) / 100) / 10,
  };
  let path: string;
  if (narrowed) {
    path = values.out ?? `/tmp/opqueue-bench-${new Date().toISOString().replace(/[:.]/g, "-")}.json`;
  } else {
    mkdirSync(join(ROOT, "bench/results"), { recursive: true });
    path = join(ROOT, "bench/results", `${date}${mode === "quick" ? "-quick" : ""}.json`);
  }
  writeFileSync(path, `${JSON.stringify(results, null, 2)}\n`);
  if (!narrowed) writeReport(results, path);
  printSummary(results);
  if (values["merge-into"]) {
    const target = values["merge-into"];
    const merged = mergeResults(JSON.parse(readFileSync(target, "utf8")) as Results, results);
    writeFileSync(target, `${JSON.stringify(merged, null, 2)}\n`);
    writeReport(merged, target);
    console.log(`merged into ${target}; BENCHMARKS.md and bench/results/throughput.svg rewritten from it`);
  }
  console.log(
    `\nresults: ${path}${narrowed ? " (narrowed run: BENCHMARKS.md not rewritten)" : "; BENCHMARKS.md and bench/results/throughput.svg rewritten"}`,
  );
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);

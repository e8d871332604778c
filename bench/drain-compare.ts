/**
 * The drain regression check of flow control: the drain scenario (bench/scenarios/drain.ts, opqueue only, no flow
 * control configured) run in two checkouts, a baseline and the code under test, in alternation (base, new, base,
 * new, ...) per engine, so a change in the machine's load reaches both alike. Each turn is one narrowed harness run
 * in that checkout (`tsx bench/run.ts --only drain --skip-peers --engine E`, which is `npm run bench -- ...` without
 * the build: build each checkout once beforehand); its results file goes to --out-dir. The medians over every drain
 * run of a side are compared, and the figures are written into the flow results file (bench/flow.ts) as `drain`.
 *
 *   npx tsx bench/drain-compare.ts --base /tmp/opq-base --new /tmp/opq-new [--rounds 3] [--engine sqlite,postgres]
 *     [--full] [--quiet SECONDS] [--out-dir DIR] [--into bench/results/flow-DATE.json]
 *
 * Without --into the figures are printed only. `--collect` skips the runs and reads the results files already in
 * --out-dir (named `<engine>-<side>-<round>.json`); the load and duration recorded are then those of the harness runs.
 * `--note TEXT` (repeatable) adds a note shown under the table (say, a change the new checkout's harness needed).
 */
import { execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import type { DrainComparison, ComparisonSide, FlowResults } from "./lib/flow-report.js";
import type { Engine, Results } from "./lib/results.js";
import { summarize } from "./lib/stats.js";

const { values } = parseArgs({
  options: {
    base: { type: "string" },
    new: { type: "string" },
    rounds: { type: "string", default: "3" },
    engine: { type: "string", default: "sqlite,postgres" },
    full: { type: "boolean", default: false },
    quiet: { type: "string", default: "0" },
    "out-dir": { type: "string", default: "/tmp/opqueue-drain-compare" },
    into: { type: "string" },
    collect: { type: "boolean", default: false },
    note: { type: "string", multiple: true },
  },
});

const SIDES = ["base", "new"] as const;
type Side = (typeof SIDES)[number];

function commitOf(dir: string): string {
  return execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: dir, encoding: "utf8" }).trim();
}

/** One narrowed drain run of the harness in `dir`, its results written to `out`. */
async function harnessRun(options: { dir: string; engine: Engine; out: string }): Promise<void> {
  const args = ["bench/run.ts", "--only", "drain", "--skip-peers", "--engine", options.engine, "--quiet", values.quiet ?? "0", "--out", options.out];
  if (values.full) args.push("--full");
  const child = spawn(join(options.dir, "node_modules/.bin/tsx"), args, { cwd: options.dir, stdio: ["ignore", "ignore", "inherit"] });
  const [code] = (await once(child, "exit")) as [number | null];
  if (code !== 0) throw new Error(`${options.dir}: bench/run.ts ${args.join(" ")} exited ${code}`);
}

/** Every drain run's figures of one results file: rate (jobs/s) and node CPU per job (µs). */
function drainRuns(
  path: string,
  engine: Engine,
): { rate: number[]; cpu: number[]; loadavg: number[]; loadavgEnd: number[]; seconds: number } {
  const results = JSON.parse(readFileSync(path, "utf8")) as Results;
  const scenario = results.scenarios.find((s) => s.id === "drain");
  if (!scenario || scenario.figures.length === 0) throw new Error(`${path}: no drain figures (${scenario?.notes.join("; ") ?? "no scenario"})`);
  const runs = (metric: string) => scenario.figures.find((f) => f.system === `opqueue-${engine}` && f.metric === metric)?.summary.runs ?? [];
  return {
    rate: runs("rate"),
    cpu: runs("cpu_per_job"),
    loadavg: scenario.loadavgStart,
    loadavgEnd: scenario.loadavgEnd,
    seconds: results.totalSeconds,
  };
}

async function main(): Promise<void> {
  const dirs: Record<Side, string> = { base: resolve(values.base ?? ""), new: resolve(values.new ?? "") };
  for (const side of SIDES) {
    if (!existsSync(join(dirs[side], "dist/cli.js"))) throw new Error(`--${side} ${dirs[side]}: no dist/cli.js (build it first)`);
  }
  const engines = (values.engine ?? "").split(",").filter(Boolean) as Engine[];
  const rounds = Number(values.rounds);
  const outDir = resolve(values["out-dir"] ?? "");
  mkdirSync(outDir, { recursive: true });
  const file = (engine: Engine, side: Side, round: number) => join(outDir, `${engine}-${side}-${round + 1}.json`);
  const started = performance.now();
  const loadStart = loadavg();

  if (!values.collect) {
    for (const engine of engines) {
      for (let round = 0; round < rounds; round++) {
        for (const side of SIDES) {
          process.stderr.write(`drain ${engine} ${side} round ${round + 1}/${rounds} (load ${loadavg()[0]?.toFixed(2)})\n`);
          await harnessRun({ dir: dirs[side], engine, out: file(engine, side, round) });
        }
      }
    }
  }

  // The command that makes these figures: without --collect, --out-dir and --note, which only say where they were read.
  const args: string[] = [];
  for (let i = 2; i < process.argv.length; i++) {
    const arg = process.argv[i] ?? "";
    if (arg === "--collect") continue;
    if (arg === "--out-dir" || arg === "--note") i++;
    else if (!arg.startsWith("--out-dir=") && !arg.startsWith("--note=")) args.push(arg);
  }
  const comparison: DrainComparison = {
    command: `npx tsx bench/drain-compare.ts ${args.join(" ")}`,
    harnessCommand: `tsx bench/run.ts --only drain --skip-peers --engine <engine>${values.full ? " --full" : ""} --quiet ${values.quiet} (in each checkout, built beforehand)`,
    mode: values.full ? "full" : "quick",
    rounds,
    commits: { base: commitOf(dirs.base), new: commitOf(dirs.new) },
    engines: {},
    loadavgStart: loadStart,
    loadavgEnd: loadavg(),
    seconds: Math.round((performance.now() - started) / 1000),
    notes: values.note ?? [],
  };
  let harnessSeconds = 0;
  for (const engine of engines) {
    const sides = {} as Record<Side, ComparisonSide>;
    for (const side of SIDES) {
      const rate: number[] = [];
      const cpu: number[] = [];
      const loads: number[] = [];
      for (let round = 0; round < rounds; round++) {
        const runs = drainRuns(file(engine, side, round), engine);
        rate.push(...runs.rate);
        cpu.push(...runs.cpu);
        if (runs.loadavg[0] !== undefined) loads.push(runs.loadavg[0]);
        harnessSeconds += runs.seconds;
        if (values.collect && engine === engines[0] && round === 0 && side === "base") comparison.loadavgStart = runs.loadavg;
        if (values.collect && engine === engines.at(-1) && round === rounds - 1 && side === "new") comparison.loadavgEnd = runs.loadavgEnd;
      }
      sides[side] = { rate: summarize(rate), cpuUsPerJob: summarize(cpu), loadavg1: summarize(loads) };
    }
    comparison.engines[engine] = {
      ...sides,
      ratePct: (sides.new.rate.median / sides.base.rate.median - 1) * 100,
      cpuPct: (sides.new.cpuUsPerJob.median / sides.base.cpuUsPerJob.median - 1) * 100,
    };
  }
  if (values.collect) comparison.seconds = Math.round(harnessSeconds);
  console.log(JSON.stringify(comparison, null, 2));
  if (values.into) {
    const target = resolve(values.into);
    const results = (existsSync(target) ? JSON.parse(readFileSync(target, "utf8")) : {}) as Partial<FlowResults>;
    results.drain = comparison;
    writeFileSync(target, `${JSON.stringify(results, null, 2)}\n`);
    console.log(`written into ${target}`);
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);

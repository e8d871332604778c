/**
 * The single-job enqueue regression check of the extensions (flow control, batches, idempotency keys, expiry, schema
 * checks, traces): the enqueue scenario (bench/scenarios/enqueue.ts, opqueue only, none of them used) measured by
 * this checkout's harness against two builds, a baseline and the code under test, in alternation (base, new, base,
 * new, ...) per engine, so a change in the machine's load reaches both alike. Each turn is one narrowed harness run,
 * `tsx bench/run.ts --only enqueue --skip-peers --engine E --opqueue-dir DIR`: the load, the assertions and the
 * CPU accounting are the same code for both sides, only the serve process differs. The medians over every run of a
 * side are compared, and the figures are written into the flow results file (bench/flow.ts) as `enqueue`.
 *
 *   npx tsx bench/enqueue-compare.ts --base /tmp/opq-base [--new DIR] [--rounds 3] [--engine sqlite,postgres]
 *     [--full] [--quiet SECONDS] [--out-dir DIR] [--into bench/results/flow-DATE.json]
 *
 * --new defaults to this checkout. Build each side beforehand (`npx tsc -p tsconfig.build.json` in a worktree).
 * `--collect` skips the runs and reads the results files already in --out-dir (named `<engine>-<side>-<round>.json`);
 * `--note TEXT` (repeatable) adds a note shown under the table.
 */
import { execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { CPU_METRICS } from "./lib/cpu.js";
import type { ComparisonSide, EnqueueComparison, FlowResults } from "./lib/flow-report.js";
import { ROOT } from "./lib/ipc.js";
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
    "out-dir": { type: "string", default: "/tmp/opqueue-enqueue-compare" },
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

function harnessArgs(engine: Engine, dir: string, out: string): string[] {
  const args = ["bench/run.ts", "--only", "enqueue", "--skip-peers", "--engine", engine, "--quiet", values.quiet ?? "0"];
  args.push("--opqueue-dir", dir, "--out", out);
  if (values.full) args.push("--full");
  return args;
}

/** One narrowed enqueue run of this checkout's harness against the build in `dir`, its results written to `out`. */
async function harnessRun(options: { dir: string; engine: Engine; out: string }): Promise<void> {
  const args = harnessArgs(options.engine, options.dir, options.out);
  const child = spawn(join(ROOT, "node_modules/.bin/tsx"), args, { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });
  const [code] = (await once(child, "exit")) as [number | null];
  if (code !== 0) throw new Error(`bench/run.ts ${args.join(" ")} exited ${code}`);
}

/** Every enqueue run's figures of one results file: rate (jobs/s) and CPU per enqueued job of all processes (µs). */
function enqueueRuns(path: string, engine: Engine): { rate: number[]; cpu: number[]; loadavg: number[]; loadavgEnd: number[]; seconds: number } {
  const results = JSON.parse(readFileSync(path, "utf8")) as Results;
  const scenario = results.scenarios.find((s) => s.id === "enqueue");
  if (!scenario || scenario.figures.length === 0) throw new Error(`${path}: no enqueue figures (${scenario?.notes.join("; ") ?? "no scenario"})`);
  const runs = (metric: string) => scenario.figures.find((f) => f.system === `opqueue-${engine}` && f.metric === metric)?.summary.runs ?? [];
  return { rate: runs("rate"), cpu: runs(CPU_METRICS.all), loadavg: scenario.loadavgStart, loadavgEnd: scenario.loadavgEnd, seconds: results.totalSeconds };
}

async function main(): Promise<void> {
  const dirs: Record<Side, string> = { base: resolve(values.base ?? ""), new: resolve(values.new ?? ROOT) };
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
          process.stderr.write(`enqueue ${engine} ${side} round ${round + 1}/${rounds} (load ${loadavg()[0]?.toFixed(2)})\n`);
          await harnessRun({ dir: dirs[side], engine, out: file(engine, side, round) });
        }
      }
    }
  }

  const comparison: EnqueueComparison = {
    command: `npx tsx bench/enqueue-compare.ts --base <base> --rounds ${rounds} --engine ${engines.join(",")}${values.full ? " --full" : ""} --quiet ${values.quiet}`,
    harnessCommand: `tsx bench/run.ts ${harnessArgs("sqlite", "<side>", "<file>").slice(1).join(" ").replace("--engine sqlite", "--engine <engine>")}`,
    date: new Date().toISOString().slice(0, 10),
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
        const runs = enqueueRuns(file(engine, side, round), engine);
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
    results.enqueue = comparison;
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

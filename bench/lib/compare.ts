/**
 * What the regression checks share (bench/drain-compare.ts, bench/enqueue-compare.ts): turns in alternation (base,
 * new, base, new, ...) per engine, so a change in the machine's load reaches both sides alike, each turn one harness
 * run writing its results file (`<engine>-<side>-<round>.json` in the output directory); then the medians of each side
 * over every run, compared. How a turn runs is each script's own.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import type { ComparisonSide, DrainComparison, FlowResults } from "./flow-report.js";
import { requireBuild } from "./opqueue.js";
import type { Engine, Results } from "./results.js";
import { summarize } from "./stats.js";

export const SIDES = ["base", "new"] as const;
export type Side = (typeof SIDES)[number];

/**
 * The options both checks take (their headers say what each means); the output directory defaults to
 * /tmp/opqueue-<scenario>-compare.
 */
export function comparisonArgs(scenario: "drain" | "enqueue" | "encryption") {
  return parseArgs({
    options: {
      base: { type: "string" },
      new: { type: "string" },
      rounds: { type: "string", default: "3" },
      engine: { type: "string", default: "sqlite,postgres" },
      full: { type: "boolean", default: false },
      quiet: { type: "string", default: "0" },
      "out-dir": { type: "string", default: `/tmp/opqueue-${scenario}-compare` },
      into: { type: "string" },
      collect: { type: "boolean", default: false },
      note: { type: "string", multiple: true },
      // bench/encryption-compare.ts: the scenarios to run (enqueue, drain).
      only: { type: "string" },
    },
  }).values;
}
export type ComparisonArgs = ReturnType<typeof comparisonArgs>;

/** What the turns measured: every field of a comparison but how it was made. */
export type Compared = Pick<DrainComparison, "commits" | "engines" | "loadavgStart" | "loadavgEnd" | "seconds">;

/** The runs of one results file: rate (jobs/s), CPU per job (µs), and the commit measured. */
function runsOf(path: string, options: { scenario: string; cpuMetric: string; engine: Engine }) {
  const results = JSON.parse(readFileSync(path, "utf8")) as Results;
  const scenario = results.scenarios.find((s) => s.id === options.scenario);
  if (!scenario || scenario.figures.length === 0)
    throw new Error(`${path}: no ${options.scenario} figures (${scenario?.notes.join("; ") ?? "no scenario"})`);
  const runs = (metric: string) => {
    const values =
      scenario.figures.find((f) => f.system === `opqueue-${options.engine}` && f.metric === metric)?.summary.runs ?? [];
    if (values.length === 0) throw new Error(`${path}: no ${metric} of opqueue-${options.engine}`);
    return values;
  };
  return {
    rate: runs("rate"),
    cpu: runs(options.cpuMetric),
    loadavg: scenario.loadavgStart,
    loadavgEnd: scenario.loadavgEnd,
    seconds: results.totalSeconds,
    commit: results.git === undefined ? "?" : `${results.git.commit}${results.git.srcDirty ? " (src/ changed)" : ""}`,
  };
}

/**
 * Runs the turns (unless --collect: the results files are already in --out-dir) and compares the sides. The commits
 * are those the results files recorded; every turn of a side must agree.
 */
export async function compareSides(
  args: ComparisonArgs,
  options: {
    scenario: "drain" | "enqueue";
    /** Each side's checkout, whose build (dist/cli.js) must exist unless collecting. */
    dirs: Record<Side, string>;
    cpuMetric: string;
    runTurn: (turn: { side: Side; dir: string; engine: Engine; out: string }) => Promise<void>;
  },
): Promise<Compared> {
  const engines = (args.engine ?? "").split(",").filter(Boolean) as Engine[];
  const rounds = Number(args.rounds);
  const collect = args.collect ?? false;
  const outDir = resolve(args["out-dir"] ?? "");
  for (const side of collect ? [] : SIDES) requireBuild(options.dirs[side], `--${side}`);
  mkdirSync(outDir, { recursive: true });
  const file = (engine: Engine, side: Side, round: number) => join(outDir, `${engine}-${side}-${round + 1}.json`);
  const started = performance.now();
  const compared: Compared = {
    commits: { base: "", new: "" },
    engines: {},
    loadavgStart: loadavg(),
    loadavgEnd: [],
    seconds: 0,
  };
  if (!collect) {
    for (const engine of engines) {
      for (let round = 0; round < rounds; round++) {
        for (const side of SIDES) {
          process.stderr.write(
            `${options.scenario} ${engine} ${side} round ${round + 1}/${rounds} (load ${loadavg()[0]?.toFixed(2)})\n`,
          );
          await options.runTurn({ side, dir: options.dirs[side], engine, out: file(engine, side, round) });
        }
      }
    }
  }
  let harnessSeconds = 0;
  for (const engine of engines) {
    const sides = {} as Record<Side, ComparisonSide>;
    for (const side of SIDES) {
      const rate: number[] = [];
      const cpu: number[] = [];
      const loads: number[] = [];
      for (let round = 0; round < rounds; round++) {
        const runs = runsOf(file(engine, side, round), {
          scenario: options.scenario,
          cpuMetric: options.cpuMetric,
          engine,
        });
        if (compared.commits[side] === "") compared.commits[side] = runs.commit;
        else if (compared.commits[side] !== runs.commit)
          throw new Error(`${side}: turns measured ${compared.commits[side]} and ${runs.commit}`);
        rate.push(...runs.rate);
        cpu.push(...runs.cpu);
        if (runs.loadavg[0] !== undefined) loads.push(runs.loadavg[0]);
        harnessSeconds += runs.seconds;
        if (collect && engine === engines[0] && round === 0 && side === "base") compared.loadavgStart = runs.loadavg;
        if (collect && engine === engines.at(-1) && round === rounds - 1 && side === "new")
          compared.loadavgEnd = runs.loadavgEnd;
      }
      sides[side] = { rate: summarize(rate), cpuUsPerJob: summarize(cpu), loadavg1: summarize(loads) };
    }
    compared.engines[engine] = {
      ...sides,
      ratePct: (sides.new.rate.median / sides.base.rate.median - 1) * 100,
      cpuPct: (sides.new.cpuUsPerJob.median / sides.base.cpuUsPerJob.median - 1) * 100,
    };
  }
  if (collect) {
    compared.seconds = Math.round(harnessSeconds);
  } else {
    compared.loadavgEnd = loadavg();
    compared.seconds = Math.round((performance.now() - started) / 1000);
  }
  return compared;
}

/** The script's command line as run, without the options that only say where figures are read or how they are noted. */
function commandLine(script: string): string {
  const args: string[] = [];
  for (let i = 2; i < process.argv.length; i++) {
    const arg = process.argv[i] ?? "";
    if (arg === "--collect") continue;
    if (arg === "--out-dir" || arg === "--note") i++;
    else if (!arg.startsWith("--out-dir=") && !arg.startsWith("--note=")) args.push(arg);
  }
  return `npx tsx ${script} ${args.join(" ")}`;
}

/** A comparison's fields that each check gives itself (the rest come from its arguments and its turns). */
type OwnFields<K extends "drain" | "enqueue"> = Omit<
  NonNullable<FlowResults[K]>,
  keyof Compared | "command" | "mode" | "rounds" | "notes"
>;

/** The record of `script`'s turns, as a flow results file keeps it. */
export function comparisonOf<K extends "drain" | "enqueue">(
  script: string,
  args: ComparisonArgs,
  compared: Compared,
  own: OwnFields<K>,
): NonNullable<FlowResults[K]> {
  return {
    command: commandLine(script),
    mode: args.full ? "full" : "quick",
    rounds: Number(args.rounds),
    ...compared,
    notes: args.note ?? [],
    ...own,
  } as NonNullable<FlowResults[K]>;
}

/**
 * Prints `fields`, and writes them into the flow results file of --into (if given), over what it held; `merge`, given
 * what it held, says what to write instead.
 */
export function writeComparison(
  args: ComparisonArgs,
  fields: Partial<FlowResults>,
  merge: (held: Partial<FlowResults>) => Partial<FlowResults> = () => fields,
): void {
  console.log(JSON.stringify(fields, null, 2));
  if (args.into === undefined) return;
  const target = resolve(args.into);
  const results = (existsSync(target) ? JSON.parse(readFileSync(target, "utf8")) : {}) as Partial<FlowResults>;
  writeFileSync(target, `${JSON.stringify({ ...results, ...merge(results) }, null, 2)}\n`);
  console.log(`written into ${target}`);
}

/**
 * Prints the comparison of `script`'s turns, and writes it into the flow results file of --into (if given) under
 * `key`.
 */
export function report<K extends "drain" | "enqueue">(
  key: K,
  script: string,
  args: ComparisonArgs,
  compared: Compared,
  own: OwnFields<K>,
): void {
  writeComparison(args, { [key]: comparisonOf<K>(script, args, compared, own) });
}

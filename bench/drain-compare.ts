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
import { spawn } from "node:child_process";
import { once } from "node:events";
import { join, resolve } from "node:path";
import { compareSides, comparisonArgs, report, type Side } from "./lib/compare.js";
import type { Engine } from "./lib/results.js";

const values = comparisonArgs("drain");

/** One narrowed drain run of the harness in `dir`, its results written to `out`. */
async function harnessRun(options: { dir: string; engine: Engine; out: string }): Promise<void> {
  const args = [
    "bench/run.ts",
    "--only",
    "drain",
    "--skip-peers",
    "--engine",
    options.engine,
    "--quiet",
    values.quiet ?? "0",
    "--out",
    options.out,
  ];
  if (values.full) args.push("--full");
  const child = spawn(join(options.dir, "node_modules/.bin/tsx"), args, {
    cwd: options.dir,
    stdio: ["ignore", "ignore", "inherit"],
  });
  const [code] = (await once(child, "exit")) as [number | null];
  if (code !== 0) throw new Error(`${options.dir}: bench/run.ts ${args.join(" ")} exited ${code}`);
}

async function main(): Promise<void> {
  if (values.base === undefined || values.new === undefined) throw new Error("--base and --new are required");
  const dirs: Record<Side, string> = { base: resolve(values.base), new: resolve(values.new) };
  const compared = await compareSides(values, {
    scenario: "drain",
    dirs,
    cpuMetric: "cpu_per_job",
    runTurn: harnessRun,
  });
  report("drain", "bench/drain-compare.ts", values, compared, {
    harnessCommand: `tsx bench/run.ts --only drain --skip-peers --engine <engine>${values.full ? " --full" : ""} --quiet ${values.quiet} (in each checkout, built beforehand)`,
  });
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);

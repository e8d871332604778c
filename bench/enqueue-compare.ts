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
 * `--collect` skips the runs and reads the results files already in --out-dir (named `<engine>-<side>-<round>.json`;
 * `date` and `harness` are then the day and commit of the collect); `--note TEXT` (repeatable) adds a note shown under the table.
 */
import { execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { join, resolve } from "node:path";
import { compareSides, comparisonArgs, report, type Side } from "./lib/compare.js";
import { CPU_METRICS } from "./lib/cpu.js";
import { ROOT } from "./lib/ipc.js";
import type { Engine } from "./lib/results.js";

const values = comparisonArgs("enqueue");

/** The harness's arguments for one turn: this checkout's enqueue scenario against the build in `dir`. */
function harnessArgs(engine: string, dir: string, out: string): string[] {
  const args = [
    "bench/run.ts",
    "--only",
    "enqueue",
    "--skip-peers",
    "--engine",
    engine,
    "--quiet",
    values.quiet ?? "0",
  ];
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

async function main(): Promise<void> {
  if (values.base === undefined) throw new Error("--base is required");
  const dirs: Record<Side, string> = { base: resolve(values.base), new: resolve(values.new ?? ROOT) };
  const compared = await compareSides(values, {
    scenario: "enqueue",
    dirs,
    cpuMetric: CPU_METRICS.all,
    runTurn: harnessRun,
  });
  report("enqueue", "bench/enqueue-compare.ts", values, compared, {
    harnessCommand: `tsx bench/run.ts ${harnessArgs("<engine>", "<side's build>", "<file>").slice(1).join(" ")}`,
    harness: execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim(),
    date: new Date().toISOString().slice(0, 10),
  });
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);

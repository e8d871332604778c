/**
 * What payloads encrypted at rest cost (docs/encryption.md; BENCHMARKS.md section 6, "Payloads encrypted at rest"):
 * the enqueue scenario (1) and the drain scenario (2), opqueue only, this checkout, with encryption off (`base`) and
 * on (`new`: `BENCH_ENCRYPTION=1`, one AES-256-GCM key), in alternation (off, on, off, on, ...) per engine, so a change
 * in the machine's load reaches both alike. With encryption on, every enqueued request is sealed by the service and
 * the drain's pre-inserted requests are sealed as the service would have (bench/lib/opqueue.ts), so each delivery
 * opens one. Each turn is one narrowed harness run, `tsx bench/run.ts --only S --skip-peers --engine E`; the
 * medians of CPU per job with every process counted (opqueue's and, on PostgreSQL, the server's) are compared, and
 * written into the flow results file of --into as `encryption`.
 *
 *   npx tsx bench/encryption-compare.ts [--rounds 3] [--engine sqlite,postgres] [--only enqueue,drain] [--full]
 *     [--quiet SECONDS] [--out-dir DIR] [--into bench/results/flow-DATE.json]
 *
 * Build this checkout first (`npm run build`). `--collect` reads the results files already in --out-dir (named
 * `<scenario>/<engine>-<side>-<round>.json`); `--note TEXT` (repeatable) adds a note shown under the tables.
 */
import { execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { join } from "node:path";
import { comparisonArgs, compareSides, comparisonOf, writeComparison, type Side } from "./lib/compare.js";
import { CPU_METRICS } from "./lib/cpu.js";
import type { EncryptionComparison } from "./lib/flow-report.js";
import { ROOT } from "./lib/ipc.js";
import type { Engine } from "./lib/results.js";

const values = comparisonArgs("encryption");
const SCENARIOS = ["enqueue", "drain"] as const;

/** The harness's arguments for one turn of `scenario`. */
function harnessArgs(scenario: string, engine: string, out: string): string[] {
  const args = ["bench/run.ts", "--only", scenario, "--skip-peers", "--engine", engine, "--quiet", values.quiet ?? "0"];
  args.push("--out", out);
  if (values.full) args.push("--full");
  return args;
}

/** One narrowed run of `scenario`, encrypted on the `new` side, its results written to `out`. */
async function harnessRun(scenario: string, turn: { side: Side; engine: Engine; out: string }): Promise<void> {
  const args = harnessArgs(scenario, turn.engine, turn.out);
  const child = spawn(join(ROOT, "node_modules/.bin/tsx"), args, {
    cwd: ROOT,
    stdio: ["ignore", "ignore", "inherit"],
    env: { ...process.env, BENCH_ENCRYPTION: turn.side === "new" ? "1" : "0" },
  });
  const [code] = (await once(child, "exit")) as [number | null];
  if (code !== 0) throw new Error(`bench/run.ts ${args.join(" ")} (${turn.side}) exited ${code}`);
}

async function main(): Promise<void> {
  const encryption: EncryptionComparison = {};
  const harness = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim();
  for (const scenario of SCENARIOS.filter((name) => (values.only ?? name).split(",").includes(name))) {
    const args = { ...values, "out-dir": join(values["out-dir"] ?? "", scenario) };
    const compared = await compareSides(args, {
      scenario,
      dirs: { base: ROOT, new: ROOT },
      cpuMetric: CPU_METRICS.all,
      runTurn: (turn) => harnessRun(scenario, turn),
    });
    encryption[scenario] = comparisonOf<"enqueue">("bench/encryption-compare.ts", values, compared, {
      harnessCommand: `[BENCH_ENCRYPTION=1] tsx bench/run.ts ${harnessArgs(scenario, "<engine>", "<file>").slice(1).join(" ")}`,
      harness,
      date: new Date().toISOString().slice(0, 10),
    });
  }
  // A narrowed run (--only) keeps what the results file holds of the other scenario.
  writeComparison(values, { encryption }, (held) => ({ encryption: { ...held.encryption, ...encryption } }));
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);

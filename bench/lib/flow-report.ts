/**
 * Section 6 of BENCHMARKS.md, flow control, from a flow results file (bench/results/flow-<date>.json, written by
 * bench/flow.ts, with the regression checks of bench/drain-compare.ts and bench/enqueue-compare.ts merged in as `drain`
 * and `enqueue`, and bench/encryption-compare.ts's as `encryption`). bench/lib/report.ts emits it from the newest such file when it regenerates BENCHMARKS.md; `npx tsx bench/flow.ts --report FILE` puts it
 * in place without touching the rest of the file.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Engine } from "./results.js";
import { formatNumber, formatSummary, type Summary } from "./stats.js";

/** The heading of the section; the section runs to the next `## ` heading. */
export const FLOW_HEADING = "## 6. Flow control";

/** One side of a regression check: every run of that build. */
export interface ComparisonSide {
  rate: Summary;
  cpuUsPerJob: Summary;
  /** The one-minute load average at the start of each harness run. */
  loadavg1: Summary;
}

/** The drain scenario without flow control, baseline against the code under test (bench/drain-compare.ts). */
export interface DrainComparison {
  command: string;
  harnessCommand: string;
  mode: "quick" | "full";
  rounds: number;
  commits: { base: string; new: string };
  engines: Partial<Record<Engine, { base: ComparisonSide; new: ComparisonSide; ratePct: number; cpuPct: number }>>;
  loadavgStart: number[];
  loadavgEnd: number[];
  seconds: number;
  /** Anything the reader should know: a change the harness needed, a rerun. */
  notes?: string[];
}

/**
 * The single-job enqueue with none of the extensions used, baseline against the code under test, both measured by one
 * harness (bench/enqueue-compare.ts).
 */
export type EnqueueComparison = DrainComparison & {
  /** The day the turns ran (of the collect, with --collect). */
  date: string;
  /** The commit of the harness that measured both builds. */
  harness: string;
};

/**
 * Payloads encrypted at rest against in clear (bench/encryption-compare.ts): the enqueue and the drain scenarios, one
 * build, `base` without encryption and `new` with it.
 */
export interface EncryptionComparison {
  enqueue?: EnqueueComparison;
  drain?: EnqueueComparison;
}

/** One run of the per-key rate scenario. */
export interface RateRun {
  keys: number;
  jobsPerKey: number;
  limit: { limit: number; period_ms: number; burst: number };
  delivered: number;
  duplicates: number;
  /** From the resume to the first arrival. */
  firstDelayMs: number;
  /** First to last arrival. */
  spanMs: number;
  /** What GCRA allows: every key's first job at once, then one per period: (jobsPerKey − 1) periods. */
  idealSpanMs: number;
  /** Arrivals per second between 1 s after the first arrival and 1 s before the last. */
  steadyRate: number;
  expectedRate: number;
  /** Each key's (arrivals − 1) / (its last − its first arrival). */
  perKeyRate: { min: number; median: number; max: number };
  /** The shortest gap between two arrivals of one key, and the share of gaps under 90 % of a period. */
  minGapMs: number;
  shortGapShare: number;
  loadavg: number[];
}

/** One of B's single jobs during A's backlog drain. */
export interface FairnessProbe {
  /** Share of A's backlog delivered when B enqueued. */
  aDeliveredShare: number;
  /** From B's enqueue answered (201) to its delivery at the target. */
  waitMs: number;
  /** A's deliveries at the target during that wait. */
  aDeliveriesMeanwhile: number;
  /** A's jobs not yet delivered when B's enqueue was answered: all ahead of B in strict FIFO. */
  fifoAhead: number;
  /** fifoAhead at A's drain rate: B's wait under strict FIFO. */
  fifoWaitMs: number;
}

/** One run of the fairness scenario. */
export interface FairnessRun {
  backlog: number;
  enqueueRate: number;
  /** A's drain rate at the target, first to last arrival. */
  aRate: number;
  probes: FairnessProbe[];
  duplicates: number;
  loadavg: number[];
}

/** What bench/flow.ts writes. */
export interface FlowResults {
  date: string;
  command: string;
  git: { commit: string; srcDirty: boolean };
  machine: Record<string, string | number>;
  versions: Record<string, string>;
  settings: Record<string, string>;
  busyCoresBefore: number;
  rate: Partial<Record<Engine, RateRun[]>>;
  fairness: Partial<Record<Engine, FairnessRun[]>>;
  seconds: number;
  drain?: DrainComparison;
  enqueue?: EnqueueComparison;
  encryption?: EncryptionComparison;
  /** bench/blocked-keys.ts, merged in with its --into. */
  blockedKeys?: BlockedKeysResults;
}

/** One engine's run of bench/blocked-keys.ts. */
export interface BlockedKeysRun {
  keys: number;
  enqueueSeconds: number;
  firstJobsSeconds: number;
  unrelatedWaitMs: number[];
  freshKeyWaitMs: number[];
  /** Jobs of the blocked keys delivered beyond one per key (0: each key's rate held). */
  secondJobsDelivered: number;
}

/** What bench/blocked-keys.ts writes. */
export interface BlockedKeysResults {
  date: string;
  command: string;
  commit: string;
  keys: number;
  probes: number;
  loadavg: number[];
  results: Partial<Record<Engine, BlockedKeysRun>>;
  /** What else the machine did meanwhile, when known. */
  note?: string;
}

/** The blocked rate keys' part: how long an unrelated job and a fresh key's job wait behind K blocked keys. */
function blockedKeysPart(blocked: BlockedKeysResults): string[] {
  const ms = (values: number[]) => {
    const sorted = [...values].sort((a, b) => a - b);
    return `${Math.round(sorted[Math.floor(sorted.length / 2)] ?? Number.NaN)} ms (max ${Math.round(sorted.at(-1) ?? Number.NaN)})`;
  };
  const lines = [
    "### Blocked rate keys",
    "",
    `\`rate_per_key\` {limit 1, period 1 h}; ${blocked.keys.toLocaleString("en-US")} rate keys with two jobs each, one ` +
      "delivered and the other held back by its key's rate for an hour. Then, one at a time, a job without a rate key " +
      "and a job of a fresh key, each timed from its enqueue's answer to its arrival at the target (issue 28's goal: " +
      "within a second). Before lanes were held, 10,000 such keys held an unrelated job back for more than a minute.",
    "",
    "| engine | unrelated job waited, median | fresh key's job waited, median | blocked keys' jobs beyond one each | enqueue of the 2 × keys jobs | one job of each key delivered in |",
    "|---|---:|---:|---:|---:|---:|",
  ];
  for (const engine of ENGINES) {
    const run = blocked.results[engine];
    if (!run) continue;
    lines.push(
      `| ${LABEL[engine]} | ${ms(run.unrelatedWaitMs)} | ${ms(run.freshKeyWaitMs)} | ${run.secondJobsDelivered} | ` +
        `${run.enqueueSeconds.toFixed(1)} s | ${run.firstJobsSeconds.toFixed(1)} s |`,
    );
  }
  lines.push(
    "",
    `*Run:* \`${blocked.command}\` on ${blocked.date}, commit ${blocked.commit}, ${blocked.probes} probes of each kind` +
      `${blocked.loadavg.length > 0 ? `; load average ${loads(blocked.loadavg)} at the start` : ""}. A wait is the ` +
      "target's clock at arrival less the load generator's at the answer, two processes on one machine: a few " +
      "milliseconds either way are noise." +
      (blocked.note ? ` ${blocked.note}` : ""),
    "",
  );
  return lines;
}

const ENGINES: Engine[] = ["sqlite", "postgres"];
const LABEL: Record<Engine, string> = { sqlite: "SQLite", postgres: "PostgreSQL" };

const pct = (value: number) => `${value >= 0 ? "+" : "−"}${Math.abs(value).toFixed(1)} %`;
const loads = (values: number[]) => values.map((x) => x.toFixed(2)).join(" ");

/** Runs per harness run of a side: every run of its first engine over the rounds. */
function runsPerTurn(comparison: DrainComparison): number {
  const first = ENGINES.map((engine) => comparison.engines[engine]).find((e) => e !== undefined);
  return first === undefined ? 0 : Math.round(first.base.rate.runs.length / comparison.rounds);
}

/** A regression check's table, load, command and notes, under its heading and introduction. */
function comparisonPart(
  comparison: DrainComparison,
  options: {
    heading: string;
    intro: string;
    cpuHeader: string;
    when?: string;
    /** What the two sides are, when not two commits ("commit A against B") with a limit of 5 %. */
    sides?: { against: string; base: string; new: string; limit: string };
  },
): string[] {
  const sides = options.sides ?? {
    against: `commit ${comparison.commits.base} against ${comparison.commits.new}`,
    base: "base",
    new: "new",
    limit: "the limit set is 5 %",
  };
  const lines = [
    ...(options.heading ? [options.heading, ""] : []),
    `${options.intro}, ${comparison.mode} sizes, ${sides.against}, in alternation (${sides.base}, ${sides.new}, ` +
      `${sides.base}, ${sides.new}, ...; ${comparison.rounds} harness runs of ${runsPerTurn(comparison)} each per side ` +
      `and engine). Median (min–max) over every run; ${sides.limit}.`,
    "",
    `| engine | rate, ${sides.base} (jobs/s) | rate, ${sides.new} (jobs/s) | rate Δ | ${options.cpuHeader}, ${sides.base} (µs) | ${sides.new} (µs) | CPU Δ |`,
    "|---|---:|---:|---:|---:|---:|---:|",
  ];
  for (const engine of ENGINES) {
    const e = comparison.engines[engine];
    if (!e) continue;
    lines.push(
      `| ${LABEL[engine]} | ${formatSummary(e.base.rate)} | ${formatSummary(e.new.rate)} | ${pct(e.ratePct)} | ` +
        `${formatSummary(e.base.cpuUsPerJob)} | ${formatSummary(e.new.cpuUsPerJob)} | ${pct(e.cpuPct)} |`,
    );
  }
  lines.push(
    "",
    `*Load:* ${options.when ?? ""}load average ${loads(comparison.loadavgStart)} at the start, ${loads(comparison.loadavgEnd)} at the end, ` +
      `${comparison.seconds} s; one-minute load average at the start of the harness runs, ${sides.base} ` +
      ENGINES.filter((engine) => comparison.engines[engine])
        .map(
          (engine) =>
            `${LABEL[engine]} ${formatSummary(comparison.engines[engine]?.base.loadavg1)}, ${sides.new} ${formatSummary(comparison.engines[engine]?.new.loadavg1)}`,
        )
        .join("; ") +
      ".",
    "",
    `Command: \`${comparison.command}\`, each turn being \`${comparison.harnessCommand}\`.`,
    "",
  );
  if (comparison.notes?.length) lines.push(...comparison.notes.map((note) => `- ${note}`), "");
  return lines;
}

function drainPart(drain: DrainComparison): string[] {
  return comparisonPart(drain, {
    heading: "### Drain without flow control (regression check)",
    intro:
      "The drain scenario (2) with nothing of flow control configured, opqueue only, each checkout run by its own harness",
    cpuHeader: "node CPU per job",
  });
}

function enqueuePart(enqueue: EnqueueComparison): string[] {
  return comparisonPart(enqueue, {
    heading: "### Single-job enqueue without the extensions (regression check)",
    intro:
      "The enqueue scenario (1) with none of flow control, batches, idempotency keys, expiry or traces used (schema " +
      "checks at enqueue on, as by default, with nothing to check: the benchmark's `buildReport` declares no request " +
      `schema), opqueue only, both builds measured by one harness (commit ${enqueue.harness})`,
    cpuHeader: "CPU per enqueued job, all processes",
    when: `on ${enqueue.date}, `,
  });
}

function encryptionPart(encryption: EncryptionComparison): string[] {
  const lines = [
    "### Payloads encrypted at rest",
    "",
    "What `encryption.keys` (docs/encryption.md) costs: one AES-256-GCM key seals each job's request on its way into " +
      "the store and opens it on its way out (a claim, a read). With it on, the drain's pre-inserted requests are " +
      "sealed as the service would have, so each delivery opens one. No limit is set; the goal is a cost written down.",
    "",
  ];
  const sides = { base: "off", new: "on", limit: "no limit set", against: "encryption off against on" };
  const scenarios = [
    {
      comparison: encryption.enqueue,
      name: "**Enqueue** (scenario 1)",
      cpuHeader: "CPU per enqueued job, all processes",
    },
    { comparison: encryption.drain, name: "**Drain** (scenario 2)", cpuHeader: "CPU per delivered job, all processes" },
  ];
  for (const { comparison, name, cpuHeader } of scenarios) {
    if (!comparison) continue;
    lines.push(
      ...comparisonPart(comparison, {
        heading: "",
        intro: `${name}, opqueue only, one build and harness (commit ${comparison.harness})`,
        cpuHeader,
        when: `on ${comparison.date}, `,
        sides,
      }),
    );
  }
  return lines;
}

function ratePart(results: FlowResults): string[] {
  const first = ENGINES.map((engine) => results.rate[engine]?.[0]).find((run) => run !== undefined);
  if (!first) return [];
  const lines = [
    "### Rate per key",
    "",
    `\`operations.buildReport.rate_per_key: {limit: ${first.limit.limit}, period_ms: ${first.limit.period_ms}, burst: ${first.limit.burst}}\`, ` +
      `${first.keys} rate keys × ${first.jobsPerKey} jobs enqueued over HTTP while the operation is paused, then resumed: ` +
      `expected ${formatNumber(first.expectedRate)} jobs/s in all, ${formatNumber(first.limit.limit / (first.limit.period_ms / 1000))}/s per key. ` +
      "Steady rate: arrivals at the target between 1 s after the first and 1 s before the last; per key: (arrivals − 1) / " +
      "(its last − its first arrival). Gaps are read at the target, so they include the jitter of delivery, not only " +
      "of the claims GCRA spaces.",
    "",
    "| engine | run | delivered | steady rate (jobs/s) | vs expected | per-key rate min / median / max (jobs/s) | shortest gap of a key (ms) | gaps < 90 % of a period | first to last arrival (s; ideal) |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
  ];
  for (const engine of ENGINES) {
    for (const [index, run] of (results.rate[engine] ?? []).entries()) {
      lines.push(
        `| ${LABEL[engine]} | ${index + 1} | ${formatNumber(run.delivered)}${run.duplicates ? ` (${run.duplicates} repeated)` : ""} | ` +
          `${formatNumber(run.steadyRate)} | ${pct((run.steadyRate / run.expectedRate - 1) * 100)} | ` +
          `${run.perKeyRate.min.toFixed(2)} / ${run.perKeyRate.median.toFixed(2)} / ${run.perKeyRate.max.toFixed(2)} | ` +
          `${formatNumber(run.minGapMs)} | ${(run.shortGapShare * 100).toFixed(1)} % | ${(run.spanMs / 1000).toFixed(2)} (${(run.idealSpanMs / 1000).toFixed(2)}) |`,
      );
    }
  }
  lines.push("");
  return lines;
}

function fairnessPart(results: FlowResults): string[] {
  const first = ENGINES.map((engine) => results.fairness[engine]?.[0]).find((run) => run !== undefined);
  if (!first) return [];
  const lines = [
    "### Fairness: one user's backlog, another user's single job",
    "",
    `User A enqueues ${formatNumber(first.backlog)} jobs over HTTP (32 connections) while the operation is paused; ` +
      "the resume starts the drain (no limits configured, concurrency 64); user B enqueues one job at a time when A's " +
      "deliveries reach 10, 25, 40, 55 and 70 % of the backlog. B's wait: from its enqueue answered (201) to its arrival " +
      "at the target. Strict FIFO (the contract's order before fair claims) would put every undelivered job of A ahead " +
      "of it; its wait is estimated at A's measured drain rate. The two clocks are one, but the answer and the arrival " +
      "travel apart: a job delivered before its 201 is read shows a wait below zero (and A's deliveries meanwhile " +
      "counted back from B's arrival).",
    "",
    "| engine | run | A's drain rate (jobs/s) | B enqueued at (A delivered) | B's wait (ms) | A's deliveries meanwhile | FIFO: A's jobs ahead | FIFO: wait (ms, est.) |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
  ];
  for (const engine of ENGINES) {
    for (const [index, run] of (results.fairness[engine] ?? []).entries()) {
      for (const probe of run.probes) {
        lines.push(
          `| ${LABEL[engine]} | ${index + 1} | ${formatNumber(run.aRate)} | ${(probe.aDeliveredShare * 100).toFixed(0)} % | ` +
            `${formatNumber(probe.waitMs)} | ${formatNumber(probe.aDeliveriesMeanwhile)} | ${formatNumber(probe.fifoAhead)} | ${formatNumber(probe.fifoWaitMs)} |`,
        );
      }
    }
  }
  lines.push("");
  return lines;
}

/** The whole section 6 for a flow results file. */
export function flowSection(results: FlowResults, resultsFile: string): string {
  const lines = [
    FLOW_HEADING,
    "",
    "Flow control (docs/flow-control.md): what it and the producers' extensions cost a drain and an enqueue that use none " +
      "of them, what encryption at rest costs them, how exactly a per-key rate holds, " +
      `and how long one user's job waits behind another user's backlog. Raw figures: [${resultsFile}](${resultsFile}).`,
    "",
    `*Run:* \`${results.command}\` on ${results.date}, opqueue built from commit ${results.git.commit}` +
      `${results.git.srcDirty ? " with uncommitted changes in src/" : ""}, ${results.seconds} s; ` +
      `${results.busyCoresBefore.toFixed(2)} cores busy with other work just before; machine: ${results.machine["nproc"]} vCPUs, ` +
      `load average ${results.machine["loadavg_at_start"]} at the start. Settings: ` +
      `${Object.entries(results.settings)
        .map(([key, value]) => `${key} ${value}`)
        .join("; ")}.`,
    "",
  ];
  if (results.drain) lines.push(...drainPart(results.drain));
  if (results.enqueue) lines.push(...enqueuePart(results.enqueue));
  if (results.encryption) lines.push(...encryptionPart(results.encryption));
  lines.push(...ratePart(results), ...fairnessPart(results));
  if (results.blockedKeys) lines.push(...blockedKeysPart(results.blockedKeys));
  const runLoads = ENGINES.flatMap((engine) => [
    ...(results.rate[engine] ?? []).map((run) => `rate ${LABEL[engine]} ${loads(run.loadavg)}`),
    ...(results.fairness[engine] ?? []).map((run) => `fairness ${LABEL[engine]} ${loads(run.loadavg)}`),
  ]);
  if (runLoads.length > 0) lines.push(`*Load* at the start of each run (1, 5, 15 min): ${runLoads.join("; ")}.`, "");
  return lines.join("\n");
}

/** Section 6 from the newest bench/results/flow-*.json under `root`, or null when there is none. */
export function newestFlowSection(root: string): string | null {
  let files: string[];
  try {
    files = readdirSync(join(root, "bench/results"))
      .filter((name) => /^flow-.*\.json$/.test(name))
      .sort();
  } catch {
    return null;
  }
  const newest = files.at(-1);
  if (!newest) return null;
  const relativePath = `bench/results/${newest}`;
  return flowSection(JSON.parse(readFileSync(join(root, relativePath), "utf8")) as FlowResults, relativePath);
}

/** `markdown` with section 6 replaced by `section`, or inserted before the method section (or at the end). */
export function spliceFlowSection(markdown: string, section: string): string {
  const block = `${section.trimEnd()}\n\n`;
  const start = markdown.indexOf(`${FLOW_HEADING}\n`);
  if (start >= 0) {
    const next = markdown.indexOf("\n## ", start + FLOW_HEADING.length);
    return markdown.slice(0, start) + block + (next >= 0 ? markdown.slice(next + 1) : "");
  }
  const method = markdown.indexOf("## How these figures are made");
  if (method >= 0) return markdown.slice(0, method) + block + markdown.slice(method);
  return `${markdown.trimEnd()}\n\n${block}`;
}

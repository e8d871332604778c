/**
 * The results of a benchmark run: figures per scenario, system and engine, each a summary of repeated runs, and
 * everything needed to say what was measured where (machine, versions, settings, load). Written as JSON to
 * `bench/results/`, from which BENCHMARKS.md and the chart are generated.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import type { Sizes } from "./context.js";
import { ROOT } from "./ipc.js";
import { serverInfo } from "./pg.js";
import { redisVersion } from "./redis.js";
import { summarize, type Summary } from "./stats.js";

/** Scenario ids, in the order of the issue. */
export const SCENARIOS = ["enqueue", "drain", "latency", "backlog", "core", "batch", "deep-backlog", "nodes"] as const;
export type ScenarioId = (typeof SCENARIOS)[number];
export type Engine = "sqlite" | "postgres";

/** Scenario 9's node counts, by mode: how many nodes drain together. */
export const NODE_COUNTS = { quick: [1, 3], full: [1, 3, 6] } as const;

/** The system key of scenario 9's figures for a node count. */
export function nodesSystem(nodes: number): string {
  return `opqueue-postgres-${nodes}-nodes`;
}

/** The suffix of a backlog scenario's system measured in turns with the backlog's, on a database without one. */
export const NO_BACKLOG = "-no-backlog";

/** One figure: one metric of one system, summarised over runs. */
export interface Figure {
  /** A stable key, e.g. "opqueue-sqlite", "graphile-batched". */
  system: string;
  /** How the table names it. */
  label: string;
  /** opqueue's engine, or null for a reference (which always runs on PostgreSQL, or on no database). */
  engine: Engine | null;
  /** e.g. "rate", "p50", "peak_rss". */
  metric: string;
  unit: string;
  summary: Summary;
  /** Whether this system is opqueue or a reference. */
  reference: boolean;
}

/** What one scenario measured. */
export interface ScenarioResult {
  id: ScenarioId;
  title: string;
  /** Sizes and settings, as shown in the table header. */
  settings: Record<string, string | number>;
  figures: Figure[];
  /** Anything odd: refused requests, duplicate deliveries, a rerun. */
  notes: string[];
  loadavgStart: number[];
  loadavgEnd: number[];
  /** CPU cores kept busy by other work in a 1 s window before the scenario started (nothing of ours running). */
  busyCoresBefore?: number;
  seconds: number;
}

/** A whole run. */
export interface Results {
  date: string;
  /** The sizes this run used (see SIZES in bench/lib/context.ts). */
  sizes?: Sizes;
  /** The commit the built dist/ came from, and whether src/ had changes not committed yet. */
  git?: { commit: string; srcDirty: boolean };
  mode: "quick" | "full";
  command: string;
  filters: { only: string[]; engines: Engine[] };
  machine: Record<string, string | number>;
  versions: Record<string, string>;
  postgres: Record<string, string>;
  settings: Record<string, string>;
  /**
   * The local PostgreSQL server's CPU over a quiet window (nothing of this run's running) as long as an enqueue
   * run's, read once before the first scenario that counts CPU per job; the figures subtract nothing, this is for
   * readers to judge them by. `error` says why it could not be read.
   */
  idlePostgres?: { windowMs: number; cpuMs: number; busyCoresBefore: number } | { error: string };
  scenarios: ScenarioResult[];
  totalSeconds: number;
  /** Narrowed runs merged in afterwards (`--merge-into`), by command. */
  reruns?: string[];
  /** The capacity model checked against a server held to a share of a core (bench/capacity.ts). */
  capacityCheck?: {
    commands: string[];
    periodUs: number;
    /** The server's CPU while the check's nodes run with nothing to do. */
    idle: { nodes: number; serverMsPerSecond: number };
    checks: CapacityCheck[];
  };
}

/** One way of enqueueing, checked: the model's prediction and what each run measured. */
export interface CapacityCheck {
  shape: "single" | "batch";
  /** The server's share of one core. */
  cores: number;
  nodes: number;
  jobs: number;
  /** The model's inputs: the server's CPU per job to enqueue and to drain, in µs. */
  enqueueUs: number;
  drainUs: number;
  /** The model's rate at `cores`: cores × 1,000,000 ÷ (enqueueUs + drainUs). */
  predicted: number;
  runs: Array<{
    /** Jobs per second from the first enqueue to the last arrival. */
    rate: number;
    enqueueSeconds: number;
    serverUsPerJob: number;
    nodeUsPerJob: number;
    /** The server's CPU over the run ÷ its share's: near 1 when saturated. */
    saturation: number;
    /** The CFS periods in which the quota ran out, as a share of all. */
    throttledShare: number;
  }>;
  /** The runs' median rate ÷ `predicted`. */
  ratio: number;
  /**
   * The whole-life model (`bench/capacity.ts --whole-life`): the same load run with the server free, in turns with the
   * runs above, its CPU per job read over the whole life of every job at once; the model's rate at `cores` is
   * cores × 1,000,000 ÷ that CPU's median, and `ratio` the measured median rate ÷ it.
   */
  wholeLife?: {
    runs: Array<{
      rate: number;
      serverUsPerJob: number;
      nodeUsPerJob: number;
      /** The server's CPU over the run, in cores (it was held to none). */
      coresUsed: number;
    }>;
    serverUsPerJob: number;
    predicted: number;
    ratio: number;
  };
}

/** Collects the figures of one scenario. */
export class ScenarioRecorder {
  private readonly started = performance.now();
  readonly result: ScenarioResult;

  constructor(id: ScenarioId, title: string, settings: Record<string, string | number>) {
    this.result = { id, title, settings, figures: [], notes: [], loadavgStart: loadavg(), loadavgEnd: [], seconds: 0 };
    if (lastIdleSample !== undefined) this.result.busyCoresBefore = lastIdleSample;
  }

  /** Records one metric of one system over its runs. */
  add(options: {
    system: string;
    label: string;
    engine: Engine | null;
    metric: string;
    unit: string;
    values: number[];
    reference?: boolean;
  }): void {
    this.result.figures.push({
      system: options.system,
      label: options.label,
      engine: options.engine,
      metric: options.metric,
      unit: options.unit,
      summary: summarize(options.values),
      reference: options.reference ?? !options.system.startsWith("opqueue"),
    });
  }

  note(text: string): void {
    this.result.notes.push(text);
  }

  finish(): ScenarioResult {
    this.result.loadavgEnd = loadavg();
    this.result.seconds = Math.round((performance.now() - this.started) / 100) / 10;
    return this.result;
  }
}

let lastIdleSample: number | undefined;

function cpuTimes(): { busy: number; total: number } {
  const line = readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "";
  const fields = line.trim().split(/\s+/).slice(1).map(Number);
  const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
  const total = fields.reduce((a, b) => a + b, 0);
  return { busy: total - idle, total };
}

/**
 * How many cores other work keeps busy: /proc/stat over `ms` while the harness runs nothing. The next scenario
 * recorder takes the figure as its `busyCoresBefore`.
 */
export async function sampleBusyCores(ms = 1000): Promise<number> {
  const before = cpuTimes();
  await new Promise((resolve) => setTimeout(resolve, ms));
  const after = cpuTimes();
  const cores = cpus().length;
  const busy = after.total === before.total ? 0 : ((after.busy - before.busy) / (after.total - before.total)) * cores;
  lastIdleSample = Math.round(busy * 100) / 100;
  return lastIdleSample;
}

/** Finds a figure. */
export function findFigure(results: Results, scenario: ScenarioId, system: string, metric: string): Figure | undefined {
  return results.scenarios
    .find((s) => s.id === scenario)
    ?.figures.find((f) => f.system === system && f.metric === metric);
}

function packageVersion(name: string): string {
  try {
    return (JSON.parse(readFileSync(join(ROOT, "node_modules", name, "package.json"), "utf8")) as { version: string })
      .version;
  } catch {
    return "?";
  }
}

function cpuModel(): string {
  return cpus()[0]?.model ?? "?";
}

function nproc(): number {
  try {
    return Number(execFileSync("nproc", { encoding: "utf8" }).trim());
  } catch {
    return cpus().length;
  }
}

/** Machine, versions and PostgreSQL server facts, read at the start of a run. */
export async function describeEnvironment(): Promise<Pick<Results, "machine" | "versions" | "postgres">> {
  const memory = db();
  const postgres = await serverInfo().catch((error: unknown) => ({ error: String(error) }) as Record<string, string>);
  const opqueue = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }).version;
  return {
    machine: {
      nproc: nproc(),
      cpu: cpuModel(),
      memory_gib: Math.round((totalmem() / 1024 ** 3) * 10) / 10,
      kernel: execFileSync("uname", ["-r"], { encoding: "utf8" }).trim(),
      loadavg_at_start: loadavg()
        .map((value) => value.toFixed(2))
        .join(" "),
    },
    versions: {
      node: process.version.slice(1),
      opqueue,
      sqlite: memory,
      "better-sqlite3": packageVersion("better-sqlite3"),
      pg: packageVersion("pg"),
      fastify: packageVersion("fastify"),
      undici: packageVersion("undici"),
      "graphile-worker": packageVersion("graphile-worker"),
      "pg-boss": packageVersion("pg-boss"),
      bullmq: packageVersion("bullmq"),
      ioredis: packageVersion("ioredis"),
      redis: redisVersion() ?? "not installed",
    },
    postgres,
  };
}

function db(): string {
  const memory = new Database(":memory:");
  try {
    return (memory.prepare("SELECT sqlite_version() AS v").get() as { v: string }).v;
  } finally {
    memory.close();
  }
}

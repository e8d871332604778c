/**
 * What every scenario gets: the mode's sizes, the engines to run, a temporary folder, the shared helper processes
 * (load generator, target), and clean-up that runs however the harness ends.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { CpuRoot } from "./cpu.js";
import { Child } from "./ipc.js";
import type { LoadResult, LoadTask, LoadWindowEdge } from "./loadgen.js";
import { postgresServer } from "./pg.js";
import type { Engine } from "./results.js";

/** How big and how often, per mode. */
export interface Sizes {
  /** Runs per figure. */
  runs: number;
  enqueue: { durationMs: number; warmupMs: number; clients: number };
  /**
   * `warmupJobs` are enqueued over HTTP and delivered by each fresh opqueue node before the measured jobs, which
   * are pre-inserted due `leadMs` after the insert (long enough for the node to start and warm up). `peerJobs`: jobs
   * per run of the peer workers, fewer in the quick mode: pg-boss and graphile-worker's default setup deliver about
   * 1,000 jobs/s however fast the machine, and would take most of its five minutes.
   */
  drain: { jobs: number; peerJobs: number; concurrency: number; warmupJobs: number; leadMs: number };
  latency: { jobs: number; rate: number; warmup: number };
  backlog: { rows: number };
  /** The deep backlog (scenario 8): the same measurements as the backlog's over many more jobs not yet due. */
  deepBacklog: { rows: number };
  /** `jobs` per run for opqueue's store, `peerJobs` for the peers (as in the drain). */
  core: { jobs: number; peerJobs: number };
  /** Batch enqueue: `clients` connections each sending `jobsPerRequest` jobs per request, each run after `warmupMs`. */
  batch: { durationMs: number; warmupMs: number; clients: number; jobsPerRequest: number };
}

export const SIZES: Record<"quick" | "full", Sizes> = {
  quick: {
    runs: 3,
    enqueue: { durationMs: 1500, warmupMs: 1000, clients: 32 },
    drain: { jobs: 5000, peerJobs: 1500, concurrency: 64, warmupJobs: 1000, leadMs: 2500 },
    latency: { jobs: 150, rate: 100, warmup: 20 },
    backlog: { rows: 100_000 },
    deepBacklog: { rows: 300_000 },
    core: { jobs: 4000, peerJobs: 1500 },
    batch: { durationMs: 1500, warmupMs: 800, clients: 8, jobsPerRequest: 500 },
  },
  full: {
    runs: 3,
    enqueue: { durationMs: 10_000, warmupMs: 2000, clients: 32 },
    drain: { jobs: 20_000, peerJobs: 20_000, concurrency: 64, warmupJobs: 2000, leadMs: 3500 },
    latency: { jobs: 1000, rate: 100, warmup: 50 },
    backlog: { rows: 1_000_000 },
    deepBacklog: { rows: 10_000_000 },
    core: { jobs: 20_000, peerJobs: 20_000 },
    batch: { durationMs: 10_000, warmupMs: 2000, clients: 8, jobsPerRequest: 500 },
  },
};

/** "5,000" or "5,000 (peers 1,500)": the jobs per run of a scenario whose peers get another number. */
export function jobsPerRun(sizes: { jobs: number; peerJobs?: number }): string {
  const peers = sizes.peerJobs ?? sizes.jobs;
  return sizes.jobs.toLocaleString("en-US") + (peers === sizes.jobs ? "" : ` (peers ${peers.toLocaleString("en-US")})`);
}

/** The target's counters (see bench/peers/target.ts). */
export interface TargetStats {
  requests: number;
  distinct: number;
  firstAt: number;
  lastAt: number;
  spanMs: number;
  firstWall: number;
  lastWall: number;
  /** Requests to other paths (warm-up jobs). */
  others: number;
}

export class Context {
  readonly tmp = mkdtempSync(join(tmpdir(), "opqueue-bench-"));
  private targetChild: Promise<Child> | undefined;
  private loadgenChild: Promise<Child> | undefined;
  private postgresServerRoot: ReturnType<typeof postgresServer> | undefined;
  private readonly cleanups: Array<() => Promise<unknown>> = [];

  constructor(
    readonly mode: "quick" | "full",
    readonly sizes: Sizes,
    readonly engines: Engine[],
    private readonly options: {
      /** Where serve processes write CPU profiles (`--cpu-prof`), when profiling. */
      profileDir?: string | undefined;
      /** More Node arguments for serve processes (--serve-node-args). */
      serveNodeArgs?: string[];
      /** False with --skip-peers: only opqueue is measured (for profiling and development). */
      peers?: boolean;
    } = {},
  ) {}

  /** False with --skip-peers: only opqueue is measured (for profiling and development). */
  get peers(): boolean {
    return this.options.peers ?? true;
  }

  /** The shared no-op target (started on first use). */
  target(): Promise<Child> {
    this.targetChild ??= Child.start({ name: "target", file: "bench/peers/target.ts" });
    return this.targetChild;
  }

  async targetOrigin(): Promise<string> {
    const target = await this.target();
    return `http://127.0.0.1:${(target.info as { port: number }).port}`;
  }

  async targetStats(): Promise<TargetStats> {
    return (await this.target()).call<TargetStats>("stats");
  }

  /**
   * Zeroes the target's counters. With `watch`, the target announces the first measured arrival after the reset
   * ("start") and the `expect`th ("end"): a drain's measured window, whose edges `watch.onEdge` hears as they happen.
   */
  async resetTarget(watch?: { expect: number; onEdge: (edge: LoadWindowEdge) => void }): Promise<void> {
    const target = await this.target();
    target.onProgress = (value) => {
      const edge = (value as { arrival?: LoadWindowEdge }).arrival;
      if (edge) watch?.onEdge(edge);
    };
    await target.call("reset", { expect: watch?.expect ?? null });
  }

  /** The local PostgreSQL server's processes (asked once), or null and why when their CPU cannot be read. */
  postgresServer(): ReturnType<typeof postgresServer> {
    this.postgresServerRoot ??= postgresServer();
    return this.postgresServerRoot;
  }

  /** The server's processes as a database part of a system's CPU; when they cannot be read, `note` hears why. */
  async postgresCpuRoot(note: (text: string) => void): Promise<CpuRoot | null> {
    const server = await this.postgresServer();
    if (server.root === null) note(`PostgreSQL server CPU not counted: ${server.reason}`);
    return server.root;
  }

  /** The shared load generator (started on first use). */
  loadgen(): Promise<Child> {
    this.loadgenChild ??= Child.start({ name: "loadgen", file: "bench/lib/loadgen.ts" });
    return this.loadgenChild;
  }

  /**
   * Runs one load task in the load generator, reporting its progress; `onWindow` hears the measured window open and
   * close as the load generator announces it.
   */
  async load(
    task: LoadTask,
    onProgress?: (ok: number) => void,
    onWindow?: (edge: LoadWindowEdge) => void,
  ): Promise<LoadResult> {
    const loadgen = await this.loadgen();
    loadgen.onProgress = (value) => {
      const { ok, window } = value as { ok?: number; window?: LoadWindowEdge };
      if (window) onWindow?.(window);
      else if (ok !== undefined) onProgress?.(ok);
    };
    try {
      return await loadgen.call<LoadResult>("run", task);
    } finally {
      loadgen.onProgress = () => undefined;
    }
  }

  /** Registers clean-up to run at the end (last registered runs first). */
  defer(cleanup: () => Promise<unknown>): void {
    this.cleanups.push(cleanup);
  }

  /** Node arguments for a serve process: CPU profiling and --serve-node-args when asked. */
  serveNodeArgs(): string[] {
    const { profileDir, serveNodeArgs = [] } = this.options;
    return [...(profileDir ? ["--cpu-prof", "--cpu-prof-dir", profileDir] : []), ...serveNodeArgs];
  }

  async close(): Promise<void> {
    for (const cleanup of this.cleanups.reverse()) await cleanup().catch(() => undefined);
    this.cleanups.length = 0;
    for (const child of [this.targetChild, this.loadgenChild]) {
      if (child) await (await child.catch(() => undefined))?.stop();
    }
    rmSync(this.tmp, { recursive: true, force: true });
  }
}

/** Polls `check` every `everyMs` until it answers true; throws after `timeoutMs`. */
export async function waitUntil(check: () => Promise<boolean>, timeoutMs: number, everyMs = 50): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${Math.round(timeoutMs / 1000)} s`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

export const ENGINE_LABEL: Record<Engine, string> = { sqlite: "SQLite", postgres: "PostgreSQL" };

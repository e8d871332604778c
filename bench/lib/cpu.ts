/**
 * CPU time of every process a system is made of, read from /proc: its own processes (an opqueue serve node, a peer's
 * route or worker process) and its database server (every process of the local PostgreSQL server, or the harness's
 * Redis server of a BullMQ row). The load generator and the no-op target are the harness's, the same for every system,
 * and are never counted.
 *
 * /proc/<pid>/stat gives a process's user and system time (every thread of it) in clock ticks, and the time of its
 * children that have exited and been waited for (`cutime`, `cstime`). A server's processes are read as a tree: every
 * live process plus what each has reaped, so a PostgreSQL backend that exits during a window (a pool closing) still
 * counts, through the postmaster that waits for it.
 */
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { findFigure, type Engine, type Results, type ScenarioId, type ScenarioRecorder } from "./results.js";

let ticksPerSecond: number | undefined;

/** Clock ticks per second of /proc's CPU times (`getconf CLK_TCK`, asked once). */
export function clockTicksPerSecond(): number {
  if (ticksPerSecond === undefined) {
    const answer = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim());
    if (!Number.isInteger(answer) || answer <= 0) throw new Error(`getconf CLK_TCK answered ${answer}`);
    ticksPerSecond = answer;
  }
  return ticksPerSecond;
}

/** The fields of a /proc stat file this harness reads; times in clock ticks. */
export interface ProcStat {
  comm: string;
  ppid: number;
  /** utime + stime: the process's own CPU (every thread, for /proc/<pid>/stat). */
  ownTicks: number;
  /** cutime + cstime: its children that have exited and been waited for. */
  reapedTicks: number;
}

/** Reads /proc/<pid>/stat, or a thread's /proc/<pid>/task/<tid>/stat; null when it is gone. */
export function readProcStat(path: string): ProcStat | null {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return null;
  }
  // The command name sits in parentheses and may hold spaces; the fields after it are: state (3), ppid (4), ...,
  // utime (14), stime (15), cutime (16), cstime (17).
  const close = text.lastIndexOf(")");
  const fields = text.slice(close + 2).split(" ");
  return {
    comm: text.slice(text.indexOf("(") + 1, close),
    ppid: Number(fields[1]),
    ownTicks: Number(fields[11]) + Number(fields[12]),
    reapedTicks: Number(fields[13]) + Number(fields[14]),
  };
}

/**
 * Processes read as one: `process` is the process alone (every thread); `tree` adds its descendants, live or reaped.
 * A peer is read as a process: tsx, which runs the peers' TypeScript, keeps an esbuild child that only compiled
 * the peer at start-up and is not part of the system.
 */
export interface CpuRoot {
  pid: number;
  scope: "process" | "tree";
}

/** Every process's parent, from one pass over /proc. */
function parents(): Map<number, number> {
  const parentOf = new Map<number, number>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const stat = readProcStat(`/proc/${name}/stat`);
    if (stat) parentOf.set(Number(name), stat.ppid);
  }
  return parentOf;
}

/** `root` and its descendants, each parent before its children. */
export function treeOrder(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const [pid, ppid] of parents()) children.set(ppid, [...(children.get(ppid) ?? []), pid]);
  const order = [root];
  for (let i = 0; i < order.length; i++) order.push(...(children.get(order[i] ?? 0) ?? []));
  return order;
}

/**
 * A tree's CPU in ticks: each live process's own time and what it has reaped. Parents are read before their
 * children, so a child reaped between two reads is either in its parent's reaped time already (and then missing
 * itself) or counted by its own read alone; a missing child makes the reading start again, so nothing is counted
 * twice or lost.
 */
function treeTicks(root: number): number {
  for (let attempt = 0; attempt < 10; attempt++) {
    let total = 0;
    let complete = true;
    for (const pid of treeOrder(root)) {
      const stat = readProcStat(`/proc/${pid}/stat`);
      if (!stat) {
        if (pid === root) throw new Error(`process ${root} is gone`);
        complete = false;
        break;
      }
      total += stat.ownTicks + stat.reapedTicks;
    }
    if (complete) return total;
  }
  throw new Error(`the processes under ${root} kept changing while read`);
}

function rootTicks(root: CpuRoot): number {
  if (root.scope === "tree") return treeTicks(root.pid);
  const stat = readProcStat(`/proc/${root.pid}/stat`);
  if (!stat) throw new Error(`process ${root.pid} is gone`);
  return stat.ownTicks;
}

/** The CPU `root` uses over `windowMs` while the harness runs nothing, in ms (a server's idle cost, to judge by). */
export async function idleCpuMs(root: CpuRoot, windowMs: number): Promise<number> {
  const before = rootTicks(root);
  await new Promise((resolve) => setTimeout(resolve, windowMs));
  return ((rootTicks(root) - before) * 1000) / clockTicksPerSecond();
}

/** CPU used so far by a system's processes and by its database server, in ms. */
export interface CpuReading {
  systemMs: number;
  /** Null for a system without a server of its own (opqueue on SQLite, the bare route). */
  databaseMs: number | null;
}

/** The processes of one system: its own, and its database server's (null when it has none). */
export class SystemCpu {
  constructor(readonly parts: { system: CpuRoot[]; database: CpuRoot | null }) {}

  read(): CpuReading {
    const ms = (ticks: number) => (ticks * 1000) / clockTicksPerSecond();
    const systemMs = ms(this.parts.system.reduce((sum, root) => sum + rootTicks(root), 0));
    return { systemMs, databaseMs: this.parts.database ? ms(rootTicks(this.parts.database)) : null };
  }
}

/** CPU per job over a window, in µs: in all, and split into the system's processes and its database server. */
export interface CpuPerJob {
  allUs: number;
  systemUs: number;
  databaseUs: number | null;
}

/**
 * A measured window's readings, taken when its edges are announced (the load generator's measured window, a
 * drain's first and last arrival at the target). The system's processes may be attached after the edges are first
 * listened for (an opqueue node started after the target was reset); an edge with nothing attached leaves the
 * window unmeasured.
 */
export class CpuWindow {
  private cpu: SystemCpu | undefined;
  private start: CpuReading | undefined;
  private end: CpuReading | undefined;
  private unmeasured = false;

  constructor(cpu?: SystemCpu) {
    this.cpu = cpu;
  }

  attach(cpu: SystemCpu): void {
    this.cpu = cpu;
  }

  /** Takes the reading of one edge (bound, so it can be handed on as a callback). */
  readonly edge = (which: "start" | "end"): void => {
    if (!this.cpu) {
      this.unmeasured = true;
      return;
    }
    if (which === "start") this.start = this.cpu.read();
    else this.end = this.cpu.read();
  };

  /** CPU per job over the window, `jobs` being the work done in it; null when an edge was missed. */
  perJob(jobs: number): CpuPerJob | null {
    if (this.unmeasured || !this.start || !this.end || jobs <= 0) return null;
    const systemUs = ((this.end.systemMs - this.start.systemMs) * 1000) / jobs;
    const databaseUs =
      this.start.databaseMs === null || this.end.databaseMs === null
        ? null
        : ((this.end.databaseMs - this.start.databaseMs) * 1000) / jobs;
    return { allUs: systemUs + (databaseUs ?? 0), systemUs, databaseUs };
  }
}

/** The metrics of a system's CPU per job: in all, its own processes, its database server. */
export const CPU_METRICS = {
  all: "cpu_all_per_job",
  system: "cpu_system_per_job",
  database: "cpu_db_per_job",
} as const;

/** The median of a system's database-server CPU per job in a scenario of `results`, in µs; undefined when not measured. */
export function serverCpuMedian(results: Results, scenario: ScenarioId, system: string): number | undefined {
  return findFigure(results, scenario, system, CPU_METRICS.database)?.summary.median;
}

/** CPU per job of one system over its runs; `record` adds its figures. */
export class CpuSeries {
  private readonly all: number[] = [];
  private readonly system: number[] = [];
  private readonly database: number[] = [];

  push(perJob: CpuPerJob | null): void {
    if (!perJob) return;
    this.all.push(perJob.allUs);
    this.system.push(perJob.systemUs);
    if (perJob.databaseUs !== null) this.database.push(perJob.databaseUs);
  }

  /** Adds the three figures; a system without a database server gets an empty one ("–"), so every table has the same columns. */
  record(recorder: ScenarioRecorder, common: { system: string; label: string; engine: Engine | null }): void {
    if (this.all.length === 0) return;
    recorder.add({ ...common, metric: CPU_METRICS.all, unit: "µs", values: this.all });
    recorder.add({ ...common, metric: CPU_METRICS.system, unit: "µs", values: this.system });
    recorder.add({ ...common, metric: CPU_METRICS.database, unit: "µs", values: this.database });
  }
}

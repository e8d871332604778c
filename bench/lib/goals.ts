/** The goals of the issue, as ratios and bounds over the medians of one run. */
import { ENGINE_LABEL } from "./context.js";
import { CPU_METRICS, serverCpuMedian } from "./cpu.js";
import {
  findFigure,
  NODE_COUNTS,
  nodesSystem,
  NO_BACKLOG,
  type Engine,
  type Results,
  type ScenarioId,
} from "./results.js";

/** One goal, evaluated: `met` is null when a figure it needs was not measured. */
export interface GoalResult {
  /** A scenario of the run, or the capacity model's check (bench/capacity.ts, merged into the results). */
  scenario: ScenarioId | "capacity";
  engine: Engine;
  goal: string;
  value: number;
  unit: "×" | "ms" | "MB" | "µs";
  target: string;
  met: boolean | null;
}

/** The share of its quota a capacity check's server must have used for its rate to count as a ceiling. */
const SATURATED = 0.9;

function median(results: Results, scenario: ScenarioId, system: string, metric: string): number {
  return findFigure(results, scenario, system, metric)?.summary.median ?? Number.NaN;
}

export function evaluateGoals(results: Results): GoalResult[] {
  const goals: GoalResult[] = [];
  const add = (
    scenario: GoalResult["scenario"],
    engine: Engine,
    goal: string,
    value: number,
    unit: GoalResult["unit"],
    bound: number,
    direction: "≥" | "≤" | "<",
  ) => {
    const holds = { "≥": value >= bound, "≤": value <= bound, "<": value < bound }[direction];
    const met = Number.isFinite(value) ? holds : null;
    goals.push({
      scenario,
      engine,
      goal,
      value,
      unit,
      target: `${direction} ${bound}${unit === "×" ? " ×" : ` ${unit}`}`,
      met,
    });
  };
  // The server's part of a PostgreSQL figure's CPU per job (issue 31's goals are the database server's work).
  const server = (scenario: ScenarioId, system: string) => serverCpuMedian(results, scenario, system) ?? Number.NaN;
  for (const engine of ["sqlite", "postgres"] as Engine[]) {
    const me = `opqueue-${engine}`;
    if (!results.scenarios.some((s) => s.figures.some((f) => f.system === me))) continue;
    const enqueue = median(results, "enqueue", me, "rate");
    add(
      "enqueue",
      engine,
      "enqueue ÷ bare Fastify route",
      enqueue / median(results, "enqueue", "bare", "rate"),
      "×",
      0.5,
      "≥",
    );
    add(
      "enqueue",
      engine,
      "enqueue ÷ Fastify + graphile-worker",
      enqueue / median(results, "enqueue", "graphile-route", "rate"),
      "×",
      5,
      "≥",
    );
    add(
      "enqueue",
      engine,
      "enqueue ÷ Fastify + pg-boss",
      enqueue / median(results, "enqueue", "pgboss-route", "rate"),
      "×",
      5,
      "≥",
    );
    const drain = median(results, "drain", me, "rate");
    add(
      "drain",
      engine,
      "drain ÷ graphile-worker (batched)",
      drain / median(results, "drain", "graphile-batched", "rate"),
      "×",
      1.2,
      "≥",
    );
    add(
      "drain",
      engine,
      "drain ÷ graphile-worker (default)",
      drain / median(results, "drain", "graphile-default", "rate"),
      "×",
      3,
      "≥",
    );
    add("drain", engine, "drain ÷ pg-boss", drain / median(results, "drain", "pgboss", "rate"), "×", 10, "≥");
    add("drain", engine, "drain ÷ target alone", drain / median(results, "drain", "target", "rate"), "×", 0.5, "≥");
    // CPU per delivered job, summed over every process of each system (its own and its database server's).
    const cpu = (system: string) => median(results, "drain", system, CPU_METRICS.all);
    if (engine === "postgres") {
      add(
        "drain",
        engine,
        "CPU per job, all processes ÷ graphile-worker (batched)",
        cpu(me) / cpu("graphile-batched"),
        "×",
        0.8,
        "≤",
      );
      add(
        "drain",
        engine,
        "CPU per job, all processes ÷ graphile-worker (batched), issue 31's bound",
        cpu(me) / cpu("graphile-batched"),
        "×",
        1.3,
        "≤",
      );
      add(
        "drain",
        engine,
        "server CPU per job ÷ graphile-worker (batched)",
        server("drain", me) / server("drain", "graphile-batched"),
        "×",
        1.5,
        "≤",
      );
      add(
        "drain",
        engine,
        "CPU per job, all processes ÷ BullMQ (Redis, AOF always)",
        cpu(me) / cpu("bullmq"),
        "×",
        1,
        "≤",
      );
    } else {
      add(
        "drain",
        engine,
        "CPU per job, all processes ÷ opqueue (PostgreSQL)",
        cpu(me) / cpu("opqueue-postgres"),
        "×",
        1,
        "<",
      );
    }
    add("latency", engine, "latency p50, one node", median(results, "latency", me, "p50"), "ms", 5, "≤");
    add("latency", engine, "latency p99, one node", median(results, "latency", me, "p99"), "ms", 25, "≤");
    if (engine === "postgres") {
      add(
        "latency",
        engine,
        "latency p99, API node + worker node",
        median(results, "latency", "opqueue-postgres-2nodes", "p99"),
        "ms",
        50,
        "≤",
      );
    }
    // The backlog (scenario 4) and the deep backlog (scenario 8): each rate against the empty one, and the RSS. The
    // empty one is the same scenario's run on a database without the backlog, measured in turns with it; results from
    // before that was measured compare with scenarios 1 and 2 instead. Issue 31 asks more of PostgreSQL's drain
    // beside a million jobs not yet due: 0.9 of the empty one's.
    const backlogs = [
      { scenario: "backlog", name: "backlog", rssMb: 200, drainBound: engine === "postgres" ? 0.9 : 0.8 },
      { scenario: "deep-backlog", name: "deep backlog", rssMb: 250, drainBound: 0.8 },
    ] as const;
    for (const { scenario, name, rssMb, drainBound } of backlogs) {
      const figure = (metric: string) => median(results, scenario, me, metric);
      const empty = (metric: string, otherwise: number) => {
        const inTurns = median(results, scenario, `${me}${NO_BACKLOG}`, metric);
        return Number.isFinite(inTurns) ? inTurns : otherwise;
      };
      const enqueueRatio = figure("enqueue_rate") / empty("enqueue_rate", enqueue);
      const drainRatio = figure("drain_rate") / empty("drain_rate", drain);
      add(scenario, engine, `enqueue with ${name} ÷ empty`, enqueueRatio, "×", 0.8, "≥");
      add(scenario, engine, `drain with ${name} ÷ empty`, drainRatio, "×", drainBound, "≥");
      add(scenario, engine, `peak RSS with ${name}`, figure("peak_rss"), "MB", rssMb, "≤");
    }
    if (engine === "sqlite") {
      const [single, bulk] = batchRatios(results, engine);
      add("batch", engine, "batch enqueue ÷ single-job enqueue", single, "×", 4, "≥");
      add("batch", engine, "batch enqueue ÷ Fastify + BullMQ addBulk", bulk, "×", 1.5, "≥");
    } else {
      // Issue 31: the database server's work per job, as enqueues, several nodes and the capacity model see it.
      add("enqueue", engine, "server CPU per enqueued job, single", server("enqueue", me), "µs", 100, "≤");
      add(
        "batch",
        engine,
        "server CPU per enqueued job, batches of 500",
        server("batch", `${me}-batch`),
        "µs",
        40,
        "≤",
      );
      const one = server("nodes", nodesSystem(1));
      for (const nodes of NODE_COUNTS.full.filter((n) => n > 1)) {
        add(
          "nodes",
          engine,
          `server CPU per job, ${nodes} nodes ÷ 1`,
          server("nodes", nodesSystem(nodes)) / one,
          "×",
          1.15,
          "≤",
        );
      }
      // A check whose server did not use most of its share measured no ceiling: shown, but neither met nor not. The
      // model is the whole life's, measured in the same turns with the server free, where the check has it; the sum of
      // the parts measured apart (sections 1, 7 and 9), a lower bound of the whole life's cost, is shown beside it in
      // the capacity section.
      for (const check of results.capacityCheck?.checks ?? []) {
        const shape = check.shape === "batch" ? "batches of 500" : "single jobs";
        const used = Math.min(...check.runs.map((run) => run.saturation));
        const saturated = used >= SATURATED;
        const ratio = check.wholeLife?.ratio ?? check.ratio;
        goals.push({
          scenario: "capacity",
          engine,
          goal:
            `capacity at ${check.cores} of a core, ${shape}: measured ÷ ${check.wholeLife ? "whole-life " : ""}model` +
            (saturated ? "" : ` (the server used ${Math.round(used * 100)} % of its share: no ceiling)`),
          value: ratio,
          unit: "×",
          target: "0.8 × to 1.2 ×",
          met: Number.isFinite(ratio) && saturated ? ratio >= 0.8 && ratio <= 1.2 : null,
        });
      }
    }
  }
  return goals;
}

/**
 * The batch scenario's ratios for one engine, from medians: batch enqueue ÷ opqueue's single-job enqueue of the same
 * turns, and ÷ the BullMQ addBulk route. Goals on SQLite; reported beside on PostgreSQL.
 */
export function batchRatios(results: Results, engine: Engine): [number, number] {
  const batch = median(results, "batch", `opqueue-${engine}-batch`, "rate");
  return [
    batch / median(results, "batch", `opqueue-${engine}`, "rate"),
    batch / median(results, "batch", "bullmq-bulk-route", "rate"),
  ];
}

export function goalEngineLabel(engine: Engine): string {
  return ENGINE_LABEL[engine];
}

/**
 * The BullMQ rows of a run, one per backend: Redis as durable as opqueue (AOF fsync always), Redis as BullMQ's
 * production guide suggests (AOF fsync every second), and BullMQ 6's PostgreSQL backend on the same server as the
 * other PostgreSQL peers. Each gets a backend of its own: a fresh Redis server (bench/lib/redis.ts) or a fresh
 * schema. bench/peers/bullmq.ts takes the returned arguments.
 */
import type { Context } from "./context.js";
import type { CpuRoot } from "./cpu.js";
import { dropSchema, freshSchema, PG_URL } from "./pg.js";
import { redisVersion, startRedis } from "./redis.js";
import type { ScenarioRecorder } from "./results.js";

export interface BullmqBackend {
  /** `bullmq`, `bullmq-everysec` or `bullmq-postgres`. */
  system: string;
  /** What the rows' labels say after "BullMQ": `Redis, AOF always` and so on. */
  label: string;
  /** Arguments for bench/peers/bullmq.ts. */
  args: string[];
  /** The Redis server's processes (its AOF rewrites fork), whose CPU is the row's database server's; null on PostgreSQL. */
  redis: CpuRoot | null;
}

/** The backends a scenario may ask for: Redis with AOF always, Redis with AOF everysec, PostgreSQL. */
export type BullmqBackendKind = "always" | "everysec" | "postgres";

/**
 * Prepares the BullMQ backends of `kinds` (all by default) this machine can run, in the run's temporary folder, adding
 * each one's clean-up to `cleanups` as soon as it exists (so a failure halfway still removes those already made). A
 * missing redis-server leaves the Redis rows out, with a note in the scenario's results.
 */
export async function prepareBullmqBackends(
  ctx: Context,
  recorder: ScenarioRecorder,
  cleanups: Array<() => Promise<void>>,
  kinds: BullmqBackendKind[] = ["always", "everysec", "postgres"],
): Promise<BullmqBackend[]> {
  const backends: BullmqBackend[] = [];
  const appendfsyncs = (["always", "everysec"] as const).filter((kind) => kinds.includes(kind));
  if (appendfsyncs.length > 0 && redisVersion() === null) {
    recorder.note("BullMQ on Redis left out: no redis-server on this machine");
  } else {
    for (const appendfsync of appendfsyncs) {
      const redis = await startRedis({ parentDir: ctx.tmp, appendfsync });
      cleanups.push(() => redis.stop());
      backends.push({
        system: appendfsync === "always" ? "bullmq" : "bullmq-everysec",
        label: `Redis, AOF ${appendfsync}`,
        args: ["--redis-port", String(redis.port)],
        redis: { pid: redis.pid, scope: "tree" },
      });
    }
  }
  if (kinds.includes("postgres")) {
    const schema = freshSchema("bench_bmq");
    cleanups.push(() => dropSchema(schema));
    backends.push({
      system: "bullmq-postgres",
      label: "PostgreSQL",
      args: ["--database", PG_URL, "--schema", schema],
      redis: null,
    });
  }
  return backends;
}

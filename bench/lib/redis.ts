/**
 * A Redis server of the harness's own for BullMQ: a fresh `redis-server` on a free port of 127.0.0.1, its files in a
 * temporary folder, with BullMQ's production settings (AOF on, `maxmemory-policy noeviction`, no RDB snapshots).
 * `appendfsync always` fsyncs the AOF before the answers of each event-loop turn go out, so an acknowledged job
 * survives a power loss, as opqueue's and PostgreSQL's commits do. `everysec` is what BullMQ's production guide
 * suggests: a power loss may take the last second of acknowledged jobs.
 *
 * The machine's own Redis (port 6379) is left alone: its settings are not the benchmark's to choose.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, rmSync } from "node:fs";
import { createConnection } from "node:net";
import { join } from "node:path";
import { freePort } from "./opqueue.js";

export type AppendFsync = "always" | "everysec";

export interface RedisServer {
  port: number;
  /** The redis-server process (whose CPU a BullMQ row counts as its database server's). */
  pid: number;
  stop(): Promise<void>;
}

/** The redis-server version, or null when none is installed (BullMQ on Redis is then left out of the run). */
export function redisVersion(): string | null {
  try {
    const banner = execFileSync("redis-server", ["--version"], { encoding: "utf8" });
    return /v=(\S+)/.exec(banner)?.[1] ?? "?";
  } catch {
    return null;
  }
}

/** Resolves once the server answers PING. */
async function waitForPong(port: number, child: ChildProcess): Promise<void> {
  const deadline = performance.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server exited (${child.exitCode}) before it was ready`);
    const pong = await new Promise<boolean>((resolve) => {
      const socket = createConnection({ host: "127.0.0.1", port });
      socket.once("error", () => resolve(false));
      socket.once("connect", () => socket.write("PING\r\n"));
      socket.once("data", (data) => {
        socket.destroy();
        resolve(data.toString("latin1").startsWith("+PONG"));
      });
    });
    if (pong) return;
    if (performance.now() > deadline) throw new Error("redis-server did not answer PING within 10 s");
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Starts a Redis server whose files live in `parentDir`; `stop()` ends it and removes them. */
export async function startRedis(options: { parentDir: string; appendfsync: AppendFsync }): Promise<RedisServer> {
  const port = await freePort();
  const dir = join(options.parentDir, `redis-${options.appendfsync}-${port}`);
  mkdirSync(dir, { recursive: true });
  const child = spawn(
    "redis-server",
    [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      "--dir",
      dir,
      "--appendonly",
      "yes",
      "--appendfsync",
      options.appendfsync,
      "--save",
      "",
      "--maxmemory-policy",
      "noeviction",
      "--loglevel",
      "warning",
    ],
    { stdio: ["ignore", "ignore", "inherit"] },
  );
  try {
    await waitForPong(port, child);
  } catch (error) {
    child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    port,
    pid: child.pid ?? 0,
    async stop() {
      if (child.exitCode === null) {
        const exited = once(child, "exit");
        child.kill("SIGTERM");
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

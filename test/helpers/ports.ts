/**
 * A port for a process the test spawns, which must be told its port before it starts.
 *
 * A port the kernel hands out for `listen(0)` and then freed can be handed out again, to another test's server or to
 * an outgoing connection, before the spawned process binds it (EADDRINUSE, or a test talking to the wrong server).
 * So the port is picked below the kernel's ephemeral range, where nothing is handed out unasked; only another test
 * picking the same one at random in the same second could collide.
 */
import { readFileSync } from "node:fs";
import net from "node:net";

/** Ports the kernel assigns by itself start here (Linux's default when /proc cannot say). */
function ephemeralLow(): number {
  try {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 0 ? low : 32_768;
  } catch {
    return 32_768;
  }
}

/** Whether nothing listens on `port` of 127.0.0.1 right now. */
function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/** A free port on 127.0.0.1 outside the ephemeral range, for a child process to listen on. */
export async function freePort(): Promise<number> {
  const high = ephemeralLow();
  const low = Math.max(1024, high - 12_000);
  for (let tries = 0; tries < 100; tries++) {
    const port = low + Math.floor(Math.random() * (high - low));
    if (await isFree(port)) return port;
  }
  throw new Error(`no free port found between ${low} and ${high}`);
}

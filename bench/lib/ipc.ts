/**
 * Child processes of the harness and the little request/reply protocol they speak over the IPC channel.
 *
 * Every helper process (load generator, target, peer servers and workers, core runner) is started with
 * `forkChild`, which runs a TypeScript file through tsx. The child calls `serveCommands` with its handlers; it
 * announces itself with `{type: "ready", info}` and answers `{type: "call", id, command, args}` with
 * `{type: "reply", id, ok, value | error}`. It may also send `{type: "progress", value}` at any time. A child exits
 * when its parent goes away (the IPC channel closes), so a crashed harness leaves no process behind.
 */
import { fork, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";

/** The repository root. */
export const ROOT = fileURLToPath(new URL("../..", import.meta.url));

interface CallMessage {
  type: "call";
  id: number;
  command: string;
  args: unknown;
}

type ChildMessage =
  | { type: "ready"; info: unknown }
  | { type: "reply"; id: number; ok: true; value: unknown }
  | { type: "reply"; id: number; ok: false; error: string }
  | { type: "progress"; value: unknown };

/** A helper process with a command channel. */
export class Child {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void }>();
  private exited = false;
  private stderrTail = "";
  /** Called with every progress message. */
  onProgress: (value: unknown) => void = () => undefined;

  private constructor(
    readonly name: string,
    readonly process: ChildProcess,
    readonly info: unknown,
  ) {
    process.on("message", (message: ChildMessage) => this.handle(message));
    process.on("exit", (code, signal) => {
      this.exited = true;
      for (const { reject } of this.pending.values()) {
        reject(
          new Error(`${name} exited (${signal ?? code}) during a call${this.stderrTail ? `: ${this.stderrTail}` : ""}`),
        );
      }
      this.pending.clear();
    });
  }

  /** Starts `file` (relative to the repository root) and waits for its ready message. */
  static async start(options: {
    name: string;
    file: string;
    args?: string[];
    env?: Record<string, string>;
    execArgv?: string[];
  }): Promise<Child> {
    const child = fork(`${ROOT}/${options.file}`, options.args ?? [], {
      execArgv: ["--import", "tsx", ...(options.execArgv ?? [])],
      env: { ...process.env, ...options.env },
      stdio: ["ignore", "inherit", "pipe", "ipc"],
    });
    let tail = "";
    child.stderr?.on("data", (chunk: Buffer) => {
      process.stderr.write(chunk);
      tail = (tail + chunk.toString("utf8")).slice(-2000);
    });
    const ready = new Promise<unknown>((resolve, reject) => {
      const onMessage = (message: ChildMessage) => {
        if (message.type === "ready") {
          child.off("message", onMessage);
          resolve(message.info);
        }
      };
      child.on("message", onMessage);
      child.once("exit", (code, signal) =>
        reject(new Error(`${options.name} exited (${signal ?? code}) before it was ready: ${tail}`)),
      );
    });
    const info = await ready;
    const result = new Child(options.name, child, info);
    child.stderr?.on("data", (chunk: Buffer) => {
      result.stderrTail = (result.stderrTail + chunk.toString("utf8")).slice(-2000);
    });
    return result;
  }

  private handle(message: ChildMessage): void {
    if (message.type === "progress") {
      this.onProgress(message.value);
      return;
    }
    if (message.type !== "reply") return;
    const waiter = this.pending.get(message.id);
    if (!waiter) return;
    this.pending.delete(message.id);
    if (message.ok) waiter.resolve(message.value);
    else waiter.reject(new Error(`${this.name}: ${message.error}`));
  }

  /** Runs a command in the child and returns its answer. */
  call<T>(command: string, args: unknown = {}): Promise<T> {
    if (this.exited) return Promise.reject(new Error(`${this.name} has exited`));
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      const message: CallMessage = { type: "call", id, command, args };
      this.process.send(message);
    });
  }

  /** Asks the child to exit (SIGTERM), waiting up to `timeoutMs` before SIGKILL. */
  async stop(timeoutMs = 10_000): Promise<void> {
    if (this.exited) return;
    const exited = once(this.process, "exit");
    this.process.kill("SIGTERM");
    const timer = setTimeout(() => this.process.kill("SIGKILL"), timeoutMs);
    await exited;
    clearTimeout(timer);
  }
}

/** In a child: answers the parent's commands with `handlers` and says it is ready with `info`. */
export function serveCommands(
  handlers: Record<string, (args: never) => unknown>,
  info: unknown = {},
  onExit?: () => Promise<void> | void,
): { progress: (value: unknown) => void } {
  if (!process.send) throw new Error("this file is a child process of bench/run.ts; it has no IPC channel");
  const send = (message: ChildMessage) => process.send?.(message);
  process.on("message", (message: CallMessage) => {
    if (message?.type !== "call") return;
    const handler = handlers[message.command];
    if (!handler) {
      send({ type: "reply", id: message.id, ok: false, error: `unknown command ${message.command}` });
      return;
    }
    Promise.resolve()
      .then(() => handler(message.args as never))
      .then(
        (value) => send({ type: "reply", id: message.id, ok: true, value: value ?? null }),
        (error: unknown) =>
          send({
            type: "reply",
            id: message.id,
            ok: false,
            error: error instanceof Error ? (error.stack ?? error.message) : String(error),
          }),
      );
  });
  let exiting = false;
  const exit = () => {
    if (exiting) return;
    exiting = true;
    Promise.resolve(onExit?.())
      .catch(() => undefined)
      .finally(() => process.exit(0));
  };
  process.on("disconnect", exit);
  process.on("SIGTERM", exit);
  process.on("SIGINT", exit);
  send({ type: "ready", info });
  return { progress: (value) => send({ type: "progress", value }) };
}

/**
 * The `opqueue` command as a real process, run from the sources (never from a possibly stale dist/), for tests of
 * commands that work on a running `serve`: start one, wait until it answers, run another command beside it, read its
 * JSON log.
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { rawTestConfig } from "./service.js";

/** The repository's root, the working directory of every process started here. */
export const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** Upper bound of the wait for a starting `serve`; far above what a passing test needs. */
const START_LIMIT_MS = 20_000;

/** A fresh temporary folder (its name starting `opqueue-<prefix>-`), removed when the test ends. */
export function tempDir(t: { after: (fn: () => void) => void }, prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `opqueue-${prefix}-`));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Writes the test product's config (SQLite file in `dir`) as `dir`/opqueue.json, changed by `change`; returns its path. */
export function writeConfig(dir: string, change: (raw: Record<string, unknown>) => void = () => {}): string {
  const raw = rawTestConfig(dir);
  change(raw);
  const file = path.join(dir, "opqueue.json");
  fs.writeFileSync(file, JSON.stringify(raw, null, 2));
  return file;
}

/** What a finished CLI process left behind. */
export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** A CLI process that may still be running. */
export interface CliProcess {
  child: ChildProcess;
  /** Output so far. */
  stdout(): string;
  stderr(): string;
  /** Resolves when the process has exited and its output is closed. */
  exited: Promise<CliResult>;
}

/** The environment of a child: this process's, without anything that could steer opqueue or the test runner. */
function childEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const base: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (name.startsWith("OPQUEUE_") || name.startsWith("NODE_TEST") || name === "NODE_OPTIONS") continue;
    base[name] = value;
  }
  return { ...base, ...env };
}

/** Starts `opqueue ARGS` from source; the process is killed when test `t` ends if it is still running. */
export function startCli(
  t: { after: (fn: () => Promise<void>) => void },
  args: string[],
  env: Record<string, string> = {},
): CliProcess {
  const child = spawn(process.execPath, ["--import", "tsx", "src/cli.ts", ...args], {
    cwd: REPO_ROOT,
    env: childEnv(env),
    stdio: ["ignore", "pipe", "pipe"],
  });
  return watchProcess(t, child);
}

/** Collects the output of `child` (started with piped stdout and stderr); it is killed when test `t` ends if still running. */
export function watchProcess(t: { after: (fn: () => Promise<void>) => void }, child: ChildProcess): CliProcess {
  let stdout = "";
  let stderr = "";
  child.stdout?.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<CliResult>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await exited;
    }
  });
  return { child, stdout: () => stdout, stderr: () => stderr, exited };
}

/** Runs `opqueue ARGS` to its end. */
export function runCli(
  t: { after: (fn: () => Promise<void>) => void },
  args: string[],
  env: Record<string, string> = {},
): Promise<CliResult> {
  return startCli(t, args, env).exited;
}

/**
 * Resolves once `serve` has logged that it started (its listener is bound by then); fails with its output if it
 * exits first, or does not start within `START_LIMIT_MS`.
 */
export function waitForStart(cli: CliProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    const onData = () => {
      if (logLines(cli.stdout()).some((line) => line["msg"] === "opqueue started")) settle();
    };
    const onExit = (result: CliResult) => {
      settle(
        new Error(
          `serve exited (code ${result.code}, signal ${result.signal}) before starting:\n${result.stderr}${result.stdout}`,
        ),
      );
    };
    // A bound for a broken service, never a pause: a passing test is woken by the log line itself.
    const timer = setTimeout(
      () => settle(new Error(`serve did not start within ${START_LIMIT_MS} ms:\n${cli.stderr()}${cli.stdout()}`)),
      START_LIMIT_MS,
    );
    let settled = false;
    function settle(error?: Error): void {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      cli.child.stdout?.off("data", onData);
      if (error) reject(error);
      else resolve();
    }
    cli.child.stdout?.on("data", onData);
    void cli.exited.then(onExit);
    onData();
  });
}

/** Stops a `serve` with SIGTERM and asserts it shut down cleanly (exit code 0). */
export async function stopServe(cli: CliProcess): Promise<void> {
  cli.child.kill("SIGTERM");
  const result = await cli.exited;
  assert.equal(result.code, 0, `serve did not stop cleanly (signal ${result.signal}):\n${result.stderr}`);
}

/** The JSON lines of a serve process's log. */
export function logLines(output: string): Array<Record<string, unknown>> {
  return output
    .split("\n")
    .filter((line) => line.startsWith("{") && line.endsWith("}"))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

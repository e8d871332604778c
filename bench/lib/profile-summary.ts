/**
 * Summarises V8 CPU profiles (`node --cpu-prof`, as `npm run bench -- --profile DIR` makes the serve processes
 * write): the top functions by self time, and self time by package or source folder.
 *
 * Usage: tsx bench/lib/profile-summary.ts FILE.cpuprofile [FILE...] [--top 30] [--skip-ms 1500] [--after-gap 300]
 * `--skip-ms` leaves out the first milliseconds of each profile (the process's start-up); `--after-gap` leaves
 * out everything up to the end of the first idle stretch that long (a drain node's wait, after its warm-up, for
 * the measured jobs to fall due), so only the measured drain counts.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** Where a frame comes from: a package, an opqueue source folder, node internals, or V8's own entries. */
function origin(frame: CallFrame): string {
  const url = frame.url;
  if (url === "") return frame.functionName.startsWith("(") ? frame.functionName : "(native)";
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1] ?? url;
  const own = /\/dist\/(.+)\/[^/]+\.js$/.exec(url) ?? /\/dist\/([^/]+)\.js$/.exec(url);
  if (own) return `opqueue ${own[1]}`;
  if (url.startsWith("node:")) return url;
  return url;
}

function describe(frame: CallFrame): string {
  const name = frame.functionName || "(anonymous)";
  if (frame.url === "") return name;
  const short = frame.url.replace(/^file:\/\/.*?\/(node_modules|dist)\//, "$1/");
  return `${name}  ${short}:${frame.lineNumber + 1}`;
}

/** Where the first run of idle samples lasting `gapMs` ends, in µs from the profile's start (0 when none). */
function endOfFirstGap(profile: CpuProfile, idleIds: Set<number>, gapMs: number): number {
  let at = 0;
  let idleSince: number | undefined;
  for (let index = 0; index < profile.samples.length; index++) {
    at += profile.timeDeltas[index] ?? 0;
    if (idleIds.has(profile.samples[index] ?? -1)) {
      idleSince ??= at;
    } else {
      if (idleSince !== undefined && at - idleSince >= gapMs * 1000) return at;
      idleSince = undefined;
    }
  }
  return 0;
}

export function summarize(paths: string[], top: number, skipMs = 0, afterGapMs = 0): string {
  const byFunction = new Map<string, number>();
  const byOrigin = new Map<string, number>();
  let total = 0;
  for (const path of paths) {
    const profile = JSON.parse(readFileSync(path, "utf8")) as CpuProfile;
    const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
    const idleIds = new Set(
      profile.nodes.filter((node) => node.callFrame.functionName === "(idle)").map((node) => node.id),
    );
    const start = Math.max(skipMs * 1000, afterGapMs > 0 ? endOfFirstGap(profile, idleIds, afterGapMs) : 0);
    let at = 0;
    profile.samples.forEach((id, index) => {
      const delta = profile.timeDeltas[index] ?? 0;
      at += delta;
      const node = nodes.get(id);
      if (!node || at < start) return;
      total += delta;
      const fn = describe(node.callFrame);
      byFunction.set(fn, (byFunction.get(fn) ?? 0) + delta);
      const from = origin(node.callFrame);
      byOrigin.set(from, (byOrigin.get(from) ?? 0) + delta);
    });
  }
  const idle = byFunction.get("(idle)") ?? 0;
  const busy = total - idle;
  const pct = (value: number) => `${((value / busy) * 100).toFixed(1).padStart(5)} %`;
  const ms = (value: number) => `${(value / 1000).toFixed(0).padStart(7)} ms`;
  const lines: string[] = [
    `${paths.length} profile(s)${skipMs > 0 ? ` from ${skipMs} ms on` : ""}${afterGapMs > 0 ? ` after the first ${afterGapMs} ms idle gap` : ""}: ${ms(total)} sampled, ${ms(idle)} idle, ${ms(busy)} busy (percentages of busy time)`,
    "",
    "Self time by function:",
  ];
  const sorted = [...byFunction.entries()].filter(([name]) => name !== "(idle)").sort((a, b) => b[1] - a[1]);
  for (const [name, value] of sorted.slice(0, top)) lines.push(`${ms(value)} ${pct(value)}  ${name}`);
  lines.push("", "Self time by package / source folder:");
  const origins = [...byOrigin.entries()].filter(([name]) => name !== "(idle)").sort((a, b) => b[1] - a[1]);
  for (const [name, value] of origins.slice(0, top)) lines.push(`${ms(value)} ${pct(value)}  ${name}`);
  return lines.join("\n");
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values, positionals } = parseArgs({
    options: { top: { type: "string" }, "skip-ms": { type: "string" }, "after-gap": { type: "string" } },
    allowPositionals: true,
  });
  if (positionals.length === 0) {
    console.error("usage: tsx bench/lib/profile-summary.ts FILE.cpuprofile [FILE...] [--top 30]");
    process.exit(2);
  }
  console.log(
    summarize(positionals, Number(values.top ?? 30), Number(values["skip-ms"] ?? 0), Number(values["after-gap"] ?? 0)),
  );
}

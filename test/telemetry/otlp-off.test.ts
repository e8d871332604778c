/**
 * docs/tracing.md, "Cost when off": without `telemetry.otlp`, no module of OpenTelemetry's SDK (nor opqueue's OTLP
 * tracer) is ever loaded. A child process runs a whole enqueue and delivery (test/fixtures/deliver-without-otlp.ts)
 * under a module loader that refuses them, and the same loader is shown to refuse them when asked.
 *
 * `@opentelemetry/api` alone is not refused: prom-client requires it for its exemplars, whatever opqueue does.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const CHILD = fileURLToPath(new URL("../fixtures/deliver-without-otlp.ts", import.meta.url));

/** A resolve hook that refuses OpenTelemetry's SDK packages and opqueue's OTLP tracer, naming what was asked for. */
const REFUSING_HOOK = `
export async function resolve(specifier, context, next) {
  if ((specifier.startsWith("@opentelemetry/") && specifier !== "@opentelemetry/api") || /\\/otlp\\.(js|ts)$/.test(specifier)) {
    throw new Error("refused to load " + specifier);
  }
  return next(specifier, context);
}`;
const REGISTER = `import { register } from "node:module"; register(${JSON.stringify(`data:text/javascript,${encodeURIComponent(REFUSING_HOOK)}`)});`;

/** Runs `args` with node, tsx and the refusing hook; its exit code and output. */
function runRefusing(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ["--import", "tsx", "--import", `data:text/javascript,${encodeURIComponent(REGISTER)}`, ...args],
      { env: process.env, stdio: ["ignore", "pipe", "pipe"] },
    );
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

test("the loader used below does refuse OpenTelemetry's SDK", async () => {
  const { code, stderr } = await runRefusing([
    "--input-type=module",
    "-e",
    'await import("@opentelemetry/sdk-trace-base");',
  ]);
  assert.notEqual(code, 0);
  assert.match(stderr, /refused to load @opentelemetry\/sdk-trace-base/);
});

test("a service without telemetry.otlp enqueues and delivers a traced job without loading any of OpenTelemetry's SDK", async () => {
  const { code, stdout, stderr } = await runRefusing([CHILD]);
  assert.equal(code, 0, `the child failed:\n${stderr}`);
  assert.match(stdout, /^delivered 00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$/m);
});

/**
 * What the flow control benchmarks share (bench/flow.ts, bench/blocked-keys.ts): the target's arrivals, the wall clock
 * they are read on, the generated configs' auth, and a serve node on a fresh database.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseConfig } from "../../src/config.js";
import { AUTH } from "./assertions.js";
import type { Context } from "./context.js";
import { ROOT } from "./ipc.js";
import { migrate, ServeProcess, writeOpqueueConfig } from "./opqueue.js";
import { dropSchema, freshSchema, opqueueUrl } from "./pg.js";
import type { Engine } from "./results.js";

export type Arrival = [group: string, key: string, wall: number];

/** Epoch milliseconds with sub-millisecond precision, comparable with the target's. */
export const wallNow = () => performance.timeOrigin + performance.now();

/** The HS256 auth of the generated configs, parsed (mintToken takes the parsed form). */
export function parsedAuth() {
  return parseConfig({
    raw: { openapi: "x", target: { base_url: "http://127.0.0.1:1", audience: "product" }, auth: AUTH },
    baseDir: ROOT,
    env: {},
  }).auth;
}

/** A fresh database and a serve node on it, with `operations` in its config; stopped and dropped by `ctx.close`. */
export async function startNode(options: {
  ctx: Context;
  engine: Engine;
  name: string;
  targetOrigin: string;
  operations: Record<string, unknown>;
}): Promise<ServeProcess> {
  const { ctx, engine } = options;
  const dir = join(ctx.tmp, `${options.name}-${engine}-${Date.now().toString(36)}`);
  let database: string;
  if (engine === "sqlite") {
    database = `sqlite:${join(dir, "opqueue.db")}`;
  } else {
    // bench_opq: the harness drops schemas of that prefix left by an interrupted run.
    const schema = freshSchema("bench_opq");
    database = opqueueUrl(schema);
    ctx.defer(() => dropSchema(schema));
  }
  const setup = writeOpqueueConfig({ dir, database, targetOrigin: options.targetOrigin });
  setup.raw["operations"] = options.operations;
  writeFileSync(setup.configPath, JSON.stringify(setup.raw, null, 2));
  await migrate(setup);
  const serve = await ServeProcess.start({ setup });
  ctx.defer(() => serve.stop());
  return serve;
}

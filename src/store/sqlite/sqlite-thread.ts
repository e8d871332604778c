/**
 * The thread that owns the SQLite connection (see sqlite-store.ts). It opens the engine named by `workerData`,
 * reports `ready` (or why it could not open), then runs one call at a time, in the order they arrive: a call is
 * `{ id, method, args, now }`, its answer `{ id, ok, value | error }`. `now` is the caller's clock, so tests that
 * move a manual clock move this thread's time too.
 */
import { parentPort, workerData } from "node:worker_threads";
import type { Clock } from "../../clock.js";
import { SqliteEngine } from "./sqlite-engine.js";
import { serializeError, type EngineCall, type EngineMethod, type FromThread, type InsertAnswer } from "./thread-protocol.js";

const port = parentPort;
if (!port) throw new Error("sqlite-thread.ts runs as a worker thread");

let callTime = 0;
const clock: Clock = { now: () => callTime };
const { path } = workerData as { path: string };

function post(message: FromThread): void {
  port?.postMessage(message);
}

let engine: SqliteEngine;
try {
  engine = SqliteEngine.open({ path, clock });
  post({ kind: "ready" });
} catch (error) {
  post({ kind: "failed", error: serializeError(error) });
  port.close();
  process.exit(0);
}

port.on("message", (call: EngineCall) => {
  callTime = call.now;
  try {
    const method = engine[call.method as EngineMethod] as (...args: unknown[]) => unknown;
    let value = method.apply(engine, call.args);
    if (call.method === "jobInsertMany") {
      value = (value as ReturnType<SqliteEngine["jobInsertMany"]>).map((settled): InsertAnswer => {
        if (!settled.ok) return { ok: false, error: serializeError(settled.error) };
        if (settled.value.kind !== "created") return settled;
        const { seq, createdAt, status } = settled.value.job;
        return { ok: true, created: { seq, createdAt, chainCancelled: status === "cancelled" } };
      });
    }
    post({ kind: "answer", id: call.id, ok: true, value });
  } catch (error) {
    post({ kind: "answer", id: call.id, ok: false, error: serializeError(error) });
  }
  if (call.method === "close") port.close();
});

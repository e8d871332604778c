/**
 * The thread that owns the SQLite connection (see sqlite-store.ts). It opens the engine named by `workerData`,
 * reports `ready` (or why it could not open, and ends), then runs one call at a time, in the order they arrive: a call is
 * `{ id, method, args, now }`, its answer `{ id, ok, value | error }`. `now` is the caller's clock, so tests that
 * move a manual clock move this thread's time too. Insert calls that arrive together are committed together (group
 * commit on this side of the boundary too: see `commitWaitingInserts`). A backup is the one call that spans many turns
 * of this thread's event loop: the calls that arrive while it runs are served between its batches. Once its store is
 * closed the thread waits, idle, for an `{kind: "open", path}` from the next store the process opens (a thread's start
 * is most of the cost of opening a store), and serves that one as it served the first.
 */
import { parentPort, workerData } from "node:worker_threads";
import type { Clock } from "../../clock.js";
import type { JobInsertParams } from "../store.js";
import { SqliteEngine } from "./sqlite-engine.js";
import {
  serializeError,
  type EngineCall,
  type EngineMethod,
  type FromThread,
  type InsertAnswer,
  type ToThread,
} from "./thread-protocol.js";

const port = parentPort;
if (!port) throw new Error("sqlite-thread.ts runs as a worker thread");

let callTime = 0;
const clock: Clock = { now: () => callTime };
const { path } = workerData as { path: string };

function post(message: FromThread): void {
  port?.postMessage(message);
}

let engine: SqliteEngine;

/** Opens the engine of `path` and says so; a thread that cannot open its database ends. */
function open(path: string): void {
  try {
    engine = SqliteEngine.open({ path, clock });
    post({ kind: "ready" });
  } catch (error) {
    post({ kind: "failed", error: serializeError(error) });
    port?.close();
    process.exit(0);
  }
}

open(path);

/** Most inserts committed in one transaction, so one commit never holds the thread (and every other call) for long. */
const MAX_INSERTS_PER_COMMIT = 512;

/** Insert calls that arrived while the thread was busy: committed together, in arrival order, with one fsync. */
let waitingInserts: EngineCall[] = [];
let insertsScheduled = false;

function answerOf(settled: ReturnType<SqliteEngine["jobInsertMany"]>[number]): InsertAnswer {
  if (!settled.ok) return { ok: false, error: serializeError(settled.error) };
  if (settled.value.kind !== "created") return settled;
  const { seq, createdAt, runAt, expiresAt, status } = settled.value.job;
  return { ok: true, created: { seq, createdAt, runAt, expiresAt, chainCancelled: status === "cancelled" } };
}

/** Commits the waiting insert calls, as few transactions as the cap allows, and answers each call. */
function commitWaitingInserts(): void {
  const calls = waitingInserts;
  waitingInserts = [];
  let from = 0;
  while (from < calls.length) {
    let to = from;
    let rows = 0;
    do {
      rows += (calls[to]?.args[0] as unknown[]).length;
      to++;
    } while (to < calls.length && rows + (calls[to]?.args[0] as unknown[]).length <= MAX_INSERTS_PER_COMMIT);
    const group = calls.slice(from, to);
    from = to;
    callTime = group.at(-1)?.now ?? callTime;
    try {
      const settled = engine.jobInsertMany(group.flatMap((call) => call.args[0] as JobInsertParams[]));
      let offset = 0;
      for (const call of group) {
        const size = (call.args[0] as unknown[]).length;
        post({ kind: "answer", id: call.id, ok: true, value: settled.slice(offset, offset + size).map(answerOf) });
        offset += size;
      }
    } catch (error) {
      for (const call of group) post({ kind: "answer", id: call.id, ok: false, error: serializeError(error) });
    }
  }
}

port.on("message", (message: ToThread) => {
  if ("kind" in message) {
    // The next store of this process: its predecessor was closed, with no call left behind (close is its last).
    callTime = 0;
    open(message.path);
    return;
  }
  const call = message;
  if (call.method === "jobInsertMany") {
    // Inserts wait for the calls already queued behind this one (the port hands them all over before the event loop
    // turns), so that every insert that arrived during the last commit shares the next one.
    waitingInserts.push(call);
    if (!insertsScheduled) {
      insertsScheduled = true;
      setImmediate(() => {
        insertsScheduled = false;
        commitWaitingInserts();
      });
    }
    return;
  }
  // Any other call runs after the inserts that came before it: calls take effect in the order they arrive.
  if (waitingInserts.length > 0) commitWaitingInserts();
  callTime = call.now;
  try {
    const method = engine[call.method as EngineMethod] as (...args: unknown[]) => unknown;
    const value = method.apply(engine, call.args);
    if (value instanceof Promise) {
      // A backup: answered when its last batch is done. The calls arriving meanwhile run between its batches.
      value.then(
        (settled: unknown) => post({ kind: "answer", id: call.id, ok: true, value: settled }),
        (error: unknown) => post({ kind: "answer", id: call.id, ok: false, error: serializeError(error) }),
      );
    } else {
      post({ kind: "answer", id: call.id, ok: true, value });
    }
  } catch (error) {
    post({ kind: "answer", id: call.id, ok: false, error: serializeError(error) });
  }
});

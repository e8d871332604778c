/**
 * sharedRead: callers share a read under way, an expensive read is reused for a multiple of its cost, a cheap or
 * failed one never is. Time is a number the test moves; each read settles when the test says so.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { sharedRead } from "../../src/telemetry/shared-read.js";

/** A read whose calls the test settles by hand, on a clock the test moves. */
function controlledRead() {
  let time = 0;
  const calls: Array<{ resolve: (value: number) => void; reject: (error: Error) => void }> = [];
  const read = sharedRead(() => new Promise<number>((resolve, reject) => calls.push({ resolve, reject })), {
    ageFactor: 10,
    maxAgeMs: 30_000,
    minCostMs: 50,
    now: () => time,
  });
  return {
    read,
    calls,
    advance: (ms: number) => (time += ms),
    /** Lets the read's continuations run. */
    settle: () => new Promise((resolve) => setImmediate(resolve)),
  };
}

test("callers that ask while a read is under way share it", async () => {
  const c = controlledRead();
  const first = c.read();
  const second = c.read();
  assert.equal(c.calls.length, 1);
  c.advance(10);
  c.calls[0]?.resolve(7);
  assert.deepEqual(await Promise.all([first, second]), [7, 7]);
});

test("a read of 500 ms is served again for 5 s, then read afresh", async () => {
  const c = controlledRead();
  const first = c.read();
  c.advance(500);
  c.calls[0]?.resolve(1);
  assert.equal(await first, 1);
  c.advance(4_999);
  assert.equal(await c.read(), 1);
  assert.equal(c.calls.length, 1);
  c.advance(1);
  const next = c.read();
  assert.equal(c.calls.length, 2);
  c.calls[1]?.resolve(2);
  assert.equal(await next, 2);
});

test("a very slow read is reused for at most maxAgeMs", async () => {
  const c = controlledRead();
  const first = c.read();
  c.advance(10_000);
  c.calls[0]?.resolve(1);
  await first;
  c.advance(29_999);
  await c.read();
  assert.equal(c.calls.length, 1);
  c.advance(1);
  void c.read();
  assert.equal(c.calls.length, 2);
});

test("a read quicker than minCostMs is never reused", async () => {
  const c = controlledRead();
  const first = c.read();
  c.advance(49);
  c.calls[0]?.resolve(1);
  await first;
  await c.settle();
  void c.read();
  assert.equal(c.calls.length, 2);
});

test("a failed read fails its callers and is not reused", async () => {
  const c = controlledRead();
  const first = c.read();
  const second = c.read();
  c.advance(500);
  c.calls[0]?.reject(new Error("database gone"));
  await assert.rejects(first, /database gone/);
  await assert.rejects(second, /database gone/);
  await c.settle();
  const retry = c.read();
  assert.equal(c.calls.length, 2);
  c.calls[1]?.resolve(3);
  assert.equal(await retry, 3);
});

test("a clock that goes back ends the reuse instead of stretching it", async () => {
  const c = controlledRead();
  const first = c.read();
  c.advance(500);
  c.calls[0]?.resolve(1);
  await first;
  c.advance(-3_600_000);
  void c.read();
  assert.equal(c.calls.length, 2);
});

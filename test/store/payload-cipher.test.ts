/**
 * The payload cipher (src/store/payload-cipher.ts) and the encrypting store (src/store/encrypting-store.ts) on their
 * own: every sealed value has a nonce of its own, across the draws the cipher takes them from; and an insert's answer
 * holds the request it was given in clear, a copy of it, while the engine stores it sealed.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { ManualClock } from "../../src/clock.js";
import { encryptingStore } from "../../src/store/encrypting-store.js";
import { PayloadCipher } from "../../src/store/payload-cipher.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { jobParams, T0 } from "./conformance/harness.js";

const cipher = new PayloadCipher([{ id: "k1", key: randomBytes(32) }]);

/** The 12-byte nonce a sealed value begins with. */
function nonceOf(sealed: string): string {
  const body = sealed.slice(sealed.indexOf(":", "opq1:".length) + 1);
  return Buffer.from(body, "base64url").subarray(0, 12).toString("hex");
}

test("every sealed value has a nonce of its own, over many draws of random bytes, and opens to its value", () => {
  const value = { body: { email: "ada@example.com" } };
  const sealed = Array.from({ length: 2000 }, () => cipher.seal(value));
  assert.equal(new Set(sealed.map(nonceOf)).size, sealed.length);
  for (const text of sealed) assert.deepEqual(cipher.open(text), value);
  assert.deepEqual(cipher.open(cipher.sealText('{"a":[1,2]}')), { a: [1, 2] }, "sealText seals JSON text");
});

test("an insert's answer holds its request in clear, as a copy, while the engine stores it sealed", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "opqueue-cipher-"));
  const bare = await SqliteStore.open({ path: join(dir, "opqueue.db"), clock: new ManualClock(T0) });
  t.after(async () => {
    await bare.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const store = encryptingStore(bare, cipher);
  const params = jobParams({ request: { body: { email: "ada@example.com" } } });
  const outcome = await store.jobInsert(params);
  assert.equal(outcome.kind, "created");
  const answered = (outcome as { job: { request: unknown } }).job.request;
  assert.deepEqual(answered, params.request);
  assert.notEqual(answered, params.request, "the answer's request is not the caller's object");
  const stored = (await bare.jobGet({ id: params.id }))?.request;
  assert.ok(PayloadCipher.isSealed(stored), `stored as ${JSON.stringify(stored)}`);
  assert.deepEqual(cipher.open(stored), params.request);
  assert.deepEqual((await store.jobGet({ id: params.id }))?.request, params.request, "a later read opens it");
});

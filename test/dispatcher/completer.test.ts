/**
 * The completer against the test engine's real store: outcomes the database refuses must not hold back the others.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Completer } from "../../src/dispatcher/completer.js";
import type { JobOutcome } from "../../src/job/job.js";
import { buildReport, enqueue, startService } from "../helpers/jobs.js";
import { capturedLogger } from "../helpers/logs.js";

test("an outcome the database refuses is dropped and logged; the rest of its batch is written", async (t) => {
  const s = await startService(t);
  const store = s.service.store;
  for (let i = 0; i < 3; i++) await enqueue(s, buildReport());
  const [refused, first, second] = await store.jobClaimMany({ limit: 3 });
  assert.ok(refused && first && second, "three running jobs");

  const { logger, lines: logged } = capturedLogger();
  let writes = 0;
  const completer = new Completer({ store, logger, onWritten: () => writes++ });
  const succeeded = (job: { id: string; attempt: number }): JobOutcome => ({
    id: job.id,
    attempt: job.attempt,
    status: "succeeded",
    result: { status_code: 204, error_body: null, terminal_reason: null },
  });
  // A status no job may have: both engines' CHECK constraints refuse it, as they would a bug's outcome.
  completer.add({ outcome: { ...succeeded(refused), status: "bogus" } as unknown as JobOutcome, report: refused.id });
  completer.add({ outcome: succeeded(first), report: first.id });
  completer.add({ outcome: succeeded(second), report: second.id });
  await completer.drain(10_000);

  assert.equal(completer.size, 0, "nothing is left queued");
  assert.equal((await store.jobGet({ id: first.id }))?.status, "succeeded");
  assert.equal((await store.jobGet({ id: second.id }))?.status, "succeeded");
  assert.equal((await store.jobGet({ id: refused.id }))?.status, "running", "left to its lease and the rescuer");
  assert.ok(writes >= 1, "the dispatcher is told slots and keys are free");
  const errors = logged.filter((line) => Number(line["level"]) >= 50);
  assert.deepEqual(
    errors.map((line) => line["jobId"]),
    [refused.id],
    logged.map((line) => line["msg"]).join("\n"),
  );
});

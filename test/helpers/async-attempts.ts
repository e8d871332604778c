/**
 * Attempts a target took asynchronously, as tests of the target's calls (heartbeat, complete, fail) need them: the
 * delivery token the deliverer would have signed, and the mark the dispatcher writes on a 202 with x-job-async: 1.
 */
import assert from "node:assert/strict";
import { deliveryTokenHash } from "../../src/auth/delivery-tokens.js";
import type { DeliverySigner } from "../../src/auth/tokens.js";
import type { JobRow } from "../../src/job/job.js";
import { wireAuthority } from "../../src/job/wire.js";
import { buildReport, driveTo, enqueue } from "./jobs.js";
import type { TestService } from "./service.js";

/** The delivery token of the job's current attempt, signed as the deliverer signs it (by `signer`, the service's by default). */
export async function deliveryToken(
  s: TestService,
  job: JobRow,
  signer: DeliverySigner = s.service.signer,
): Promise<string> {
  return signer.sign({
    sub: job.userId,
    op: job.operationId,
    job: job.id,
    att: job.attempt,
    clm: job.claimCount,
    rid: job.originalRequestId,
    authority: wireAuthority(job.authority),
    timeoutMs: s.service.settings.of(job.operationId).timeoutMs,
  });
}

/** A job running its first attempt, its delivery token, and (unless `async: false`) marked as taken asynchronously. */
export async function runningAttempt(
  s: TestService,
  options: { async?: boolean; enqueue?: Record<string, unknown> } = {},
): Promise<{ job: JobRow; token: string }> {
  const created = await enqueue(s, buildReport(options.enqueue));
  await driveTo(s, created.id, "running");
  const job = (await s.service.store.jobGet({ id: created.id })) as JobRow;
  const token = await deliveryToken(s, job);
  if (options.async ?? true) {
    const marked = await s.service.store.jobMarkAsyncIfRunning({
      job: { id: job.id, attempt: job.attempt, startedAt: job.startedAt },
      tokenHash: deliveryTokenHash(token),
    });
    assert.equal(marked, true);
  }
  return { job, token };
}

/**
 * ClaimSizing's gathering (docs/delivery.md, "Gathering claims"): when a claim for another node's work or a freed slot
 * waits for jobs to gather. Times are the stopwatch's milliseconds, given by each call: nothing here waits.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ClaimSizing } from "../../src/dispatcher/claim-sizing.js";

const GATHER_MS = 25;

function sizing(gatherMs = GATHER_MS): ClaimSizing {
  return new ClaimSizing({ concurrency: 8, gatherMs });
}

test("a node that has made no claim, or whose claims found jobs, claims at once", () => {
  const s = sizing();
  assert.equal(s.gatherWait(0), 0);
  s.claimed({ limit: 8, found: 3, now: 100, forElsewhere: true });
  assert.equal(s.gatherWait(101), 0, "a claim that found jobs");
  s.claimed({ limit: 8, found: 8, now: 200, forElsewhere: false });
  assert.equal(s.gatherWait(201), 0, "a full claim (a backlog)");
});

test("after a claim for another node's work found nothing, the next waits until claim_gather_ms after it", () => {
  const s = sizing();
  s.claimed({ limit: 8, found: 0, now: 1000, forElsewhere: true });
  assert.equal(s.gatherWait(1000), GATHER_MS);
  assert.equal(s.gatherWait(1010), GATHER_MS - 10);
  assert.equal(s.gatherWait(1000 + GATHER_MS), 0, "over at claim_gather_ms");
  assert.equal(s.gatherWait(5000), 0, "an idle node's next claim goes at once");
});

test("a claim that found nothing for a freed slot or this process's work neither starts nor ends a wait", () => {
  const s = sizing();
  s.claimed({ limit: 8, found: 0, now: 1000, forElsewhere: false });
  assert.equal(s.gatherWait(1001), 0, "nothing started");
  s.claimed({ limit: 8, found: 0, now: 2000, forElsewhere: true });
  s.claimed({ limit: 8, found: 0, now: 2005, forElsewhere: false });
  assert.equal(s.gatherWait(2010), GATHER_MS - 10, "the wait goes on from the wasted claim");
});

test("a claim that finds a job, or the end of a wait (gathered), ends it", () => {
  const s = sizing();
  s.claimed({ limit: 8, found: 0, now: 1000, forElsewhere: true });
  s.claimed({ limit: 8, found: 1, now: 1005, forElsewhere: false });
  assert.equal(s.gatherWait(1006), 0);
  s.claimed({ limit: 8, found: 0, now: 2000, forElsewhere: true });
  s.gathered();
  assert.equal(s.gatherWait(2001), 0);
});

test("claim_gather_ms 0 never waits", () => {
  const s = sizing(0);
  s.claimed({ limit: 8, found: 0, now: 1000, forElsewhere: true });
  assert.equal(s.gatherWait(1000), 0);
});

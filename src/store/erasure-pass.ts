/**
 * How `userErase` walks one user's jobs, the same on both engines (docs/api.md, "Erasing a user's data").
 *
 * A call reads a page: the user's next `limit` jobs in creation order (`seq`) after where the subject's last call
 * stopped, which that call's `erasures` row keeps (`pass_after`). It cancels the page's waiting jobs when asked, then
 * erases its finished ones. So a user of N jobs costs N ÷ limit calls of at most `limit` rows each. Each call used to
 * read every job of the user again: 180,000 jobs took 55 s of 180 calls on PostgreSQL, the last ones 470 ms each.
 *
 * Only the call that reaches the user's last job reads all of them once more. It counts the jobs left waiting and
 * running, and finds the first job it should come back to. That can be a job that finished behind the cursor, one it
 * skipped because another transaction held it, or, with `cancelWaiting`, a waiting one. When there is one, the cursor
 * moves back to it and `more` is true. A call that finds nothing after the cursor does the same count first, so a call
 * with nothing to do does nothing, and a change of `cancelWaiting` is seen at once.
 */
import type { JobStatus } from "../job/statuses.js";

/** Where the subject's walk stands, as its last `erasures` row left it. */
export interface ErasurePass {
  /** The seq after which the next page starts: 0 for the first call. */
  after: number;
  /** The waiting and running jobs seen since the pass began; null when the last call ended its pass. */
  waiting: number | null;
  running: number | null;
}

/** One job of a page. */
export interface ErasurePageJob {
  seq: number;
  id: string;
  status: JobStatus;
}

/** All of the user's jobs counted at once: what a call that reaches the last one answers. */
export interface UserJobsLeft {
  waiting: number;
  running: number;
  erasable: number;
  /** The first job to come back to (finished and not erased, or waiting when cancelling); null when none. */
  firstLeft: number | null;
}

/** What a call answers of what is left, and what its `erasures` row keeps for the next call. */
export interface ErasureStep {
  waiting: number;
  running: number;
  more: boolean;
  next: ErasurePass;
}

/** The pass of a subject's last `erasures` row, or the start for a subject with none (or a row of an earlier version). */
export function erasurePassOf(
  row: { after: number | null; waiting: number | null; running: number | null } | undefined,
): ErasurePass {
  if (row === undefined || row.after === null) return { after: 0, waiting: null, running: null };
  return { after: row.after, waiting: row.waiting, running: row.running };
}

/** Whether `left` names a job to come back to; if so the pass starts again just before it. */
export function passRestart(left: UserJobsLeft): ErasurePass | null {
  return left.firstLeft === null ? null : { after: left.firstLeft - 1, waiting: 0, running: 0 };
}

/** The waiting jobs of a page, which a call with `cancelWaiting` cancels. */
export function waitingIds(page: readonly ErasurePageJob[]): string[] {
  return page.filter((job) => job.status === "pending" || job.status === "retrying").map((job) => job.id);
}

/**
 * What a call answers once it has cancelled and erased its page. `left` is the count of all the user's jobs, made by
 * the call when its page was shorter than `limit` (the pass reached the last job), and null otherwise.
 */
export function erasureStep(input: {
  pass: ErasurePass;
  page: readonly ErasurePageJob[];
  cancelled: number;
  cancelWaiting: boolean;
  left: UserJobsLeft | null;
}): ErasureStep {
  const { pass, page, left } = input;
  const through = page.at(-1)?.seq ?? pass.after;
  if (left === null) {
    const waiting = (pass.waiting ?? 0) + waitingIds(page).length - input.cancelled;
    const running = (pass.running ?? 0) + page.filter((job) => job.status === "running").length;
    return { waiting, running, more: true, next: { after: through, waiting, running } };
  }
  const more = left.erasable > 0 || (input.cancelWaiting && left.waiting > 0);
  const restart = more ? passRestart(left) : null;
  return {
    waiting: left.waiting,
    running: left.running,
    more,
    next: restart ?? { after: through, waiting: null, running: null },
  };
}

/**
 * "Did you mean": the known name nearest a mistyped one, for every message that refuses or warns about a name (config
 * keys, operation ids, trigger keys, `opqueue token --op`).
 */

/**
 * The number of single-character edits (insert, delete, replace, or swap two neighbours) that turn `a` into `b`: the
 * optimal string alignment distance. A swap counts once, so `tagret` is one edit from `target`.
 */
export function editDistance(a: string, b: string): number {
  // rows[i][j]: the distance between the first i characters of a and the first j of b.
  const rows: number[][] = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  const at = (i: number, j: number): number => rows[i]?.[j] ?? Number.POSITIVE_INFINITY;
  for (let i = 1; i <= a.length; i++) {
    const row = rows[i] ?? [];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, at(i - 2, j - 2) + 1);
      row[j] = best;
    }
  }
  return at(a.length, b.length);
}

/**
 * The most edits a name may be from a candidate to be taken for a typo of it: one per three characters, at least one
 * and at most three. More would suggest unrelated names (`port` for `host` is two edits).
 */
function tolerance(name: string): number {
  return Math.min(3, Math.max(1, Math.floor(name.length / 3)));
}

/**
 * The candidate `name` most likely misspells, or undefined when none is near enough. Case is ignored in the comparison
 * (`SendWelcomeEmail` finds `sendWelcomeEmail`); of equally near candidates the first wins.
 */
export function closestName(name: string, candidates: Iterable<string>): string | undefined {
  const wanted = name.toLowerCase();
  let best: { candidate: string; distance: number } | undefined;
  for (const candidate of candidates) {
    if (candidate === name) continue;
    const distance = editDistance(wanted, candidate.toLowerCase());
    if (distance <= tolerance(name) && (best === undefined || distance < best.distance)) best = { candidate, distance };
  }
  return best?.candidate;
}

/** ` (did you mean "NAME"?)` for the candidate nearest `name`, or "" when none is near: to end a message with. */
export function didYouMean(name: string, candidates: Iterable<string>): string {
  const closest = closestName(name, candidates);
  return closest === undefined ? "" : ` (did you mean "${closest}"?)`;
}

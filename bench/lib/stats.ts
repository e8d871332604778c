/** Figures from runs: percentiles of samples, and the median (min–max) summary of repeated runs. */

/** Percentile of ascending-sorted values (nearest rank); NaN when empty. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] ?? Number.NaN;
}

/** The median, min and max of one figure over repeated runs, with the runs themselves. */
export interface Summary {
  median: number;
  min: number;
  max: number;
  runs: number[];
}

/** Summarises the values of one figure over runs (NaN values, failed runs, are left out). */
export function summarize(values: number[]): Summary {
  const runs = values.filter((value) => Number.isFinite(value));
  const sorted = [...runs].sort((a, b) => a - b);
  if (sorted.length === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN, runs: values };
  const middle = Math.floor(sorted.length / 2);
  const median =
    sorted.length % 2 === 1 ? (sorted[middle] ?? Number.NaN) : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
  return { median, min: sorted[0] ?? Number.NaN, max: sorted.at(-1) ?? Number.NaN, runs: values };
}

/** Rounds for display: 3 significant digits below 100, whole numbers above, with thousands separators. */
export function formatNumber(value: number): string {
  if (!Number.isFinite(value)) return "–";
  if (Math.abs(value) >= 100) return Math.round(value).toLocaleString("en-US");
  return Number(value.toPrecision(3)).toString();
}

/** `median (min–max)` of a summary, with a unit. */
export function formatSummary(summary: Summary | undefined, unit = ""): string {
  if (!summary || !Number.isFinite(summary.median)) return "–";
  const suffix = unit ? ` ${unit}` : "";
  if (summary.runs.length <= 1 || summary.min === summary.max) return `${formatNumber(summary.median)}${suffix}`;
  return `${formatNumber(summary.median)}${suffix} (${formatNumber(summary.min)}–${formatNumber(summary.max)})`;
}

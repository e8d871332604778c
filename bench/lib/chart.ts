/**
 * bench/results/throughput.svg: horizontal bars of throughput per system (median, with a min–max whisker), one
 * panel for enqueue over HTTP and one for drain. Plain SVG, written by hand: no chart library.
 */
import { formatNumber } from "./stats.js";
import type { Figure, Results, ScenarioId } from "./results.js";

const WIDTH = 860;
const LABEL_WIDTH = 300;
const BAR_AREA = WIDTH - LABEL_WIDTH - 110;
const ROW = 26;
const PANEL_GAP = 44;

function escape(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function panel(title: string, figures: Figure[], top: number): { svg: string; height: number } {
  const max = Math.max(...figures.map((f) => (Number.isFinite(f.summary.max) ? f.summary.max : 0)), 1);
  const scale = BAR_AREA / max;
  const parts: string[] = [`<text x="10" y="${top + 18}" font-size="15" font-weight="bold">${escape(title)}</text>`];
  figures.forEach((figure, index) => {
    const y = top + 32 + index * ROW;
    const median = Number.isFinite(figure.summary.median) ? figure.summary.median : 0;
    const colour = figure.reference ? "#9aa5b1" : "#2f6fdf";
    parts.push(
      `<text x="${LABEL_WIDTH - 8}" y="${y + 14}" font-size="12" text-anchor="end">${escape(figure.label)}</text>`,
      `<rect x="${LABEL_WIDTH}" y="${y + 3}" width="${(median * scale).toFixed(1)}" height="${ROW - 8}" fill="${colour}"/>`,
    );
    if (Number.isFinite(figure.summary.min) && figure.summary.max > figure.summary.min) {
      const x1 = LABEL_WIDTH + figure.summary.min * scale;
      const x2 = LABEL_WIDTH + figure.summary.max * scale;
      const mid = y + ROW / 2 - 1;
      parts.push(
        `<line x1="${x1.toFixed(1)}" y1="${mid}" x2="${x2.toFixed(1)}" y2="${mid}" stroke="#222" stroke-width="1"/>`,
        `<line x1="${x1.toFixed(1)}" y1="${mid - 4}" x2="${x1.toFixed(1)}" y2="${mid + 4}" stroke="#222"/>`,
        `<line x1="${x2.toFixed(1)}" y1="${mid - 4}" x2="${x2.toFixed(1)}" y2="${mid + 4}" stroke="#222"/>`,
      );
    }
    const valueX =
      LABEL_WIDTH + Math.max(median, Number.isFinite(figure.summary.max) ? figure.summary.max : 0) * scale + 6;
    parts.push(`<text x="${valueX.toFixed(1)}" y="${y + 14}" font-size="12">${formatNumber(median)}/s</text>`);
  });
  return { svg: parts.join("\n"), height: 32 + figures.length * ROW };
}

/** The SVG for a run's enqueue and drain rates. */
export function throughputSvg(results: Results): string {
  const pick = (scenario: ScenarioId) =>
    results.scenarios.find((s) => s.id === scenario)?.figures.filter((f) => f.metric === "rate") ?? [];
  const panels: Array<{ title: string; figures: Figure[] }> = [
    { title: "Enqueue over HTTP, 32 clients (jobs/s)", figures: pick("enqueue") },
    { title: `Drain to a 204 target, concurrency 64 (jobs/s)`, figures: pick("drain") },
  ].filter((p) => p.figures.length > 0);
  let top = 40;
  const body: string[] = [];
  for (const p of panels) {
    const drawn = panel(p.title, p.figures, top);
    body.push(drawn.svg);
    top += drawn.height + PANEL_GAP;
  }
  const height = top + 10;
  const heading = `opqueue ${results.versions["opqueue"] ?? ""} benchmarks, ${results.date} (${results.mode} mode; median, whiskers min–max; blue: opqueue, grey: references)`;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="Helvetica, Arial, sans-serif">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="10" y="22" font-size="13" fill="#444">${escape(heading)}</text>`,
    ...body,
    "</svg>",
    "",
  ].join("\n");
}

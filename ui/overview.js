// The overview: jobs by status and by operation, queue lag, the dead jobs needing attention (with a bulk retry),
// and the attempts of the last hour as a stacked bar chart drawn in SVG.
import { api, query } from "./api.js";
import { canOperate } from "./session.js";
import {
  announce,
  confirmAction,
  count,
  duration,
  h,
  replaceContent,
  STATUSES,
  statusBadge,
  svg,
  time,
} from "./dom.js";

/** How often the overview refreshes itself. */
const REFRESH_MS = 5000;
/** The most dead jobs one bulk retry re-queues (the service's bound). */
export const BULK_RETRY_LIMIT = 1000;

/** The outcomes drawn in the chart, bottom to top, with their legend. */
const SERIES = [
  { key: "succeeded", label: "succeeded" },
  { key: "retrying", label: "failed, will retry" },
  { key: "dead", label: "failed, dead" },
  { key: "cancelled", label: "cancelled" },
];

const STATUS_HINTS = {
  pending: "waiting for their run time",
  running: "being delivered now",
  retrying: "failed, waiting to retry",
  succeeded: "delivered",
  dead: "gave up: need attention",
  cancelled: "by an administrator or a chain",
};

const jobsLink = (params) => `#/jobs${query(params)}`;

/** Mounts the overview in `container`. */
export function overviewView(container, ctx) {
  document.title = "Overview · opqueue";
  const updated = h("p", { class: "updated muted", "aria-live": "off" });
  const statusCards = h("ul", { class: "cards", "aria-label": "Jobs by status" });
  const lag = h("div", { class: "panel panel-metric" });
  const attention = h("div", { class: "panel panel-attention" });
  const chart = h("div", { class: "chart" });
  const operations = h("div", { class: "table-wrap" });

  container.append(
    h("div", { class: "view-head" }, h("h1", { tabindex: "-1" }, "Overview"), updated),
    h(
      "section",
      { "aria-labelledby": "by-status-title" },
      h("h2", { id: "by-status-title", class: "visually-hidden" }, "Jobs by status"),
      statusCards,
    ),
    h("div", { class: "row" }, lag, attention),
    h(
      "section",
      { class: "panel", "aria-labelledby": "chart-title" },
      h("h2", { id: "chart-title" }, "Attempts over the last hour"),
      chart,
    ),
    h(
      "section",
      { class: "panel", "aria-labelledby": "ops-title" },
      h("h2", { id: "ops-title" }, "Jobs by operation"),
      operations,
    ),
  );

  let deadCount = 0;
  const retryAllDead = async () => {
    const confirmed = await confirmAction({
      title: "Retry all dead jobs?",
      message:
        `Re-queue the dead jobs (${count(deadCount)} now), newest first, at most ${count(BULK_RETRY_LIMIT)} at once. ` +
        "Each goes back to pending with attempt 0 and runs now. Jobs whose dedupe key a waiting job holds are skipped.",
      confirmLabel: "Retry dead jobs",
    });
    if (!confirmed) return;
    try {
      const { jobs } = await api("/jobs/retry-dead", { method: "POST", body: { limit: BULK_RETRY_LIMIT } });
      announce(bulkRetryMessage(jobs.length, deadCount));
    } catch (error) {
      ctx.reportError(error);
      return;
    }
    await refresh().catch(ctx.reportError);
  };

  let lastData = "";
  async function refresh() {
    const stats = await api("/stats");
    if (!ctx.isCurrent()) return;
    replaceContent(updated, "Updated ", time(new Date().toISOString()), " · refreshes every 5 s");
    const text = JSON.stringify(stats);
    if (text === lastData) return;
    lastData = text;
    deadCount = stats.by_status.dead ?? 0;

    replaceContent(
      statusCards,
      STATUSES.map((status) =>
        h(
          "li",
          { class: `card card-${status}` },
          h(
            "a",
            { href: jobsLink({ status }), "data-focus-key": `status-${status}` },
            h("span", { class: "card-count" }, count(stats.by_status[status] ?? 0)),
            h("span", { class: "card-label" }, status),
            h("span", { class: "card-hint" }, STATUS_HINTS[status]),
          ),
        ),
      ),
    );

    replaceContent(
      lag,
      h("h2", {}, "Queue lag"),
      h("p", { class: "metric" }, stats.queue_lag_seconds > 0 ? duration(stats.queue_lag_seconds * 1000) : "none"),
      h(
        "p",
        { class: "muted" },
        stats.queue_lag_seconds > 0
          ? "How long the oldest due job has been waiting to be claimed."
          : "No due job is waiting to be claimed.",
      ),
    );

    replaceContent(
      attention,
      h("h2", {}, "Dead jobs needing attention"),
      h(
        "div",
        { class: "attention-body" },
        h("p", { class: `metric ${deadCount > 0 ? "metric-bad" : ""}` }, count(deadCount)),
        h(
          "p",
          { class: "muted" },
          deadCount > 0
            ? "Jobs that ran out of attempts or that the target refused for good. Look at why, fix the cause, then retry them."
            : "Nothing to do: no job is dead.",
        ),
      ),
      deadCount > 0
        ? h(
            "div",
            { class: "actions" },
            h(
              "a",
              { class: "button", href: jobsLink({ status: "dead" }), "data-focus-key": "show-dead" },
              "Show dead jobs",
            ),
            canOperate()
              ? h(
                  "button",
                  {
                    type: "button",
                    class: "button button-danger",
                    onclick: retryAllDead,
                    "data-focus-key": "retry-all-dead",
                  },
                  "Retry all dead jobs…",
                )
              : null,
          )
        : null,
    );

    replaceContent(chart, throughputChart(stats.throughput));
    replaceContent(operations, operationTable(stats.by_operation));
  }

  return { refresh, everyMs: REFRESH_MS };
}

/** What a bulk retry did, in words. */
export function bulkRetryMessage(retried, matching) {
  const what = `Re-queued ${count(retried)} dead job${retried === 1 ? "" : "s"}.`;
  if (retried >= BULK_RETRY_LIMIT)
    return `${what} More may remain: run it again for the next ${count(BULK_RETRY_LIMIT)}.`;
  if (matching !== undefined && retried < Math.min(matching, BULK_RETRY_LIMIT))
    return `${what} The others were skipped: a waiting job holds their dedupe key.`;
  return what;
}

/**
 * The value axis of a chart of counts: whole-number ticks 1, 2 or 5 times a power of ten apart, at most five of
 * them, the top one at or above `peak` (0..4 when nothing or little happened).
 */
export function countTicks(peak) {
  let power = 1;
  while (power * 5 * 4 < peak) power *= 10;
  const step = [1, 2, 5].map((factor) => factor * power).find((candidate) => candidate * 4 >= peak) ?? power * 5;
  const top = step === 1 ? Math.max(4, Math.ceil(peak)) : Math.ceil(peak / step) * step;
  const ticks = [];
  for (let value = 0; value <= top; value += step) ticks.push(value);
  return ticks;
}

const hhmm = (iso) => {
  const date = new Date(iso);
  return `${String(date.getHours()).padStart(2, "0")}:${String(date.getMinutes()).padStart(2, "0")}`;
};

/** The chart: one stacked bar per minute, a legend, totals, and the same numbers as a table. */
function throughputChart(buckets) {
  const totals = Object.fromEntries(SERIES.map(({ key }) => [key, buckets.reduce((sum, b) => sum + (b[key] ?? 0), 0)]));
  const perMinute = buckets.map((b) => SERIES.reduce((sum, { key }) => sum + (b[key] ?? 0), 0));
  const peak = Math.max(0, ...perMinute);
  const ticksY = countTicks(peak);
  const yMax = ticksY[ticksY.length - 1];

  const width = 960;
  const height = 220;
  const left = 44;
  const right = 8;
  const top = 10;
  const bottom = 26;
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  const slots = Math.max(buckets.length, 60);
  const slotW = plotW / slots;
  const barW = Math.max(2, slotW - 3);
  const y = (v) => top + plotH - (v / yMax) * plotH;

  const grid = ticksY.flatMap((value) => [
    svg("line", { x1: left, x2: width - right, y1: y(value), y2: y(value), class: value === 0 ? "axis" : "gridline" }),
    svg("text", { x: left - 6, y: y(value) + 4, class: "tick tick-y", "text-anchor": "end" }, count(value)),
  ]);

  const bars = buckets.map((bucket, i) => {
    const x = left + (slots - buckets.length + i) * slotW + (slotW - barW) / 2;
    let base = 0;
    const rects = [];
    for (const { key } of SERIES) {
      const value = bucket[key] ?? 0;
      if (value === 0) continue;
      rects.push(
        svg("rect", {
          x: x.toFixed(1),
          y: y(base + value).toFixed(1),
          width: barW.toFixed(1),
          height: Math.max(1, y(base) - y(base + value)).toFixed(1),
          class: `bar bar-${key}`,
        }),
      );
      base += value;
    }
    const label = SERIES.filter(({ key }) => bucket[key])
      .map(({ key, label }) => `${bucket[key]} ${label}`)
      .join(", ");
    return svg("g", {}, svg("title", {}, `${hhmm(bucket.start)}: ${label || "no attempts"}`), ...rects);
  });

  const ticks = [];
  buckets.forEach((bucket, i) => {
    const minutesAgo = buckets.length - 1 - i;
    if (minutesAgo % 10 !== 0) return;
    const x = left + (slots - buckets.length + i) * slotW + slotW / 2;
    // "now" ends at the plot's right edge, so no width of the chart cuts it off.
    if (minutesAgo === 0)
      ticks.push(svg("text", { x: width - right, y: height - 6, class: "tick", "text-anchor": "end" }, "now"));
    else
      ticks.push(
        svg("text", { x: x.toFixed(1), y: height - 6, class: "tick", "text-anchor": "middle" }, hhmm(bucket.start)),
      );
  });

  const summary =
    `Last hour: ${totals.succeeded} succeeded, ${totals.retrying} failed and will retry, ${totals.dead} failed for good, ` +
    `${totals.cancelled} cancelled. Busiest minute: ${peak} attempt${peak === 1 ? "" : "s"}.`;

  const picture = svg(
    "svg",
    {
      viewBox: `0 0 ${width} ${height}`,
      role: "img",
      "aria-labelledby": "chart-svg-title",
      class: "chart-svg",
      preserveAspectRatio: "xMidYMid meet",
    },
    svg("title", { id: "chart-svg-title" }, summary),
    ...grid,
    ...bars,
    ...ticks,
  );

  const legend = h(
    "ul",
    { class: "legend" },
    SERIES.map(({ key, label }) =>
      h(
        "li",
        {},
        h("span", { class: `swatch swatch-${key}`, "aria-hidden": "true" }),
        h("strong", {}, count(totals[key])),
        ` ${label}`,
      ),
    ),
  );

  const busy = buckets.filter((_, i) => perMinute[i] > 0);
  const table = h(
    "details",
    { class: "chart-data" },
    h("summary", {}, "The same numbers as a table"),
    busy.length === 0
      ? h("p", { class: "muted" }, "No attempt finished in the last hour.")
      : h(
          "table",
          { class: "data compact" },
          h("caption", { class: "visually-hidden" }, "Finished attempts per minute over the last hour"),
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              h("th", { scope: "col" }, "Minute"),
              SERIES.map(({ label }) => h("th", { scope: "col", class: "num" }, label)),
            ),
          ),
          h(
            "tbody",
            {},
            busy.map((bucket) =>
              h(
                "tr",
                {},
                h("th", { scope: "row" }, hhmm(bucket.start)),
                SERIES.map(({ key }) => h("td", { class: "num" }, count(bucket[key] ?? 0))),
              ),
            ),
          ),
        ),
  );

  return [legend, picture, table];
}

/** Jobs by operation and status, each count a link to the list filtered by both. */
function operationTable(rows) {
  if (rows.length === 0) return h("p", { class: "muted" }, "No job yet.");
  const byOperation = new Map();
  for (const row of rows) {
    const counts = byOperation.get(row.operation_id) ?? {};
    counts[row.status] = (counts[row.status] ?? 0) + row.count;
    byOperation.set(row.operation_id, counts);
  }
  const names = [...byOperation.keys()].sort();
  return h(
    "table",
    { class: "data" },
    h("caption", { class: "visually-hidden" }, "Jobs by operation and status"),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        h("th", { scope: "col" }, "Operation"),
        STATUSES.map((status) => h("th", { scope: "col", class: "num" }, statusBadge(status))),
        h("th", { scope: "col", class: "num" }, "total"),
      ),
    ),
    h(
      "tbody",
      {},
      names.map((name) => {
        const counts = byOperation.get(name);
        const total = Object.values(counts).reduce((sum, n) => sum + n, 0);
        return h(
          "tr",
          {},
          h(
            "th",
            { scope: "row" },
            h("a", { href: jobsLink({ operation_id: name }), "data-focus-key": `op-${name}` }, name),
          ),
          STATUSES.map((status) =>
            h(
              "td",
              { class: `num ${counts[status] ? "" : "zero"}` },
              counts[status]
                ? h(
                    "a",
                    {
                      href: jobsLink({ status, operation_id: name }),
                      "aria-label": `${counts[status]} ${status} ${name} jobs`,
                      "data-focus-key": `op-${name}-${status}`,
                    },
                    count(counts[status]),
                  )
                : "0",
            ),
          ),
          h("td", { class: "num" }, count(total)),
        );
      }),
    ),
  );
}

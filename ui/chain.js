// A chain's page (GET /chains/{original_request_id}, docs/chains.md): how it stands (counts, settled, spawn cap use,
// its on_settled), and a waterfall: a row per job, indented under its parent, with a bar per attempt on one time axis
// from the chain's start to its settling (or now), so where the time went is seen at a glance.
import { api, apiPath } from "./api.js";
import { count, duration, h, replaceContent, statusBadge, svg, time } from "./dom.js";
import { jobHash } from "./jobs.js";

/** How often a chain's page refreshes itself. */
const REFRESH_MS = 2000;
/** Width of the waterfall's time axis, in SVG units. */
const AXIS = 600;

/** The page's address for chain `rid`. */
export function chainHash(rid) {
  return `#/chains/${encodeURIComponent(rid)}`;
}

/** Mounts the page of chain `rid` in `container`. */
export function chainView(container, rid, ctx) {
  document.title = `Chain ${rid} · opqueue`;
  const summary = h("div", {});
  const waterfall = h("div", {});
  const updated = h("p", { class: "updated muted" });
  container.append(
    h("nav", { class: "breadcrumb", "aria-label": "Breadcrumb" }, h("a", { href: "#/jobs" }, "Jobs"), h("span", { "aria-hidden": "true" }, " › "), h("span", { "aria-current": "page" }, "Chain")),
    h("div", { class: "view-head" }, h("h1", { tabindex: "-1" }, "Chain ", h("code", { class: "chain-id", id: "chain-title" }, rid)), updated),
    h("section", { class: "panel", "aria-labelledby": "chain-summary-title" }, h("h2", { id: "chain-summary-title" }, "Summary"), summary),
    h("section", { class: "panel", "aria-labelledby": "waterfall-title" }, h("h2", { id: "waterfall-title" }, "Waterfall"), waterfall),
  );
  let last = "";
  async function refresh() {
    const { chain } = await api(apiPath`/chains/${rid}`);
    if (!ctx.isCurrent()) return;
    replaceContent(updated, "Updated ", time(new Date().toISOString()), ` · refreshes every ${REFRESH_MS / 1000} s`);
    const text = JSON.stringify(chain);
    if (text === last) return;
    last = text;
    replaceContent(summary, summaryTable(chain));
    replaceContent(waterfall, waterfallOf(chain));
  }
  return { refresh, everyMs: REFRESH_MS };
}

function summaryTable(chain) {
  const counts = Object.entries(chain.counts)
    .filter(([, n]) => n > 0)
    .map(([status, n]) => h("span", { class: "count-item" }, statusBadge(status), ` ${count(n)}`));
  const rows = [
    ["started_at", time(chain.started_at)],
    ["settled", chain.settled ? h("strong", { id: "chain-settled" }, "yes") : h("span", { id: "chain-settled" }, "no: jobs are waiting or running")],
    ["settled_at", time(chain.settled_at)],
    ["jobs by status", counts.length > 0 ? counts : h("span", { class: "muted" }, "none")],
    ["spawn cap", `${count(chain.spawn_cap.used)} of ${count(chain.spawn_cap.limit)} used`],
    ["on_settled", chain.on_settled ? [h("code", {}, chain.on_settled.operation_id), chain.on_settled.fired_at ? [" · fired ", time(chain.on_settled.fired_at)] : " · not fired yet"] : h("span", { class: "muted" }, "none")],
    ["cancelled", chain.cancelled_at ? [time(chain.cancelled_at), ` by ${chain.cancelled_by ?? "?"}`] : h("span", { class: "muted" }, "no")],
  ];
  return h("table", { class: "fields" }, h("tbody", {}, rows.map(([name, value]) => h("tr", {}, h("th", { scope: "row" }, name), h("td", {}, value)))));
}

/** Every node of the tree with its depth, parents before children, oldest first. */
function flatten(nodes, depth = 0, out = []) {
  for (const node of nodes) {
    out.push({ node, depth });
    flatten(node.children, depth + 1, out);
  }
  return out;
}

function waterfallOf(chain) {
  const rows = flatten(chain.jobs);
  if (rows.length === 0) return h("p", { class: "muted" }, "No jobs.");
  const start = Date.parse(chain.started_at ?? rows[0].node.job.created_at);
  const ends = rows.flatMap(({ node }) => [Date.parse(node.job.created_at), ...node.attempts.map((a) => Date.parse(a.finished_at))]);
  const end = chain.settled_at ? Date.parse(chain.settled_at) : Math.max(Date.now(), ...ends);
  const span = Math.max(1, end - start);
  const x = (ms) => ((ms - start) / span) * AXIS;
  return [
    h("p", { class: "muted" }, `From the chain's first enqueue to ${chain.settled_at ? "its settling" : "now"}: ${duration(span)}. A bar per attempt, coloured by how it ended; the line before it is the job's wait.`),
    h(
      "table",
      { class: "waterfall", id: "waterfall" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Job"), h("th", { scope: "col" }, "Status"), h("th", { scope: "col" }, "Attempts over time"))),
      h(
        "tbody",
        {},
        rows.map(({ node, depth }) => {
          const { job } = node;
          const created = x(Date.parse(job.created_at));
          const bars = node.attempts.map((attempt) => {
            const from = x(Date.parse(attempt.started_at ?? attempt.finished_at));
            const to = x(Date.parse(attempt.finished_at));
            return svg(
              "rect",
              { x: from, y: 4, width: Math.max(2, to - from), height: 12, class: `bar bar-${attempt.outcome}` },
              svg("title", {}, `attempt ${attempt.attempt}: ${attempt.outcome}${attempt.status_code === null ? "" : ` (HTTP ${attempt.status_code})`}, ${duration(Date.parse(attempt.finished_at) - Date.parse(attempt.started_at ?? attempt.finished_at))}`),
            );
          });
          const firstStart = node.attempts[0]?.started_at ? x(Date.parse(node.attempts[0].started_at)) : job.status === "running" && job.started_at ? x(Date.parse(job.started_at)) : x(end);
          return h(
            "tr",
            { class: "waterfall-row", "data-job": job.id },
            // A class per depth: the dashboard's CSP refuses style attributes.
            h("td", { class: `depth-${Math.min(depth, 8)}` }, h("a", { href: jobHash(job.id) }, job.operation_id, " ", h("code", {}, job.id))),
            h("td", {}, statusBadge(job.status)),
            h(
              "td",
              {},
              svg(
                "svg",
                { viewBox: `0 0 ${AXIS} 20`, width: "100%", height: "20", preserveAspectRatio: "none", role: "img", "aria-label": `${node.attempts.length} attempt(s)` },
                svg("line", { x1: created, x2: Math.max(created, firstStart), y1: 10, y2: 10, class: "wait" }),
                bars,
              ),
            ),
          );
        }),
      ),
    ),
    chain.truncated ? h("p", { class: "muted" }, "The chain has more than 10,000 jobs: the newest 10,000 are drawn; the counts are of every job.") : null,
  ];
}

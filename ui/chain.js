// A chain's page (GET /chains/{original_request_id}, docs/chains.md): how it stands (counts, settled, spawn cap use,
// its on_settled), and a waterfall: a row per job, indented under its parent, with a bar per attempt on one time axis
// from the chain's start to its settling (or now), so where the time went is seen at a glance. The rows are paged,
// ROWS_PER_PAGE at a time in the tree's order, so a chain of thousands of jobs stays a page of a few thousand pixels;
// opened from a job's page, it shows the page holding that job, the job's row marked.
import { api, apiPath, query } from "./api.js";
import { count, duration, h, replaceContent, statusBadge, svg, time } from "./dom.js";
import { jobHash } from "./jobs.js";

/** How often a chain's page refreshes itself, and a job's page its chain. */
const REFRESH_MS = 2000;
/** A chain of more jobs than this is read again only every LARGE_CHAIN_REFRESH_MS: its answer is large. */
export const LARGE_CHAIN_JOBS = 200;
export const LARGE_CHAIN_REFRESH_MS = 10_000;
/** Rows of the waterfall on one page. */
export const ROWS_PER_PAGE = 100;
/** Width of the waterfall's time axis, in SVG units. */
const AXIS = 600;

/** The page's address for chain `rid`; `job` opens it where that job's row is, `page` (from 1) on that page of rows. */
export function chainHash(rid, { job, page } = {}) {
  return `#/chains/${encodeURIComponent(rid)}${query({ job, page })}`;
}

/** The number of jobs in a chain's answer: every job, also those a truncated tree leaves out. */
function jobCount(chain) {
  return Object.values(chain.counts).reduce((sum, n) => sum + n, 0);
}

/** Mounts the page of chain `rid` in `container`; `params` may name a `job` to show and mark, and a `page` of rows. */
export function chainView(container, rid, ctx, params = new URLSearchParams()) {
  document.title = `Chain ${rid} · opqueue`;
  const marked = params.get("job");
  const askedPage = Number.parseInt(params.get("page") ?? "", 10);
  const summary = h("div", {});
  const waterfall = h("div", {});
  const updated = h("p", { class: "updated muted" });
  container.append(
    h(
      "nav",
      { class: "breadcrumb", "aria-label": "Breadcrumb" },
      h("a", { href: "#/jobs" }, "Jobs"),
      h("span", { "aria-hidden": "true" }, " › "),
      h("span", { "aria-current": "page" }, "Chain"),
    ),
    h(
      "div",
      { class: "view-head" },
      h("h1", { tabindex: "-1" }, "Chain ", h("code", { class: "chain-id", id: "chain-title" }, rid)),
      updated,
    ),
    h(
      "section",
      { class: "panel", "aria-labelledby": "chain-summary-title" },
      h("h2", { id: "chain-summary-title" }, "Summary"),
      summary,
    ),
    h(
      "section",
      { class: "panel", "aria-labelledby": "waterfall-title" },
      h("h2", { id: "waterfall-title" }, "Waterfall"),
      waterfall,
    ),
  );
  let last = "";
  let everyMs = REFRESH_MS;
  async function refresh() {
    const { chain } = await api(apiPath`/chains/${rid}`);
    if (!ctx.isCurrent()) return;
    everyMs = jobCount(chain) > LARGE_CHAIN_JOBS ? LARGE_CHAIN_REFRESH_MS : REFRESH_MS;
    replaceContent(updated, "Updated ", time(new Date().toISOString()), ` · refreshes every ${everyMs / 1000} s`);
    const text = JSON.stringify(chain);
    if (text === last) return;
    last = text;
    replaceContent(summary, summaryTable(chain));
    replaceContent(waterfall, waterfallOf(chain, { rid, marked, askedPage }));
  }
  return { refresh, everyMs: () => everyMs };
}

function summaryTable(chain) {
  const counts = Object.entries(chain.counts)
    .filter(([, n]) => n > 0)
    .map(([status, n]) => h("span", { class: "count-item" }, statusBadge(status), ` ${count(n)}`));
  const rows = [
    ["started_at", time(chain.started_at)],
    [
      "settled",
      chain.settled
        ? h("strong", { id: "chain-settled" }, "yes")
        : h("span", { id: "chain-settled" }, "no: jobs are waiting or running"),
    ],
    ["settled_at", time(chain.settled_at)],
    ["jobs by status", counts.length > 0 ? counts : h("span", { class: "muted" }, "none")],
    ["spawn cap", `${count(chain.spawn_cap.used)} of ${count(chain.spawn_cap.limit)} used`],
    [
      "on_settled",
      chain.on_settled
        ? [
            h("code", {}, chain.on_settled.operation_id),
            chain.on_settled.fired_at ? [" · fired ", time(chain.on_settled.fired_at)] : " · not fired yet",
          ]
        : h("span", { class: "muted" }, "none"),
    ],
    [
      "cancelled",
      chain.cancelled_at
        ? [time(chain.cancelled_at), ` by ${chain.cancelled_by ?? "?"}`]
        : h("span", { class: "muted" }, "no"),
    ],
  ];
  return h(
    "table",
    { class: "fields" },
    h(
      "tbody",
      {},
      rows.map(([name, value]) => h("tr", {}, h("th", { scope: "row" }, name), h("td", {}, value))),
    ),
  );
}

/** Every node of the tree with its depth, parents before children, oldest first. */
function flatten(nodes, depth = 0, out = []) {
  for (const node of nodes) {
    out.push({ node, depth });
    flatten(node.children, depth + 1, out);
  }
  return out;
}

/** The page of rows to draw: the one asked for, else the one holding the marked job, else the first. */
function pageOf(rows, { marked, askedPage }) {
  const pages = Math.max(1, Math.ceil(rows.length / ROWS_PER_PAGE));
  if (Number.isInteger(askedPage) && askedPage >= 1) return { page: Math.min(askedPage, pages), pages };
  const at = marked ? rows.findIndex(({ node }) => node.job.id === marked) : -1;
  return { page: at === -1 ? 1 : Math.floor(at / ROWS_PER_PAGE) + 1, pages };
}

/** Links to the other pages of rows (first, previous, next, last), drawn above the rows and again below them. */
function rowPager({ rid, marked, page, pages, rowCount, below }) {
  if (pages === 1) return null;
  const link = (to, text, key, rel) =>
    h(
      "a",
      {
        href: chainHash(rid, { job: marked ?? undefined, page: to }),
        class: "button",
        "data-focus-key": `${key}${below ? "-below" : ""}`,
        ...(rel ? { rel } : {}),
      },
      text,
    );
  const first = (page - 1) * ROWS_PER_PAGE + 1;
  const lastRow = Math.min(rowCount, page * ROWS_PER_PAGE);
  return h(
    "nav",
    { class: "pager rows-pager", "aria-label": below ? "Pages of the waterfall, below it" : "Pages of the waterfall" },
    page > 1 ? link(1, "« First", "rows-first") : null,
    page > 1 ? link(page - 1, "‹ Previous", "rows-previous", "prev") : null,
    h(
      "span",
      { class: "muted rows-shown" },
      `Rows ${count(first)}–${count(lastRow)} of ${count(rowCount)} · page ${page} of ${pages}`,
    ),
    page < pages ? link(page + 1, "Next ›", "rows-next", "next") : null,
    page < pages ? link(pages, "Last »", "rows-last") : null,
  );
}

function waterfallOf(chain, { rid, marked, askedPage }) {
  const all = flatten(chain.jobs);
  if (all.length === 0) return h("p", { class: "muted" }, "No jobs.");
  const { page, pages } = pageOf(all, { marked, askedPage });
  const rows = all.slice((page - 1) * ROWS_PER_PAGE, page * ROWS_PER_PAGE);
  const pager = (below) => rowPager({ rid, marked, page, pages, rowCount: all.length, below });
  // One time axis for every page: the whole chain's.
  const start = Date.parse(chain.started_at ?? all[0].node.job.created_at);
  const ends = all.flatMap(({ node }) => [
    Date.parse(node.job.created_at),
    ...node.attempts.map((a) => Date.parse(a.finished_at)),
  ]);
  const end = chain.settled_at ? Date.parse(chain.settled_at) : Math.max(Date.now(), ...ends);
  const span = Math.max(1, end - start);
  const x = (ms) => ((ms - start) / span) * AXIS;
  return [
    h(
      "p",
      { class: "muted" },
      `From the chain's first enqueue to ${chain.settled_at ? "its settling" : "now"}: ${duration(span)}. A bar per attempt, coloured by how it ended; the line before it is the job's wait.`,
    ),
    pager(false),
    h(
      "table",
      { class: "waterfall", id: "waterfall" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", { scope: "col" }, "Job"),
          h("th", { scope: "col" }, "Status"),
          h("th", { scope: "col" }, "Attempts over time"),
        ),
      ),
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
              svg(
                "title",
                {},
                `attempt ${attempt.attempt}: ${attempt.outcome}${attempt.status_code === null ? "" : ` (HTTP ${attempt.status_code})`}, ${duration(Date.parse(attempt.finished_at) - Date.parse(attempt.started_at ?? attempt.finished_at))}`,
              ),
            );
          });
          const firstStart = node.attempts[0]?.started_at
            ? x(Date.parse(node.attempts[0].started_at))
            : job.status === "running" && job.started_at
              ? x(Date.parse(job.started_at))
              : x(end);
          const here = job.id === marked;
          return h(
            "tr",
            {
              class: here ? "waterfall-row here" : "waterfall-row",
              "data-job": job.id,
              ...(here ? { "aria-current": "true" } : {}),
            },
            // A class per depth: the dashboard's CSP refuses style attributes.
            h(
              "td",
              { class: `depth-${Math.min(depth, 8)}` },
              h(
                "a",
                { href: jobHash(job.id), title: `${job.operation_id} ${job.id}` },
                job.operation_id,
                " ",
                h("code", {}, job.id),
              ),
              // Indentation stops at 8 levels; a deeper row says how deep it is.
              depth > 8 ? h("span", { class: "muted depth-more" }, ` · depth ${depth}`) : null,
            ),
            h("td", {}, statusBadge(job.status)),
            h(
              "td",
              {},
              svg(
                "svg",
                {
                  viewBox: `0 0 ${AXIS} 20`,
                  width: "100%",
                  height: "20",
                  preserveAspectRatio: "none",
                  role: "img",
                  "aria-label": `${node.attempts.length} attempt(s)`,
                },
                svg("line", { x1: created, x2: Math.max(created, firstStart), y1: 10, y2: 10, class: "wait" }),
                bars,
              ),
            ),
          );
        }),
      ),
    ),
    pager(true),
    chain.truncated
      ? h(
          "p",
          { class: "muted" },
          "The chain has more than 10,000 jobs: the newest 10,000 are drawn; the counts are of every job.",
        )
      : null,
  ];
}

// The job list: filters (status, operation, chain, user, dedupe key) kept in the address bar, newest first,
// cursor paging, live refresh, and the bulk retry of the dead jobs matching the filter.
import { api, query } from "./api.js";
import { announce, confirmAction, count, h, relative, replaceContent, STATUSES, statusBadge, time } from "./dom.js";
import { BULK_RETRY_LIMIT, bulkRetryMessage } from "./overview.js";

/** Jobs per page. */
const PAGE_SIZE = 50;
/** How often the list refreshes itself while live refresh is on. */
const REFRESH_MS = 3000;
const LIVE_KEY = "opqueue.liveRefresh";

/** The text filters: query parameter, label, hint. */
const TEXT_FILTERS = [
  { name: "operation_id", label: "Operation", hint: "operationId" },
  { name: "original_request_id", label: "Chain", hint: "original_request_id" },
  { name: "user_id", label: "User", hint: "user_id" },
  { name: "dedupe_key", label: "Dedupe key", hint: "exact dedupe_key" },
];

/** The link to the list with these filters. */
export function listHash(filters) {
  return `#/jobs${query(filters)}`;
}

/** The link to a job's page; the id is encoded, as app.js's router decodes it. */
export function jobHash(id) {
  return `#/jobs/${encodeURIComponent(id)}`;
}

/** The filters of the list as the address bar holds them. */
function readFilters(params) {
  const filters = { status: params.getAll("status").filter((status) => STATUSES.includes(status)) };
  for (const { name } of TEXT_FILTERS) {
    const value = params.get(name);
    if (value) filters[name] = value;
  }
  return filters;
}

/** When the job runs next, is running since, or ended. */
function progress(job) {
  if (job.status === "pending" || job.status === "retrying") {
    const due = new Date(job.run_at).getTime() <= Date.now();
    return h("span", { title: job.run_at }, due ? `due ${relative(job.run_at)}` : `runs ${relative(job.run_at)}`);
  }
  if (job.status === "running") return h("span", {}, "started ", h("span", { title: job.started_at }, relative(job.started_at)));
  if (job.finished_at) return h("span", {}, "ended ", h("span", { title: job.finished_at }, relative(job.finished_at)));
  return h("span", { class: "muted" }, "—");
}

/** Mounts the list in `container`, filtered by the route's `params`. */
export function jobsView(container, params, ctx) {
  document.title = "Jobs · opqueue";
  const filters = readFilters(params);
  const cursor = params.get("cursor");
  const page = Math.max(1, Number.parseInt(params.get("page") ?? "1", 10) || 1);
  let live = sessionStorage.getItem(LIVE_KEY) !== "off";

  // The filter form.
  const operationsList = h("datalist", { id: "operations-list" });
  const statusBoxes = STATUSES.map((status) =>
    h(
      "label",
      { class: "check" },
      h("input", { type: "checkbox", name: "status", value: status, checked: filters.status.includes(status) }),
      " ",
      statusBadge(status),
    ),
  );
  const textInputs = TEXT_FILTERS.map(({ name, label, hint }) =>
    h(
      "div",
      { class: "field" },
      h("label", { for: `filter-${name}` }, label),
      h("input", {
        id: `filter-${name}`,
        name,
        type: "search",
        placeholder: hint,
        value: filters[name] ?? "",
        autocomplete: "off",
        spellcheck: "false",
        ...(name === "operation_id" ? { list: "operations-list" } : {}),
      }),
    ),
  );
  const form = h(
    "form",
    { class: "filters panel", role: "search", "aria-label": "Filter jobs" },
    h("fieldset", { class: "status-filter" }, h("legend", {}, "Status ", h("span", { class: "muted" }, "(any of)")), statusBoxes),
    h(
      "div",
      { class: "filter-fields" },
      textInputs,
      operationsList,
      h(
        "div",
        { class: "form-buttons" },
        h("button", { type: "submit", class: "button button-primary" }, "Apply filters"),
        h("a", { href: "#/jobs", class: "button button-quiet" }, "Clear"),
      ),
    ),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const next = { status: data.getAll("status") };
    for (const { name } of TEXT_FILTERS) next[name] = String(data.get(name) ?? "").trim();
    ctx.navigate(listHash(next));
  });

  // The toolbar: live refresh, the time of the last refresh, the bulk retry.
  const liveBox = h("input", { type: "checkbox", id: "live-refresh", checked: live });
  liveBox.addEventListener("change", () => {
    live = liveBox.checked;
    sessionStorage.setItem(LIVE_KEY, live ? "on" : "off");
    announce(live ? "Live refresh on." : "Live refresh off.");
    if (live) void refresh().catch(ctx.reportError);
  });
  const updated = h("span", { class: "muted updated" });
  const onlyDead = filters.status.length === 1 && filters.status[0] === "dead";
  const bulk = h("div", { class: "bulk" });
  if (onlyDead && !filters.dedupe_key) {
    bulk.append(h("button", { type: "button", class: "button button-danger", id: "retry-matching", onclick: () => retryMatching() }, "Retry the dead jobs matching this filter…"));
  } else if (onlyDead) {
    bulk.append(h("span", { class: "muted" }, "Bulk retry cannot filter by dedupe key."));
  }

  const results = h("div", { class: "table-wrap" });
  const pager = h("nav", { class: "pager", "aria-label": "Pages" });
  const heading = h("h1", { tabindex: "-1" }, filters.status.length === 1 ? `Jobs: ${filters.status[0]}` : "Jobs");

  container.append(
    h("div", { class: "view-head" }, heading),
    form,
    h(
      "div",
      { class: "toolbar" },
      h("label", { class: "check", for: "live-refresh" }, liveBox, ` Live refresh (every ${REFRESH_MS / 1000} s)`),
      updated,
      bulk,
    ),
    h("section", { "aria-labelledby": "results-title" }, h("h2", { id: "results-title", class: "visually-hidden" }, "Matching jobs"), results, pager),
  );

  const describeFilter = () => {
    const parts = [];
    if (filters.operation_id) parts.push(`operation ${filters.operation_id}`);
    if (filters.original_request_id) parts.push(`chain ${filters.original_request_id}`);
    if (filters.user_id) parts.push(`user ${filters.user_id}`);
    return parts.length === 0 ? "every dead job" : `the dead jobs of ${parts.join(", ")}`;
  };

  async function retryMatching() {
    const confirmed = await confirmAction({
      title: "Retry the dead jobs matching this filter?",
      message:
        `Re-queue ${describeFilter()}, newest first, at most ${count(BULK_RETRY_LIMIT)} at once. Each goes back to ` +
        "pending with attempt 0 and runs now. Jobs whose dedupe key a waiting job holds are skipped.",
      confirmLabel: "Retry dead jobs",
    });
    if (!confirmed) return;
    try {
      const body = { limit: BULK_RETRY_LIMIT };
      for (const name of ["operation_id", "original_request_id", "user_id"]) if (filters[name]) body[name] = filters[name];
      const { jobs } = await api("/jobs/retry-dead", { method: "POST", body });
      announce(bulkRetryMessage(jobs.length));
    } catch (error) {
      ctx.reportError(error);
      return;
    }
    await refresh({ force: true }).catch(ctx.reportError);
  }

  let first = true;
  let lastData = "";
  async function refresh({ force = false } = {}) {
    if (!first && !live && !force) return;
    const wasFirst = first;
    first = false;
    if (wasFirst) {
      // The operations known to the overview feed the operation filter's suggestions; not needed to list.
      api("/stats")
        .then((stats) => {
          const names = [...new Set(stats.by_operation.map((row) => row.operation_id))].sort();
          operationsList.replaceChildren(...names.map((name) => h("option", { value: name })));
        })
        .catch(() => undefined);
    }
    const data = await api(`/jobs${query({ ...filters, limit: PAGE_SIZE, cursor })}`);
    if (!ctx.isCurrent()) return;
    replaceContent(updated, "Updated ", time(new Date().toISOString()));
    const text = JSON.stringify(data);
    if (text === lastData) return;
    lastData = text;
    renderTable(data.jobs);
    renderPager(data.next_cursor);
    if (wasFirst) {
      const n = data.jobs.length;
      announce(n === 0 ? "No job matches." : `${n}${data.next_cursor ? "+" : ""} job${n === 1 ? "" : "s"} shown, newest first.`, { visible: false });
    }
  }

  function renderTable(jobs) {
    if (jobs.length === 0) {
      replaceContent(results, h("p", { class: "empty" }, page > 1 ? "No more jobs." : "No job matches these filters."));
      return;
    }
    replaceContent(
      results,
      h(
        "table",
        { class: "data jobs-table" },
        h("caption", { class: "visually-hidden" }, "Jobs, newest first"),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["Job", "Operation", "Status", "Attempt", "User", "Chain", "Created", "Run / ended"].map((label) =>
              h("th", { scope: "col", class: label === "Attempt" ? "num" : "" }, label),
            ),
          ),
        ),
        h(
          "tbody",
          {},
          jobs.map((job) =>
            h(
              "tr",
              { "data-job-id": job.id },
              h("th", { scope: "row" }, h("a", { href: jobHash(job.id), class: "mono", "data-focus-key": `job-${job.id}` }, job.id)),
              h("td", {}, job.operation_id),
              h(
                "td",
                {},
                statusBadge(job.status),
                job.result?.terminal_reason ? h("span", { class: "reason" }, job.result.terminal_reason) : null,
              ),
              h("td", { class: "num" }, `${job.attempt} / ${job.max_attempts}`),
              h("td", { class: "clip" }, h("a", { href: listHash({ user_id: job.user_id }), title: `Jobs of user ${job.user_id}`, "data-focus-key": `user-${job.id}` }, job.user_id)),
              h(
                "td",
                { class: "clip" },
                h("a", { href: listHash({ original_request_id: job.original_request_id }), title: `Jobs of chain ${job.original_request_id}`, "data-focus-key": `chain-${job.id}` }, job.original_request_id),
              ),
              h("td", { class: "nowrap" }, time(job.created_at)),
              h("td", { class: "nowrap" }, progress(job)),
            ),
          ),
        ),
      ),
    );
  }

  function renderPager(nextCursor) {
    const base = { ...filters };
    const items = [];
    if (cursor) items.push(h("a", { href: listHash(base), class: "button button-quiet", "data-focus-key": "first-page" }, "« Newest"));
    items.push(h("span", { class: "muted" }, `Page ${page}`));
    if (nextCursor) {
      items.push(h("a", { href: listHash({ ...base, cursor: nextCursor, page: page + 1 }), class: "button", rel: "next", "data-focus-key": "next-page" }, "Next page »"));
    }
    replaceContent(pager, items);
  }

  return { refresh, everyMs: REFRESH_MS };
}

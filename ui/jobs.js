// The job list: filters (status, operation, chain, user, dedupe key) kept in the address bar, newest first, one
// line per job with its last error, cursor paging, live refresh, the bulk retry of the dead jobs matching the filter,
// and the bulk cancel of the waiting (and, when asked for by status, running) jobs matching it. On a phone each job
// becomes a card (style.css).
import { api, query } from "./api.js";
import {
  announce,
  confirmAction,
  count,
  h,
  relative,
  replaceContent,
  STATUSES,
  statusBadge,
  time,
  timeCompact,
} from "./dom.js";
import { BULK_RETRY_LIMIT, bulkRetryMessage } from "./overview.js";
import { canOperate } from "./session.js";

/** The list's columns, in order (the job id, first, heads its row). */
const COLUMNS = [
  { label: "Job", className: "col-job" },
  { label: "Operation", className: "col-operation" },
  { label: "Status", className: "col-status" },
  { label: "Attempt", className: "col-attempt num" },
  { label: "Last error", className: "col-error" },
  { label: "User", className: "col-user" },
  { label: "Chain", className: "col-chain" },
  { label: "Created", className: "col-created" },
  { label: "Run / ended", className: "col-progress" },
];

/** Jobs per page. */
const PAGE_SIZE = 50;
/** How often the list refreshes itself while live refresh is on. */
const REFRESH_MS = 3000;
const LIVE_KEY = "opqueue.liveRefresh";

/** The filters other than status: query parameter, label, and the hint of a text field. */
const FIELD_FILTERS = [
  { name: "operation_id", label: "Operation" },
  { name: "original_request_id", label: "Chain", hint: "original_request_id" },
  { name: "user_id", label: "User", hint: "user_id" },
  { name: "dedupe_key", label: "Dedupe key", hint: "exact dedupe_key" },
];
/** The most jobs one bulk cancel cancels (the service's bound). */
export const BULK_CANCEL_LIMIT = 1000;
/** The statuses a bulk cancel can take jobs from; a running job's delivery is aborted. */
const CANCELLABLE = ["pending", "retrying", "running"];
/** The most characters of an error body put in the list; the cell cuts it to its width, the tooltip has it all. */
const ERROR_PREVIEW_CHARS = 200;

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
  for (const { name } of FIELD_FILTERS) {
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
  if (job.status === "running")
    return h("span", {}, "started ", h("span", { title: job.started_at }, relative(job.started_at)));
  if (job.finished_at) return h("span", {}, "ended ", h("span", { title: job.finished_at }, relative(job.finished_at)));
  return h("span", { class: "muted" }, "—");
}

/** Text on one line: runs of white space (new lines included) become one space. */
function oneLine(text) {
  return text.replace(/\s+/g, " ").trim();
}

/** Whether the job's result says why it failed or stopped. */
function hasError(job) {
  return job.result !== null && (job.result.terminal_reason !== null || job.result.error_body !== null);
}

/**
 * The last error of a job, on one line: the HTTP status and the start of the error body (an ellipsis where it is
 * cut), or the terminal reason when there is no body. The tooltip holds the reason, the status and the whole body.
 */
function lastError(job) {
  if (!hasError(job)) return h("span", { class: "muted" }, "—");
  const { terminal_reason: reason, status_code: statusCode, error_body: body } = job.result;
  const flat = body === null ? "" : oneLine(body);
  const shown = flat.length > ERROR_PREVIEW_CHARS ? `${flat.slice(0, ERROR_PREVIEW_CHARS)}…` : flat;
  const summary = [reason, statusCode === undefined ? null : `HTTP ${statusCode}`].filter(Boolean).join(" · ");
  return h(
    "span",
    { class: "error-line", title: [summary, body].filter(Boolean).join("\n") },
    statusCode === undefined ? null : h("span", { class: "error-status" }, String(statusCode)),
    shown === "" ? h("span", { class: "error-reason" }, reason) : h("span", { class: "error-text" }, shown),
  );
}

/** The operation filter: every background operation the service knows (GET /operations), or any. */
function operationSelect(selected) {
  const select = h(
    "select",
    { id: "filter-operation_id", name: "operation_id" },
    h("option", { value: "" }, "any operation"),
  );
  if (selected) select.append(h("option", { value: selected, selected: true }, selected));
  return select;
}

/** Fills `select` with the operations, keeping its choice (listed even when the service no longer knows it). */
function fillOperations(select, operations) {
  const chosen = select.value;
  const names = operations.map((operation) => operation.operation_id);
  if (chosen && !names.includes(chosen)) names.push(chosen);
  const options = names.map((name) => {
    const known = operations.find((operation) => operation.operation_id === name);
    return h(
      "option",
      {
        value: name,
        selected: name === chosen,
        title: known ? `${known.method} ${known.path}` : "not an operation of the service's document",
      },
      known ? name : `${name} (unknown)`,
    );
  });
  select.replaceChildren(h("option", { value: "", selected: chosen === "" }, "any operation"), ...options);
}

/** Mounts the list in `container`, filtered by the route's `params`. */
export function jobsView(container, params, ctx) {
  document.title = "Jobs · opqueue";
  const filters = readFilters(params);
  const cursor = params.get("cursor");
  const page = Math.max(1, Number.parseInt(params.get("page") ?? "1", 10) || 1);
  let live = sessionStorage.getItem(LIVE_KEY) !== "off";

  // The filter form.
  const operations = operationSelect(filters.operation_id);
  const statusBoxes = STATUSES.map((status) =>
    h(
      "label",
      { class: "check" },
      h("input", { type: "checkbox", name: "status", value: status, checked: filters.status.includes(status) }),
      " ",
      statusBadge(status),
    ),
  );
  const fieldInputs = FIELD_FILTERS.map(({ name, label, hint }) =>
    h(
      "div",
      { class: "field" },
      h("label", { for: `filter-${name}` }, label),
      name === "operation_id"
        ? operations
        : h("input", {
            id: `filter-${name}`,
            name,
            type: "search",
            placeholder: hint,
            value: filters[name] ?? "",
            autocomplete: "off",
            spellcheck: "false",
          }),
    ),
  );
  const form = h(
    "form",
    { class: "filters panel", role: "search", "aria-label": "Filter jobs" },
    h(
      "fieldset",
      { class: "status-filter" },
      h("legend", {}, "Status ", h("span", { class: "muted" }, "(any of)")),
      statusBoxes,
    ),
    h(
      "div",
      { class: "filter-fields" },
      fieldInputs,
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
    for (const { name } of FIELD_FILTERS) next[name] = String(data.get(name) ?? "").trim();
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
  // A bulk action is the role's to take: an operator limited to some operations, with one of them in the filter.
  const mayAct = canOperate(filters.operation_id || undefined);
  if (mayAct && onlyDead && !filters.dedupe_key) {
    bulk.append(
      h(
        "button",
        { type: "button", class: "button button-danger", id: "retry-matching", onclick: () => retryMatching() },
        "Retry the dead jobs matching this filter…",
      ),
    );
  } else if (mayAct && onlyDead) {
    bulk.append(h("span", { class: "muted" }, "Bulk retry cannot filter by dedupe key."));
  }
  // The statuses a bulk cancel takes: those of the filter that can be cancelled, else the waiting ones (the service's
  // default). Running jobs only when the filter names them, as cancelling them aborts their delivery. The service
  // wants a filter besides statuses, so a list filtered by status alone offers none.
  const cancelStatuses =
    filters.status.length === 0
      ? ["pending", "retrying"]
      : filters.status.filter((status) => CANCELLABLE.includes(status));
  const narrowed = FIELD_FILTERS.some(({ name }) => filters[name]);
  if (cancelStatuses.length > 0 && narrowed && mayAct) {
    bulk.append(
      h(
        "button",
        { type: "button", class: "button button-danger", id: "cancel-matching", onclick: () => cancelMatching() },
        "Cancel matching…",
      ),
    );
  }

  const results = h("div", { class: "table-wrap" });
  const pager = h("nav", { class: "pager", "aria-label": "Pages" });
  const heading = h("h1", { tabindex: "-1" }, filters.status.length === 1 ? `Jobs: ${filters.status[0]}` : "Jobs");

  // A chain id is often a long request id: in full here, where the filter is the whole point of the page.
  const chainLine = filters.original_request_id
    ? [
        h(
          "p",
          { class: "chain-line" },
          h("span", { class: "muted" }, "Jobs of chain "),
          h("code", { class: "chain-id" }, filters.original_request_id),
        ),
      ]
    : [];

  container.append(
    h("div", { class: "view-head" }, heading),
    ...chainLine,
    form,
    h(
      "div",
      { class: "toolbar" },
      h("label", { class: "check", for: "live-refresh" }, liveBox, ` Live refresh (every ${REFRESH_MS / 1000} s)`),
      updated,
      bulk,
    ),
    h(
      "section",
      { "aria-labelledby": "results-title" },
      h("h2", { id: "results-title", class: "visually-hidden" }, "Matching jobs"),
      results,
      pager,
    ),
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
      for (const name of ["operation_id", "original_request_id", "user_id"])
        if (filters[name]) body[name] = filters[name];
      const { jobs } = await api("/jobs/retry-dead", { method: "POST", body });
      announce(bulkRetryMessage(jobs.length));
    } catch (error) {
      ctx.reportError(error);
      return;
    }
    await refresh({ force: true }).catch(ctx.reportError);
  }

  async function cancelMatching() {
    const parts = [];
    if (filters.operation_id) parts.push(`operation ${filters.operation_id}`);
    if (filters.original_request_id) parts.push(`chain ${filters.original_request_id}`);
    if (filters.user_id) parts.push(`user ${filters.user_id}`);
    if (filters.dedupe_key) parts.push(`dedupe key ${filters.dedupe_key}`);
    const which = cancelStatuses.join(", ").replace(/, ([^,]*)$/, " and $1");
    const aborting = cancelStatuses.includes("running");
    const confirmed = await confirmAction({
      title: "Cancel the jobs matching this filter?",
      message:
        `Cancel the ${which} jobs of ${parts.join(", ")}, newest first, at most ${count(BULK_CANCEL_LIMIT)} at once. ` +
        (aborting ? "Running jobs have their delivery aborted. " : "") +
        "Cancelled jobs are not delivered; an administrator can retry them later.",
      confirmLabel: "Cancel jobs",
    });
    if (!confirmed) return;
    try {
      const body = { statuses: cancelStatuses, limit: BULK_CANCEL_LIMIT };
      for (const { name } of FIELD_FILTERS) if (filters[name]) body[name] = filters[name];
      const { jobs } = await api("/jobs/cancel", { method: "POST", body });
      const what = `Cancelled ${count(jobs.length)} job${jobs.length === 1 ? "" : "s"}.`;
      announce(
        jobs.length >= BULK_CANCEL_LIMIT
          ? `${what} More may remain: run it again for the next ${count(BULK_CANCEL_LIMIT)}.`
          : what,
      );
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
      // The operation filter's choices; the list does not wait for them, and a refusal is the list's to report.
      api("/operations")
        .then((answer) => {
          if (ctx.isCurrent()) fillOperations(operations, answer.operations);
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
      announce(
        n === 0
          ? "No job matches."
          : `${n}${data.next_cursor ? "+" : ""} job${n === 1 ? "" : "s"} shown, newest first.`,
        { visible: false },
      );
    }
  }

  function renderTable(jobs) {
    if (jobs.length === 0) {
      replaceContent(results, h("p", { class: "empty" }, page > 1 ? "No more jobs." : "No job matches these filters."));
      return;
    }
    // Each cell names its column in data-label: the phone layout shows it beside the value.
    const cell = (label, attrs, ...children) => h("td", { ...attrs, "data-label": label }, ...children);
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
            COLUMNS.map(({ label, className }) => h("th", { scope: "col", class: className }, label)),
          ),
        ),
        h(
          "tbody",
          {},
          jobs.map((job) =>
            h(
              "tr",
              { "data-job-id": job.id },
              h(
                "th",
                { scope: "row", class: "job-cell" },
                h(
                  "a",
                  { href: jobHash(job.id), class: "mono clip-text", title: job.id, "data-focus-key": `job-${job.id}` },
                  job.id,
                ),
              ),
              cell(
                "Operation",
                { class: "clip op-cell" },
                h("span", { class: "clip-text", title: job.operation_id }, job.operation_id),
              ),
              cell("Status", { class: "status-cell" }, statusBadge(job.status)),
              cell("Attempt", { class: "num" }, `${job.attempt} / ${job.max_attempts}`),
              cell("Last error", { class: `clip error-cell${hasError(job) ? "" : " no-error"}` }, lastError(job)),
              cell(
                "User",
                { class: "clip" },
                h(
                  "a",
                  {
                    href: listHash({ user_id: job.user_id }),
                    class: "clip-text",
                    title: `Jobs of user ${job.user_id}`,
                    "data-focus-key": `user-${job.id}`,
                  },
                  job.user_id,
                ),
              ),
              cell(
                "Chain",
                { class: "clip chain-cell" },
                h(
                  "a",
                  {
                    href: listHash({ original_request_id: job.original_request_id }),
                    class: "clip-text mono",
                    title: job.original_request_id,
                    "data-focus-key": `chain-${job.id}`,
                  },
                  job.original_request_id,
                ),
              ),
              cell("Created", { class: "nowrap" }, timeCompact(job.created_at)),
              cell("Run / ended", { class: "nowrap" }, progress(job)),
            ),
          ),
        ),
      ),
    );
  }

  function renderPager(nextCursor) {
    const base = { ...filters };
    const items = [];
    if (cursor)
      items.push(
        h("a", { href: listHash(base), class: "button button-quiet", "data-focus-key": "first-page" }, "« Newest"),
      );
    items.push(h("span", { class: "muted" }, `Page ${page}`));
    if (nextCursor) {
      items.push(
        h(
          "a",
          {
            href: listHash({ ...base, cursor: nextCursor, page: page + 1 }),
            class: "button",
            rel: "next",
            "data-focus-key": "next-page",
          },
          "Next page »",
        ),
      );
    }
    replaceContent(pager, items);
  }

  return { refresh, everyMs: REFRESH_MS };
}

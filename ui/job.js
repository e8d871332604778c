// A job's page: every field of its wire form, its result with the error body, its chain as a tree, its attempt
// history, and the actions (cancel, retry, cancel the chain), each confirmed first.
import { api, ApiError, apiPath, query } from "./api.js";
import { ACTIVE_STATUSES, announce, confirmAction, duration, h, jsonBlock, relative, replaceContent, showError, statusBadge, time, timeShort } from "./dom.js";
import { jobHash, listHash } from "./jobs.js";

/** How often a job's page refreshes itself. */
const REFRESH_MS = 2000;
/** The most jobs of a chain drawn in its tree (the list's largest page). */
const CHAIN_LIMIT = 500;

/** Mounts the page of job `id` in `container`. */
export function jobView(container, id, ctx) {
  document.title = `Job ${id} · opqueue`;
  const heading = h("h1", { tabindex: "-1" }, "Job ", h("code", { class: "job-id" }, id));
  const headStatus = h("span", { class: "head-status" });
  const actions = h("div", { class: "actions", role: "group", "aria-label": "Actions" });
  const fields = h("div", {});
  const result = h("div", {});
  const chain = h("div", {});
  const attempts = h("div", { class: "table-wrap" });
  const payload = h("div", { class: "payloads" });
  const updated = h("p", { class: "updated muted" });

  container.append(
    h("nav", { class: "breadcrumb", "aria-label": "Breadcrumb" }, h("a", { href: "#/jobs" }, "Jobs"), h("span", { "aria-hidden": "true" }, " › "), h("span", { "aria-current": "page" }, id)),
    h("div", { class: "view-head" }, h("div", { class: "title-line" }, heading, headStatus), updated),
    actions,
    h(
      "div",
      { class: "columns" },
      h(
        "div",
        { class: "column" },
        h("section", { class: "panel", "aria-labelledby": "fields-title" }, h("h2", { id: "fields-title" }, "Fields"), fields),
        h("section", { class: "panel", "aria-labelledby": "payload-title" }, h("h2", { id: "payload-title" }, "Request and authority"), payload),
      ),
      h(
        "div",
        { class: "column" },
        h("section", { class: "panel", "aria-labelledby": "result-title" }, h("h2", { id: "result-title" }, "Result"), result),
        h("section", { class: "panel", "aria-labelledby": "chain-title" }, h("h2", { id: "chain-title" }, "Chain"), chain),
        h("section", { class: "panel", "aria-labelledby": "attempts-title" }, h("h2", { id: "attempts-title" }, "Attempts"), attempts),
      ),
    ),
  );

  let job = null;
  let missing = false;

  /** Runs an action after its confirmation; says what happened, or the service's refusal. */
  async function act({ title, message, confirmLabel, run, done, refused }) {
    if (!(await confirmAction({ title, message, confirmLabel }))) return;
    try {
      const answer = await run();
      announce(done(answer));
    } catch (error) {
      if (error instanceof ApiError && error.status !== 401 && error.code !== "site_admin_required") {
        showError(`${refused}: ${error.describe()}`);
      } else {
        ctx.reportError(error);
      }
    }
    await refresh().catch(ctx.reportError);
  }

  const cancel = () =>
    act({
      title: "Cancel this job?",
      message: `Job ${id} (${job.operation_id}) will not be delivered. A running delivery is not interrupted: the service refuses to cancel it.`,
      confirmLabel: "Cancel job",
      run: () => api(apiPath`/jobs/${id}/cancel`, { method: "POST" }),
      done: ({ job: updatedJob }) => `Job ${id} is ${updatedJob.status}.`,
      refused: "Not cancelled",
    });

  const retry = () =>
    act({
      title: "Retry this job?",
      message: `Job ${id} (${job.operation_id}) goes back to the queue as pending, with attempt 0, and runs now.`,
      confirmLabel: "Retry job",
      run: () => api(apiPath`/jobs/${id}/retry`, { method: "POST" }),
      done: ({ job: updatedJob }) => `Job ${id} re-queued (${updatedJob.status}, attempt ${updatedJob.attempt}); it runs now.`,
      refused: "Not retried",
    });

  const cancelChain = () =>
    act({
      title: "Cancel the whole chain?",
      message:
        `Every pending or retrying job of chain ${job.original_request_id} is cancelled, and every job enqueued into it ` +
        "later is created cancelled. Running jobs finish their attempt and are not retried.",
      confirmLabel: "Cancel chain",
      run: () => api(apiPath`/chains/${job.original_request_id}/cancel`, { method: "POST" }),
      done: ({ jobs }) => `Chain ${job.original_request_id} cancelled: ${jobs.length} job${jobs.length === 1 ? "" : "s"} cancelled.`,
      refused: "Chain not cancelled",
    });

  let lastData = "";
  async function refresh() {
    let answers;
    try {
      answers = await Promise.all([
        api(apiPath`/jobs/${id}`),
        api(apiPath`/jobs/${id}/attempts`),
      ]);
    } catch (error) {
      if (error instanceof ApiError && error.code === "job_not_found") {
        if (!missing) {
          missing = true;
          container.replaceChildren(
            h("h1", { tabindex: "-1" }, "Job not found"),
            h("p", {}, `No job has id "${id}": it never existed, or retention removed it. `, h("a", { href: "#/jobs" }, "Back to the jobs"), "."),
          );
        }
        return;
      }
      throw error;
    }
    const [{ job: fresh }, { attempts: history }] = answers;
    const chainPage = await api(`/jobs${query({ original_request_id: fresh.original_request_id, limit: CHAIN_LIMIT })}`);
    if (!ctx.isCurrent()) return;
    replaceContent(updated, "Updated ", time(new Date().toISOString()), ` · refreshes every ${REFRESH_MS / 1000} s`);
    const text = JSON.stringify([fresh, history, chainPage]);
    if (text === lastData) return;
    lastData = text;
    job = fresh;

    replaceContent(headStatus, statusBadge(job.status), job.result?.terminal_reason ? h("span", { class: "reason" }, job.result.terminal_reason) : null);
    const buttons = [];
    if (ACTIVE_STATUSES.has(job.status)) {
      buttons.push(h("button", { type: "button", class: "button", id: "action-cancel", onclick: cancel, "data-focus-key": "cancel" }, "Cancel job…"));
    }
    if (job.status === "dead" || job.status === "cancelled") {
      buttons.push(h("button", { type: "button", class: "button button-primary", id: "action-retry", onclick: retry, "data-focus-key": "retry" }, "Retry job…"));
    }
    buttons.push(h("button", { type: "button", class: "button button-danger", id: "action-cancel-chain", onclick: cancelChain, "data-focus-key": "cancel-chain" }, "Cancel chain…"));
    replaceContent(actions, buttons);

    replaceContent(fields, fieldTable(job));
    replaceContent(result, resultBlock(job));
    replaceContent(payload, h("h3", {}, "request"), jsonBlock(job.request, "request"), h("h3", {}, "authority"), jsonBlock(job.authority, "authority"));
    replaceContent(chain, chainTree(job, chainPage));
    replaceContent(attempts, attemptTable(history));
  }

  return { refresh, everyMs: REFRESH_MS };
}

/** Every scalar field of the wire form, by its wire name. */
function fieldTable(job) {
  const link = (href, text, key) => h("a", { href, "data-focus-key": key }, text);
  const code = (value) => (value === null ? h("span", { class: "muted" }, "null") : h("code", {}, value));
  const withRelative = (iso) => (iso === null ? time(null) : h("span", {}, time(iso), h("span", { class: "muted" }, ` (${relative(iso)})`)));
  const rows = [
    ["id", code(job.id)],
    ["operation_id", link(listHash({ operation_id: job.operation_id }), job.operation_id, "f-op")],
    ["status", statusBadge(job.status)],
    ["attempt", `${job.attempt}`],
    ["max_attempts", `${job.max_attempts}`],
    ["priority", `${job.priority}`],
    ["run_at", withRelative(job.run_at)],
    ["created_at", withRelative(job.created_at)],
    ["started_at", withRelative(job.started_at)],
    ["finished_at", withRelative(job.finished_at)],
    ["dedupe_key", job.dedupe_key === null ? code(null) : link(listHash({ dedupe_key: job.dedupe_key }), job.dedupe_key, "f-dedupe")],
    ["concurrency_key", code(job.concurrency_key)],
    ["enqueued_by_operation_id", code(job.enqueued_by_operation_id)],
    ["parent_job_id", job.parent_job_id === null ? code(null) : link(jobHash(job.parent_job_id), job.parent_job_id, "f-parent")],
    ["original_request_id", link(listHash({ original_request_id: job.original_request_id }), job.original_request_id, "f-chain")],
    ["user_id", link(listHash({ user_id: job.user_id }), job.user_id, "f-user")],
  ];
  return h(
    "table",
    { class: "fields" },
    h("caption", { class: "visually-hidden" }, "Fields of the job"),
    h("tbody", {}, rows.map(([name, value]) => h("tr", {}, h("th", { scope: "row" }, name), h("td", {}, value)))),
  );
}

/** The result: status code, terminal reason, and the error body as the target sent it. */
function resultBlock(job) {
  if (job.result === null) {
    return h("p", { class: "muted" }, ACTIVE_STATUSES.has(job.status) ? "No result yet: no attempt has failed or finished the job." : "null");
  }
  const { status_code: statusCode, error_body: errorBody, terminal_reason: reason } = job.result;
  return [
    h(
      "table",
      { class: "fields" },
      h("caption", { class: "visually-hidden" }, "Result of the job"),
      h(
        "tbody",
        {},
        h("tr", {}, h("th", { scope: "row" }, "status_code"), h("td", {}, statusCode === undefined ? h("span", { class: "muted" }, "none (no response)") : h("code", {}, String(statusCode)))),
        h("tr", {}, h("th", { scope: "row" }, "terminal_reason"), h("td", {}, reason === null ? h("span", { class: "muted" }, "null") : h("code", {}, reason))),
      ),
    ),
    h("h3", {}, "error_body"),
    errorBody === null ? h("p", { class: "muted" }, "null") : h("pre", { class: "code error-body", tabindex: "0", "aria-label": "error_body" }, errorBody),
  ];
}

/** The chain as a tree: the root (no parent), each job under its parent, each with its status and a link. */
function chainTree(job, page) {
  const jobs = page.jobs;
  const byId = new Map(jobs.map((j) => [j.id, j]));
  const children = new Map();
  const roots = [];
  for (const j of [...jobs].sort((a, b) => a.created_at.localeCompare(b.created_at))) {
    if (j.parent_job_id !== null && byId.has(j.parent_job_id)) {
      const list = children.get(j.parent_job_id) ?? [];
      list.push(j);
      children.set(j.parent_job_id, list);
    } else {
      roots.push(j);
    }
  }
  const node = (j, depth) => {
    const here = j.id === job.id;
    const label = [
      statusBadge(j.status),
      " ",
      here
        ? h("strong", { "aria-current": "true" }, j.operation_id, " ", h("code", {}, j.id), " (this job)")
        : h("a", { href: jobHash(j.id), "data-focus-key": `tree-${j.id}` }, j.operation_id, " ", h("code", {}, j.id)),
      j.parent_job_id === null ? h("span", { class: "muted" }, " · root") : null,
      j.parent_job_id !== null && !byId.has(j.parent_job_id) ? h("span", { class: "muted" }, ` · parent ${j.parent_job_id} not shown`) : null,
    ];
    const kids = children.get(j.id) ?? [];
    return h("li", { class: here ? "here" : "" }, h("span", { class: "node" }, label), kids.length > 0 && depth < 50 ? h("ul", {}, kids.map((kid) => node(kid, depth + 1))) : null);
  };
  return [
    h(
      "p",
      { class: "muted" },
      `${jobs.length}${page.next_cursor ? "+" : ""} job${jobs.length === 1 ? "" : "s"} in chain `,
      h("a", { href: listHash({ original_request_id: job.original_request_id }), "data-focus-key": "chain-list" }, h("code", {}, job.original_request_id)),
      page.next_cursor ? ` (the ${CHAIN_LIMIT} newest are drawn)` : "",
    ),
    h("ul", { class: "tree", "aria-label": `Chain ${job.original_request_id}` }, roots.map((root) => node(root, 0))),
  ];
}

/** Every finished attempt, oldest first, with its outcome and what the target answered. */
function attemptTable(history) {
  if (history.length === 0) return h("p", { class: "muted" }, "No attempt has finished yet.");
  return h(
    "table",
    { class: "data attempts" },
    h("caption", { class: "visually-hidden" }, "Attempts, oldest first"),
    h(
      "thead",
      {},
      h("tr", {}, ["#", "Finished", "Took", "Outcome", "HTTP", "Error body"].map((label) => h("th", { scope: "col" }, label))),
    ),
    h(
      "tbody",
      {},
      history.map((attempt) =>
        h(
          "tr",
          {},
          h("th", { scope: "row" }, String(attempt.attempt)),
          h("td", { class: "nowrap" }, timeShort(attempt.finished_at)),
          h("td", { class: "nowrap" }, attempt.started_at === null ? "—" : duration(new Date(attempt.finished_at) - new Date(attempt.started_at))),
          h("td", {}, statusBadge(attempt.outcome)),
          h("td", {}, attempt.status_code === null ? h("span", { class: "muted" }, "none") : String(attempt.status_code)),
          h("td", {}, attempt.error_body === null ? h("span", { class: "muted" }, "—") : h("pre", { class: "code small" }, attempt.error_body)),
        ),
      ),
    ),
  );
}

// A job's page: every field of its wire form, its result with the error body, its history (creation, attempts
// numbered across retries, administrators' actions) as one timeline, its place in its chain (ui/chain-slice.js), and the
// actions (run now, cancel, retry, cancel the chain), each confirmed first. Cancelling a running job aborts its delivery
// (?abort=true).
import { api, ApiError, apiPath } from "./api.js";
import { canOperate } from "./session.js";
import {
  ACTIVE_STATUSES,
  announce,
  confirmAction,
  duration,
  h,
  jsonBlock,
  relative,
  replaceContent,
  showError,
  statusBadge,
  time,
  timeShort,
} from "./dom.js";
import { chainHash, LARGE_CHAIN_JOBS, LARGE_CHAIN_REFRESH_MS } from "./chain.js";
import { chainSliceView } from "./chain-slice.js";
import { jobHash, listHash } from "./jobs.js";

/** How often a job's page refreshes itself. */
const REFRESH_MS = 2000;

/** Mounts the page of job `id` in `container`. */
export function jobView(container, id, ctx) {
  document.title = `Job ${id} · opqueue`;
  const heading = h("h1", { tabindex: "-1" }, "Job ", h("code", { class: "job-id" }, id));
  const headStatus = h("span", { class: "head-status" });
  const actions = h("div", { class: "actions", role: "group", "aria-label": "Actions" });
  const fields = h("div", {});
  const result = h("div", {});
  const chainPanel = h("div", {});
  const history = h("div", {});
  const payload = h("div", { class: "payloads" });
  const updated = h("p", { class: "updated muted" });

  container.append(
    h(
      "nav",
      { class: "breadcrumb", "aria-label": "Breadcrumb" },
      h("a", { href: "#/jobs" }, "Jobs"),
      h("span", { "aria-hidden": "true" }, " › "),
      h("span", { "aria-current": "page" }, id),
    ),
    h("div", { class: "view-head" }, h("div", { class: "title-line" }, heading, headStatus), updated),
    actions,
    h(
      "div",
      { class: "columns" },
      h(
        "div",
        { class: "column" },
        h(
          "section",
          { class: "panel", "aria-labelledby": "fields-title" },
          h("h2", { id: "fields-title" }, "Fields"),
          fields,
        ),
        h(
          "section",
          { class: "panel", "aria-labelledby": "payload-title" },
          h("h2", { id: "payload-title" }, "Request and authority"),
          payload,
        ),
      ),
      h(
        "div",
        { class: "column" },
        h(
          "section",
          { class: "panel", "aria-labelledby": "result-title" },
          h("h2", { id: "result-title" }, "Result"),
          result,
        ),
        h(
          "section",
          { class: "panel", "aria-labelledby": "history-title" },
          h("h2", { id: "history-title" }, "History"),
          history,
        ),
        h(
          "section",
          { class: "panel", "aria-labelledby": "chain-title" },
          h("h2", { id: "chain-title" }, "Chain"),
          chainPanel,
        ),
      ),
    ),
  );

  let job = null;
  let missing = false;
  /** The chain as last read (GET /chains/{rid}), when, and whether the next refresh must read it again. */
  let chainRead = { chain: null, at: 0, again: true };

  /** Runs an action after its confirmation; says what happened, or the service's refusal. */
  async function act({ title, message, confirmLabel, run, done, refused }) {
    if (!(await confirmAction({ title, message, confirmLabel }))) return;
    chainRead.again = true;
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

  const runNow = () =>
    act({
      title: "Run this job now?",
      message:
        `Job ${id} (${job.operation_id}) would run ${relative(job.run_at)}. It becomes due now and runs as soon as a ` +
        "worker is free; its attempt count, priority and keys stay as they are, and a concurrency key still makes it wait its turn.",
      confirmLabel: "Run now",
      run: () => api(apiPath`/jobs/${id}/run-now`, { method: "POST" }),
      done: () => `Job ${id} is due now; it runs as soon as a worker is free.`,
      refused: "Not run now",
    });

  const cancel = () => {
    // Asked of the job as shown: one that started meanwhile is refused (409 job_running), not aborted unawares.
    const running = job.status === "running";
    return act({
      title: running ? "Abort and cancel this running job?" : "Cancel this job?",
      message: running
        ? `Job ${id} (${job.operation_id}) is being delivered now. Its delivery is aborted (the target sees the ` +
          "connection close) and the job ends cancelled, whatever the target answers. It is not retried."
        : `Job ${id} (${job.operation_id}) will not be delivered.`,
      confirmLabel: running ? "Abort and cancel" : "Cancel job",
      run: () => api(`${apiPath`/jobs/${id}/cancel`}${running ? "?abort=true" : ""}`, { method: "POST" }),
      done: ({ job: updatedJob }) =>
        running ? `Job ${id} is ${updatedJob.status}; its delivery was aborted.` : `Job ${id} is ${updatedJob.status}.`,
      refused: "Not cancelled",
    });
  };

  const retry = () =>
    act({
      title: "Retry this job?",
      message: `Job ${id} (${job.operation_id}) goes back to the queue as pending, with attempt 0, and runs now.`,
      confirmLabel: "Retry job",
      run: () => api(apiPath`/jobs/${id}/retry`, { method: "POST" }),
      done: ({ job: updatedJob }) =>
        `Job ${id} re-queued (${updatedJob.status}, attempt ${updatedJob.attempt}); it runs now.`,
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
      done: ({ jobs }) =>
        `Chain ${job.original_request_id} cancelled: ${jobs.length} job${jobs.length === 1 ? "" : "s"} cancelled.`,
      refused: "Chain not cancelled",
    });

  /**
   * The job's chain: read again at every refresh while it is small, at most every LARGE_CHAIN_REFRESH_MS once it is
   * large (its answer then weighs hundreds of kilobytes), and after every action. Null once no job of it is left.
   */
  async function readChain(rid) {
    const size = chainRead.chain === null ? 0 : Object.values(chainRead.chain.counts).reduce((sum, n) => sum + n, 0);
    const stale =
      chainRead.again ||
      chainRead.chain?.original_request_id !== rid ||
      size <= LARGE_CHAIN_JOBS ||
      Date.now() - chainRead.at >= LARGE_CHAIN_REFRESH_MS;
    if (!stale) return chainRead.chain;
    let chain = null;
    try {
      ({ chain } = await api(apiPath`/chains/${rid}`));
    } catch (error) {
      if (!(error instanceof ApiError && error.code === "chain_not_found")) throw error;
    }
    chainRead = { chain, at: Date.now(), again: false };
    return chain;
  }

  let lastData = "";
  async function refresh() {
    let answers;
    try {
      answers = await Promise.all([
        api(apiPath`/jobs/${id}`),
        api(apiPath`/jobs/${id}/history`),
        api(apiPath`/jobs/${id}/extensions`),
      ]);
    } catch (error) {
      if (error instanceof ApiError && error.code === "job_not_found") {
        if (!missing) {
          missing = true;
          container.replaceChildren(
            h("h1", { tabindex: "-1" }, "Job not found"),
            h(
              "p",
              {},
              `No job has id "${id}": it never existed, or retention removed it. `,
              h("a", { href: "#/jobs" }, "Back to the jobs"),
              ".",
            ),
          );
        }
        return;
      }
      throw error;
    }
    const [{ job: fresh }, { events }, { extensions }] = answers;
    const chain = await readChain(fresh.original_request_id);
    if (!ctx.isCurrent()) return;
    replaceContent(updated, "Updated ", time(new Date().toISOString()), ` · refreshes every ${REFRESH_MS / 1000} s`);
    // Running now is offered while the run time is ahead; it passes without the job changing.
    const waiting =
      (fresh.status === "pending" || fresh.status === "retrying") && new Date(fresh.run_at).getTime() > Date.now();
    const text = JSON.stringify([fresh, events, extensions, chain, waiting]);
    if (text === lastData) return;
    lastData = text;
    job = fresh;

    replaceContent(
      headStatus,
      statusBadge(job.status),
      job.result?.terminal_reason ? h("span", { class: "reason" }, job.result.terminal_reason) : null,
    );
    const buttons = [];
    // Only what the role may do on this job's operation (docs/api.md, "Roles").
    const mayAct = canOperate(job.operation_id);
    if (waiting && mayAct) {
      buttons.push(
        h(
          "button",
          {
            type: "button",
            class: "button button-primary",
            id: "action-run-now",
            onclick: runNow,
            "data-focus-key": "run-now",
          },
          "Run now…",
        ),
      );
    }
    if (ACTIVE_STATUSES.has(job.status) && mayAct) {
      buttons.push(
        h(
          "button",
          { type: "button", class: "button", id: "action-cancel", onclick: cancel, "data-focus-key": "cancel" },
          "Cancel job…",
        ),
      );
    }
    if ((job.status === "dead" || job.status === "cancelled") && mayAct) {
      buttons.push(
        h(
          "button",
          {
            type: "button",
            class: "button button-primary",
            id: "action-retry",
            onclick: retry,
            "data-focus-key": "retry",
          },
          "Retry job…",
        ),
      );
    }
    if (canOperate()) {
      buttons.push(
        h(
          "button",
          {
            type: "button",
            class: "button button-danger",
            id: "action-cancel-chain",
            onclick: cancelChain,
            "data-focus-key": "cancel-chain",
          },
          "Cancel chain…",
        ),
      );
    }
    replaceContent(actions, buttons);

    replaceContent(fields, fieldTable(job, extensions));
    replaceContent(result, resultBlock(job));
    replaceContent(
      payload,
      h("h3", {}, "request"),
      jsonBlock(job.request, "request"),
      h("h3", {}, "authority"),
      jsonBlock(job.authority, "authority"),
    );
    replaceContent(
      chainPanel,
      chain === null
        ? h("p", { class: "muted" }, "The chain has no job any more: retention removed it.")
        : chainSliceView({
            job,
            chain,
            jobHref: jobHash,
            chainHref: chainHash(job.original_request_id, { job: job.id }),
            listHref: listHash({ original_request_id: job.original_request_id }),
          }),
    );
    replaceContent(history, historyTimeline(job, events));
  }

  return { refresh, everyMs: REFRESH_MS };
}

/**
 * Every scalar field of the wire form, by its wire name, then what opqueue keeps beyond it (its rate key, expiry, trace
 * context, and the latest attempt its target took asynchronously with its progress: GET /jobs/{id}/extensions), marked
 * as such.
 */
function fieldTable(job, extensions) {
  const link = (href, text, key) => h("a", { href, "data-focus-key": key }, text);
  const code = (value) => (value === null ? h("span", { class: "muted" }, "null") : h("code", {}, value));
  const withRelative = (iso) =>
    iso === null ? time(null) : h("span", {}, time(iso), h("span", { class: "muted" }, ` (${relative(iso)})`));
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
    [
      "dedupe_key",
      job.dedupe_key === null ? code(null) : link(listHash({ dedupe_key: job.dedupe_key }), job.dedupe_key, "f-dedupe"),
    ],
    ["concurrency_key", code(job.concurrency_key)],
    ["enqueued_by_operation_id", code(job.enqueued_by_operation_id)],
    [
      "parent_job_id",
      job.parent_job_id === null ? code(null) : link(jobHash(job.parent_job_id), job.parent_job_id, "f-parent"),
    ],
    [
      "original_request_id",
      h(
        "a",
        {
          href: listHash({ original_request_id: job.original_request_id }),
          class: "mono chain-id",
          "data-focus-key": "f-chain",
        },
        job.original_request_id,
      ),
    ],
    ["user_id", link(listHash({ user_id: job.user_id }), job.user_id, "f-user")],
    ["rate_key (extension)", code(extensions.rate_key)],
    ["expires_at (extension)", withRelative(extensions.expires_at)],
    ["traceparent (extension)", code(extensions.traceparent)],
    ["async (extension)", asyncCell(job, extensions.async)],
    ["progress (extension)", progressCell(extensions.progress)],
  ];
  return h(
    "table",
    { class: "fields" },
    h("caption", { class: "visually-hidden" }, "Fields of the job"),
    h(
      "tbody",
      {},
      rows.map(([name, value]) => h("tr", {}, h("th", { scope: "row" }, name), h("td", {}, value))),
    ),
  );
}

/**
 * The latest attempt the target took asynchronously (202 with x-job-async: 1): when, and whether the job is waiting on
 * the target for it now (running that attempt), so an operator can tell a long job from a stuck delivery.
 */
function asyncCell(job, accepted) {
  if (accepted === null) return h("span", { class: "muted" }, "null");
  const waiting = job.status === "running" && job.attempt === accepted.attempt;
  return h(
    "span",
    {},
    `attempt ${accepted.attempt}, taken asynchronously `,
    time(accepted.accepted_at),
    h("span", { class: "muted" }, ` (${relative(accepted.accepted_at)})`),
    waiting ? h("span", {}, "; running on the target's heartbeats") : "",
  );
}

/** The latest progress a heartbeat reported: its JSON, by which attempt, and when. */
function progressCell(progress) {
  if (progress === null) return h("span", { class: "muted" }, "null");
  return h(
    "span",
    {},
    h("code", {}, JSON.stringify(progress.value)),
    h("span", { class: "muted" }, ` from attempt ${progress.attempt}, `),
    time(progress.reported_at),
    h("span", { class: "muted" }, ` (${relative(progress.reported_at)})`),
  );
}

/** The result: status code, terminal reason, the stored body (store_result) and the error body as the target sent them. */
function resultBlock(job) {
  if (job.result === null) {
    return h(
      "p",
      { class: "muted" },
      ACTIVE_STATUSES.has(job.status) ? "No result yet: no attempt has failed or finished the job." : "null",
    );
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
        h(
          "tr",
          {},
          h("th", { scope: "row" }, "status_code"),
          h(
            "td",
            {},
            statusCode === undefined
              ? h("span", { class: "muted" }, "none (no response)")
              : h("code", {}, String(statusCode)),
          ),
        ),
        h(
          "tr",
          {},
          h("th", { scope: "row" }, "terminal_reason"),
          h("td", {}, reason === null ? h("span", { class: "muted" }, "null") : h("code", {}, reason)),
        ),
      ),
    ),
    "body" in job.result ? storedBody(job.result.body) : null,
    h("h3", {}, "error_body"),
    errorBody === null
      ? h("p", { class: "muted" }, "null")
      : h("pre", { class: "code error-body", tabindex: "0", "aria-label": "error_body" }, errorBody),
  ];
}

/**
 * The target's 2xx body kept by an operation with store_result (docs/chains.md, "Stored results"): a string as its
 * text, any other JSON value indented. Always text, never markup: a body holding HTML shows its tags.
 */
function storedBody(body) {
  const text = typeof body === "string";
  return [
    h("h3", {}, "body ", h("span", { class: "body-kind" }, text ? "(text)" : "(JSON)")),
    h(
      "pre",
      { class: "code result-body", id: "result-body", tabindex: "0", "aria-label": "body" },
      text ? body : JSON.stringify(body, null, 2),
    ),
  ];
}

/** How the history names an administrator's action, the mark drawn beside it, and what it did to the job. */
const ACTIONS = {
  cancel: { words: "Cancelled", mark: "✕", note: "the job will not be delivered" },
  retry: { words: "Retried", mark: "↻", note: "back to pending, attempts counted from 1 again" },
  "retry-dead": { words: "Retried", mark: "↻", note: "in a bulk retry, attempts counted from 1 again" },
  "cancel-chain": {
    words: "Chain cancelled",
    mark: "✕",
    note: "every waiting job of the chain was cancelled, this one too",
  },
  "run-now": { words: "Run now", mark: "▶", note: "made due at once" },
  "cancel-many": { words: "Cancelled", mark: "✕", note: "in a bulk cancel" },
};

/** One line of the history: a mark (an attempt's number), what happened, when. */
function historyItem({ className, mark, markSpoken, body, at }) {
  return h(
    "li",
    { class: `event ${className}` },
    h("span", { class: "event-mark", ...(markSpoken ? {} : { "aria-hidden": "true" }) }, mark),
    h("div", { class: "event-body" }, body),
    h("span", { class: "event-time" }, at === null ? null : timeShort(at)),
  );
}

/** A finished attempt: its number across the job's life, outcome, answer, time taken and error body. */
function attemptItem(event) {
  const took = event.started_at === null ? null : duration(new Date(event.at) - new Date(event.started_at));
  const restarted = event.attempt !== event.number;
  return historyItem({
    className: `event-attempt event-outcome-${event.outcome}`,
    mark: `#${event.number}`,
    markSpoken: true,
    at: event.at,
    body: [
      h(
        "p",
        { class: "event-line" },
        statusBadge(event.outcome),
        " ",
        event.status_code === null
          ? h("span", { class: "muted" }, "no response")
          : h("span", { class: "http-status" }, `HTTP ${event.status_code}`),
        took === null ? null : h("span", { class: "muted" }, ` · took ${took}`),
        restarted
          ? h(
              "span",
              { class: "muted", title: "An administrator's retry starts the job's attempt counter again." },
              ` · job attempt ${event.attempt}`,
            )
          : null,
      ),
      event.error_body === null
        ? null
        : h(
            "pre",
            { class: "code small", tabindex: "0", "aria-label": `error body of attempt ${event.number}` },
            event.error_body,
          ),
    ],
  });
}

/** An administrator's action; a retry is drawn as a band across the history, between the attempts it separates. */
function adminItem(event) {
  const action = ACTIONS[event.action] ?? { words: event.action, mark: "•", note: "" };
  const band = event.action === "retry" || event.action === "retry-dead";
  return historyItem({
    className: `event-admin event-${event.action}${band ? " event-band" : ""}`,
    mark: action.mark,
    at: event.at,
    body: h(
      "p",
      { class: "event-line" },
      h("strong", {}, action.words),
      " by ",
      h("strong", { class: "actor" }, event.actor),
      event.role ? h("span", { class: "muted role" }, ` (${event.role})`) : null,
      action.note ? h("span", { class: "muted" }, ` · ${action.note}`) : null,
    ),
  });
}

/** The attempt to come: running now, or waiting for its run time. */
function nextItem(job, number) {
  if (job.status === "running") {
    return historyItem({
      className: "event-next",
      mark: `#${number}`,
      markSpoken: true,
      at: job.started_at,
      body: h(
        "p",
        { class: "event-line" },
        statusBadge("running"),
        h("span", { class: "muted" }, ` started ${relative(job.started_at)}`),
      ),
    });
  }
  if (job.status !== "pending" && job.status !== "retrying") return null;
  const due = new Date(job.run_at).getTime() <= Date.now();
  return historyItem({
    className: "event-next",
    mark: `#${number}`,
    markSpoken: true,
    at: job.run_at,
    body: h(
      "p",
      { class: "event-line muted" },
      due
        ? `next attempt due ${relative(job.run_at)}, waiting to be claimed`
        : `next attempt runs ${relative(job.run_at)}`,
    ),
  });
}

/** The job's history as one timeline, oldest first: creation, attempts numbered across retries, admins' actions. */
function historyTimeline(job, events) {
  let attempts = 0;
  const items = events.map((event) => {
    switch (event.type) {
      case "enqueued":
        return historyItem({
          className: "event-enqueued",
          mark: "●",
          at: event.at,
          body: h("p", { class: "event-line" }, h("strong", {}, "Created"), " by ", h("code", {}, event.by)),
        });
      case "attempt":
        attempts = Math.max(attempts, event.number);
        return attemptItem(event);
      case "admin":
        return adminItem(event);
      default:
        return null;
    }
  });
  return h("ol", { class: "timeline", "aria-label": "History, oldest first" }, items, nextItem(job, attempts + 1));
}

// Flow control (docs/flow-control.md): every background operation with its pause (who, when), its jobs waiting and
// running (from GET /stats) with a "throttled" badge, its limits in force and where they come from, a Pause/Resume
// toggle, "Reset to config", and one form to change an operation's limits; then the paused concurrency keys, each with
// Resume, and a field to pause one. Every node reads these at its next claim.
import { api, ApiError, apiPath } from "./api.js";
import { announce, confirmAction, count, h, replaceContent, showError, time } from "./dom.js";
import { listHash } from "./jobs.js";
import { canOperate, session } from "./session.js";

/** How often the view refreshes itself. */
const REFRESH_MS = 5000;

/** `1 s`, `10 min`, `2 h`, `1500 ms`: a rate's period, in the largest unit that divides it. */
function period(ms) {
  for (const [unit, size] of [
    ["h", 3_600_000],
    ["min", 60_000],
    ["s", 1000],
  ]) {
    if (ms % size === 0) return `${count(ms / size)} ${unit}`;
  }
  return `${count(ms)} ms`;
}

/** A rate limit in words: `10 per 1 s`, with its burst when it is not the limit. */
function rateText(rate) {
  const burst = rate.burst ?? rate.limit;
  return `${count(rate.limit)} per ${period(rate.period_ms)}${burst === rate.limit ? "" : `, bursts of ${count(burst)}`}`;
}

/** "by X, at T": who did an administrator's action, and when. */
function stamp(value) {
  return [
    h("span", { class: "muted" }, "by "),
    h("strong", { class: "actor" }, value.by),
    h("span", { class: "muted" }, ", "),
    time(value.at),
  ];
}

/** An operation's limits as a list of what holds its jobs back. */
function limitsList(limits) {
  const item = (name, value) => h("li", {}, h("span", { class: "muted" }, `${name}: `), value);
  // A new node each time: one node appended twice would move, not repeat.
  const none = () => h("span", { class: "muted" }, "none");
  return h(
    "ul",
    { class: "limits" },
    item("rate", limits.rate === null ? none() : rateText(limits.rate)),
    item("per rate key", limits.rate_per_key === null ? none() : rateText(limits.rate_per_key)),
    item("max concurrency", limits.max_concurrency === null ? none() : count(limits.max_concurrency)),
    item("per concurrency key", count(limits.concurrency_limit)),
  );
}

/** An operation's jobs waiting (pending or retrying) and running, from GET /stats's `by_operation` rows. */
function jobCounts(rows) {
  const counts = new Map();
  for (const { operation_id: id, status, count: n } of rows) {
    const entry = counts.get(id) ?? { waiting: 0, running: 0 };
    if (status === "pending" || status === "retrying") entry.waiting += n;
    else if (status === "running") entry.running += n;
    else continue;
    counts.set(id, entry);
  }
  return counts;
}

/**
 * Whether an operation is throttled: it has jobs waiting and a pause, a rate, a rate per key or a max concurrency
 * that may hold them. The same rule as the `opqueue_operation_throttled` metric (docs/flow-control.md), so the
 * dashboard and the alerts agree.
 */
function isThrottled(control, waiting) {
  const { limits } = control;
  const gated =
    control.paused !== null || limits.rate !== null || limits.rate_per_key !== null || limits.max_concurrency !== null;
  return gated && waiting > 0;
}

/** An operation's waiting and running jobs, each count a link to those jobs in the list. */
function jobsCell(id, { waiting, running }) {
  const line = (n, label, statuses) =>
    h(
      "li",
      { class: n === 0 ? "zero" : "" },
      n === 0
        ? `0 ${label}`
        : h(
            "a",
            { href: listHash({ operation_id: id, status: statuses }), "data-focus-key": `${label}-${id}` },
            `${count(n)} ${label}`,
          ),
    );
  return h(
    "ul",
    { class: "job-counts" },
    line(waiting, "waiting", ["pending", "retrying"]),
    line(running, "running", ["running"]),
  );
}

/** A whole number typed in `input`, null when it is empty; throws with the field's name when it is not one ≥ 1. */
function wholeNumber(input, name) {
  const text = input.value.trim();
  if (text === "") return null;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a whole number of at least 1.`);
  return value;
}

/** Mounts the flow control view in `container`. */
export function flowView(container, ctx) {
  document.title = "Flow control · opqueue";
  const updated = h("p", { class: "updated muted", "aria-live": "off" });
  const operationsBox = h("div", { class: "table-wrap" });
  const keysBox = h("div", { class: "table-wrap" });

  // The limits form: built once, so a refresh never loses what is being typed.
  const field = (id, label, attrs = {}) => {
    const input = h("input", { id, name: id, type: "text", inputmode: "numeric", autocomplete: "off", ...attrs });
    return { input, node: h("div", { class: "field" }, h("label", { for: id }, label), input) };
  };
  const operationChoice = h("select", { id: "limits-operation", name: "operation" });
  const rateFields = (prefix, label) => ({
    limit: field(`${prefix}-limit`, "Jobs", { placeholder: "none" }),
    period: field(`${prefix}-period`, "Per (ms)", { placeholder: "1000" }),
    burst: field(`${prefix}-burst`, "Burst", { placeholder: "= jobs" }),
    label,
  });
  const rate = rateFields("limits-rate", "Rate");
  const ratePerKey = rateFields("limits-rate-per-key", "Rate per rate key");
  const maxConcurrency = field("limits-max-concurrency", "Max concurrency", { placeholder: "none" });
  const concurrencyLimit = field("limits-concurrency-limit", "Per concurrency key", {
    placeholder: "1",
    required: true,
  });
  const rateFieldset = ({ limit, period: per, burst, label }) =>
    h(
      "fieldset",
      { class: "rate-fields" },
      h("legend", {}, label, h("span", { class: "muted" }, " (no jobs: no limit)")),
      limit.node,
      per.node,
      burst.node,
    );
  const limitsForm = h(
    "form",
    { class: "limits-form", "aria-labelledby": "limits-title", novalidate: true },
    h("div", { class: "field" }, h("label", { for: "limits-operation" }, "Operation"), operationChoice),
    rateFieldset(rate),
    rateFieldset(ratePerKey),
    h("div", { class: "limits-counts" }, maxConcurrency.node, concurrencyLimit.node),
    h(
      "p",
      { class: "help muted" },
      "Saved limits are the administrator's: they apply on every node at once and are kept across restarts until reset to the configuration's.",
    ),
    h(
      "div",
      { class: "form-buttons" },
      h("button", { type: "submit", class: "button button-primary", id: "limits-save" }, "Save limits"),
    ),
  );
  limitsForm.addEventListener("submit", (event) => {
    event.preventDefault();
    void saveLimits();
  });
  // Once edited, the form is left alone by the refresh until it is saved or another operation is picked.
  let edited = false;
  limitsForm.addEventListener("input", () => {
    edited = true;
  });
  operationChoice.addEventListener("change", () => fillLimits(operationChoice.value));

  // Pausing a key.
  const keyInput = h("input", {
    id: "pause-key",
    name: "key",
    type: "text",
    autocomplete: "off",
    spellcheck: "false",
    maxlength: "256",
    placeholder: "concurrency_key",
  });
  const keyForm = h(
    "form",
    { class: "key-form", "aria-label": "Pause a concurrency key" },
    h("div", { class: "field" }, h("label", { for: "pause-key" }, "Concurrency key"), keyInput),
    h("button", { type: "submit", class: "button", id: "pause-key-button" }, "Pause key"),
  );
  keyForm.addEventListener("submit", (event) => {
    event.preventDefault();
    void pauseKey();
  });

  container.append(
    h("div", { class: "view-head" }, h("h1", { tabindex: "-1" }, "Flow control"), updated),
    h(
      "section",
      { class: "panel", "aria-labelledby": "operations-title" },
      h("h2", { id: "operations-title" }, "Operations"),
      h(
        "p",
        { class: "muted intro" },
        "A paused operation still takes enqueues; no node starts its jobs until it is resumed. Running deliveries finish. " +
          "Throttled: jobs are waiting (pending or retrying) and a pause, a rate or a max concurrency may hold them.",
      ),
      operationsBox,
    ),
    // A viewer changes nothing: no form. An operator limited to some operations picks among those.
    session().role === "viewer"
      ? null
      : h(
          "section",
          { class: "panel", "aria-labelledby": "limits-title" },
          h("h2", { id: "limits-title" }, "Change limits"),
          limitsForm,
        ),
    h(
      "section",
      { class: "panel", "aria-labelledby": "keys-title" },
      h("h2", { id: "keys-title" }, "Paused concurrency keys"),
      h("p", { class: "muted intro" }, "No job with a paused concurrency key is started, whatever its operation."),
      canOperate() ? keyForm : null,
      keysBox,
    ),
  );

  let operations = [];
  /** Jobs waiting and running per operation id, from the last GET /stats. */
  let counts = new Map();

  /** Runs an API call for an action; says what happened, or the service's refusal; then refreshes. */
  async function act({ run, done, refused }) {
    try {
      announce(done(await run()));
    } catch (error) {
      if (error instanceof ApiError && error.status !== 401 && error.code !== "site_admin_required") {
        showError(`${refused}: ${error.describe()}`);
      } else if (error instanceof ApiError) {
        ctx.reportError(error);
      } else {
        showError(`${refused}: ${error.message}`);
      }
    }
    await refresh({ force: true }).catch(ctx.reportError);
  }

  async function pause(operation) {
    const confirmed = await confirmAction({
      title: `Pause ${operation.operation_id}?`,
      message:
        `No node starts a job of ${operation.operation_id} until it is resumed. Enqueues are still accepted and wait, ` +
        "running deliveries finish, and retries wait like any other job.",
      confirmLabel: "Pause operation",
    });
    if (!confirmed) return;
    await act({
      run: () => api(apiPath`/operations/${operation.operation_id}/pause`, { method: "POST" }),
      done: ({ operation: control }) => `${control.operation_id} is paused.`,
      refused: "Not paused",
    });
  }

  const resume = (operation) =>
    act({
      run: () => api(apiPath`/operations/${operation.operation_id}/resume`, { method: "POST" }),
      done: ({ operation: control }) => `${control.operation_id} is resumed: its due jobs start now.`,
      refused: "Not resumed",
    });

  async function resetLimits(operation) {
    const confirmed = await confirmAction({
      title: `Reset the limits of ${operation.operation_id}?`,
      message: `The limits set by ${operation.control.limits_set?.by ?? "an administrator"} are dropped, and the configuration's apply again on every node.`,
      confirmLabel: "Reset to config",
    });
    if (!confirmed) return;
    await act({
      run: () => api(apiPath`/operations/${operation.operation_id}/limits`, { method: "DELETE" }),
      done: ({ operation: control }) => {
        if (operationChoice.value === control.operation_id) edited = false;
        return `The limits of ${control.operation_id} are the configuration's again.`;
      },
      refused: "Not reset",
    });
  }

  /** Shows `operationId`'s limits in force in the form. */
  function fillLimits(operationId) {
    const operation = operations.find((candidate) => candidate.operation_id === operationId);
    if (!operation) return;
    edited = false;
    operationChoice.value = operationId;
    const { limits } = operation.control;
    for (const [fields, value] of [
      [rate, limits.rate],
      [ratePerKey, limits.rate_per_key],
    ]) {
      fields.limit.input.value = value === null ? "" : String(value.limit);
      fields.period.input.value = value === null ? "" : String(value.period_ms);
      fields.burst.input.value = value === null ? "" : String(value.burst ?? value.limit);
    }
    maxConcurrency.input.value = limits.max_concurrency === null ? "" : String(limits.max_concurrency);
    concurrencyLimit.input.value = String(limits.concurrency_limit);
  }

  /** The limits the form holds, as PATCH /operations/{id}/limits takes them (every one: the form shows them all). */
  function formLimits() {
    const rateOf = ({ limit, period: per, burst, label }) => {
      const jobs = wholeNumber(limit.input, `${label}: jobs`);
      const periodMs = wholeNumber(per.input, `${label}: per (ms)`);
      const burstSize = wholeNumber(burst.input, `${label}: burst`);
      if (jobs === null) {
        if (periodMs !== null || burstSize !== null)
          throw new Error(`${label}: give the number of jobs, or clear the other fields to remove the limit.`);
        return null;
      }
      return { limit: jobs, period_ms: periodMs ?? 1000, ...(burstSize === null ? {} : { burst: burstSize }) };
    };
    const perKey = wholeNumber(concurrencyLimit.input, "Per concurrency key");
    if (perKey === null)
      throw new Error("Per concurrency key must be a whole number of at least 1 (1: one running job per key).");
    return {
      rate: rateOf(rate),
      rate_per_key: rateOf(ratePerKey),
      max_concurrency: wholeNumber(maxConcurrency.input, "Max concurrency"),
      concurrency_limit: perKey,
    };
  }

  async function saveLimits() {
    const operationId = operationChoice.value;
    if (!operationId) {
      showError("Choose an operation first.");
      operationChoice.focus();
      return;
    }
    let limits;
    try {
      limits = formLimits();
    } catch (error) {
      showError(`Not saved: ${error.message}`);
      return;
    }
    await act({
      run: () => api(apiPath`/operations/${operationId}/limits`, { method: "PATCH", body: limits }),
      done: ({ operation: control }) => {
        edited = false;
        return `The limits of ${control.operation_id} are saved; every node applies them at its next claim.`;
      },
      refused: "Limits not saved",
    });
  }

  async function pauseKey() {
    const key = keyInput.value;
    if (key.trim() === "") {
      showError("Type the concurrency key to pause.");
      keyInput.focus();
      return;
    }
    await act({
      run: () => api(apiPath`/concurrency-keys/${key}/pause`, { method: "POST" }),
      done: ({ key: paused }) => {
        keyInput.value = "";
        return `Concurrency key ${paused.concurrency_key} is paused.`;
      },
      refused: "Key not paused",
    });
  }

  const resumeKey = (key) =>
    act({
      run: () => api(apiPath`/concurrency-keys/${key}/resume`, { method: "POST" }),
      done: ({ resumed }) =>
        resumed ? `Concurrency key ${key} is resumed.` : `Concurrency key ${key} was not paused.`,
      refused: "Key not resumed",
    });

  function renderOperations() {
    if (operations.length === 0) {
      replaceContent(
        operationsBox,
        h("p", { class: "empty" }, "The service's OpenAPI document has no background operation."),
      );
      return;
    }
    replaceContent(
      operationsBox,
      h(
        "table",
        { class: "data flow-table" },
        h("caption", { class: "visually-hidden" }, "Background operations and their flow control"),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["Operation", "State", "Jobs", "Limits", "Limits from", "Actions"].map((label) =>
              h("th", { scope: "col" }, label),
            ),
          ),
        ),
        h(
          "tbody",
          {},
          operations.map((operation) => {
            const { operation_id: id, control } = operation;
            const paused = control.paused !== null;
            const jobs = counts.get(id) ?? { waiting: 0, running: 0 };
            const throttled = isThrottled(control, jobs.waiting);
            return h(
              "tr",
              { "data-operation-id": id, class: paused ? "paused" : "" },
              h(
                "th",
                { scope: "row" },
                h("a", { href: listHash({ operation_id: id }), "data-focus-key": `op-${id}` }, id),
                h("span", { class: "op-route muted" }, `${operation.method} ${operation.path}`),
              ),
              h(
                "td",
                { class: "state-cell", "data-label": "State" },
                h(
                  "span",
                  { class: "badges" },
                  h(
                    "span",
                    { class: `badge ${paused ? "badge-paused" : "badge-active"}` },
                    paused ? "paused" : "active",
                  ),
                  throttled ? h("span", { class: "badge badge-throttled" }, "throttled") : null,
                ),
                paused ? h("span", { class: "stamp" }, stamp(control.paused)) : null,
              ),
              h("td", { class: "jobs-cell", "data-label": "Jobs" }, jobsCell(id, jobs)),
              h("td", { "data-label": "Limits" }, limitsList(control.limits)),
              h(
                "td",
                { class: "source-cell", "data-label": "Limits from" },
                control.limits_source === "admin"
                  ? [
                      h("strong", {}, "administrator"),
                      control.limits_set ? h("span", { class: "stamp" }, stamp(control.limits_set)) : null,
                    ]
                  : h("span", {}, "configuration"),
              ),
              h(
                "td",
                { class: "actions-cell", "data-label": "Actions" },
                canOperate(id)
                  ? h(
                      "div",
                      { class: "actions", role: "group", "aria-label": `Actions on ${id}` },
                      paused
                        ? h(
                            "button",
                            {
                              type: "button",
                              class: "button button-primary",
                              onclick: () => resume(operation),
                              "data-focus-key": `toggle-${id}`,
                            },
                            "Resume",
                          )
                        : h(
                            "button",
                            {
                              type: "button",
                              class: "button",
                              onclick: () => pause(operation),
                              "data-focus-key": `toggle-${id}`,
                            },
                            "Pause…",
                          ),
                      h(
                        "button",
                        {
                          type: "button",
                          class: "button button-quiet",
                          "data-focus-key": `edit-${id}`,
                          onclick: () => {
                            fillLimits(id);
                            rate.limit.input.focus();
                          },
                        },
                        "Change limits",
                      ),
                      control.limits_source === "admin"
                        ? h(
                            "button",
                            {
                              type: "button",
                              class: "button button-danger",
                              onclick: () => resetLimits(operation),
                              "data-focus-key": `reset-${id}`,
                            },
                            "Reset to config…",
                          )
                        : null,
                    )
                  : null,
              ),
            );
          }),
        ),
      ),
    );
  }

  function renderKeys(keys) {
    if (keys.length === 0) {
      replaceContent(keysBox, h("p", { class: "muted", id: "no-paused-keys" }, "No concurrency key is paused."));
      return;
    }
    replaceContent(
      keysBox,
      h(
        "table",
        { class: "data keys-table" },
        h("caption", { class: "visually-hidden" }, "Paused concurrency keys"),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["Concurrency key", "Paused", ""].map((label) => h("th", { scope: "col" }, label)),
          ),
        ),
        h(
          "tbody",
          {},
          keys.map((key) =>
            h(
              "tr",
              { "data-key": key.concurrency_key },
              h("th", { scope: "row" }, h("code", { class: "key" }, key.concurrency_key)),
              h("td", {}, stamp(key.paused)),
              h(
                "td",
                { class: "num" },
                canOperate()
                  ? h(
                      "button",
                      {
                        type: "button",
                        class: "button",
                        onclick: () => resumeKey(key.concurrency_key),
                        "data-focus-key": `resume-key-${key.concurrency_key}`,
                        "aria-label": `Resume key ${key.concurrency_key}`,
                      },
                      "Resume",
                    )
                  : null,
              ),
            ),
          ),
        ),
      ),
    );
  }

  /** The operation choices of the limits form, keeping the one chosen. */
  function renderChoices() {
    const chosen = operationChoice.value;
    operationChoice.replaceChildren(
      h("option", { value: "", selected: chosen === "" }, "choose an operation"),
      ...operations
        .filter(({ operation_id: id }) => canOperate(id))
        .map(({ operation_id: id }) => h("option", { value: id, selected: id === chosen }, id)),
    );
  }

  let lastData = "";
  async function refresh({ force = false } = {}) {
    const [listed, paused, stats] = await Promise.all([
      api("/operations"),
      api("/concurrency-keys/paused"),
      api("/stats"),
    ]);
    if (!ctx.isCurrent()) return;
    replaceContent(updated, "Updated ", time(new Date().toISOString()), ` · refreshes every ${REFRESH_MS / 1000} s`);
    const latestCounts = jobCounts(stats.by_operation);
    // Only the counts of /stats shown here: its lag and chart move every refresh and would redraw the table for nothing.
    const text = JSON.stringify([listed, paused, [...latestCounts]]);
    if (text === lastData && !force) return;
    lastData = text;
    operations = listed.operations;
    counts = latestCounts;
    renderOperations();
    renderKeys(paused.keys);
    renderChoices();
    // The form shows the limits in force until someone edits it; what they type is left alone.
    const choosable = operations.filter(({ operation_id: id }) => canOperate(id));
    if (!edited && choosable.length > 0) fillLimits(operationChoice.value || choosable[0].operation_id);
  }

  return { refresh, everyMs: REFRESH_MS };
}

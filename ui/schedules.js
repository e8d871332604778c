// Schedules (docs/schedules.md): every schedule with its cron expression and time zone, its target, whether it runs
// or who paused it, its next run and its last run with a link to the job that run enqueued; Edit, Pause/Resume, Run
// now and Delete on the schedules created through the API; Run now alone on the config file's entries, which are
// read-only here. One form creates a schedule, or edits the one chosen. Every node reads a change at once.
import { api, ApiError, apiPath } from "./api.js";
import { announce, confirmAction, h, replaceContent, showError, time } from "./dom.js";
import { jobHash } from "./jobs.js";
import { canAdminister, canOperate } from "./session.js";

/** How often the view refreshes itself. */
const REFRESH_MS = 5000;

/** "by X, at T": who did an administrator's action, and when. */
function stamp(value) {
  return [
    h("span", { class: "muted" }, "by "),
    h("strong", { class: "actor" }, value.by),
    h("span", { class: "muted" }, ", "),
    time(value.at),
  ];
}

/** Mounts the schedules view in `container`. */
export function schedulesView(container, ctx) {
  document.title = "Schedules · opqueue";
  const updated = h("p", { class: "updated muted", "aria-live": "off" });
  const tableBox = h("div", { class: "table-wrap" });

  // The form: built once, so a refresh never loses what is being typed.
  const input = (id, label, attrs = {}) => {
    const element = h("input", { id, name: id, type: "text", autocomplete: "off", spellcheck: "false", ...attrs });
    return { input: element, node: h("div", { class: "field" }, h("label", { for: id }, label), element) };
  };
  const name = input("schedule-name", "Name", {
    required: true,
    maxlength: "200",
    placeholder: "letters, digits, _ - .",
  });
  const expression = input("schedule-expression", "Cron expression", { required: true, placeholder: "0 3 * * *" });
  const timezone = input("schedule-timezone", "Time zone", { placeholder: "UTC" });
  const operation = h("select", { id: "schedule-operation", name: "operation", required: true });
  const user = input("schedule-user", "Runs as user", { required: true, maxlength: "255" });
  const priority = input("schedule-priority", "Priority", { inputmode: "numeric", placeholder: "0" });
  const dedupeKey = input("schedule-dedupe-key", "Dedupe key", { maxlength: "255", placeholder: "cron:{name}" });
  const noDedupe = h("input", { id: "schedule-no-dedupe", name: "no-dedupe", type: "checkbox" });
  const concurrencyKey = input("schedule-concurrency-key", "Concurrency key", {
    maxlength: "255",
    placeholder: "none",
  });
  const request = h("textarea", {
    id: "schedule-request",
    name: "request",
    rows: "4",
    spellcheck: "false",
    placeholder: '{"body": {}}',
  });
  const formTitle = h("h2", { id: "schedule-form-title" }, "Create a schedule");
  const submit = h(
    "button",
    { type: "submit", class: "button button-primary", id: "schedule-save" },
    "Create schedule",
  );
  const cancelEdit = h("button", { type: "button", class: "button button-quiet", hidden: true }, "Cancel editing");
  const form = h(
    "form",
    { class: "schedule-form", "aria-labelledby": "schedule-form-title", novalidate: true },
    h(
      "div",
      { class: "schedule-fields" },
      name.node,
      expression.node,
      timezone.node,
      h("div", { class: "field" }, h("label", { for: "schedule-operation" }, "Operation"), operation),
      user.node,
      priority.node,
      dedupeKey.node,
      concurrencyKey.node,
    ),
    h("label", { class: "check", for: "schedule-no-dedupe" }, noDedupe, "No dedupe key: every tick a job of its own"),
    h(
      "div",
      { class: "field" },
      h("label", { for: "schedule-request" }, "Request (JSON: body, path_params, query)"),
      request,
    ),
    h(
      "p",
      { class: "help muted" },
      "5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first, in an IANA time zone. ",
      "Without a dedupe key of its own, a tick refreshes the previous tick's job if it still waits. ",
      'The operation must be listed under triggers."cron:*" in the service\'s config.',
    ),
    h("div", { class: "form-buttons" }, submit, cancelEdit),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    void save();
  });
  cancelEdit.addEventListener("click", () => resetForm());
  // A schedule without a dedupe key has none to type.
  noDedupe.addEventListener("change", () => {
    dedupeKey.input.disabled = noDedupe.checked;
  });

  container.append(
    h("div", { class: "view-head" }, h("h1", { tabindex: "-1" }, "Schedules"), updated),
    h(
      "section",
      { class: "panel", "aria-labelledby": "schedules-title" },
      h("h2", { id: "schedules-title" }, "Schedules"),
      h(
        "p",
        { class: "muted intro" },
        "Each tick enqueues one job across all nodes. A paused schedule enqueues nothing, and resumes at its next tick. " +
          "Entries of the config file are listed here too; change them in the config file.",
      ),
      tableBox,
    ),
    // Creating and changing schedules is an admin's (docs/api.md, "Roles").
    canAdminister()
      ? h("section", { class: "panel", "aria-labelledby": "schedule-form-title" }, formTitle, form)
      : null,
  );

  let schedules = [];
  /** The schedule being edited, or null while the form creates one. */
  let editing = null;

  /** Runs an API call for an action; says what happened, or the service's refusal; then refreshes. */
  async function act({ run, done, refused }) {
    let succeeded = false;
    try {
      announce(done(await run()));
      succeeded = true;
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
    return succeeded;
  }

  /** Back to creating a schedule, the fields empty. */
  function resetForm() {
    editing = null;
    form.reset();
    name.input.disabled = false;
    dedupeKey.input.disabled = false;
    formTitle.textContent = "Create a schedule";
    submit.textContent = "Create schedule";
    cancelEdit.hidden = true;
  }

  /** Fills the form with `schedule`'s definition to change it. */
  function edit(schedule) {
    editing = schedule.name;
    name.input.value = schedule.name;
    name.input.disabled = true;
    expression.input.value = schedule.schedule;
    timezone.input.value = schedule.timezone;
    operation.value = schedule.operation_id;
    user.input.value = schedule.user_id;
    priority.input.value = String(schedule.priority);
    noDedupe.checked = schedule.dedupe_key === null;
    dedupeKey.input.disabled = noDedupe.checked;
    dedupeKey.input.value = schedule.dedupe_key ?? "";
    concurrencyKey.input.value = schedule.concurrency_key ?? "";
    request.value = JSON.stringify(schedule.request, null, 2);
    formTitle.textContent = `Edit schedule ${schedule.name}`;
    submit.textContent = "Save changes";
    cancelEdit.hidden = false;
    expression.input.focus();
  }

  /** The definition the form holds; throws with the field's name when one cannot be read. */
  function formDefinition() {
    const text = (field) => field.input.value.trim();
    const definition = {
      schedule: text(expression),
      timezone: text(timezone) || "UTC",
      operation_id: operation.value,
      user_id: text(user),
      concurrency_key: text(concurrencyKey) || null,
    };
    if (definition.schedule === "") throw new Error("Give the cron expression.");
    if (definition.operation_id === "") throw new Error("Choose the operation.");
    if (definition.user_id === "") throw new Error("Give the user the jobs run as.");
    const priorityText = text(priority);
    if (priorityText !== "") {
      const value = Number(priorityText);
      if (!Number.isSafeInteger(value)) throw new Error("Priority must be a whole number.");
      definition.priority = value;
    } else if (editing !== null) {
      definition.priority = 0;
    }
    if (noDedupe.checked) definition.dedupe_key = null;
    else if (text(dedupeKey) !== "") definition.dedupe_key = text(dedupeKey);
    else if (editing !== null) definition.dedupe_key = `cron:${editing}`;
    const requestText = request.value.trim();
    if (requestText !== "") {
      try {
        definition.request = JSON.parse(requestText);
      } catch (error) {
        throw new Error(`Request is not JSON: ${error.message}`);
      }
    } else if (editing !== null) {
      definition.request = {};
    }
    return definition;
  }

  async function save() {
    let definition;
    try {
      definition = formDefinition();
    } catch (error) {
      showError(`Not saved: ${error.message}`);
      return;
    }
    if (editing === null) {
      const chosen = name.input.value.trim();
      if (chosen === "") {
        showError("Not saved: give the schedule a name.");
        name.input.focus();
        return;
      }
      const created = await act({
        run: () => api("/schedules", { method: "POST", body: { name: chosen, ...definition } }),
        done: ({ schedule }) => `Schedule ${schedule.name} is created; every node runs it from its next tick.`,
        refused: "Schedule not created",
      });
      if (created) resetForm();
      return;
    }
    const target = editing;
    const changed = await act({
      run: () => api(apiPath`/schedules/${target}`, { method: "PATCH", body: definition }),
      done: ({ schedule }) =>
        `Schedule ${schedule.name} is changed; every node runs it by the new definition from its next tick.`,
      refused: "Schedule not changed",
    });
    if (changed) resetForm();
  }

  async function pause(schedule) {
    const confirmed = await confirmAction({
      title: `Pause ${schedule.name}?`,
      message: `No tick of ${schedule.name} enqueues a job until it is resumed; the ticks it misses meanwhile are not enqueued later.`,
      confirmLabel: "Pause schedule",
    });
    if (!confirmed) return;
    await act({
      run: () => api(apiPath`/schedules/${schedule.name}/pause`, { method: "POST" }),
      done: ({ schedule: paused }) => `Schedule ${paused.name} is paused.`,
      refused: "Not paused",
    });
  }

  const resume = (schedule) =>
    act({
      run: () => api(apiPath`/schedules/${schedule.name}/resume`, { method: "POST" }),
      done: ({ schedule: resumed }) => `Schedule ${resumed.name} is resumed: it runs again from its next tick.`,
      refused: "Not resumed",
    });

  const runNow = (schedule) =>
    act({
      run: () => api(apiPath`/schedules/${schedule.name}/run-now`, { method: "POST" }),
      done: ({ job }) => `Job ${job.id} of ${schedule.name} is enqueued to run now.`,
      refused: "Not run",
    });

  async function remove(schedule) {
    const confirmed = await confirmAction({
      title: `Delete ${schedule.name}?`,
      message: `${schedule.name} stops on every node at once. The jobs it enqueued stay.`,
      confirmLabel: "Delete schedule",
    });
    if (!confirmed) return;
    await act({
      run: () => api(apiPath`/schedules/${schedule.name}`, { method: "DELETE" }),
      done: ({ schedule: deleted }) => {
        if (editing === deleted.name) resetForm();
        return `Schedule ${deleted.name} is deleted.`;
      },
      refused: "Not deleted",
    });
  }

  function actionsOf(schedule) {
    const { name: id } = schedule;
    const button = (label, onclick, extra = {}) =>
      h("button", { type: "button", class: "button", onclick, "data-focus-key": `${label}-${id}`, ...extra }, label);
    // Only what the role may do: an operator pauses, resumes and runs now (its operations' schedules, when limited),
    // an admin also edits and deletes.
    const mayOperate = canOperate(schedule.operation_id);
    const mayAdminister = canAdminister();
    const runButton = mayOperate ? button("Run now", () => runNow(schedule), { "aria-label": `Run ${id} now` }) : null;
    if (schedule.source === "config") {
      return [runButton, h("span", { class: "muted config-note" }, "config file: read-only")];
    }
    return [
      mayAdminister
        ? button("Edit", () => edit(schedule), { class: "button button-quiet", "aria-label": `Edit ${id}` })
        : null,
      !mayOperate
        ? null
        : schedule.paused
          ? button("Resume", () => resume(schedule), { class: "button button-primary", "aria-label": `Resume ${id}` })
          : button("Pause…", () => pause(schedule), { "aria-label": `Pause ${id}` }),
      runButton,
      mayAdminister
        ? button("Delete…", () => remove(schedule), { class: "button button-danger", "aria-label": `Delete ${id}` })
        : null,
    ];
  }

  function renderTable() {
    if (schedules.length === 0) {
      replaceContent(
        tableBox,
        h("p", { class: "empty" }, "No schedule yet: create one below, or add cron entries to the config file."),
      );
      return;
    }
    replaceContent(
      tableBox,
      h(
        "table",
        { class: "data schedules-table" },
        h("caption", { class: "visually-hidden" }, "Schedules, with their next and last runs"),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["Schedule", "When", "Job", "State", "Next run", "Last run", "Actions"].map((label) =>
              h("th", { scope: "col" }, label),
            ),
          ),
        ),
        h(
          "tbody",
          {},
          schedules.map((schedule) => {
            const paused = schedule.paused !== null;
            return h(
              "tr",
              { "data-schedule": schedule.name, class: paused ? "paused" : "" },
              h(
                "th",
                { scope: "row" },
                h("span", { class: "schedule-name" }, schedule.name),
                h(
                  "span",
                  { class: `badge badge-source-${schedule.source}` },
                  schedule.source === "config" ? "config" : "API",
                ),
              ),
              h(
                "td",
                { "data-label": "When" },
                h("code", { class: "cron" }, schedule.schedule),
                h("span", { class: "muted tz" }, schedule.timezone),
              ),
              h(
                "td",
                { "data-label": "Job" },
                h("span", {}, schedule.operation_id),
                h("span", { class: "muted as-user" }, `as ${schedule.user_id}`),
              ),
              h(
                "td",
                { class: "state-cell", "data-label": "State" },
                h("span", { class: `badge ${paused ? "badge-paused" : "badge-active"}` }, paused ? "paused" : "active"),
                paused ? h("span", { class: "stamp" }, stamp(schedule.paused)) : null,
              ),
              h("td", { class: "next-run", "data-label": "Next run" }, time(schedule.next_run_at)),
              h(
                "td",
                { class: "last-run", "data-label": "Last run" },
                time(schedule.last_run_at),
                schedule.last_job_id
                  ? h(
                      "a",
                      {
                        class: "last-job",
                        href: jobHash(schedule.last_job_id),
                        "data-focus-key": `job-${schedule.name}`,
                      },
                      schedule.last_job_id,
                    )
                  : null,
              ),
              h(
                "td",
                { class: "actions-cell", "data-label": "Actions" },
                h(
                  "div",
                  { class: "actions", role: "group", "aria-label": `Actions on ${schedule.name}` },
                  actionsOf(schedule),
                ),
              ),
            );
          }),
        ),
      ),
    );
  }

  /** The operations a schedule may target, keeping the one chosen. */
  function renderOperations(operations) {
    const chosen = operation.value;
    operation.replaceChildren(
      h("option", { value: "", selected: chosen === "" }, "choose an operation"),
      ...operations.map(({ operation_id: id }) => h("option", { value: id, selected: id === chosen }, id)),
    );
  }

  let lastData = "";
  let operationsShown = false;
  async function refresh({ force = false } = {}) {
    const [listed, operations] = await Promise.all([api("/schedules"), operationsShown ? null : api("/operations")]);
    if (!ctx.isCurrent()) return;
    replaceContent(updated, "Updated ", time(new Date().toISOString()), ` · refreshes every ${REFRESH_MS / 1000} s`);
    if (operations) {
      renderOperations(operations.operations);
      operationsShown = true;
    }
    const text = JSON.stringify(listed);
    if (text === lastData && !force) return;
    lastData = text;
    schedules = listed.schedules;
    renderTable();
  }

  return { refresh, everyMs: REFRESH_MS };
}

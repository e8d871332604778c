// The dashboard's shell: sign-in (a `#token=` link or the form), the session line, hash routing between the
// overview, the job list, a job's page, flow control and schedules, and the periodic refresh of the view on screen.
import { api, ApiError, clearToken, getToken, onUnauthorized, setToken } from "./api.js";
import { announce, clearMessages, h, showError, timeShort, timeZoneLabel } from "./dom.js";
import { chainView } from "./chain.js";
import { flowView } from "./flow.js";
import { jobView } from "./job.js";
import { jobsView } from "./jobs.js";
import { overviewView } from "./overview.js";
import { schedulesView } from "./schedules.js";
import { session, setSession } from "./session.js";

const NOT_ADMIN_MESSAGE =
  "This token carries no administrator's role (role: viewer, operator or admin; or site_admin: true).";

const viewRoot = () => document.getElementById("view");

/** The route named by the address bar's fragment: `#/`, `#/jobs?filters`, `#/jobs/{id}`, `#/flow`, `#/schedules`. */
function parseRoute(hash) {
  const raw = hash.replace(/^#/, "");
  const mark = raw.indexOf("?");
  const path = mark === -1 ? raw : raw.slice(0, mark);
  const params = new URLSearchParams(mark === -1 ? "" : raw.slice(mark + 1));
  if (path === "" || path === "/") return { name: "overview", params };
  if (path === "/jobs" || path === "/jobs/") return { name: "jobs", params };
  if (path === "/flow" || path === "/flow/") return { name: "flow", params };
  const chainMatch = /^\/chains\/([^/]+)$/.exec(path);
  if (chainMatch) {
    let rid;
    try {
      rid = decodeURIComponent(chainMatch[1]);
    } catch {
      return { name: "unknown", params };
    }
    if (rid === "." || rid === "..") return { name: "unknown", params };
    return { name: "chain", rid, params };
  }
  if (path === "/schedules" || path === "/schedules/") return { name: "schedules", params };
  const match = /^\/jobs\/([^/]+)$/.exec(path);
  if (match) {
    let id;
    try {
      id = decodeURIComponent(match[1]);
    } catch {
      return { name: "unknown", params };
    }
    // No job has such an id, and the API could not be asked for it: a dot-segment would leave the /jobs/ path.
    if (id === "." || id === "..") return { name: "unknown", params };
    return { name: "job", id, params };
  }
  return { name: "unknown", params };
}

/** What the view on screen is doing: a generation number (bumped on every change of view) and its timer. */
const current = { generation: 0, timer: 0, view: null };

function stopView() {
  current.generation++;
  window.clearTimeout(current.timer);
  current.view?.destroy?.();
  current.view = null;
}

/** Runs the view's refresh now and then every `everyMs`, while it stays on screen and the tab is visible. */
function scheduleRefresh(view, generation) {
  const tick = async () => {
    if (generation !== current.generation) return;
    if (document.visibilityState !== "hidden") {
      try {
        await view.refresh();
      } catch (error) {
        if (generation !== current.generation) return;
        reportError(error);
      }
    }
    if (generation !== current.generation) return;
    const everyMs = typeof view.everyMs === "function" ? view.everyMs() : view.everyMs;
    if (everyMs) current.timer = window.setTimeout(tick, everyMs);
  };
  return tick();
}

/** Shows an error of a background refresh or an action; a refused token is handled by onUnauthorized. */
function reportError(error) {
  if (error instanceof ApiError && error.status === 401) return;
  if (error instanceof ApiError && error.code === "site_admin_required") {
    signOut({ notAdmin: true });
    return;
  }
  showError(error instanceof ApiError ? error.describe() : `Unexpected error: ${error?.message ?? error}`);
}

/** Mounts the view of the address bar's route (signed in). */
async function route({ focus = true } = {}) {
  const target = parseRoute(location.hash);
  stopView();
  clearMessages();
  const generation = current.generation;
  for (const link of document.querySelectorAll("[data-nav]")) {
    const active = link.dataset.nav === (target.name === "job" || target.name === "chain" ? "jobs" : target.name);
    if (active) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const container = h("div", { class: "view" });
  viewRoot().replaceChildren(container);
  const ctx = {
    navigate: (hash) => {
      if (location.hash === hash) void route();
      else location.hash = hash;
    },
    reportError,
    isCurrent: () => generation === current.generation,
  };
  let view;
  switch (target.name) {
    case "overview":
      view = overviewView(container, ctx);
      break;
    case "jobs":
      view = jobsView(container, target.params, ctx);
      break;
    case "job":
      view = jobView(container, target.id, ctx);
      break;
    case "flow":
      view = flowView(container, ctx);
      break;
    case "chain":
      view = chainView(container, target.rid, ctx, target.params);
      break;
    case "schedules":
      view = schedulesView(container, ctx);
      break;
    default:
      document.title = "Not found · opqueue";
      container.append(
        h("h1", { tabindex: "-1" }, "Page not found"),
        h("p", {}, "The dashboard has no page at this address. ", h("a", { href: "#/" }, "Go to the overview"), "."),
      );
      view = { refresh: async () => undefined, everyMs: 0 };
  }
  current.view = view;
  if (focus) container.querySelector("h1")?.focus({ preventScroll: true });
  await scheduleRefresh(view, generation);
}

/** The session line of the header: who is signed in, with which role, until when, and the time zone of every time. */
function showSession() {
  const me = session();
  const parts = [
    h("span", { class: "muted" }, "Signed in as "),
    h("strong", {}, me.sub),
    h("span", { class: "muted" }, " · "),
    h(
      "span",
      { class: `role role-${me.role}`, id: "session-role", title: ROLE_HELP[me.role] },
      me.operations === null ? me.role : `${me.role} of ${me.operations.join(", ")}`,
    ),
  ];
  if (me.expires_at) {
    parts.push(h("span", { class: "muted" }, " · valid until "), timeShort(me.expires_at));
  }
  document.getElementById("session-who").replaceChildren(...parts);
  document
    .getElementById("time-zone")
    .replaceChildren(
      h("span", { class: "muted" }, "Times in "),
      h(
        "span",
        { title: "This browser's time zone. Point at a time to see its exact instant in UTC." },
        timeZoneLabel(),
      ),
    );
  document.getElementById("session").hidden = false;
  document.getElementById("nav").hidden = false;
}

function hideSession() {
  document.getElementById("session").hidden = true;
  document.getElementById("nav").hidden = true;
}

/** What each role may do, shown when pointing at the role of the session line. */
const ROLE_HELP = {
  viewer: "Viewer: reads everything, changes nothing.",
  operator: "Operator: also cancels, retries and runs jobs now, pauses and resumes, and sets limits.",
  admin: "Admin: may do everything, schedules' definitions too.",
};

/** Back to the sign-in form, with why. */
function signOut({ message, notAdmin = false } = {}) {
  stopView();
  clearToken();
  hideSession();
  renderSignIn({ message, notAdmin });
}

/** The sign-in form; `message` says why it is shown again, `notAdmin` that the last token was not a site admin's. */
function renderSignIn({ message, notAdmin = false } = {}) {
  document.title = "Sign in · opqueue";
  clearMessages();
  const input = h("input", {
    id: "token-input",
    name: "token",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    "aria-describedby": "token-help",
  });
  const form = h(
    "form",
    { class: "sign-in-form", novalidate: true },
    h("label", { for: "token-input" }, "Admin token"),
    input,
    h(
      "p",
      { id: "token-help", class: "help" },
      "A JWT with a ",
      h("code", {}, "role"),
      " (viewer, operator or admin). Print one with its sign-in link: ",
      h("code", {}, "npx opqueue token --role viewer --sub NAME --config FILE"),
      ", then open the link, or paste the token here. The token stays in this tab only (session storage).",
    ),
    h("button", { type: "submit", class: "button button-primary" }, "Sign in"),
  );
  const notices = [];
  if (notAdmin) {
    notices.push(
      h(
        "div",
        { class: "notice notice-error", role: "alert", id: "not-admin" },
        h("strong", {}, NOT_ADMIN_MESSAGE),
        " Sign in with an administrator's token.",
      ),
    );
  } else if (message) {
    notices.push(h("div", { class: "notice notice-error", role: "alert", id: "sign-in-error" }, message));
  }
  viewRoot().replaceChildren(
    h(
      "section",
      { class: "sign-in", "aria-labelledby": "sign-in-title" },
      h("h1", { id: "sign-in-title", tabindex: "-1" }, "Sign in to the opqueue dashboard"),
      ...notices,
      form,
    ),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    let token = input.value.trim();
    // A pasted sign-in link or `Bearer …` header works too.
    const fromLink = /#token=([^&\s]+)/.exec(token);
    if (fromLink) token = decodeURIComponent(fromLink[1]);
    token = token.replace(/^Bearer\s+/i, "");
    if (token === "") {
      showError("Paste an admin token first.");
      input.focus();
      return;
    }
    void signIn(token);
  });
  input.focus();
}

/** Asks the service who `token` signs in (GET /admin/me), then shows the dashboard for its role or says why not. */
async function signIn(token, { announceIt = true } = {}) {
  let me;
  try {
    me = await api("/admin/me", { token });
  } catch (error) {
    if (error instanceof ApiError && error.code === "site_admin_required") {
      signOut({ notAdmin: true });
    } else if (error instanceof ApiError && error.status === 401) {
      signOut({ message: `The service refused this token: ${error.message}` });
    } else {
      clearToken();
      renderSignIn({ message: error instanceof ApiError ? error.describe() : String(error) });
    }
    return;
  }
  setToken(token);
  setSession(me);
  showSession();
  if (!location.hash.startsWith("#/")) history.replaceState(null, "", `${location.pathname}${location.search}#/`);
  await route();
  if (announceIt) announce(`Signed in as ${me.sub}, ${me.role}.`, { visible: false });
}

function start() {
  onUnauthorized((error) => {
    if (!getToken()) return;
    signOut({ message: `Signed out: the service refused the token (${error.message}). Sign in again.` });
  });
  document.getElementById("sign-out").addEventListener("click", () => {
    signOut();
    announce("Signed out.");
  });
  window.addEventListener("hashchange", () => {
    if (location.hash.startsWith("#token=")) {
      void takeTokenFromLink();
      return;
    }
    if (getToken()) void route();
  });
  document.addEventListener("visibilitychange", () => {
    // Back to a visible tab: refresh at once rather than at the next tick.
    if (document.visibilityState === "visible" && getToken() && current.view) {
      window.clearTimeout(current.timer);
      void scheduleRefresh(current.view, current.generation);
    }
  });
  if (location.hash.startsWith("#token=")) {
    void takeTokenFromLink();
  } else if (getToken()) {
    void signIn(getToken(), { announceIt: false });
  } else {
    renderSignIn();
  }
}

/** A sign-in link `#token=…`: the token moves to sessionStorage and out of the address bar (and history). */
async function takeTokenFromLink() {
  const token = decodeURIComponent(location.hash.slice("#token=".length).split("&")[0] ?? "");
  history.replaceState(null, "", `${location.pathname}${location.search}#/`);
  if (token === "") {
    renderSignIn();
    return;
  }
  await signIn(token);
}

start();

// Small DOM helpers shared by the views: element building (text only, never HTML strings), formatting of times
// and durations, status badges, the confirmation dialog and the live region.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function setAttributes(element, attrs) {
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") element.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(element.dataset, value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
}

/** An HTML element: `h("a", { href: "#/" }, "Overview")`. Children are nodes or text. */
export function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  setAttributes(element, attrs);
  append(element, children);
  return element;
}

/** An SVG element. */
export function svg(tag, attrs, ...children) {
  const element = document.createElementNS(SVG_NS, tag);
  setAttributes(element, attrs);
  append(element, children);
  return element;
}

/**
 * Replaces the children of `container`, keeping keyboard focus on the element with the same `data-focus-key`
 * when the focused element was inside it, so a periodic refresh does not throw a keyboard user out.
 */
export function replaceContent(container, ...children) {
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.getAttribute("data-focus-key") : null;
  container.replaceChildren();
  append(container, children);
  if (key) {
    const next = container.querySelector(`[data-focus-key="${CSS.escape(key)}"]`);
    if (next) next.focus();
  }
}

/** Every status of a job, in the order of its life. */
export const STATUSES = ["pending", "running", "retrying", "succeeded", "dead", "cancelled"];

/** Statuses from which a job is still going somewhere. */
export const ACTIVE_STATUSES = new Set(["pending", "running", "retrying"]);

/** A status badge (the word itself, coloured; colour is never the only signal). */
export function statusBadge(status) {
  return h("span", { class: `badge badge-${STATUSES.includes(status) ? status : "unknown"}` }, status);
}

const pad = (n, width = 2) => String(n).padStart(width, "0");

/** `2026-11-22 01:02:03` in the browser's time zone, inside a <time> carrying the exact instant. */
export function time(iso) {
  if (iso === null || iso === undefined) return h("span", { class: "muted" }, "—");
  const date = new Date(iso);
  const text =
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
  return h("time", { datetime: iso, title: iso }, text);
}

/** `UTC+05:30`: how far the browser's time zone is from UTC at `date` (summer time included). */
function utcOffset(date) {
  const minutes = -date.getTimezoneOffset();
  const abs = Math.abs(minutes);
  return `UTC${minutes < 0 ? "-" : "+"}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}`;
}

/** The time zone every time on screen is shown in: `Europe/Paris (UTC+01:00)`, the offset of `date` (default now). */
export function timeZoneLabel(date = new Date()) {
  const name = Intl.DateTimeFormat().resolvedOptions().timeZone;
  return name ? `${name} (${utcOffset(date)})` : utcOffset(date);
}

/** A duration in words: `850 ms`, `12.5 s`, `4 min 10 s`, `3 h 5 min`, `2 d 4 h`. */
export function duration(ms) {
  if (!Number.isFinite(ms)) return "—";
  const abs = Math.abs(ms);
  if (abs < 1000) return `${Math.round(ms)} ms`;
  if (abs < 60_000) return `${(ms / 1000).toFixed(abs < 10_000 ? 1 : 0)} s`;
  if (abs < 3_600_000) return `${Math.floor(abs / 60_000)} min ${Math.floor((abs % 60_000) / 1000)} s`;
  if (abs < 86_400_000) return `${Math.floor(abs / 3_600_000)} h ${Math.floor((abs % 3_600_000) / 60_000)} min`;
  return `${Math.floor(abs / 86_400_000)} d ${Math.floor((abs % 86_400_000) / 3_600_000)} h`;
}

/** Like `time`, but only `01:02:03` when the instant is today. */
export function timeShort(iso) {
  if (iso === null || iso === undefined) return time(iso);
  const date = new Date(iso);
  if (date.toDateString() !== new Date().toDateString()) return time(iso);
  return h(
    "time",
    { datetime: iso, title: iso },
    `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`,
  );
}

/** For a list: `01:02:03` when the instant is today, else only its date `2026-11-22`; the exact instant as `time`'s. */
export function timeCompact(iso) {
  if (iso === null || iso === undefined) return time(iso);
  const date = new Date(iso);
  if (date.toDateString() === new Date().toDateString()) return timeShort(iso);
  return h(
    "time",
    { datetime: iso, title: iso },
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`,
  );
}

/** `in 4 min 10 s` / `4 min 10 s ago`, from now. */
export function relative(iso) {
  const ms = new Date(iso).getTime() - Date.now();
  if (Math.abs(ms) < 1000) return "now";
  return ms > 0 ? `in ${duration(ms)}` : `${duration(-ms)} ago`;
}

/** A number with thousands separators. */
export function count(n) {
  return Number(n).toLocaleString("en-US");
}

/** JSON, indented, in a <pre>. */
export function jsonBlock(value, label) {
  return h("pre", { class: "code", tabindex: "0", "aria-label": label }, JSON.stringify(value, null, 2));
}

/**
 * Says `message` to screen readers and, unless `visible` is false, shows it in the status line (the outcome of an
 * action). Messages that only describe what is on screen anyway (a list's size, a sign-in) are not shown.
 */
export function announce(message, { visible = true } = {}) {
  const announcer = document.getElementById(visible ? "announcer" : "sr-announcer");
  if (visible) {
    const alert = document.getElementById("alert");
    alert.hidden = true;
    alert.textContent = "";
  }
  // Cleared first, so the same message twice is announced twice.
  announcer.textContent = "";
  window.setTimeout(() => {
    announcer.textContent = message;
  }, 50);
}

/** Shows an error (role=alert), e.g. a refused action with the service's message. */
export function showError(message) {
  const announcer = document.getElementById("announcer");
  const alert = document.getElementById("alert");
  announcer.textContent = "";
  alert.textContent = message;
  alert.hidden = false;
}

/** Hides the status line and the error. */
export function clearMessages() {
  document.getElementById("announcer").textContent = "";
  document.getElementById("sr-announcer").textContent = "";
  const alert = document.getElementById("alert");
  alert.textContent = "";
  alert.hidden = true;
}

/**
 * Asks before an action: a modal <dialog> (focus moves into it, Escape cancels). Resolves true when confirmed.
 */
export function confirmAction({ title, message, confirmLabel }) {
  const dialog = document.getElementById("confirm-dialog");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-message").textContent = message;
  document.getElementById("confirm-ok").textContent = confirmLabel;
  const opener = document.activeElement;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => {
        if (opener && opener.isConnected) opener.focus();
        resolve(dialog.returnValue === "confirm");
      },
      { once: true },
    );
    dialog.showModal();
  });
}

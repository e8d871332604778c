// The admin API as the dashboard uses it: the admin token kept in sessionStorage, JSON in and out, and every
// refusal turned into an ApiError carrying the service's {code, message}.

const TOKEN_KEY = "opqueue.adminToken";

/** An answer other than 2xx, or no answer at all (status 0). */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }

  /** "code: message", as the service said it. */
  describe() {
    return this.code ? `${this.message} (${this.code})` : this.message;
  }
}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** Listeners told when the service refuses the token (401), so the app can go back to the sign-in form. */
const unauthorizedListeners = new Set();
export function onUnauthorized(listener) {
  unauthorizedListeners.add(listener);
}

/**
 * Calls the API: `path` with its query, an optional JSON `body`. Resolves with the parsed JSON answer; rejects
 * with an ApiError. A 401 also tells the onUnauthorized listeners.
 */
export async function api(path, { method = "GET", body, token = getToken() } = {}) {
  const headers = { accept: "application/json" };
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
    });
  } catch {
    throw new ApiError(0, "", "The service does not answer. Is it running?");
  }
  let data = null;
  const text = await response.text();
  if (text !== "") {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const code = data && typeof data.code === "string" ? data.code : `http_${response.status}`;
    const message = data && typeof data.message === "string" ? data.message : `HTTP ${response.status}`;
    const error = new ApiError(response.status, code, message);
    if (response.status === 401) for (const listener of unauthorizedListeners) listener(error);
    throw error;
  }
  return data;
}

/**
 * `value` as one segment of an API path: percent-encoded, so `/`, `?`, `#` and `%` stay inside it (a chain id such as
 * `a/b` or `%2F` reaches its own route). An empty value, `.` or `..` cannot travel as a segment (URL parsing removes
 * dot-segments, `%2E` too), so it is refused rather than sent to another route.
 */
export function pathSegment(value) {
  const text = String(value);
  if (text === "" || text === "." || text === "..") {
    throw new ApiError(0, "invalid_request", `${JSON.stringify(text)} cannot be sent as a path segment`);
  }
  return encodeURIComponent(text);
}

/** An API path whose every interpolated value is one encoded segment: apiPath`/jobs/${id}/cancel`. */
export function apiPath(strings, ...values) {
  return strings.reduce((text, part, i) => text + pathSegment(values[i - 1]) + part);
}

/** A query string from an object; arrays repeat their key, empty values are left out. */
export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (Array.isArray(value)) for (const item of value) search.append(name, item);
    else if (value !== undefined && value !== null && value !== "") search.append(name, String(value));
  }
  const text = search.toString();
  return text === "" ? "" : `?${text}`;
}

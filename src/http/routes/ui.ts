/**
 * The operators' dashboard: static files of the package's `ui/` folder (plain HTML, CSS and ES modules, no build
 * step), served at `/ui` with a strict Content-Security-Policy. The dashboard calls the admin API from the
 * browser with the admin token it keeps in sessionStorage; these routes themselves need no token.
 */
import { readFile } from "node:fs/promises";
import type { FastifyPluginAsync, FastifyReply } from "fastify";
import { ApiError } from "../../errors.js";

/** The folder of the dashboard's files: `ui/` at the package root, from `src/http/routes/` and `dist/http/routes/`. */
export const UI_DIR = new URL("../../../ui/", import.meta.url);

/** Nothing but this origin: no inline script or style, no framing, no third-party asset. */
export const UI_CONTENT_SECURITY_POLICY =
  "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'";

/** Content types by extension; a file with any other extension is not served. */
const CONTENT_TYPES: Record<string, string> = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
  svg: "image/svg+xml",
  png: "image/png",
  ico: "image/x-icon",
  json: "application/json; charset=utf-8",
};

/**
 * A file name of the flat `ui/` folder: no slash, no backslash, no leading dot, so no path can leave the folder
 * (`..`, `%2e%2e%2f`, absolute paths and hidden files all fail this test).
 */
const FILE_NAME = /^[A-Za-z0-9_-][A-Za-z0-9_.-]*\.([a-z0-9]+)$/;

function notFound(path: string): ApiError {
  return new ApiError(404, "not_found", `no dashboard file ${path.slice(0, 128)}`);
}

/** Sends one file of `ui/` with the dashboard's security headers, or throws 404. */
async function sendFile(reply: FastifyReply, name: string, dir: URL): Promise<FastifyReply> {
  const match = FILE_NAME.exec(name);
  const type = match ? CONTENT_TYPES[match[1] ?? ""] : undefined;
  if (!match || type === undefined || name.includes("..")) throw notFound(`/ui/${name}`);
  let body: Buffer;
  try {
    body = await readFile(new URL(name, dir));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "EISDIR" || code === "ENOTDIR") throw notFound(`/ui/${name}`);
    throw error;
  }
  return reply
    .header("content-type", type)
    .header("content-security-policy", UI_CONTENT_SECURITY_POLICY)
    .header("x-content-type-options", "nosniff")
    .header("referrer-policy", "no-referrer")
    .header("x-frame-options", "DENY")
    .header("cache-control", "no-cache")
    .send(body);
}

/** Registers `GET /ui` (the page), `GET /ui/` (the same) and `GET /ui/{file}` (its scripts and styles). */
export const uiRoutes: FastifyPluginAsync<{ dir?: URL }> = async (app, options) => {
  const dir = options.dir ?? UI_DIR;
  app.get("/ui", { schema: { hide: true } }, async (_request, reply) => sendFile(reply, "index.html", dir));
  app.get<{ Params: { "*": string } }>("/ui/*", { schema: { hide: true } }, async (request, reply) => {
    const name = request.params["*"];
    return sendFile(reply, name === "" ? "index.html" : name, dir);
  });
};

/**
 * The dashboard's address on a service listening on `host:port`, as a browser on the same machine reaches it:
 * a wildcard address (`0.0.0.0`, `::`) becomes the loopback address, an IPv6 address gets its brackets.
 */
export function dashboardUrl(listen: { host: string; port: number }): string {
  let host = listen.host;
  if (host === "0.0.0.0") host = "127.0.0.1";
  else if (host === "::" || host === "[::]") host = "::1";
  if (host.includes(":") && !host.startsWith("[")) host = `[${host}]`;
  return `http://${host}:${listen.port}/ui/`;
}

/**
 * A sign-in link: the dashboard reads the admin token from the fragment, keeps it in sessionStorage and removes it
 * from the address bar. A fragment is never sent to the server, so the token stays out of access logs.
 */
export function signInLink(dashboard: string, token: string): string {
  return `${dashboard}#token=${token}`;
}

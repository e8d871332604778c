/**
 * The dashboard's static files at /ui: the page and its modules with their content types and a strict
 * Content-Security-Policy, no way out of the ui/ folder, and nothing of it in the API document. (The dashboard
 * itself is tested in a browser by test/ui/dashboard.test.ts.)
 */
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, test } from "node:test";
import { dashboardUrl, signInLink, UI_CONTENT_SECURITY_POLICY, UI_DIR } from "../../src/http/routes/ui.js";
import { assertError, startService } from "../helpers/jobs.js";

const CSP =
  "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'";

describe("dashboard files", () => {
  test("serves index.html at /ui and /ui/ with a strict CSP, without a token", async (t) => {
    const s = await startService(t);
    for (const url of ["/ui", "/ui/", "/ui/index.html"]) {
      const res = await s.inject({ method: "GET", url });
      assert.equal(res.statusCode, 200, url);
      assert.equal(res.headers["content-type"], "text/html; charset=utf-8");
      assert.equal(res.headers["content-security-policy"], CSP);
      assert.equal(UI_CONTENT_SECURITY_POLICY, CSP);
      assert.equal(res.headers["x-content-type-options"], "nosniff");
      assert.equal(res.headers["x-frame-options"], "DENY");
      assert.equal(res.headers["referrer-policy"], "no-referrer");
      assert.match(res.body, /<script type="module" src="\/ui\/app.js"><\/script>/);
    }
  });

  test("serves every file of ui/ with its content type, and no page loads anything from elsewhere", async (t) => {
    const s = await startService(t);
    const types: Record<string, RegExp> = {
      js: /^text\/javascript/,
      css: /^text\/css/,
      html: /^text\/html/,
      svg: /^image\/svg\+xml/,
    };
    const files = readdirSync(fileURLToPath(UI_DIR));
    assert.ok(files.includes("app.js") && files.includes("style.css"));
    for (const file of files) {
      const res = await s.inject({ method: "GET", url: `/ui/${file}` });
      assert.equal(res.statusCode, 200, file);
      const extension = file.split(".").pop() ?? "";
      assert.match(String(res.headers["content-type"]), types[extension] ?? /^$/, file);
      // Everything is bundled: no absolute URL to another origin (the SVG namespace is a name, not a fetch).
      const foreign =
        res.body.match(/https?:\/\/[^\s"'`)]+/g)?.filter((url) => url !== "http://www.w3.org/2000/svg") ?? [];
      assert.deepEqual(foreign, [], `${file} refers to another origin`);
    }
  });

  test("never serves anything outside ui/, hidden files or unknown types", async (t) => {
    const s = await startService(t);
    for (const url of [
      "/ui/nope.js",
      "/ui/../package.json",
      "/ui/..%2Fpackage.json",
      "/ui/%2e%2e%2fpackage.json",
      "/ui/%2e%2e/%2e%2e/package.json",
      "/ui/..%5Csrc%5Ccli.ts",
      "/ui/.hidden.js",
      "/ui/sub/app.js",
      "/ui/%2Fetc%2Fpasswd",
      "/ui/app.js%00.css",
      "/ui/README",
      "/ui/app.ts",
    ]) {
      const res = await s.inject({ method: "GET", url });
      assert.ok(res.statusCode === 404 || res.statusCode === 400, `${url}: ${res.statusCode}`);
      assert.doesNotMatch(res.body, /"name": "opqueue"|root:|import /, url);
      if (res.statusCode === 404) assertError(res, 404, "not_found");
    }
  });

  test("is not part of the API document", async (t) => {
    const s = await startService(t);
    const document = (await s.inject({ method: "GET", url: "/openapi.json" })).json() as {
      paths: Record<string, unknown>;
    };
    assert.deepEqual(
      Object.keys(document.paths).filter((path) => path.startsWith("/ui")),
      [],
    );
  });
});

describe("sign-in links", () => {
  test("point at the dashboard of the listen address, with the token in the fragment", () => {
    assert.equal(dashboardUrl({ host: "127.0.0.1", port: 8080 }), "http://127.0.0.1:8080/ui/");
    assert.equal(dashboardUrl({ host: "0.0.0.0", port: 80 }), "http://127.0.0.1:80/ui/");
    assert.equal(dashboardUrl({ host: "::", port: 8080 }), "http://[::1]:8080/ui/");
    assert.equal(dashboardUrl({ host: "fd00::5", port: 8080 }), "http://[fd00::5]:8080/ui/");
    assert.equal(dashboardUrl({ host: "queue.internal", port: 9000 }), "http://queue.internal:9000/ui/");
    assert.equal(signInLink("http://127.0.0.1:8080/ui/", "a.b.c"), "http://127.0.0.1:8080/ui/#token=a.b.c");
  });
});

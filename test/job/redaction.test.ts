/** Redaction pointers (src/job/redaction.ts): parsing, what a request shows, and putting placeholders back. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  parseRedactPointer,
  REDACTED,
  redactRequest,
  restoreRedacted,
  type RedactPath,
} from "../../src/job/redaction.js";

const paths = (...pointers: string[]): RedactPath[] =>
  pointers.map((pointer) => parseRedactPointer(pointer) as RedactPath);

describe("parseRedactPointer", () => {
  it("reads RFC 6901 pointers under body, query or path_params, ~1 and ~0 unescaped", () => {
    assert.deepEqual(parseRedactPointer("/body/a~1b/c~0d"), ["body", "a/b", "c~d"]);
    assert.deepEqual(parseRedactPointer("/query"), ["query"]);
    assert.deepEqual(parseRedactPointer("/body/cards/*/number"), ["body", "cards", "*", "number"]);
  });

  it("refuses what is not a pointer under a request's parts", () => {
    assert.match(String(parseRedactPointer("body/password")), /starts with \//);
    assert.match(String(parseRedactPointer("/headers/x")), /starts with \/body, \/query, \/path_params/);
    assert.match(String(parseRedactPointer("/body/a~2")), /~0/);
  });
});

describe("redactRequest", () => {
  const request = {
    body: { password: "hunter2", name: "Ada", cards: [{ number: "4111", exp: "12/30" }, { number: "5500" }] },
    query: { token: "t-1", page: "2" },
    path_params: { userId: "42" },
  };

  it("shows a placeholder at each pointer and leaves the rest, and the request itself, as they are", () => {
    const before = structuredClone(request);
    const shown = redactRequest(request, paths("/body/password", "/body/cards/*/number", "/query/token"));
    assert.deepEqual(shown, {
      body: { password: REDACTED, name: "Ada", cards: [{ number: REDACTED, exp: "12/30" }, { number: REDACTED }] },
      query: { token: REDACTED, page: "2" },
      path_params: { userId: "42" },
    });
    assert.deepEqual(request, before, "the stored request is not changed");
  });

  it("redacts a whole part, an array element, and nothing where the pointer finds nothing", () => {
    assert.deepEqual(redactRequest(request, paths("/path_params")).path_params, REDACTED);
    assert.deepEqual(redactRequest(request, paths("/body/cards/1")).body, {
      ...request.body,
      cards: [request.body.cards[0], REDACTED],
    });
    assert.deepEqual(redactRequest(request, paths("/body/missing/x", "/body/cards/7", "/body/name/x")), request);
    assert.deepEqual(redactRequest({}, paths("/body/password")), {});
  });
});

describe("restoreRedacted", () => {
  it("puts the stored value back where a placeholder was sent, and keeps what was changed", () => {
    const stored = { body: { password: "hunter2", cards: [{ number: "4111" }], name: "Ada" } };
    const sent = { body: { password: REDACTED, cards: [{ number: REDACTED }], name: "Grace" } };
    assert.deepEqual(restoreRedacted(sent, stored, paths("/body/password", "/body/cards/*/number")), {
      body: { password: "hunter2", cards: [{ number: "4111" }], name: "Grace" },
    });
    const changed = { body: { password: "new-secret" } };
    assert.deepEqual(restoreRedacted(changed, stored, paths("/body/password")), changed);
    // A placeholder where nothing was stored stays what it is: there is nothing to put back.
    assert.deepEqual(restoreRedacted({ body: { token: REDACTED } }, stored, paths("/body/token")), {
      body: { token: REDACTED },
    });
  });
});

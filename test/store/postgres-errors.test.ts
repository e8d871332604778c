/**
 * Which PostgreSQL errors mean "the database cannot serve now" (answered 503 `unavailable` with Retry-After) and
 * which are bugs (500): the classification alone. test/multinode/outage.test.ts drives real refusals end to end.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { isUnavailable } from "../../src/store/postgres/errors.js";

const pgError = (code: string, message = "x") => Object.assign(new Error(message), { code });

test("connection, shutdown, overload, read-only and retryable-transaction SQLSTATEs mean the database cannot serve now", () => {
  for (const code of [
    "08000",
    "08003",
    "08006",
    "08001",
    "08004",
    "08P01",
    "53000",
    "53100",
    "53200",
    "53300",
    "53400",
    "57P01",
    "57P02",
    "57P03",
    "57P05",
    "57014",
    "25006",
    "40001",
    "40P01",
    "58030",
  ]) {
    assert.equal(isUnavailable(pgError(code)), true, code);
  }
});

test("55000 means it only as 'not currently accepting connections'", () => {
  assert.equal(isUnavailable(pgError("55000", 'database "opqueue" is not currently accepting connections')), true);
  assert.equal(isUnavailable(pgError("55000", "cannot ALTER TABLE because it is being used by active queries")), false);
});

test("network errors of the driver mean it too; constraint violations, syntax errors and internal errors do not", () => {
  for (const code of ["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE"])
    assert.equal(isUnavailable(pgError(code)), true, code);
  assert.equal(isUnavailable(new Error("Connection terminated unexpectedly")), true);
  for (const code of ["23505", "23514", "42601", "42P01", "22P02", "XX000", "57P04"]) {
    assert.equal(isUnavailable(pgError(code)), false, code);
  }
});

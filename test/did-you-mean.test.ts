/** The "did you mean" of every message that refuses a name: which names count as likely typos of which. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { closestName, didYouMean, editDistance } from "../src/did-you-mean.js";
import { checkTarget } from "../src/enqueue/target.js";
import { OperationRegistry } from "../src/operations/registry.js";
import { scheduleTargetError } from "../src/schedules/checks.js";
import { TEST_OPENAPI } from "./helpers/service.js";

test("editDistance counts inserts, deletes, replacements, and a swap of neighbours as one edit", () => {
  assert.equal(editDistance("target", "target"), 0);
  assert.equal(editDistance("tagret", "target"), 1);
  assert.equal(editDistance("max_attempt", "max_attempts"), 1);
  assert.equal(editDistance("prot", "port"), 1);
  assert.equal(editDistance("sendWelcomEmail", "sendWelcomeEmail"), 1);
  assert.equal(editDistance("", "abc"), 3);
  assert.equal(editDistance("kitten", "sitting"), 3);
});

test("closestName suggests a near name, ignoring case, and nothing for a far one", () => {
  const keys = ["listen", "database", "target", "auth", "triggers"];
  assert.equal(closestName("tagret", keys), "target");
  assert.equal(closestName("TARGET", keys), "target");
  assert.equal(closestName("databse", keys), "database");
  assert.equal(closestName("workers", keys), undefined);
  assert.equal(closestName("x", keys), undefined);
  // Short names allow one edit only: `host` is not taken for `port`.
  assert.equal(closestName("host", ["port"]), undefined);
});

test("didYouMean ends a message with the suggestion, or adds nothing", () => {
  assert.equal(didYouMean("createUsr", ["createUser", "getUser"]), ' (did you mean "createUser"?)');
  assert.equal(didYouMean("zzz", ["createUser"]), "");
});

test("a schedule for an operation the document lacks is refused 422 unknown_operation with the operation it most likely names", () => {
  const error = scheduleTargetError({
    config: { triggers: { "cron:*": ["buildReport"] } },
    registry: OperationRegistry.fromFile(TEST_OPENAPI),
    source: "api",
    name: "nightly-report",
    operationId: "buildRepot",
  });
  assert.equal(error?.code, "unknown_operation");
  assert.match(
    error?.message ?? "",
    /operation "buildRepot" is not in the product's OpenAPI document \(did you mean "buildReport"\?\)$/,
  );
});

test("an enqueue of an operation the document lacks suggests only an operation the caller may enqueue", () => {
  const triggers = { createUser: ["sendWelcomeEmail", "buildReport"], importUsers: ["buildReport"] };
  const refusal = (caller: string, operationId: string) => {
    const checked = checkTarget({ target: undefined, operationId, triggers, caller });
    assert.equal(checked.ok, false);
    return checked.ok ? undefined : checked.error;
  };
  const near = refusal("createUser", "sendWelcomEmail");
  assert.equal(near?.code, "unknown_operation");
  assert.match(near?.message ?? "", /\(did you mean "sendWelcomeEmail"\?\)$/);
  // importUsers may not enqueue sendWelcomeEmail: its refusal does not name it.
  assert.doesNotMatch(refusal("importUsers", "sendWelcomEmail")?.message ?? "", /did you mean/);
});

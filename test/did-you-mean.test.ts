/** The "did you mean" of every message that refuses a name: which names count as likely typos of which. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { closestName, didYouMean, editDistance } from "../src/did-you-mean.js";

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

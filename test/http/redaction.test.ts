/**
 * Redaction (docs/api.md, "Redaction"), on the engine of the run: `operations.<id>.redact` pointers are stored and
 * delivered as sent, and every answer shows "[redacted]" in their place, whoever asks (an admin, a viewer, the
 * producer, the chain view, the schedules); an edit of a schedule read redacted keeps the stored values.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mintToken } from "../../src/auth/tokens.js";
import { parseConfig } from "../../src/config.js";
import { ConfigError } from "../../src/config/config-error.js";
import { REDACTED } from "../../src/job/redaction.js";
import type { Job } from "../../src/job/schemas.js";
import { enqueue, startService } from "../helpers/jobs.js";
import { startLiveService } from "../helpers/live-service.js";
import { rawTestConfig } from "../helpers/service.js";
import { answer, startTarget } from "../helpers/target.js";

const POINTERS = ["/body/password", "/body/cards/*/number", "/query/token"];

const redacting = (raw: Record<string, unknown>) => {
  raw["operations"] = { sendWelcomeEmail: { max_attempts: 8, redact: POINTERS } };
  (raw["triggers"] as Record<string, string[]>)["cron:*"] = ["sendWelcomeEmail"];
};

const SECRET_REQUEST = {
  path_params: { userId: "42" },
  query: { token: "tok-secret", page: "1" },
  body: { password: "hunter2", cards: [{ number: "4111111111111111", exp: "12/30" }], name: "Ada" },
};

const SHOWN_REQUEST = {
  path_params: { userId: "42" },
  query: { token: REDACTED, page: "1" },
  body: { password: REDACTED, cards: [{ number: REDACTED, exp: "12/30" }], name: "Ada" },
};

describe("redaction", () => {
  test("every answer shows the placeholder; the store keeps the request as sent", async (t) => {
    const s = await startService(t, { configure: redacting });
    const created = await enqueue(s, { operation_id: "sendWelcomeEmail", request: SECRET_REQUEST });
    assert.deepEqual(created.request, SHOWN_REQUEST, "the enqueue's own answer");
    const viewer = await mintToken({ auth: s.config.auth, clock: s.clock, sub: "v", role: "viewer" });
    const answers: unknown[] = [];
    for (const token of [await s.adminToken(), viewer]) {
      answers.push((await s.inject({ method: "GET", url: `/jobs/${created.id}`, token })).json().job.request);
      answers.push((await s.inject({ method: "GET", url: "/jobs", token })).json().jobs[0].request);
      const chain = await s.inject({ method: "GET", url: "/chains/req-1", token });
      answers.push((chain.json() as { chain: { jobs: Array<{ job: Job }> } }).chain.jobs[0]?.job.request);
    }
    const producer = await s.assertion();
    answers.push((await s.inject({ method: "GET", url: `/jobs/${created.id}`, token: producer })).json().job.request);
    for (const shown of answers) assert.deepEqual(shown, SHOWN_REQUEST);
    assert.deepEqual((await s.service.store.jobGet({ id: created.id }))?.request, SECRET_REQUEST);
    // Another operation's request is shown whole.
    const report = await enqueue(s, { operation_id: "buildReport", request: { body: { password: "shown" } } });
    assert.deepEqual(report.request, { body: { password: "shown" } });
  });

  test("the delivery sends the values as they were enqueued", async (t) => {
    const target = await startTarget(t, answer(204));
    const s = await startLiveService(t, {
      worker: true,
      configure: (raw) => {
        redacting(raw);
        raw["target"] = { base_url: target.url, audience: "product" };
      },
    });
    await enqueue(s, { operation_id: "sendWelcomeEmail", request: SECRET_REQUEST });
    const [delivery] = await target.waitForRequests(1);
    assert.equal(delivery?.query.get("token"), "tok-secret");
    assert.deepEqual(JSON.parse(delivery?.body ?? "null"), SECRET_REQUEST.body);
  });

  test("a schedule's request is shown redacted, and an edit sent back with the placeholders keeps the secrets", async (t) => {
    const s = await startService(t, { configure: redacting });
    const admin = await s.adminToken();
    const created = await s.inject({
      method: "POST",
      url: "/schedules",
      token: admin,
      payload: {
        name: "mail",
        schedule: "0 * * * *",
        operation_id: "sendWelcomeEmail",
        user_id: "system",
        request: SECRET_REQUEST,
      },
    });
    assert.equal(created.statusCode, 201, created.body);
    assert.deepEqual(created.json().schedule.request, SHOWN_REQUEST);
    const read = await s.inject({ method: "GET", url: "/schedules/mail", token: admin });
    const edited = { ...read.json().schedule.request, body: { ...read.json().schedule.request.body, name: "Grace" } };
    const patched = await s.inject({
      method: "PATCH",
      url: "/schedules/mail",
      token: admin,
      payload: { request: edited },
    });
    assert.equal(patched.statusCode, 200, patched.body);
    const stored = await s.service.store.scheduleGet({ name: "mail" });
    assert.deepEqual(stored?.request, {
      ...SECRET_REQUEST,
      body: { ...SECRET_REQUEST.body, name: "Grace" },
    });
  });

  test("a pointer that is not under body, query or path_params is refused when the config is read", () => {
    const raw = rawTestConfig("/tmp");
    raw["operations"] = { sendWelcomeEmail: { redact: ["/headers/authorization"] } };
    assert.throws(
      () => parseConfig({ raw, baseDir: "/tmp", env: {} }),
      (error: unknown) =>
        error instanceof ConfigError &&
        /operations\.sendWelcomeEmail\.redact\.0: "\/headers\/authorization": a redaction pointer starts with/.test(
          error.message,
        ),
    );
  });
});

/**
 * Revoking admin tokens (docs/api.md, "Revoking admin tokens"), on the engine of the run: by `jti`, by a cutoff on the
 * issue time, what the endpoints refuse, the list, the audit line, and a second service on the same database refusing
 * what the first revoked at its next request. Three `opqueue serve` processes with kill -9 are in
 * test/multinode/revocation.test.ts.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mintToken, type AdminRole } from "../../src/auth/tokens.js";
import { createService } from "../../src/service.js";
import { capturedLogger } from "../helpers/logs.js";
import { TEST_ENGINE, type TestService } from "../helpers/service.js";
import { assertError, startService } from "../helpers/jobs.js";

/** An admin token of `s`'s keys. */
function token(
  s: TestService,
  claims: { sub?: string; role?: AdminRole; jti?: string; extraClaims?: Record<string, unknown> } = {},
): Promise<string> {
  return mintToken({ auth: s.config.auth, clock: s.clock, sub: claims.sub ?? "alice", role: "admin", ...claims });
}

/** `GET /stats` with `bearer`: its status. */
async function statsStatus(s: TestService, bearer: string): Promise<number> {
  return (await s.inject({ method: "GET", url: "/stats", token: bearer })).statusCode;
}

/** `POST /admin/revocations` as an admin. */
async function revoke(s: TestService, body: object) {
  return s.inject({ method: "POST", url: "/admin/revocations", token: await token(s, { sub: "root" }), payload: body });
}

describe("revoking admin tokens", () => {
  test("by jti: that token is refused 401 from the next request on; other tokens are not; again changes nothing", async (t) => {
    const s = await startService(t);
    const leaked = await token(s, { jti: "leaked-1", role: "viewer" });
    const other = await token(s, { jti: "other-1" });
    assert.equal(await statsStatus(s, leaked), 200);
    const res = await revoke(s, { jti: "leaked-1" });
    assert.equal(res.statusCode, 200, res.body);
    const at = new Date(s.clock.now()).toISOString();
    assert.deepEqual(res.json(), { token: { jti: "leaked-1", revoked_at: at, revoked_by: "root" } });
    const refused = await s.inject({ method: "GET", url: "/stats", token: leaked });
    assertError(refused, 401, "unauthenticated");
    assert.equal(refused.json().message, "invalid admin token: the token was revoked");
    assert.equal(await statsStatus(s, other), 200);
    s.clock.advance(1_000);
    assert.deepEqual((await revoke(s, { jti: "leaked-1" })).json(), res.json(), "the first revocation stands");
  });

  test("by issue time: tokens issued before the instant and tokens without iat are refused; later ones are not", async (t) => {
    const s = await startService(t);
    const old = await token(s);
    const noIat = await token(s, { extraClaims: { iat: undefined } });
    s.clock.advance(10_000);
    const cutoff = new Date(s.clock.now()).toISOString();
    const fresh = await token(s);
    assert.equal(await statsStatus(s, old), 200);
    assert.equal(await statsStatus(s, noIat), 200);
    const res = await revoke(s, { issued_before: cutoff });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), { cutoff: { issued_before: cutoff, revoked_at: cutoff, revoked_by: "root" } });
    assert.equal(await statsStatus(s, old), 401);
    assert.equal(await statsStatus(s, noIat), 401);
    assert.equal(await statsStatus(s, fresh), 200, "issued at the instant, not before it");
    const earlier = await revoke(s, { issued_before: new Date(s.clock.now() - 60_000).toISOString() });
    assert.equal(earlier.json().cutoff.issued_before, cutoff, "an earlier instant does not lower the cutoff");
  });

  test("refuses both fields, neither, unknown ones, a future instant and a jti that cannot be stored, with 400", async (t) => {
    const s = await startService(t);
    const future = new Date(s.clock.now() + 3_600_000).toISOString();
    for (const body of [
      {},
      { jti: "a", issued_before: new Date(s.clock.now()).toISOString() },
      { jti: "" },
      { jti: "a", extra: 1 },
      { issued_before: "yesterday" },
      { issued_before: future },
      { jti: "a\u0000b" },
    ]) {
      assertError(await revoke(s, body), 400, "invalid_request");
    }
    const list = await s.inject({ method: "GET", url: "/admin/revocations", token: await token(s) });
    assert.deepEqual(list.json(), { tokens: [], cutoff: null }, "nothing was revoked");
  });

  test("GET /admin/revocations lists the revoked jtis newest first, at most limit, and the cutoff", async (t) => {
    const s = await startService(t);
    for (const jti of ["a", "b", "c"]) {
      assert.equal((await revoke(s, { jti })).statusCode, 200);
      s.clock.advance(1_000);
    }
    const instant = new Date(s.clock.now() - 1_000).toISOString();
    // Taken to the whole second, as iat is.
    await revoke(s, { issued_before: new Date(s.clock.now() - 500).toISOString() });
    const res = await s.inject({ method: "GET", url: "/admin/revocations?limit=2", token: await token(s) });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json() as { tokens: Array<{ jti: string }>; cutoff: { issued_before: string } };
    assert.deepEqual(
      body.tokens.map((revoked) => revoked.jti),
      ["c", "b"],
    );
    assert.equal(body.cutoff.issued_before, instant);
  });

  test("each revocation is logged as an admin action with who made it, their role and their token's jti", async (t) => {
    const { logger, lines } = capturedLogger();
    const s = await startService(t, { logger });
    const res = await s.inject({
      method: "POST",
      url: "/admin/revocations",
      token: await token(s, { sub: "root", jti: "root-token" }),
      payload: { jti: "leaked-1" },
    });
    assert.equal(res.statusCode, 200, res.body);
    const line = lines.find((entry) => entry["msg"] === "admin action");
    assert.deepEqual(
      { actor: line?.["actor"], role: line?.["role"], jti: line?.["jti"], action: line?.["action"] },
      { actor: "root", role: "admin", jti: "root-token", action: "revoke-token" },
    );
    assert.equal(line?.["revokedJti"], "leaked-1");
  });

  test(
    "another service on the same database refuses a token the first revoked, at its next request",
    { skip: TEST_ENGINE === "sqlite" && "SQLite serves one node: the PostgreSQL pass runs this" },
    async (t) => {
      const a = await startService(t);
      // The second service opens a's database: the same PostgreSQL schema.
      const b = await createService({ config: a.config, clock: a.clock });
      t.after(() => b.close());
      const leaked = await token(a, { jti: "leaked-2" });
      const onB = () => b.app.inject({ method: "GET", url: "/stats", headers: { authorization: `Bearer ${leaked}` } });
      assert.equal((await onB()).statusCode, 200);
      assert.equal((await revoke(a, { jti: "leaked-2" })).statusCode, 200);
      assert.equal((await onB()).statusCode, 401);
    },
  );
});

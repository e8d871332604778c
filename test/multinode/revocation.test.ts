/**
 * Roles and revocation across three `opqueue serve` processes on one PostgreSQL database (docs/api.md, "Roles" and
 * "Revoking admin tokens"): a token revoked through one node is refused by the others at their next request, a node
 * killed -9 and one started after it refuse it too (the revocation is in the database, not in a node), a cutoff on the
 * issue time cuts off every older token on every node, and each node refuses a role below a route's. Then one user's
 * data erased through one node is gone as every other node reads it, and an erasure begun through a node killed -9
 * goes on through another from where it stopped.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mintToken, type AdminRole } from "../../src/auth/tokens.js";
import { systemClock } from "../../src/clock.js";
import { type Cluster, createCluster, getJob, type Node, until, waitForStatus } from "../helpers/cluster.js";
import { POSTGRES_SKIP } from "../helpers/postgres.js";

function token(c: Cluster, claims: { sub: string; role: AdminRole; jti?: string }): Promise<string> {
  return mintToken({ auth: c.config.auth, clock: systemClock, ...claims });
}

/** `GET /stats` on `node` with `bearer`: the status. */
async function stats(node: Node, bearer: string): Promise<number> {
  const response = await fetch(`${node.url}/stats`, { headers: { authorization: `Bearer ${bearer}` } });
  await response.arrayBuffer();
  return response.status;
}

async function revoke(node: Node, bearer: string, body: object): Promise<void> {
  const response = await fetch(`${node.url}/admin/revocations`, {
    method: "POST",
    headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.equal(response.status, 200, await response.text());
}

test(
  "a token revoked through one node is refused by every node, one killed -9 and one started later included",
  { skip: POSTGRES_SKIP },
  async (t) => {
    const c = await createCluster(t);
    const [a, b, cNode] = [await c.start("a"), await c.start("b"), await c.start("c")];
    const root = await token(c, { sub: "root", role: "admin", jti: "root-1" });
    const leaked = await token(c, { sub: "oncall", role: "operator", jti: "oncall-1" });
    for (const node of [a, b, cNode]) assert.equal(await stats(node, leaked), 200, node.name);

    await revoke(a, root, { jti: "oncall-1" });
    // No wait: each node reads the revocations on each admin request.
    for (const node of [a, b, cNode]) assert.equal(await stats(node, leaked), 401, node.name);
    assert.equal(await stats(b, root), 200, "other tokens are untouched");

    b.child.kill("SIGKILL");
    await b.exited;
    const d = await c.start("d");
    assert.equal(await stats(d, leaked), 401, "a node started after the revocation refuses it");
    assert.equal(await stats(d, root), 200);

    // A cutoff through c: every token issued before it, on every node; a token minted in a later second is good.
    const cutoff = new Date(Math.floor(Date.now() / 1000) * 1000 + 1000);
    await until("the next second", async () => (Date.now() >= cutoff.getTime() ? true : undefined));
    await revoke(cNode, root, { issued_before: cutoff.toISOString() });
    for (const node of [a, cNode, d]) assert.equal(await stats(node, root), 401, node.name);
    const fresh = await token(c, { sub: "root", role: "admin" });
    for (const node of [a, cNode, d]) assert.equal(await stats(node, fresh), 200, node.name);

    // Roles hold on every node: a viewer reads and may not pause.
    const viewer = await token(c, { sub: "watch", role: "viewer" });
    for (const node of [a, cNode, d]) {
      assert.equal(await stats(node, viewer), 200);
      const response = await fetch(`${node.url}/operations/buildReport/pause`, {
        method: "POST",
        headers: { authorization: `Bearer ${viewer}` },
      });
      assert.equal(response.status, 403);
      assert.equal(((await response.json()) as { code: string }).code, "insufficient_role");
    }
  },
);

test(
  "a user's data erased through one node is gone on every node, and a walk begun on a node killed -9 goes on through another",
  { skip: POSTGRES_SKIP },
  async (t) => {
    const c = await createCluster(t);
    const [a, b] = [await c.start("a"), await c.start("b")];
    const assertion = await mintToken({
      auth: c.config.auth,
      clock: systemClock,
      sub: "ada",
      op: "createUser",
      rid: "erase-1",
    });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const created = await fetch(`${a.url}/jobs`, {
        method: "POST",
        headers: { authorization: `Bearer ${assertion}`, "content-type": "application/json" },
        body: JSON.stringify({ operation_id: "buildReport", request: { body: { email: `ada+${i}@example.com` } } }),
      });
      ids.push(((await created.json()) as { job: { id: string } }).job.id);
    }
    for (const id of ids) await waitForStatus(c, b, id, "succeeded");
    const root = await token(c, { sub: "dpo", role: "admin" });
    const erase = async (node: Node) => {
      const response = await fetch(`${node.url}/admin/erasures`, {
        method: "POST",
        headers: { authorization: `Bearer ${root}`, "content-type": "application/json" },
        body: JSON.stringify({ user_id: "ada", limit: 1 }),
      });
      assert.equal(response.status, 200, await response.clone().text());
      const { erased, more } = (await response.json()) as { erased: number; more: boolean };
      return { erased, more };
    };
    assert.deepEqual(await erase(b), { erased: 1, more: true });
    b.child.kill("SIGKILL");
    await b.exited;
    // Where b's call stopped is in the database: a takes the next job, not the first one again.
    assert.deepEqual(await erase(a), { erased: 1, more: true });
    const d = await c.start("d");
    assert.deepEqual(await erase(d), { erased: 1, more: true });
    assert.deepEqual(await erase(d), { erased: 0, more: false });
    for (const node of [a, d]) {
      for (const id of ids) assert.deepEqual((await getJob(c, node, id)).request, {}, `${node.name} ${id}`);
    }
  },
);

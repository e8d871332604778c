/**
 * AccessStore (src/store/roles/access.ts): revoked admin tokens, by jti and by a cutoff on `iat`, on the store's
 * clock; what every node reads on each admin request (docs/api.md, "Revoking admin tokens").
 */
import assert from "node:assert/strict";
import { describe } from "node:test";
import { T0, type Suite } from "./harness.js";

/** Registers the revocation cases. */
export function accessCases(suite: Suite): void {
  describe("AccessStore: revoked admin tokens", () => {
    suite.case("a revoked jti is revoked for good; other jtis and tokens without one are not", async ({ store }) => {
      assert.equal(await store.adminTokenIsRevoked({ jti: "t-1", issuedAt: T0 }), false);
      const revoked = await store.adminTokenRevoke({ jti: "t-1", actor: "alice" });
      assert.deepEqual(revoked, { jti: "t-1", revoked: { at: T0, by: "alice" } });
      assert.equal(await store.adminTokenIsRevoked({ jti: "t-1", issuedAt: T0 }), true);
      assert.equal(await store.adminTokenIsRevoked({ jti: "t-1", issuedAt: undefined }), true);
      assert.equal(await store.adminTokenIsRevoked({ jti: "t-2", issuedAt: T0 }), false);
      assert.equal(await store.adminTokenIsRevoked({ jti: undefined, issuedAt: T0 }), false);
      assert.equal(await store.adminTokenIsRevoked({ jti: undefined, issuedAt: undefined }), false, "no cutoff yet");
    });

    suite.case("revoking a jti again keeps the first record", async ({ store, clock }) => {
      await store.adminTokenRevoke({ jti: "t-1", actor: "alice" });
      clock.advance(5_000);
      assert.deepEqual(await store.adminTokenRevoke({ jti: "t-1", actor: "bob" }), {
        jti: "t-1",
        revoked: { at: T0, by: "alice" },
      });
      assert.deepEqual((await store.adminRevocationList({ limit: 10 })).tokens, [
        { jti: "t-1", revoked: { at: T0, by: "alice" } },
      ]);
    });

    suite.case(
      "a cutoff revokes tokens issued before it and every token without iat; it is raised, never lowered",
      async ({ store, clock }) => {
        const cutoff = await store.adminTokenCutoffRaise({ issuedBefore: T0 - 60_000, actor: "alice" });
        assert.deepEqual(cutoff, { issuedBefore: T0 - 60_000, revoked: { at: T0, by: "alice" } });
        assert.equal(await store.adminTokenIsRevoked({ jti: undefined, issuedAt: T0 - 61_000 }), true);
        assert.equal(await store.adminTokenIsRevoked({ jti: "x", issuedAt: T0 - 60_000 }), false, "at the instant");
        assert.equal(await store.adminTokenIsRevoked({ jti: undefined, issuedAt: undefined }), true, "no iat");
        clock.advance(1_000);
        const earlier = await store.adminTokenCutoffRaise({ issuedBefore: T0 - 120_000, actor: "bob" });
        assert.deepEqual(earlier, cutoff, "an earlier instant changes nothing");
        const later = await store.adminTokenCutoffRaise({ issuedBefore: T0, actor: "bob" });
        assert.deepEqual(later, { issuedBefore: T0, revoked: { at: T0 + 1_000, by: "bob" } });
        assert.equal(await store.adminTokenIsRevoked({ jti: undefined, issuedAt: T0 - 30_000 }), true);
        assert.deepEqual((await store.adminRevocationList({ limit: 10 })).cutoff, later);
      },
    );

    suite.case(
      "the list holds the revoked jtis newest first, at most `limit`, and no cutoff until one is set",
      async ({ store, clock }) => {
        for (const jti of ["a", "b", "c"]) {
          await store.adminTokenRevoke({ jti, actor: "alice" });
          clock.advance(1_000);
        }
        const list = await store.adminRevocationList({ limit: 2 });
        assert.deepEqual(
          list.tokens.map((token) => token.jti),
          ["c", "b"],
        );
        assert.equal(list.cutoff, null);
      },
    );

    suite.case(
      "a jti no row can hold (U+0000) is never revoked, and asking about it is no error",
      async ({ store }) => {
        assert.equal(await store.adminTokenIsRevoked({ jti: "a\u0000b", issuedAt: T0 }), false);
      },
    );
  });
}

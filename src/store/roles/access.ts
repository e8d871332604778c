/** The store's `AccessStore` role; src/store/store.ts composes the roles into `Store`. */

/** Who revoked, and when (ms since the epoch). */
export interface Revoked {
  at: number;
  by: string;
}

/** One admin token revoked by its `jti`. */
export interface RevokedAdminToken {
  jti: string;
  revoked: Revoked;
}

/** Every admin token issued before `issuedBefore` (ms since the epoch) is revoked. */
export interface AdminTokenCutoff {
  issuedBefore: number;
  revoked: Revoked;
}

/**
 * Revocation of admin tokens (docs/api.md, "Revoking admin tokens"): written by one node, read by every node on each
 * admin request, so a revoked token is refused everywhere from the next request on.
 */
export interface AccessStore {
  /**
   * Revokes the admin tokens whose `jti` is `jti`, for good. Idempotent: revoking again keeps the first record, which
   * is returned.
   */
  adminTokenRevoke(params: { jti: string; actor: string }): Promise<RevokedAdminToken>;
  /**
   * Revokes every admin token issued before `issuedBefore` (ms), and every token without `iat`. One cutoff is kept:
   * a later instant replaces it, an earlier one changes nothing. Returns the cutoff in force.
   */
  adminTokenCutoffRaise(params: { issuedBefore: number; actor: string }): Promise<AdminTokenCutoff>;
  /**
   * Whether an admin token is revoked: its `jti` is, or it was issued (`issuedAt`, ms) before the cutoff, or it has no
   * `iat` and a cutoff exists.
   */
  adminTokenIsRevoked(params: { jti: string | undefined; issuedAt: number | undefined }): Promise<boolean>;
  /** The revoked tokens, newest first, at most `limit`; and the cutoff, if any. */
  adminRevocationList(params: { limit: number }): Promise<{
    tokens: RevokedAdminToken[];
    cutoff: AdminTokenCutoff | null;
  }>;
}

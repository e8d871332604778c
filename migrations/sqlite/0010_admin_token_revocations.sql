-- opqueue schema for SQLite, version 10: revoked admin tokens.
--
-- An administrator revokes one admin token by its `jti`, or every admin token issued before an instant (docs/api.md,
-- "Revoking admin tokens"). Every node reads these tables on each admin request, so a revoked token is refused at once
-- everywhere. A `jti` row is kept for good: a token without `iat` may become valid long after it was minted, so no
-- instant is known after which its row could go. There is one cutoff at most; a later one replaces it. `at` and
-- `issued_before` are ms since the epoch.
CREATE TABLE revoked_admin_tokens (
  jti        TEXT    PRIMARY KEY,
  revoked_at INTEGER NOT NULL,
  revoked_by TEXT    NOT NULL
);

CREATE TABLE admin_token_cutoff (
  id            INTEGER PRIMARY KEY CHECK (id = 1),
  issued_before INTEGER NOT NULL,
  revoked_at    INTEGER NOT NULL,
  revoked_by    TEXT    NOT NULL
);

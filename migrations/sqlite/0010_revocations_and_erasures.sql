-- opqueue schema for SQLite, version 10: revoked admin tokens, and erasure of one user's data.
--
-- 1. Revoked admin tokens.
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

-- 2. Erasure of one user's data (docs/api.md, "Erasing a user's data"): `erased_at` marks a finished job whose request,
--    result body, error bodies, progress and fired callbacks were removed, so that each bounded call takes the next
--    ones. `erasures` is the audit of each call, holding no data of the user: `subject` is the SHA-256 of the user id
--    (hex), by which an auditor who knows the id finds the erasure.
ALTER TABLE jobs ADD COLUMN erased_at INTEGER;

CREATE TABLE erasures (
  id        INTEGER PRIMARY KEY AUTOINCREMENT,
  at        INTEGER NOT NULL,
  actor     TEXT    NOT NULL,
  role      TEXT    NOT NULL,
  subject   TEXT    NOT NULL,
  erased    INTEGER NOT NULL,
  cancelled INTEGER NOT NULL
);
CREATE INDEX erasures_subject ON erasures (subject, id);

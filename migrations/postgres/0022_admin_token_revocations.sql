-- opqueue schema for PostgreSQL, version 22: revoked admin tokens.
--
-- Rolling upgrade: yes. Additive: two new tables. Version 21's nodes go on working beside this one, but they do not
-- read the revocations: a token revoked through a new node is still taken by an old one until it is upgraded.
--
-- An administrator revokes one admin token by its `jti`, or every admin token issued before an instant (docs/api.md,
-- "Revoking admin tokens"). Every node reads these tables on each admin request, so a revoked token is refused at once
-- everywhere. A `jti` row is kept for good: a token without `iat` may become valid long after it was minted, so no
-- instant is known after which its row could go. There is one cutoff at most; a later one replaces it.
CREATE TABLE revoked_admin_tokens (
  jti        text        PRIMARY KEY,
  revoked_at timestamptz NOT NULL,
  revoked_by text        NOT NULL
);

CREATE TABLE admin_token_cutoff (
  id            integer     PRIMARY KEY CHECK (id = 1),
  issued_before timestamptz NOT NULL,
  revoked_at    timestamptz NOT NULL,
  revoked_by    text        NOT NULL
);

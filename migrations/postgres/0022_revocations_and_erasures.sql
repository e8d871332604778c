-- opqueue schema for PostgreSQL, version 22: revoked admin tokens, and erasure of one user's data.
--
-- Rolling upgrade: yes. Additive: three new tables and a nullable column without a default, which PostgreSQL adds
-- without rewriting job_specs, however many jobs it holds. Version 21's nodes go on working beside this one, but they
-- do not read the revocations: a token revoked through a new node is still taken by an old one until it is upgraded.
--
-- 1. Revoked admin tokens.
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

-- 2. Erasure of one user's data (docs/api.md, "Erasing a user's data"): `erased_at` marks a finished job whose request,
--    result body, error bodies, progress and fired callbacks were removed, so that each bounded call takes the next
--    ones. `erasures` is the audit of each call, holding no data of the user: `subject` is the SHA-256 of the user id
--    (hex), by which an auditor who knows the id finds the erasure.
ALTER TABLE job_specs ADD COLUMN erased_at timestamptz;

CREATE TABLE erasures (
  id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at        timestamptz NOT NULL,
  actor     text        NOT NULL,
  role      text        NOT NULL,
  subject   text        NOT NULL,
  erased    integer     NOT NULL,
  cancelled integer     NOT NULL
);
CREATE INDEX erasures_subject ON erasures (subject, id);

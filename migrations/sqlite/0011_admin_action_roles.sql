-- opqueue schema for SQLite, version 11: the role of the administrator behind each recorded action.
--
-- An admin token carries a role (docs/api.md, "Roles"): an operator and an admin may both cancel, retry or run a job
-- now, so a job's history says which of the two acted. Rows recorded before this version have no role (NULL).
ALTER TABLE admin_actions ADD COLUMN role TEXT;

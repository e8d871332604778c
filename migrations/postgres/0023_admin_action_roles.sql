-- opqueue schema for PostgreSQL, version 23: the role of the administrator behind each recorded action.
--
-- An admin token carries a role (docs/api.md, "Roles"): an operator and an admin may both cancel, retry or run a job
-- now, so a job's history says which of the two acted. Rows recorded before this version have no role (NULL).
--
-- Rolling upgrade: yes. A nullable column without a default: no table rewrite, one brief lock on admin_actions. Version
-- 22's nodes go on working beside this one and record their actions without a role.
ALTER TABLE admin_actions ADD COLUMN role text;

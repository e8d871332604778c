-- opqueue_notify: its current text. Migrations hold its history (0001); this file is what a migrated database
-- holds now, checked by test/store/postgres-sql.test.ts. A change to it is a new migration that restates it.

CREATE OR REPLACE FUNCTION opqueue_notify(p_run_at timestamptz) RETURNS void
LANGUAGE sql AS $$
  SELECT pg_notify('opqueue_jobs:' || current_schema(), floor(extract(epoch FROM p_run_at) * 1000)::bigint::text);
$$;

-- opqueue_run_time: its current text. Migrations hold its history (0008); this file is what a migrated database
-- holds now, checked by test/store/postgres-sql.test.ts. A change to it is a new migration that restates it.

CREATE OR REPLACE FUNCTION opqueue_run_time(b jsonb, p_now timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
  SELECT coalesce((b->>'run_at')::timestamptz, p_now + coalesce((b->>'delay_ms')::bigint, 0) * interval '1 millisecond');
$$;

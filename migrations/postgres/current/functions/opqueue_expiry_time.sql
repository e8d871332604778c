-- opqueue_expiry_time: its current text (migration 0011). Checked by test/store/postgres-sql.test.ts.
--
-- When a job being inserted expires: expires_in_ms after the database's now, else the instant expires_at, else never
-- (NULL). The relative form is worked out on the database's clock, as a delay is (opqueue_run_time).

CREATE OR REPLACE FUNCTION opqueue_expiry_time(b jsonb, p_now timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
  SELECT coalesce(p_now + (b->>'expires_in_ms')::bigint * interval '1 millisecond', (b->>'expires_at')::timestamptz);
$$;

-- opqueue schema for PostgreSQL, version 21: the planner keeps no statistics of job_state.status.
--
-- Rolling upgrade: yes. No statement changes, only the estimates its plans are made from, for version 20's nodes as
-- for 21's. SET STATISTICS takes a lock that waits only for a running VACUUM or ANALYZE of job_state, never for the
-- nodes' reads and writes; nothing is rewritten, however many jobs the table holds.
--
-- ANALYZE (autovacuum's, or anyone's) samples job_state whenever it likes, and a queue is most often idle then: every
-- job sampled has finished. Plans made from those statistics take the waiting jobs for none, so every index over them
-- (their partial indexes) looks as good as another. The claim's per-lane probe then read the due jobs of every lane in
-- run-time order (job_state_run_at or job_state_claim) and filtered out the other lanes': each lane of each claim read
-- every due job. A burst that arrives next is far less than the tenth of the table after which autovacuum samples it
-- again, so those plans last until the backlog is gone, and the claims' cost grows with the backlog, when it matters
-- most. Measured with bench/capacity.ts (three nodes, 49,000 jobs enqueued in batches into 32 users' lanes while they
-- drain, the server held to one core, statistics taken after a warm-up that had finished every job): 148 jobs/s before
-- (45,184 delivered in 305 s), 3,095 jobs/s without statistics of the status. Version 19's comment tells of the same
-- trap for the outcome write (statistics that saw no running job).
--
-- Without statistics, the planner takes each status for its default share of the rows (half a percent each), whatever
-- the queue held when it was sampled: plans that serve from an empty queue to a deep backlog. The other columns keep
-- their statistics. Every statement that must not depend on the share of a status is written so that it does not
-- (docs/postgres.md, "Plans").
--
-- Statistics gathered before stay until they are removed, and only a superuser may remove them: the migration does
-- when it runs as one. Run as another role on a table that has been sampled, it leaves the status's statistics as they
-- were and says so in a notice: statistics kept but never sampled again would hold one sample's skew for good.
-- docs/postgres.md ("Plans") gives the two statements with which a superuser finishes it.

DO $$
DECLARE
  v_sampled boolean;
BEGIN
  IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
    DELETE FROM pg_catalog.pg_statistic
    WHERE starelid = 'job_state'::regclass
      AND staattnum = (SELECT attnum FROM pg_attribute WHERE attrelid = 'job_state'::regclass AND attname = 'status');
  END IF;
  SELECT EXISTS (
    SELECT 1 FROM pg_stats s
    JOIN pg_class c ON c.relname = s.tablename
    JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = s.schemaname
    WHERE c.oid = 'job_state'::regclass AND s.attname = 'status'
  ) INTO v_sampled;
  IF v_sampled THEN
    RAISE NOTICE 'opqueue migration 21: job_state.status keeps its statistics, which only a superuser may remove: see docs/postgres.md, "Plans"';
  ELSE
    -- After the delete: this invalidates the plans every session has cached for job_state, so each is made anew.
    ALTER TABLE job_state ALTER COLUMN status SET STATISTICS 0;
  END IF;
END
$$;

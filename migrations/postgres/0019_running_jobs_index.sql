-- opqueue schema for PostgreSQL, version 19: running jobs get an index of their own, and succeeded jobs leave the index
-- of statuses.
--
-- Rolling upgrade: yes. Only indexes change; every statement of version 18 reads and writes as before, at most with
-- another plan. Building the two indexes reads job_state once each while writes to it wait: 0.07 and 0.11 s on a
-- million jobs here (100,000 pending, the rest succeeded), so a second or two on ten million; the nodes' claims,
-- outcomes and enqueues wait that long, none fails. Counting jobs by status (/metrics) reads job_state itself now, not
-- the index: 89 ms on that million, against 77–105 ms before.
--
-- job_state_status_seq (status, seq) held an entry for every job in every status, so a claim and an outcome each wrote
-- one. Worse, outcome writes were planned from statistics that saw no running job as a hash join over every entry of
-- status 'running', and until a vacuum those are the entries of every job claimed since, finished or not: the work of
-- each outcome write grew with the jobs drained since the last vacuum, and with the jobs running (a long asynchronous
-- job holds its entry for hours). In its place:
-- - job_state_running, the running jobs by seq: the rescue reads them all, and the outcome writes, heartbeats and
--   requeues look up only their own jobs in it, by seq (their statements name the seqs, src/store/postgres/sql/);
-- - job_state_listed_status, the other statuses a list or a bulk action filters by, but succeeded: pending, retrying,
--   dead and cancelled. A list of succeeded jobs, the most of them, reads job_state_pkey newest first.
-- A job drained (pending → running → succeeded) now writes two entries to the indexes of statuses, not three.

DROP INDEX job_state_status_seq;
CREATE INDEX job_state_running ON job_state (seq) WHERE status = 'running';
CREATE INDEX job_state_listed_status ON job_state (status, seq)
  WHERE status IN ('pending', 'retrying', 'dead', 'cancelled');

-- opqueue schema for PostgreSQL, version 6: the dashboard's attempts-per-minute chart reads counts kept per minute.
--
-- The chart (GET /stats) counted the last hour's rows of job_attempts through job_attempts_finished on every
-- refresh: a scan of every attempt of the hour, about 1.9 s with 3,600,000 of them (1,000 jobs/s), asked every 5 s
-- by each open dashboard. Now each statement that logs attempts also adds them to a count per minute and outcome,
-- and the chart reads at most an hour of those rows, however busy the queue.
--
-- `shard` is the writing connection's pid modulo 16: the outcome writes of concurrent connections (of one node or
-- of many) add to different rows of the same minute, so they never wait on each other's row lock. The chart sums
-- the shards. Rows older than a day are deleted by the cleaner.
--
-- job_attempts_finished served only the chart: without it, logging an attempt writes one index entry fewer.
CREATE TABLE attempt_counts (
  minute  timestamptz NOT NULL,
  outcome text        NOT NULL,
  shard   smallint    NOT NULL,
  n       bigint      NOT NULL,
  PRIMARY KEY (minute, outcome, shard)
);

INSERT INTO attempt_counts (minute, outcome, shard, n)
  SELECT date_trunc('minute', finished_at), outcome, 0, count(*)
  FROM job_attempts WHERE finished_at >= now() - interval '1 day'
  GROUP BY 1, 2;

DROP INDEX job_attempts_finished;

-- opqueue schema for SQLite, version 2: the dashboard's attempts-per-minute chart reads counts kept per minute.
--
-- The chart (GET /stats) counted the last hour's rows of job_attempts through job_attempts_finished on every
-- refresh: a scan of every attempt of the hour, asked every 5 s by each open dashboard. Now logging an attempt also
-- adds it to a count per minute and outcome, and the chart reads at most an hour of those rows, however busy the
-- queue. `minute` is the start of the minute in ms since the epoch. Rows older than a day are deleted by the
-- cleaner.
--
-- job_attempts_finished served only the chart: without it, logging an attempt writes one index entry fewer.
CREATE TABLE attempt_counts (
  minute  INTEGER NOT NULL,
  outcome TEXT    NOT NULL,
  n       INTEGER NOT NULL,
  PRIMARY KEY (minute, outcome)
) WITHOUT ROWID;

INSERT INTO attempt_counts (minute, outcome, n)
  SELECT (finished_at / 60000) * 60000, outcome, count(*)
  FROM job_attempts WHERE finished_at >= (CAST(strftime('%s', 'now') AS INTEGER) - 86400) * 1000
  GROUP BY 1, 2;

DROP INDEX job_attempts_finished;

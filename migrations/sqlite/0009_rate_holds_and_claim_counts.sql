-- opqueue schema for SQLite, version 9: lanes held by their rate, and a count of each job's claims.
--
-- 1. A lane that used its rate_per_key is held (docs/flow-control.md, "Blocked lanes are held"): a claim that finds
--    one sets `held` on its waiting jobs and writes the lane to rate_holds with the instant its rate lets a job start
--    again. jobs_lane holds only jobs not held, so the claim's walk of lanes steps over every held lane at no cost,
--    however many there are; the first claim at or after a hold's instant lets its jobs go again (jobs_held finds
--    them). Before this, each claim visited a bounded page of lanes in turn, blocked ones included, and ten thousand
--    blocked rate keys held every other job back for minutes.
-- 2. `claim_count` counts the claims of a job, never reset: the delivery token of a claim names it, so a token of an
--    earlier claim of the same attempt number (after an administrator's retry) is refused (SECURITY.md).
ALTER TABLE jobs ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN claim_count INTEGER NOT NULL DEFAULT 0;

DROP INDEX jobs_lane;
CREATE INDEX jobs_lane ON jobs (operation_id, lane, priority DESC, run_at, seq)
  WHERE status IN ('pending', 'retrying') AND held = 0;
CREATE INDEX jobs_held ON jobs (operation_id, lane) WHERE status IN ('pending', 'retrying') AND held = 1;

CREATE TABLE rate_holds (
  operation_id TEXT NOT NULL,
  lane         TEXT NOT NULL,
  -- When the lane's rate lets a job start again (ms since the epoch).
  open_at      REAL NOT NULL,
  PRIMARY KEY (operation_id, lane)
) WITHOUT ROWID;
CREATE INDEX rate_holds_open_at ON rate_holds (open_at);

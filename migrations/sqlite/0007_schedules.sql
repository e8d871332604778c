-- opqueue schema for SQLite, version 7: schedules created at runtime (docs/schedules.md).
--
-- A schedule is a cron entry kept in the database rather than the config file: when it ticks (a cron expression read
-- in an IANA time zone), the job each tick enqueues, and who created, last changed and paused it (`*_at` in ms since
-- the epoch). `request` is the JSON text of the job's request. `revision` changes with every change of the
-- definition: a tick is recorded only for the revision in force, not paused, in the transaction that records it and
-- inserts its job, so a change, a pause or a delete is never outrun by a tick of what it replaced. Ticks stay in
-- cron_ticks under the schedule's name, as config entries' do.
--
-- A rowid table, not WITHOUT ROWID: a request may take 16 KiB, far past the row size such tables are meant for.
CREATE TABLE schedules (
  name            TEXT    NOT NULL PRIMARY KEY,
  schedule        TEXT    NOT NULL,
  timezone        TEXT    NOT NULL,
  operation_id    TEXT    NOT NULL,
  user_id         TEXT    NOT NULL,
  request         TEXT    NOT NULL,
  priority        INTEGER NOT NULL,
  dedupe_key      TEXT,
  concurrency_key TEXT,
  revision        TEXT    NOT NULL,
  created_at      INTEGER NOT NULL,
  created_by      TEXT    NOT NULL,
  updated_at      INTEGER NOT NULL,
  updated_by      TEXT    NOT NULL,
  paused_at       INTEGER,
  paused_by       TEXT
);

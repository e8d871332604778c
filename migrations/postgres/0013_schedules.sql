-- opqueue schema for PostgreSQL, version 13: schedules created at runtime (docs/schedules.md).
--
-- Rolling upgrade: yes. A new table; nothing older changes. Version 12's nodes neither read nor run these schedules,
-- and go on ticking the config's entries beside the new nodes as before (one job per tick across all of them).
--
-- A schedule is a cron entry kept in the database rather than the config file: when it ticks (a cron expression read
-- in an IANA time zone), the job each tick enqueues, and who created, last changed and paused it. `request` is json,
-- as job_specs.request, so it is delivered as it was written. `revision` changes with every change of the definition:
-- a tick is recorded only for the revision in force, not paused, in the transaction that records it and inserts its
-- job, holding the schedule's row (FOR SHARE) until it commits, so a change, a pause or a delete waits for a tick in
-- flight and is never outrun by one of what it replaced. Ticks stay in cron_ticks under the schedule's name, as
-- config entries' do. A change is announced on the channel opqueue_schedules:<schema>, so every node reads it at once.
CREATE TABLE schedules (
  name            text        PRIMARY KEY,
  schedule        text        NOT NULL,
  timezone        text        NOT NULL,
  operation_id    text        NOT NULL,
  user_id         text        NOT NULL,
  request         json        NOT NULL,
  priority        integer     NOT NULL,
  dedupe_key      text,
  concurrency_key text,
  revision        text        NOT NULL,
  created_at      timestamptz NOT NULL,
  created_by      text        NOT NULL,
  updated_at      timestamptz NOT NULL,
  updated_by      text        NOT NULL,
  paused_at       timestamptz,
  paused_by       text
);

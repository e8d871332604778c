-- opqueue schema for SQLite, version 12: an erasure walks a user's jobs once, page by page.
--
-- Each call of `POST /admin/erasures` used to read every job of the user to find the next ones to erase and to count
-- what was left: a user of N jobs cost N rows read per call, N ÷ limit calls. Now each call takes the user's next
-- `limit` jobs after where the subject's last call stopped, and its row keeps where that is (docs/api.md, "Erasing a
-- user's data"; src/store/erasure-pass.ts):
-- - `pass_after`: the seq of the last job the call looked at, or just before the first it must come back to (a job
--   that finished behind it, or a waiting one to cancel);
-- - `pass_waiting`, `pass_running`: the user's jobs seen waiting and running since the walk began, while it goes on;
--   null once a call has reached the user's last job and counted them all.
-- Rows of earlier versions hold no cursor: the next call for that subject starts from the user's first job.
ALTER TABLE erasures ADD COLUMN pass_after INTEGER;
ALTER TABLE erasures ADD COLUMN pass_waiting INTEGER;
ALTER TABLE erasures ADD COLUMN pass_running INTEGER;

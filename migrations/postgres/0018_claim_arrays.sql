-- opqueue schema for PostgreSQL, version 18: the claim answers each job as a JSON array, and reads its candidates once.
--
-- Rolling upgrade: yes. opqueue_claim_batch is new; nodes of this version call it. opqueue_claim, which nodes of
-- version 17 call, is restated as a wrapper of it that answers each job as the JSON object it answered before, so
-- nodes of both versions claim side by side under the same locks and rules. The migration takes no lock on any table
-- and runs in a moment. A later migration drops the wrapper.
--
-- What changes, measured by bench/pg-profile.ts (the store alone, 20,000 jobs, claims of 32): the database's work per
-- claimed job.
-- 1. Each claimed job is built with json_build_array, its fields in a fixed order (src/store/postgres/rows.ts,
--    `CLAIM_FIELDS`), not with json_build_object: the names of 26 fields were written out for every job, which cost more
--    than the job's values (7 µs against 3 µs a job, measured on 20,000 rows).
-- 2. The candidates' operations and concurrency keys come with the candidates (their statements aggregate them), so the
--    locks of the operations and the tries of the keys no longer read every candidate again by its seq. The walk lane by
--    lane (gated) still reads them again, as before.
-- 3. The pick only picks; one statement then claims the picked jobs and answers them (an UPDATE whose RETURNING is
--    joined to job_specs), where the claim and a read of the claimed jobs by their seq were two.
-- Together: 44.5 → 36.5 µs of statement time per claimed job, 64 → 57 µs of the server's CPU per job drained (claim and
-- outcome). Nothing else changes: which jobs a claim takes, in which order, under which locks.

CREATE FUNCTION opqueue_claim_batch(p_now timestamp with time zone, p_limit integer, p_candidates integer, p_after_op text, p_after_lane text)
 RETURNS SETOF json
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
 SET enable_bitmapscan TO 'off'
AS $function$
DECLARE
  v_now_ms double precision := extract(epoch FROM p_now) * 1000;
  v_due integer;
  v_all_due boolean;
  v_controlled boolean;
  v_any_multi boolean;
  v_any_paused boolean;
  v_blocked text[] := '{}';
  v_by_lane boolean;
  v_candidates bigint[] := '{}';
  v_candidate_ops text[] := '{}';
  v_candidate_keys text[] := '{}';
  v_found_ops text[];
  v_found_keys text[];
  v_found bigint[];
  v_more bigint[];
  v_priority integer;
  v_op text := coalesce(p_after_op, '');
  v_lane text := coalesce(p_after_lane, '');
  v_next_op text;
  v_next_lane text;
  v_lanes integer := 0;
  v_lane_jobs integer := 0;
  v_head_lanes text[] := '{}';
  v_visits integer;
  v_lane_limit integer;
  v_lane_offer integer;
  v_keyed integer;
  v_more_keyed integer;
  v_pick record;
  v_picked bigint[] := '{}';
  v_taken_ops text[];
  v_taken_lanes text[];
  v_taken_keys text[];
  v_lane_room integer;
  v_wrapped boolean := false;
  v_operation record;
  v_shared text[] := '{}';
  v_keys text[];
  v_open_at double precision;
  v_holds integer := 0;
BEGIN
  -- job_state_run_at stops at p_now, and the count at p_candidates: a bounded read however long the queue. Whether
  -- any gate is set, read with it (one statement fewer on every claim).
  SELECT
    (SELECT count(*) FROM (SELECT 1 FROM job_state WHERE status IN ('pending', 'retrying') AND run_at <= p_now
                           ORDER BY run_at LIMIT p_candidates) AS due),
    EXISTS (SELECT 1 FROM operation_controls WHERE paused_at IS NOT NULL OR rate_limit IS NOT NULL
              OR key_rate_limit IS NOT NULL OR max_concurrency IS NOT NULL),
    EXISTS (SELECT 1 FROM operation_controls WHERE concurrency_limit > 1),
    EXISTS (SELECT 1 FROM paused_keys)
  INTO v_due, v_controlled, v_any_multi, v_any_paused;
  IF v_due = 0 THEN
    RETURN;
  END IF;
  v_all_due := v_due < p_candidates;

  -- Held lanes whose instant has come go back to the walk (a bounded number a claim; the rest are due at once, and
  -- opqueue_next_run_at says so).
  IF v_controlled AND EXISTS (SELECT 1 FROM rate_holds WHERE open_at <= v_now_ms) THEN
    WITH due AS (
      DELETE FROM rate_holds h
      USING (SELECT d.operation_id, d.lane FROM rate_holds d WHERE d.open_at <= v_now_ms ORDER BY d.open_at LIMIT 1000
             FOR UPDATE SKIP LOCKED) AS d
      WHERE h.operation_id = d.operation_id AND h.lane = d.lane
      RETURNING h.operation_id, h.lane
    )
    UPDATE job_state s SET held = false FROM due
    WHERE s.status IN ('pending', 'retrying') AND s.held AND s.operation_id = due.operation_id AND s.lane = due.lane;
  END IF;

  IF v_controlled THEN
    SELECT coalesce(array_agg(oc.operation_id), '{}') INTO v_blocked FROM operation_controls oc
    WHERE opqueue_operation_room(oc.operation_id, v_now_ms) = 0;
    v_by_lane := cardinality(v_blocked) > 0
      OR EXISTS (SELECT 1 FROM operation_controls WHERE key_rate_limit IS NOT NULL);
  ELSE
    v_by_lane := false;
  END IF;

  -- 1. Candidates.
  IF NOT v_by_lane AND v_all_due THEN
    -- Fewer due jobs than wanted: every one of them, found by run time (the claim order would walk past every
    -- future job of a higher priority).
    SELECT coalesce(array_agg(c.seq), '{}'), coalesce(array_agg(c.operation_id), '{}'),
      coalesce(array_agg(c.concurrency_key) FILTER (WHERE c.concurrency_key IS NOT NULL), '{}')
    INTO v_candidates, v_candidate_ops, v_candidate_keys FROM (
      SELECT s.seq, s.operation_id, s.concurrency_key FROM job_state s
      WHERE s.status IN ('pending', 'retrying') AND NOT s.held AND s.run_at <= p_now
        AND (s.expires_at IS NULL OR s.expires_at > p_now)
        AND (s.concurrency_key IS NULL
          OR (NOT v_any_paused AND NOT v_any_multi AND NOT EXISTS (
            SELECT 1 FROM job_state r WHERE r.concurrency_key = s.concurrency_key AND r.status = 'running'))
          OR ((v_any_paused OR v_any_multi)
            AND opqueue_key_open(s.concurrency_key, s.operation_id, v_any_paused, v_any_multi)))
      ORDER BY s.run_at
      LIMIT p_candidates
      FOR UPDATE SKIP LOCKED
    ) AS c;
  ELSIF NOT v_by_lane THEN
    SELECT coalesce(array_agg(c.seq), '{}'), coalesce(array_agg(DISTINCT c.operation_id || chr(1) || c.lane), '{}'),
      coalesce(array_agg(c.operation_id), '{}'),
      coalesce(array_agg(c.concurrency_key) FILTER (WHERE c.concurrency_key IS NOT NULL), '{}')
    INTO v_candidates, v_head_lanes, v_candidate_ops, v_candidate_keys
    FROM (
      SELECT s.seq, s.operation_id, s.lane, s.concurrency_key FROM job_state s
      WHERE s.status IN ('pending', 'retrying') AND NOT s.held AND s.run_at <= p_now
        AND (s.expires_at IS NULL OR s.expires_at > p_now)
        AND (s.concurrency_key IS NULL
          OR (NOT v_any_paused AND NOT v_any_multi AND NOT EXISTS (
            SELECT 1 FROM job_state r WHERE r.concurrency_key = s.concurrency_key AND r.status = 'running'))
          OR ((v_any_paused OR v_any_multi)
            AND opqueue_key_open(s.concurrency_key, s.operation_id, v_any_paused, v_any_multi)))
      ORDER BY s.priority DESC, s.run_at, s.seq
      LIMIT p_candidates
      FOR UPDATE SKIP LOCKED
    ) AS c;
  END IF;
  -- Lanes, from the cursor on, wrapping round once. Gated (by lane): lane by lane, up to p_limit jobs of each (no more
  -- than a rate key's rate lets start), lanes and jobs each up to p_candidates, blocked operations skipped; each step a
  -- probe of job_state_lane.
  IF v_by_lane THEN
    LOOP
      EXIT WHEN v_lanes >= p_candidates OR v_lane_jobs >= p_candidates;
      SELECT s.operation_id, s.lane INTO v_next_op, v_next_lane FROM job_state s
      WHERE s.status IN ('pending', 'retrying') AND NOT s.held AND (s.operation_id, s.lane) > (v_op, v_lane)
      ORDER BY s.operation_id, s.lane
      LIMIT 1;
      IF NOT FOUND THEN
        EXIT WHEN v_wrapped;
        v_wrapped := true;
        v_op := '';
        v_lane := '';
        CONTINUE;
      END IF;
      EXIT WHEN v_wrapped AND (v_next_op, v_next_lane) > (coalesce(p_after_op, ''), coalesce(p_after_lane, ''));
      v_op := v_next_op;
      v_lane := v_next_lane;
      IF v_op = ANY (v_blocked) THEN
        -- Past every lane of an operation that can take nothing now.
        v_lane := chr(1114111);
        CONTINUE;
      END IF;
      SELECT CASE WHEN oc.key_rate_limit IS NOT NULL AND v_lane LIKE 'r:%' THEN opqueue_rate_allowance(b.tat,
          v_now_ms, oc.key_rate_limit, oc.key_rate_period_ms, oc.key_rate_burst) END,
        CASE WHEN oc.key_rate_limit IS NOT NULL AND v_lane LIKE 'r:%' THEN opqueue_rate_opens_at(b.tat,
          oc.key_rate_limit, oc.key_rate_period_ms, oc.key_rate_burst) END
      INTO v_lane_room, v_open_at
      FROM operation_controls oc
      LEFT JOIN rate_buckets b ON b.operation_id = oc.operation_id AND b.rate_key = substr(v_lane, 3)
      WHERE oc.operation_id = v_op;
      -- Out of its rate: the lane is held until its rate lets a job start, and is not counted as a visit, so that
      -- however many lanes are blocked the walk reaches the open ones (each blocked lane costs one hold, then nothing
      -- until it opens). Up to 1,000 holds a claim; past them a blocked lane counts as any lane does. A change of
      -- limits, which lets every hold of its operation go, takes the holds' lock exclusively: a claim that cannot have
      -- it shared now holds nothing.
      IF v_lane_room <= 0 AND v_open_at IS NOT NULL AND v_holds < 1000
          AND pg_try_advisory_xact_lock_shared(hashtext('opqueue.holds:' || v_op)) THEN
        UPDATE job_state s SET held = true
        WHERE s.seq IN (SELECT h.seq FROM job_state h
                        WHERE h.status IN ('pending', 'retrying') AND NOT h.held AND h.operation_id = v_op
                          AND h.lane = v_lane
                        FOR UPDATE SKIP LOCKED);
        INSERT INTO rate_holds (operation_id, lane, open_at) VALUES (v_op, v_lane, v_open_at)
        ON CONFLICT (operation_id, lane) DO UPDATE SET open_at = excluded.open_at;
        v_holds := v_holds + 1;
        CONTINUE;
      END IF;
      v_lanes := v_lanes + 1;
      v_lane_offer := least(p_limit, coalesce(v_lane_room, p_limit));
      CONTINUE WHEN v_lane_offer <= 0;
      v_lane_limit := v_lane_offer;
      -- The lane's first due jobs, a priority at a time from the highest down: with the priority fixed, the run time
      -- bounds the index range, so a lane of jobs not yet due costs a probe or two, not a walk of all of them. Enough of
      -- them to offer v_lane_offer jobs the pick cannot refuse one by one: a job with a concurrency key may be refused
      -- for a key this claim takes, so the read goes on past each keyed job (read again, deeper: the rows this
      -- transaction locked are read again, not skipped), up to p_limit more (0017).
      LOOP
        v_found := '{}';
        v_keyed := 0;
        SELECT s.priority INTO v_priority FROM job_state s
        WHERE s.status IN ('pending', 'retrying') AND NOT s.held AND s.operation_id = v_op AND s.lane = v_lane
        ORDER BY s.priority DESC LIMIT 1;
        WHILE v_priority IS NOT NULL AND cardinality(v_found) < v_lane_limit LOOP
          SELECT coalesce(array_agg(h.seq), '{}'), count(h.concurrency_key) INTO v_more, v_more_keyed FROM (
            SELECT s.seq, s.concurrency_key FROM job_state s
            WHERE s.status IN ('pending', 'retrying') AND NOT s.held AND s.operation_id = v_op AND s.lane = v_lane
              AND s.priority = v_priority AND s.run_at <= p_now
              AND (s.expires_at IS NULL OR s.expires_at > p_now)
              AND (s.concurrency_key IS NULL
                OR (NOT v_any_paused AND NOT v_any_multi AND NOT EXISTS (
                  SELECT 1 FROM job_state r WHERE r.concurrency_key = s.concurrency_key AND r.status = 'running'))
                OR ((v_any_paused OR v_any_multi)
                  AND opqueue_key_open(s.concurrency_key, s.operation_id, v_any_paused, v_any_multi)))
            ORDER BY s.run_at, s.seq
            LIMIT v_lane_limit - cardinality(v_found)
            FOR UPDATE SKIP LOCKED
          ) AS h;
          v_found := v_found || v_more;
          v_keyed := v_keyed + v_more_keyed;
          v_priority := (SELECT s.priority FROM job_state s
                         WHERE s.status IN ('pending', 'retrying') AND NOT s.held AND s.operation_id = v_op AND s.lane = v_lane
                           AND s.priority < v_priority
                         ORDER BY s.priority DESC LIMIT 1);
        END LOOP;
        EXIT WHEN cardinality(v_found) < v_lane_limit
          OR least(v_lane_offer + v_keyed, v_lane_offer + p_limit) <= v_lane_limit;
        v_lane_limit := least(v_lane_offer + v_keyed, v_lane_offer + p_limit);
      END LOOP;
      -- A lane's first job may already be a candidate (from the head of the queue): the lane is represented then.
      v_candidates := v_candidates || v_found;
      v_lane_jobs := v_lane_jobs + least(cardinality(v_found), v_lane_offer);
    END LOOP;
  ELSIF NOT v_all_due THEN
    -- A backlog, ungated: the first due job of each of the lanes after the cursor, as many lanes as the head of the
    -- queue lacks to fill the claim with a lane each (so a head of one user's jobs makes room for p_limit - 1 other
    -- users), and at least an eighth of p_limit, so lanes behind a head of many lanes still get their turn. One
    -- statement: a skip scan of job_state_lane, each step the next lane after the last, then (the wrap) the lanes
    -- before the cursor from the first on; each lane's first due job with an open key, locked. Every probe is bounded
    -- by plain column bounds that end the index scan (PostgreSQL ends a scan at a row comparison's first column only):
    -- the index still holds the entries of jobs claimed since the last vacuum, at the head of their lanes, and a probe
    -- that ran on into the cursor's lane would step through all of them.
    v_visits := greatest(p_limit - cardinality(v_head_lanes), (p_limit + 7) / 8);
    WITH RECURSIVE lanes (n, operation_id, lane, priority, run_at, wrapped) AS (
      SELECT 1, f.operation_id, f.lane, f.priority, f.run_at, f.wrapped FROM (
        (SELECT s.operation_id, s.lane, s.priority, s.run_at, false AS wrapped FROM job_state s
         WHERE s.status IN ('pending', 'retrying') AND NOT s.held AND (s.operation_id, s.lane) > (v_op, v_lane COLLATE "C")
         ORDER BY s.operation_id, s.lane, s.priority DESC, s.run_at LIMIT 1)
        UNION ALL
        (SELECT s.operation_id, s.lane, s.priority, s.run_at, true FROM job_state s
         WHERE s.status IN ('pending', 'retrying') AND NOT s.held AND s.operation_id < v_op
         ORDER BY s.operation_id, s.lane, s.priority DESC, s.run_at LIMIT 1)
        UNION ALL
        (SELECT s.operation_id, s.lane, s.priority, s.run_at, true FROM job_state s
         WHERE s.status IN ('pending', 'retrying') AND NOT s.held AND s.operation_id = v_op AND s.lane < v_lane COLLATE "C"
         ORDER BY s.operation_id, s.lane, s.priority DESC, s.run_at LIMIT 1)
        LIMIT 1
      ) AS f
      UNION ALL
      SELECT l.n + 1, f.operation_id, f.lane, f.priority, f.run_at, f.wrapped FROM lanes l CROSS JOIN LATERAL (
        -- Before the wrap: the next lane, else the first lane before the cursor.
        (SELECT s.operation_id, s.lane, s.priority, s.run_at, false AS wrapped FROM job_state s
         WHERE NOT l.wrapped AND s.status IN ('pending', 'retrying') AND NOT s.held AND (s.operation_id, s.lane) > (l.operation_id, l.lane)
         ORDER BY s.operation_id, s.lane, s.priority DESC, s.run_at LIMIT 1)
        UNION ALL
        (SELECT s.operation_id, s.lane, s.priority, s.run_at, true FROM job_state s
         WHERE NOT l.wrapped AND s.status IN ('pending', 'retrying') AND NOT s.held AND s.operation_id < v_op
         ORDER BY s.operation_id, s.lane, s.priority DESC, s.run_at LIMIT 1)
        UNION ALL
        (SELECT s.operation_id, s.lane, s.priority, s.run_at, true FROM job_state s
         WHERE NOT l.wrapped AND s.status IN ('pending', 'retrying') AND NOT s.held AND s.operation_id = v_op AND s.lane < v_lane COLLATE "C"
         ORDER BY s.operation_id, s.lane, s.priority DESC, s.run_at LIMIT 1)
        -- After it: the next lane before the cursor.
        UNION ALL
        (SELECT s.operation_id, s.lane, s.priority, s.run_at, true FROM job_state s
         WHERE l.wrapped AND l.operation_id < v_op AND s.status IN ('pending', 'retrying') AND NOT s.held
           AND (s.operation_id, s.lane) > (l.operation_id, l.lane) AND s.operation_id < v_op
         ORDER BY s.operation_id, s.lane, s.priority DESC, s.run_at LIMIT 1)
        UNION ALL
        (SELECT s.operation_id, s.lane, s.priority, s.run_at, true FROM job_state s
         WHERE l.wrapped AND l.operation_id < v_op AND s.status IN ('pending', 'retrying') AND NOT s.held AND s.operation_id = v_op AND s.lane < v_lane COLLATE "C"
         ORDER BY s.operation_id, s.lane, s.priority DESC, s.run_at LIMIT 1)
        UNION ALL
        (SELECT s.operation_id, s.lane, s.priority, s.run_at, true FROM job_state s
         WHERE l.wrapped AND l.operation_id = v_op AND s.status IN ('pending', 'retrying') AND NOT s.held
           AND s.operation_id = v_op AND s.lane > l.lane AND s.lane < v_lane COLLATE "C"
         ORDER BY s.operation_id, s.lane, s.priority DESC, s.run_at LIMIT 1)
        LIMIT 1
      ) AS f
      WHERE l.n < v_visits
    )
    SELECT coalesce(array_agg(h.seq) FILTER (WHERE h.seq IS NOT NULL), '{}'), count(*),
      (array_agg(v.operation_id ORDER BY v.n DESC))[1], (array_agg(v.lane ORDER BY v.n DESC))[1],
      coalesce(array_agg(v.operation_id) FILTER (WHERE h.seq IS NOT NULL), '{}'),
      coalesce(array_agg(h.concurrency_key) FILTER (WHERE h.concurrency_key IS NOT NULL), '{}')
    INTO v_found, v_lanes, v_next_op, v_next_lane, v_found_ops, v_found_keys
    FROM lanes v
    LEFT JOIN LATERAL (
      -- A lane's first due job, a priority at a time from the highest down (as in the gated walk above): the lane's
      -- priorities with their earliest run times (the highest came with the lane), each below by a probe, then at each
      -- with a job due the first due job by a range the run time bounds. A lane the head of the queue has is represented
      -- by its first job already: not read again.
      WITH RECURSIVE priorities (priority, run_at) AS (
        SELECT v.priority, v.run_at WHERE NOT (v.operation_id || chr(1) || v.lane = ANY (v_head_lanes))
        UNION ALL
        SELECT b.priority, b.run_at FROM priorities p CROSS JOIN LATERAL (
          SELECT s.priority, s.run_at FROM job_state s
          WHERE s.status IN ('pending', 'retrying') AND NOT s.held AND s.operation_id = v.operation_id AND s.lane = v.lane
            AND s.priority < p.priority
          ORDER BY s.priority DESC, s.run_at LIMIT 1) AS b
      )
      SELECT d.seq, d.concurrency_key
      FROM (SELECT p.priority FROM priorities p WHERE p.run_at <= p_now ORDER BY p.priority DESC) AS p
      CROSS JOIN LATERAL (
        SELECT s.seq, s.concurrency_key FROM job_state s
        WHERE s.status IN ('pending', 'retrying') AND NOT s.held AND s.operation_id = v.operation_id AND s.lane = v.lane
          AND s.priority = p.priority AND s.run_at <= p_now
          AND (s.expires_at IS NULL OR s.expires_at > p_now)
          AND (s.concurrency_key IS NULL
            OR (NOT v_any_paused AND NOT v_any_multi AND NOT EXISTS (
              SELECT 1 FROM job_state r WHERE r.concurrency_key = s.concurrency_key AND r.status = 'running'))
            OR ((v_any_paused OR v_any_multi)
              AND opqueue_key_open(s.concurrency_key, s.operation_id, v_any_paused, v_any_multi)))
        ORDER BY s.run_at, s.seq
        LIMIT 1
        FOR UPDATE SKIP LOCKED
      ) AS d
      ORDER BY p.priority DESC
      LIMIT 1
    ) AS h ON true;
    v_candidates := v_candidates || v_found;
    v_candidate_ops := v_candidate_ops || v_found_ops;
    v_candidate_keys := v_candidate_keys || v_found_keys;
    IF v_lanes > 0 THEN
      v_op := v_next_op;
      v_lane := v_next_lane;
    END IF;
  END IF;
  IF cardinality(v_candidates) = 0 THEN
    IF v_lanes > 0 THEN
      RETURN NEXT json_build_object('cursor', json_build_array(v_op, v_lane));
    END IF;
    RETURN;
  END IF;

  -- 2. Locks, operations in name order (claims never wait on each other in a cycle), then keys, tried. Ungated, every
  -- operation's lock is shared (no claim waits on another), taken in one statement. The candidates' operations and keys
  -- came with them, except on the walk lane by lane (gated), whose candidates are read again for them.
  IF NOT v_controlled THEN
    SELECT coalesce(array_agg(o.operation_id), '{}') INTO v_shared
    FROM (SELECT DISTINCT c.operation_id FROM unnest(v_candidate_ops) AS c(operation_id) ORDER BY 1) AS o
    CROSS JOIN LATERAL (SELECT pg_advisory_xact_lock_shared(hashtext('opqueue.operation:' || o.operation_id))) AS l;
  ELSE
    FOR v_operation IN
      SELECT DISTINCT s.operation_id,
        coalesce(oc.max_concurrency IS NOT NULL OR oc.rate_limit IS NOT NULL OR oc.key_rate_limit IS NOT NULL, false)
          AS limited
      FROM job_state s LEFT JOIN operation_controls oc ON oc.operation_id = s.operation_id
      WHERE s.seq = ANY (v_candidates)
      ORDER BY s.operation_id
    LOOP
      IF v_operation.limited THEN
        PERFORM pg_advisory_xact_lock(hashtext('opqueue.operation:' || v_operation.operation_id));
      ELSE
        PERFORM pg_advisory_xact_lock_shared(hashtext('opqueue.operation:' || v_operation.operation_id));
        v_shared := v_shared || v_operation.operation_id;
      END IF;
    END LOOP;
  END IF;
  IF v_by_lane THEN
    v_candidate_keys := (SELECT coalesce(array_agg(s.concurrency_key), '{}') FROM job_state s
                         WHERE s.seq = ANY (v_candidates) AND s.concurrency_key IS NOT NULL);
  END IF;
  IF cardinality(v_candidate_keys) = 0 THEN
    v_keys := '{}';
  ELSE
    SELECT coalesce(array_agg(k.key), '{}') INTO v_keys FROM (
      SELECT DISTINCT c.key FROM unnest(v_candidate_keys) AS c(key)
    ) AS k
    WHERE pg_try_advisory_xact_lock(hashtext('opqueue.key:' || k.key));
  END IF;

  -- What the pick reads of the gates is read after the locks: a pause or a change of limits that committed meanwhile
  -- is seen (a key's pause too: it takes the key's lock, which this claim then holds or leaves). An operation limited
  -- since the candidates were read holds only its shared lock here: it gets no job from this claim (v_shared), which
  -- could not count its jobs alone.
  SELECT
    EXISTS (SELECT 1 FROM operation_controls WHERE paused_at IS NOT NULL OR rate_limit IS NOT NULL
              OR key_rate_limit IS NOT NULL OR max_concurrency IS NOT NULL),
    EXISTS (SELECT 1 FROM operation_controls WHERE concurrency_limit > 1),
    EXISTS (SELECT 1 FROM paused_keys)
  INTO v_controlled, v_any_multi, v_any_paused;

  -- 3. The pick: a new statement, so its snapshot includes whatever the claims these locks waited for committed.
  -- Without gates beyond one running job per key, the pick is the contract's with turns: a job per key, none whose
  -- key runs (the key's lock is held), in order of priority, turn, run time and creation.
  IF NOT v_controlled AND NOT v_any_multi AND NOT v_any_paused THEN
    WITH candidate AS (
      SELECT s.seq, s.concurrency_key, s.priority, s.run_at,
        row_number() OVER (PARTITION BY s.operation_id, s.lane ORDER BY s.priority DESC, s.run_at, s.seq) AS turn
      FROM job_state s
      WHERE s.seq = ANY (v_candidates) AND (s.concurrency_key IS NULL OR (s.concurrency_key = ANY (v_keys)
        AND NOT EXISTS (SELECT 1 FROM job_state q WHERE q.concurrency_key = s.concurrency_key AND q.status = 'running')))
    ), picked AS (
      SELECT k.seq FROM (
        SELECT c.*,
          row_number() OVER (PARTITION BY c.concurrency_key ORDER BY c.priority DESC, c.turn, c.run_at, c.seq) AS in_key
        FROM candidate c
      ) AS k
      WHERE k.concurrency_key IS NULL OR k.in_key = 1
      ORDER BY k.priority DESC, k.turn, k.run_at, k.seq
      LIMIT p_limit
    )
    SELECT coalesce(array_agg(seq), '{}') INTO v_picked FROM picked;
  ELSE
    -- With gates, one candidate at a time in claim order, each taken if every gate still lets it through as the jobs
    -- taken before it left them: a job refused (for its key, its lane's rate or its operation's room) uses none of
    -- them, so a job behind it is not refused for it (0017; before, each gate counted every candidate ahead of a job).
    v_taken_ops := '{}';
    v_taken_lanes := '{}';
    v_taken_keys := '{}';
    FOR v_pick IN
      WITH candidate AS (
        SELECT s.seq, s.operation_id, s.lane, s.concurrency_key, s.priority, s.run_at,
          row_number() OVER (PARTITION BY s.operation_id, s.lane ORDER BY s.priority DESC, s.run_at, s.seq) AS turn
        FROM job_state s
        WHERE s.seq = ANY (v_candidates) AND (s.concurrency_key IS NULL OR s.concurrency_key = ANY (v_keys))
      ), operation_room AS MATERIALIZED (
        SELECT o.operation_id, CASE WHEN o.room IS NOT NULL AND o.operation_id = ANY (v_shared) THEN 0 ELSE o.room END
          AS room
        FROM (SELECT d.operation_id, opqueue_operation_room(d.operation_id, v_now_ms) AS room
              FROM (SELECT DISTINCT c.operation_id FROM candidate c) AS d) AS o
        WHERE v_controlled
      ), lane_room AS MATERIALIZED (
        SELECT l.operation_id, l.lane, CASE WHEN l.operation_id = ANY (v_shared) THEN 0 ELSE opqueue_rate_allowance(
          (SELECT b.tat FROM rate_buckets b WHERE b.operation_id = l.operation_id AND b.rate_key = substr(l.lane, 3) COLLATE "default"),
          v_now_ms, oc.key_rate_limit, oc.key_rate_period_ms, oc.key_rate_burst) END AS room
        FROM (SELECT DISTINCT c.operation_id, c.lane FROM candidate c WHERE c.lane LIKE 'r:%') AS l
        JOIN operation_controls oc ON oc.operation_id = l.operation_id AND oc.key_rate_limit IS NOT NULL
      ), key_room AS MATERIALIZED (
        SELECT k.key,
          (SELECT count(*) FROM job_state q WHERE q.concurrency_key = k.key AND q.status = 'running') AS running,
          EXISTS (SELECT 1 FROM paused_keys pk WHERE pk.concurrency_key = k.key) AS paused
        FROM (SELECT DISTINCT c.concurrency_key AS key FROM candidate c WHERE c.concurrency_key IS NOT NULL) AS k
      )
      SELECT c.seq, c.operation_id, c.lane, c.concurrency_key, o.room AS operation_room, l.room AS lane_room,
        k.running AS key_running, k.paused AS key_paused, coalesce(oc.concurrency_limit, 1) AS key_limit
      FROM candidate c
      LEFT JOIN operation_controls oc ON oc.operation_id = c.operation_id
      LEFT JOIN operation_room o ON o.operation_id = c.operation_id
      LEFT JOIN lane_room l ON l.operation_id = c.operation_id AND l.lane = c.lane
      LEFT JOIN key_room k ON k.key = c.concurrency_key
      ORDER BY c.priority DESC, c.turn, c.run_at, c.seq
    LOOP
      EXIT WHEN cardinality(v_picked) >= p_limit;
      -- What the jobs taken so far used: their operations, lanes and keys, one entry per job (a claim takes few).
      CONTINUE WHEN v_pick.operation_room IS NOT NULL
        AND cardinality(array_positions(v_taken_ops, v_pick.operation_id)) >= v_pick.operation_room;
      CONTINUE WHEN v_pick.lane_room IS NOT NULL
        AND cardinality(array_positions(v_taken_lanes, v_pick.operation_id || chr(1) || v_pick.lane)) >= v_pick.lane_room;
      CONTINUE WHEN v_pick.concurrency_key IS NOT NULL AND (v_pick.key_paused
        OR cardinality(array_positions(v_taken_keys, v_pick.concurrency_key)) + v_pick.key_running >= v_pick.key_limit);
      v_picked := v_picked || v_pick.seq;
      v_taken_ops := v_taken_ops || v_pick.operation_id;
      v_taken_lanes := v_taken_lanes || (v_pick.operation_id || chr(1) || v_pick.lane);
      v_taken_keys := v_taken_keys || v_pick.concurrency_key;
    END LOOP;
  END IF;

  -- 4. The claim, and the claimed jobs answered, in one statement of their own: its snapshot is taken after the claim
  -- got its row locks, so a dedupe upsert that committed while the claim was on its way is seen whole, its request with
  -- its run time. Every picked job is a candidate this claim locked, so every one is claimed.
  IF cardinality(v_picked) > 0 THEN
    RETURN QUERY
    WITH claimed AS (
      UPDATE job_state s SET status = 'running', attempt = s.attempt + 1, started_at = p_now, heartbeat_at = p_now,
        held = false, claim_count = s.claim_count + 1
      WHERE s.seq = ANY (v_picked)
      RETURNING s.*
    )
    SELECT json_build_array(
      j.seq, j.id, j.operation_id, s.status, s.attempt, j.max_attempts, s.priority,
      floor(extract(epoch FROM s.run_at) * 1000)::bigint, floor(extract(epoch FROM j.created_at) * 1000)::bigint,
      floor(extract(epoch FROM s.started_at) * 1000)::bigint, floor(extract(epoch FROM s.finished_at) * 1000)::bigint,
      floor(extract(epoch FROM s.heartbeat_at) * 1000)::bigint, s.dedupe_key, s.concurrency_key, j.rate_key,
      j.enqueued_by_operation_id, j.parent_job_id, j.original_request_id, j.user_id, j.authority, j.request, s.result,
      j.traceparent, floor(extract(epoch FROM s.expires_at) * 1000)::bigint, j.callbacks, s.claim_count)
    FROM claimed s JOIN job_specs j ON j.seq = s.seq;
  END IF;

  -- 5. Buckets: an operation's moves on by T for each job it started, a rate key's likewise.
  IF v_controlled AND cardinality(v_picked) > 0 THEN
    INSERT INTO rate_buckets AS b (operation_id, rate_key, tat)
      SELECT s.operation_id, '', v_now_ms + count(*) * (oc.rate_period_ms::double precision / oc.rate_limit)
      FROM job_state s JOIN operation_controls oc ON oc.operation_id = s.operation_id
      WHERE s.seq = ANY (v_picked) AND oc.rate_limit IS NOT NULL
      GROUP BY s.operation_id, oc.rate_period_ms, oc.rate_limit
      UNION ALL
      SELECT s.operation_id, substr(s.lane, 3),
        v_now_ms + count(*) * (oc.key_rate_period_ms::double precision / oc.key_rate_limit)
      FROM job_state s JOIN operation_controls oc ON oc.operation_id = s.operation_id
      WHERE s.seq = ANY (v_picked) AND oc.key_rate_limit IS NOT NULL AND s.lane LIKE 'r:%'
      GROUP BY s.operation_id, s.lane, oc.key_rate_period_ms, oc.key_rate_limit
    ON CONFLICT (operation_id, rate_key) DO UPDATE SET tat = greatest(b.tat, v_now_ms) + (excluded.tat - v_now_ms);
  END IF;

  IF v_lanes > 0 THEN
    RETURN NEXT json_build_object('cursor', json_build_array(v_op, v_lane));
  END IF;
END
$function$;

-- Version 17's claim, for its nodes during a rolling upgrade: version 18's, each job answered as an object again.
CREATE OR REPLACE FUNCTION opqueue_claim(p_now timestamptz, p_limit integer, p_candidates integer, p_after_op text,
    p_after_lane text) RETURNS SETOF json
LANGUAGE sql
AS $$
  SELECT CASE WHEN json_typeof(c) = 'array' THEN json_build_object(
      'seq', c->0, 'id', c->1, 'operationId', c->2, 'status', c->3, 'attempt', c->4, 'maxAttempts', c->5,
      'priority', c->6, 'runAt', c->7, 'createdAt', c->8, 'startedAt', c->9, 'finishedAt', c->10,
      'heartbeatAt', c->11, 'dedupeKey', c->12, 'concurrencyKey', c->13, 'rateKey', c->14,
      'enqueuedByOperationId', c->15, 'parentJobId', c->16, 'originalRequestId', c->17, 'userId', c->18,
      'authority', c->19, 'request', c->20, 'result', c->21, 'traceparent', c->22, 'expiresAt', c->23,
      'callbacks', c->24, 'claimCount', c->25)
    ELSE c END
  FROM opqueue_claim_batch(p_now, p_limit, p_candidates, p_after_op, p_after_lane) AS c
$$;

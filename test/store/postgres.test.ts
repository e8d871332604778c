/**
 * The PostgreSQL engine: the conformance suite, each test in its own schema of the server named by
 * OPQUEUE_TEST_DATABASE_URL (skipped, with that reason, when it is not set).
 */
import assert from "node:assert/strict";
import { describe, test, type TestContext } from "node:test";
import pg from "pg";
import { ManualClock } from "../../src/clock.js";
import { rateAllowance, type RateLimit } from "../../src/flow/limits.js";
import { readMigrations } from "../../src/store/migrations.js";
import { leadingPlain } from "../../src/store/postgres/insert.js";
import { connectionSettings, PgConnection } from "../../src/store/postgres/connection.js";
import { migrate } from "../../src/store/postgres/migrate.js";
import { statisticsRefresh } from "../../src/store/postgres/upkeep.js";
import { batchArgument, CLAIM_FIELDS, insertArgument, type InsertAnswer } from "../../src/store/postgres/rows.js";
import { SETTLED_SINCE } from "../../src/store/postgres/sql/maintenance.js";
import type { PostgresStore } from "../../src/store/postgres/postgres-store.js";
import type { JobInsertParams } from "../../src/store/store.js";
import { dropSchema, freshSchemaName, POSTGRES_SKIP, POSTGRES_URL, openPostgresStore } from "../helpers/postgres.js";
import { until } from "../helpers/cluster.js";
import { jobParams, makeFinished, SUCCESS, T0, UNAVAILABLE } from "./conformance/harness.js";
import { runStoreConformance } from "./conformance/index.js";

/** A connection of its own to `schema`, for SQL the store does not offer; closed after the test. */
async function schemaClient(t: TestContext, schema: string): Promise<pg.Client> {
  const db = new pg.Client({ connectionString: POSTGRES_URL, options: `-c search_path=${schema}` });
  await db.connect();
  t.after(() => db.end());
  return db;
}

/**
 * `store` listening for other nodes' notifications until the test ends: the run times heard, in order, and `next`, a
 * promise of the next one (asked for before what sends it).
 */
async function listening(
  t: TestContext,
  store: PostgresStore,
): Promise<{ calls: number[]; next: () => Promise<void> }> {
  const calls: number[] = [];
  const waiters: Array<() => void> = [];
  const stop = await store.jobAvailableListen((runAt) => {
    calls.push(runAt);
    waiters.splice(0).forEach((resolve) => resolve());
  });
  t.after(() => stop());
  return { calls, next: () => new Promise<void>((resolve) => waiters.push(resolve)) };
}

if (POSTGRES_SKIP) {
  test("PostgreSQL store conformance", { skip: POSTGRES_SKIP }, () => undefined);
} else {
  runStoreConformance({
    engine: "postgres",
    open: async (clock) => {
      const { store, cleanup } = await openPostgresStore(clock);
      return { store, cleanup };
    },
  });
}

if (!POSTGRES_SKIP) {
  describe("PostgreSQL notifications", () => {
    test("an insert wakes a listener on another connection with the job's run time", async (t) => {
      const clock = new ManualClock(Date.UTC(2026, 10, 21, 12, 0, 0));
      const writer = await openPostgresStore(clock);
      t.after(() => writer.cleanup());
      const reader = await openPostgresStore(clock, { schema: writer.schema });
      t.after(() => reader.store.close());
      const woken: number[] = [];
      let resolveWoken: () => void = () => undefined;
      const gotOne = new Promise<void>((resolve) => (resolveWoken = resolve));
      const stop = await reader.store.jobAvailableListen((runAt) => {
        woken.push(runAt);
        resolveWoken();
      });
      t.after(() => stop());
      await Promise.all([
        writer.store.jobInsert(jobParams({ runAt: clock.now() + 5000 })),
        writer.store.jobInsert(jobParams({ runAt: clock.now() + 1000 })),
      ]);
      await gotOne;
      assert.deepEqual(woken, [clock.now() + 1000]);
    });

    test("a store's listener skips what its own pool made (the node woke itself for it) and hears other nodes'", async (t) => {
      const clock = new ManualClock(Date.UTC(2026, 10, 21, 12, 0, 0));
      const self = await openPostgresStore(clock);
      t.after(() => self.cleanup());
      const other = await openPostgresStore(clock, { schema: self.schema });
      t.after(() => other.store.close());
      const woken: number[] = [];
      let resolveWoken: () => void = () => undefined;
      const gotOne = new Promise<void>((resolve) => (resolveWoken = resolve));
      const stop = await self.store.jobAvailableListen((runAt) => {
        woken.push(runAt);
        resolveWoken();
      });
      t.after(() => stop());
      await self.store.jobInsert(jobParams({ runAt: clock.now() + 1000 }));
      // Notifications reach the listener in commit order: the other store's, heard, comes after this store's own.
      await other.store.jobInsert(jobParams({ runAt: clock.now() + 2000 }));
      await gotOne;
      assert.deepEqual(woken, [clock.now() + 2000]);
    });

    test("jobs the node left unannounced send no notification; a batch's names its earliest announced job", async (t) => {
      const clock = new ManualClock(Date.UTC(2026, 10, 21, 12, 0, 0));
      const writer = await openPostgresStore(clock);
      t.after(() => writer.cleanup());
      const reader = await openPostgresStore(clock, { schema: writer.schema });
      t.after(() => reader.store.close());
      const { calls: woken, next } = await listening(t, reader.store);
      const quiet = (runAt: number, more: Partial<JobInsertParams> = {}) =>
        jobParams({ runAt, announce: false, ...more });

      // A batch of quiet items only, plain and keyed (the one-statement path and the item-by-item loop), then an
      // announced job: the only notification is the announced one's.
      let heard = next();
      await writer.store.jobInsertMany({
        jobs: [quiet(clock.now() + 100), quiet(clock.now() + 200, { dedupeKey: "k" }), quiet(clock.now() + 300)],
      });
      await writer.store.jobInsert(jobParams({ runAt: clock.now() + 9000 }));
      await heard;
      assert.deepEqual(woken, [clock.now() + 9000]);

      // A mixed batch names its earliest announced job, not an earlier quiet one; in either path.
      for (const keyed of [false, true]) {
        heard = next();
        await writer.store.jobInsertMany({
          jobs: [
            quiet(clock.now() + 10),
            jobParams({ runAt: clock.now() + 700, ...(keyed ? { dedupeKey: "a" } : {}) }),
            jobParams({ runAt: clock.now() + 500 }),
            quiet(clock.now() + 20, keyed ? { dedupeKey: "b" } : {}),
          ],
        });
        await heard;
        assert.equal(woken.at(-1), clock.now() + 500);
      }
      assert.equal(woken.length, 3);
    });

    test("a listener in another schema is not woken", async (t) => {
      const clock = new ManualClock(Date.UTC(2026, 10, 21, 12, 0, 0));
      const a = await openPostgresStore(clock);
      t.after(() => a.cleanup());
      const b = await openPostgresStore(clock);
      t.after(() => b.cleanup());
      const woken: string[] = [];
      let resolveA: () => void = () => undefined;
      const aWoken = new Promise<void>((resolve) => (resolveA = resolve));
      const stopA = await a.store.jobAvailableListen(() => {
        woken.push("a");
        resolveA();
      });
      const stopB = await b.store.jobAvailableListen(() => woken.push("b"));
      t.after(async () => {
        await stopA();
        await stopB();
      });
      // Another node on a's schema inserts: a's own inserts are not passed on to its listener.
      const aOther = await openPostgresStore(clock, { schema: a.schema });
      t.after(() => aOther.store.close());
      await aOther.store.jobInsert(jobParams());
      await aWoken;
      // b's notification, had it been sent, would have arrived on its own connection no later than a's second one.
      await aOther.store.jobInsert(jobParams());
      assert.ok(!woken.includes("b"));
    });

    test("the listener reconnects after its connection is terminated and calls back once", async (t) => {
      const clock = new ManualClock(Date.UTC(2026, 10, 21, 12, 0, 0));
      const opened = await openPostgresStore(clock);
      t.after(() => opened.cleanup());
      const { calls, next } = await listening(t, opened.store);
      const admin = new pg.Client({ connectionString: POSTGRES_URL });
      await admin.connect();
      t.after(() => admin.end());
      const reconnected = next();
      await admin.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'opqueue-listener' AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()",
      );
      await reconnected;
      const woken = next();
      // Another node's insert: the store's own would not be passed on.
      const other = await openPostgresStore(clock, { schema: opened.schema });
      t.after(() => other.store.close());
      await other.store.jobInsert(jobParams());
      await woken;
      assert.ok(calls.length >= 2);
    });
  });
}

if (!POSTGRES_SKIP) {
  describe("PostgreSQL commit modes", () => {
    test("claims, outcomes and heartbeats commit lazily; inserts, admin actions and requeues durably", async (t) => {
      const clock = new ManualClock(T0);
      // One connection, so a lazy statement that leaked its setting would show in the durable ones after it.
      const opened = await openPostgresStore(clock, { poolSize: 1 });
      t.after(() => opened.cleanup());
      const { store, schema } = opened;
      const db = await schemaClient(t, schema);
      // A deferred constraint trigger runs at commit, after the statement's own work: it sees the setting the
      // commit itself uses.
      await db.query(`
        CREATE TABLE commit_modes (mode text NOT NULL);
        CREATE FUNCTION record_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN INSERT INTO commit_modes VALUES (current_setting('synchronous_commit')); RETURN NULL; END $$;
        CREATE CONSTRAINT TRIGGER job_state_commit_mode AFTER INSERT OR UPDATE ON job_state
          DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION record_commit_mode();`);
      const modesOf = async (write: () => Promise<unknown>): Promise<string[]> => {
        await db.query("TRUNCATE commit_modes");
        await write();
        const rows = await db.query<{ mode: string }>("SELECT DISTINCT mode FROM commit_modes ORDER BY mode");
        return rows.rows.map((row) => row.mode);
      };

      const inserted = await store.jobInsert(jobParams({ id: "job-commit-a" }));
      assert.equal(inserted.kind, "created");
      assert.deepEqual(await modesOf(() => store.jobClaimMany({ limit: 1 })), ["off"]);
      assert.deepEqual(await modesOf(() => store.jobHeartbeatMany({ jobs: [{ id: "job-commit-a", attempt: 1 }] })), [
        "off",
      ]);
      assert.deepEqual(
        await modesOf(() =>
          store.jobSetStateIfRunningMany({
            outcomes: [{ id: "job-commit-a", attempt: 1, status: "retrying", delayMs: 0, result: UNAVAILABLE }],
          }),
        ),
        ["off"],
      );
      assert.deepEqual(await modesOf(() => store.jobInsert(jobParams({ id: "job-commit-b" }))), ["on"]);
      await store.jobClaimMany({ limit: 2 });
      assert.deepEqual(
        await modesOf(() =>
          store.jobSetStateIfRunningMany({
            outcomes: [{ id: "job-commit-a", attempt: 2, status: "succeeded", result: SUCCESS }],
          }),
        ),
        ["off"],
      );
      assert.deepEqual(
        await modesOf(() =>
          store.jobRequeueMany({
            jobs: [{ id: "job-commit-b", attempt: 1 }],
            delayMs: 0,
            errorBody: "lease expired",
            refund: "if-last",
          }),
        ),
        ["on"],
      );
      assert.deepEqual(await modesOf(() => store.jobCancel({ id: "job-commit-b", actor: "admin", role: "admin" })), [
        "on",
      ]);
      assert.deepEqual(await modesOf(() => store.jobRetry({ id: "job-commit-b", actor: "admin", role: "admin" })), [
        "on",
      ]);
    });
  });
}

if (!POSTGRES_SKIP) {
  describe("PostgreSQL claim and heartbeat plans", () => {
    test("a claim counts the due jobs by walking job_state_run_at in order, never with a bitmap, whatever the statistics", async (t) => {
      const opened = await openPostgresStore(new ManualClock(T0));
      t.after(() => opened.cleanup());
      const { store, schema } = opened;
      const db = await schemaClient(t, schema);
      // The claim's plans are made from the table's statistics, and made again after each ANALYZE. Statistics taken
      // while 1 job in 30 was pending and the rest finished, in no particular order of run time, then twenty thousand
      // jobs due: planned from such statistics, version 3's count of the due jobs read every due job into a bitmap,
      // or walked the claim index, before stopping at its limit.
      for (let n = 0; n < 10; n++) await store.jobInsert(jobParams({ id: `job-plan-${n}` }));
      await db.query(
        `
        WITH specs AS (
          INSERT INTO job_specs (id, operation_id, max_attempts, created_at, enqueued_by_operation_id,
              original_request_id, user_id, authority, request)
            SELECT 'job-bulk-' || n, operation_id, max_attempts, created_at, enqueued_by_operation_id,
              original_request_id, user_id, authority, request
            FROM jobs, generate_series(1, 20000) AS n WHERE id = 'job-plan-0'
            RETURNING seq, split_part(id, '-', 3)::integer AS n, created_at, operation_id, user_id)
        INSERT INTO job_state (seq, status, run_at, finished_at, operation_id, lane)
          SELECT seq, CASE WHEN n % 30 = 0 THEN 'pending' ELSE 'succeeded' END,
            $1::timestamptz - (n * 7919 % 20000) * interval '1 ms', CASE WHEN n % 30 = 0 THEN NULL ELSE created_at END,
            operation_id, 'u:' || user_id
          FROM specs`,
        [new Date(T0)],
      );
      await db.query("ANALYZE job_state");
      await db.query("UPDATE job_state SET status = 'pending', finished_at = NULL WHERE status = 'succeeded'");
      // auto_explain reports each statement's plan, the function's own statements included, as it runs.
      const plans: string[] = [];
      db.on("notice", (notice) => plans.push(notice.message ?? ""));
      await db.query("LOAD 'auto_explain'");
      await db.query(`SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;
        SET client_min_messages = log`);
      const claimed = await db.query("SELECT c::text AS job FROM opqueue_claim_batch($1, 1, 2, '', '') AS c", [
        new Date(T0),
      ]);
      await db.query("SET client_min_messages = notice");
      assert.equal(claimed.rows.filter((row) => Array.isArray(JSON.parse(row.job))).length, 1);
      const counting = plans.find((plan) => plan.includes("SELECT count(*)"));
      assert.ok(counting, `the due jobs were counted: ${plans.join("\n")}`);
      assert.match(counting, /Index (Only )?Scan using job_state_run_at/);
      for (const plan of plans) assert.doesNotMatch(plan, /Bitmap|Seq Scan on job_state/, plan);
    });

    test("a heartbeat is a HOT update: no index of job_state reads heartbeat_at, and an update of heartbeat_at alone counts as HOT", async (t) => {
      const clock = new ManualClock(T0);
      const opened = await openPostgresStore(clock);
      t.after(() => opened.cleanup());
      const { store, schema } = opened;
      const db = await schemaClient(t, schema);
      const indexes = await db.query<{ name: string; definition: string }>(
        "SELECT indexrelid::regclass::text AS name, pg_get_indexdef(indexrelid) AS definition FROM pg_index WHERE indrelid = 'job_state'::regclass",
      );
      assert.ok(indexes.rows.length > 0);
      for (const index of indexes.rows) assert.doesNotMatch(index.definition, /heartbeat_at/, index.name);

      for (let n = 0; n < 3; n++) await store.jobInsert(jobParams({ id: `job-hot-${n}` }));
      const running = await store.jobClaimMany({ limit: 3 });
      assert.equal(running.length, 3);
      // A heartbeat's update (heartbeat_at alone), in a transaction of this connection, whose counters it reads before
      // committing (the store's connections report theirs only later).
      await db.query("BEGIN");
      await db.query("UPDATE job_state SET heartbeat_at = $1 WHERE status = 'running'", [new Date(T0 + 1000)]);
      const counted = await db.query<{ updated: string; hot: string }>(
        "SELECT n_tup_upd AS updated, n_tup_hot_upd AS hot FROM pg_stat_xact_user_tables WHERE relid = 'job_state'::regclass",
      );
      await db.query("COMMIT");
      assert.deepEqual(counted.rows[0], { updated: "3", hot: "3" });

      // The lease rescue still finds them, by status, oldest heartbeat first: at T0 + 1000, job-hot-1's heartbeat (T0)
      // is past a 500 ms lease, the others' (T0 + 1000) are not.
      await store.jobHeartbeatMany({ jobs: [{ id: "job-hot-1", attempt: 1 }] });
      clock.set(T0 + 1000);
      const expired = await store.jobListExpired({ lease: { defaultMs: 500, byOperation: {} }, limit: 10 });
      assert.deepEqual(
        expired.map((job) => job.id),
        ["job-hot-1"],
      );
    });

    test("an outcome write looks its own jobs up by seq, however many running jobs the statistics never saw", async (t) => {
      const opened = await openPostgresStore(new ManualClock(T0));
      t.after(() => opened.cleanup());
      const { store, schema } = opened;
      const db = await schemaClient(t, schema);
      for (let n = 0; n < 3; n++) await store.jobInsert(jobParams({ id: `job-own-${n}` }));
      // Statistics that saw no running job, then 5,000 running jobs (long asynchronous attempts, say) they never saw.
      await db.query("ANALYZE job_state");
      await db.query(
        `WITH specs AS (
           INSERT INTO job_specs (id, operation_id, max_attempts, created_at, enqueued_by_operation_id,
               original_request_id, user_id, authority, request)
             SELECT 'job-long-' || n, operation_id, max_attempts, created_at, enqueued_by_operation_id,
               original_request_id, user_id, authority, request
             FROM jobs, generate_series(1, 5000) AS n WHERE id = 'job-own-0'
             RETURNING seq, operation_id, user_id)
         INSERT INTO job_state (seq, status, attempt, run_at, started_at, heartbeat_at, operation_id, lane)
           SELECT seq, 'running', 1, $1::timestamptz, $1::timestamptz, $1::timestamptz, operation_id, 'u:' || user_id
           FROM specs`,
        [new Date(T0)],
      );
      const claimed = await store.jobClaimMany({ limit: 3 });
      assert.equal(claimed.length, 3);
      // The engine's own function, whose statement keeps the plan made without the values, run and rolled back;
      // auto_explain shows that plan to this session (loading it needs a superuser, as the test server's role is).
      const notices: string[] = [];
      db.on("notice", (notice) => notices.push(notice.message ?? ""));
      for (const setting of [
        "LOAD 'auto_explain'",
        "SET auto_explain.log_min_duration = 0",
        "SET auto_explain.log_nested_statements = on",
        "SET auto_explain.log_analyze = on",
        "SET auto_explain.log_timing = off",
        "SET client_min_messages = log",
      ])
        await db.query(setting);
      await db.query("BEGIN");
      await db.query("SELECT * FROM opqueue_finish_many($1, $2, $3, $4, $5, $6, true)", [
        claimed.map((job) => job.id),
        claimed.map((job) => job.attempt),
        claimed.map(() => "succeeded"),
        claimed.map(() => JSON.stringify(SUCCESS)),
        new Date(T0),
        claimed.map(() => null),
      ]);
      await db.query("ROLLBACK");
      await db.query("SET client_min_messages = notice");
      const plan = notices.find((notice) => notice.includes("Update on job_state")) ?? notices.join("\n");
      const reads = [...plan.matchAll(/on job_state s\b.*\(actual rows=(\d+)/g)].map((match) => Number(match[1]));
      assert.ok(reads.length > 0, plan);
      for (const rows of reads)
        assert.ok(rows <= claimed.length, `job_state read ${rows} rows for 3 outcomes:\n${plan}`);
    });

    test("version 17's opqueue_claim, kept for its nodes during a rolling upgrade, answers each job as an object", async (t) => {
      const opened = await openPostgresStore(new ManualClock(T0));
      t.after(() => opened.cleanup());
      const { store, schema } = opened;
      const db = await schemaClient(t, schema);
      const inserted = await store.jobInsert(jobParams({ id: "job-old-node" }));
      assert.equal(inserted.kind, "created");
      const answered = await db.query<{ job: string }>(
        "SELECT c::text AS job FROM opqueue_claim($1, 1, 2, '', '') AS c",
        [new Date(T0)],
      );
      const jobs = answered.rows
        .map((row) => JSON.parse(row.job) as Record<string, unknown>)
        .filter((job) => !("cursor" in job));
      assert.equal(jobs.length, 1);
      assert.deepEqual(Object.keys(jobs[0] ?? {}), [...CLAIM_FIELDS]);
      assert.equal(jobs[0]?.["id"], "job-old-node");
      assert.equal(jobs[0]?.["status"], "running");
      assert.equal(jobs[0]?.["attempt"], 1);
    });

    test("version 19's opqueue_insert_jobs, kept for its nodes during a rolling upgrade, still answers a mixed batch in the items' order", async (t) => {
      const opened = await openPostgresStore(new ManualClock(T0));
      t.after(() => opened.cleanup());
      const { store, schema } = opened;
      const db = await schemaClient(t, schema);
      const holder = await store.jobInsert(jobParams({ id: "holder", dedupeKey: "dk" }));
      assert.equal(holder.kind, "created");
      const items = [
        jobParams({ id: "plain-1", originalRequestId: "r1" }),
        jobParams({ id: "plain-2", originalRequestId: "r2" }),
        jobParams({ id: "keyed", dedupeKey: "dk" }),
        jobParams({ id: "plain-3", originalRequestId: "r1" }),
      ];
      assert.equal(leadingPlain(items), 2);
      const answered = await db.query<{ outcome: InsertAnswer }>(
        "SELECT opqueue_insert_jobs($1::json, $2) AS outcome",
        [JSON.stringify(items.map(insertArgument)), new Date(T0)],
      );
      assert.deepEqual(
        answered.rows.map((row) => row.outcome.kind),
        ["created", "created", "deduplicated", "created"],
      );
      const seqs = answered.rows.map((row) => row.outcome.seq ?? Number(row.outcome.job?.["seq"]));
      assert.ok((seqs[0] as number) < (seqs[1] as number) && (seqs[1] as number) < (seqs[3] as number), String(seqs));
      const rows = await db.query<{ id: string }>("SELECT id FROM job_specs ORDER BY seq");
      assert.deepEqual(
        rows.rows.map((row) => row.id),
        ["holder", "plain-1", "plain-2", "plain-3"],
      );
    });

    test("a batch whose node counted an item with a dedupe key as plain is inserted item by item: the count is checked", async (t) => {
      const opened = await openPostgresStore(new ManualClock(T0));
      t.after(() => opened.cleanup());
      const { store, schema } = opened;
      const db = await schemaClient(t, schema);
      assert.equal((await store.jobInsert(jobParams({ id: "holder", dedupeKey: "dk" }))).kind, "created");
      const items = [jobParams({ id: "plain-1" }), jobParams({ id: "keyed", dedupeKey: "dk" })];
      const answered = await db.query<{ outcome: InsertAnswer }>(
        "SELECT opqueue_insert_batch($1::jsonb, $2, 2) AS outcome",
        [JSON.stringify(items.map(batchArgument)), new Date(T0)],
      );
      assert.deepEqual(
        answered.rows.map((row) => row.outcome.kind),
        ["created", "deduplicated"],
      );
      const rows = await db.query<{ id: string; dedupe_key: string | null }>(
        "SELECT id, dedupe_key FROM jobs ORDER BY seq",
      );
      assert.deepEqual(rows.rows, [
        { id: "holder", dedupe_key: "dk" },
        { id: "plain-1", dedupe_key: null },
      ]);
    });
  });
}

if (!POSTGRES_SKIP) {
  describe("PostgreSQL schema upgrades", () => {
    test("version 4 moves the jobs of a version 3 database to job_specs and job_state, every field kept", async (t) => {
      const schema = freshSchemaName();
      t.after(() => dropSchema(schema));
      const db = await schemaClient(t, schema);
      // A database at version 3, as the previous release left it, holding jobs in every state.
      await db.query(`CREATE SCHEMA ${schema}`);
      await db.query(`CREATE TABLE schema_migrations (
        version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
      for (const migration of readMigrations("postgres").slice(0, 3)) {
        await db.query(migration.sql);
        await db.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [
          migration.version,
          migration.name,
        ]);
      }
      const item = (id: string, extra: Record<string, unknown> = {}) => ({
        id,
        operation_id: "sendWelcomeEmail",
        max_attempts: 5,
        priority: 0,
        run_at: new Date(T0).toISOString(),
        dedupe_key: null,
        concurrency_key: null,
        enqueued_by_operation_id: "createUser",
        parent_job_id: null,
        original_request_id: "req-1",
        user_id: "u1",
        authority: { kind: "request", user_id: "u1" },
        request: { body: { id } },
        spawn_cap: 100,
        ...extra,
      });
      const items = [
        item("old-running", { priority: 5 }),
        item("old-succeeded", { priority: 4 }),
        item("old-dead", { priority: 3 }),
        item("old-keyed", { dedupe_key: "dk", concurrency_key: "ck", parent_job_id: "old-running" }),
        item("old-later", { run_at: new Date(T0 + 60_000).toISOString() }),
      ];
      await db.query("SELECT opqueue_insert_jobs($1::json, $2)", [JSON.stringify(items), new Date(T0)]);
      const claimed = await db.query("SELECT id FROM opqueue_claim($1, 3, 6)", [new Date(T0)]);
      assert.equal(claimed.rows.length, 3);
      await db.query(
        `UPDATE jobs SET status = 'succeeded', finished_at = $1, heartbeat_at = NULL,
        result = '{"status_code":200,"error_body":null,"terminal_reason":null}' WHERE id = 'old-succeeded'`,
        [new Date(T0 + 5)],
      );
      await db.query(
        `UPDATE jobs SET status = 'dead', finished_at = $1, heartbeat_at = NULL,
        result = '{"status_code":500,"error_body":"no","terminal_reason":"exhausted"}' WHERE id = 'old-dead'`,
        [new Date(T0 + 6)],
      );
      const rowsOf = async () => (await db.query("SELECT row_to_json(jobs) AS job FROM jobs ORDER BY seq")).rows;
      const before = await rowsOf();

      const clock = new ManualClock(T0 + 1000);
      const opened = await openPostgresStore(clock, { schema });
      t.after(() => opened.store.close());
      const { store } = opened;
      // Later versions add columns to the view (version 10: rate_key; 11: traceparent, expires_at; 12: callbacks;
      // null for these jobs; 16: claim_count, 0 for them); the rest reads as before.
      const withoutLaterColumns = (rows: Array<{ job: Record<string, unknown> }>) =>
        rows.map(
          ({
            job: {
              rate_key: _rateKey,
              traceparent: _traceparent,
              expires_at: _expiresAt,
              callbacks: _callbacks,
              claim_count: _claims,
              ...job
            },
          }) => ({ job }),
        );
      assert.deepEqual(withoutLaterColumns(await rowsOf()), before, "the view answers every job as the table did");
      const specs = await db.query("SELECT count(*)::int AS n FROM job_specs");
      assert.equal(specs.rows[0]?.n, items.length);
      assert.equal((await store.jobGet({ id: "old-keyed" }))?.parentJobId, "old-running");

      // The keys still hold: the pending job keeps its dedupe key, and a new job is numbered after the old ones.
      const again = await store.jobInsert(
        jobParams({ id: "new-dedupe", dedupeKey: "dk", operationId: "sendWelcomeEmail" }),
      );
      assert.equal(again.kind, "deduplicated");
      assert.equal(again.kind === "deduplicated" && again.job.id, "old-keyed");
      const fresh = await store.jobInsert(jobParams({ id: "new-job" }));
      assert.equal(fresh.kind, "created");
      assert.ok(fresh.kind === "created" && fresh.job.seq > Math.max(...before.map((row) => Number(row.job.seq))));
      // The old running job finishes; the old pending one is claimed; retention and the list read the new tables.
      assert.deepEqual(
        await store.jobSetStateIfRunningMany({
          outcomes: [{ id: "old-running", attempt: 1, status: "succeeded", result: SUCCESS }],
        }),
        [true],
      );
      const next = await store.jobClaimMany({ limit: 10 });
      assert.deepEqual(next.map((job) => job.id).sort(), ["new-job", "old-keyed"]);
      assert.deepEqual(
        (await store.jobList({ statuses: ["dead"], limit: 10 })).map((job) => job.id),
        ["old-dead"],
      );
    });
  });
}

if (!POSTGRES_SKIP) {
  describe("PostgreSQL plans from statistics that saw every job finished", () => {
    test("a claim reads each lane's own due jobs, not every lane's (migration 0021: no statistics of the status)", async (t) => {
      const opened = await openPostgresStore(new ManualClock(T0));
      t.after(() => opened.cleanup());
      const db = await schemaClient(t, opened.schema);
      // 32 users' jobs: 20,000 finished, sampled so (an idle queue, as autovacuum most often finds it); then a burst
      // of 100 due jobs in each user's lane, far less than would make autovacuum sample the table again.
      const insert = (from: number, to: number, status: "succeeded" | "pending") =>
        db.query(
          `WITH specs AS (
            INSERT INTO job_specs (id, operation_id, max_attempts, created_at, enqueued_by_operation_id,
              original_request_id, user_id, authority, request)
            SELECT 'job-' || g, 'sendWelcomeEmail', 5, now(), 'createUser', 'rid-' || g, 'u' || (g % 32), '{}'::json,
              '{}'::json
            FROM generate_series($1::int, $2::int) AS g RETURNING seq, user_id)
          INSERT INTO job_state (seq, status, attempt, priority, run_at, operation_id, lane, finished_at)
          SELECT seq, $3, 0, 0, now() - interval '1 minute', 'sendWelcomeEmail', 'u:' || user_id,
            CASE WHEN $3 = 'succeeded' THEN now() - interval '1 minute' END FROM specs`,
          [from, to, status],
        );
      await insert(1, 20_000, "succeeded");
      await db.query("ANALYZE job_specs, job_state");
      await insert(20_001, 23_200, "pending");
      // The claim's own statements' plans, as the server runs them inside the function, sent here as notices.
      await db.query("LOAD 'auto_explain'");
      await db.query(`SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;
        SET auto_explain.log_analyze = on; SET auto_explain.log_timing = off; SET auto_explain.log_level = notice;
        SET client_min_messages = notice`);
      const plans: string[] = [];
      db.on("notice", (notice) => plans.push(notice.message ?? ""));
      const claimed = await db.query("SELECT count(*)::int AS n FROM opqueue_claim_batch(now(), 32, 64, '', '')");
      await db.query("RESET auto_explain.log_min_duration");
      assert.equal(claimed.rows[0]?.n, 33, "32 jobs and the lane cursor");
      // Every row the scans of job_state passed up, and every one they passed over.
      const read = plans
        .flatMap((plan) => [
          ...[...plan.matchAll(/Scan[^\n]* on job_state [^\n]*actual rows=(\d+) loops=(\d+)/g)].map(
            (match) => Number(match[1]) * Number(match[2]),
          ),
          ...[...plan.matchAll(/Rows Removed by Filter: (\d+)/g)].map((match) => Number(match[1])),
        ])
        .reduce((sum, rows) => sum + rows, 0);
      assert.ok(plans.length > 0, "the plans were heard");
      // 64 candidates, each lane's head and the jobs a lane is probed past: a few hundred. Every due job of
      // every lane is 3,200 for each lane visited.
      assert.ok(read < 1000, `the claim read ${read} rows of job_state:\n${plans.join("\n")}`);
    });
  });

  describe("PostgreSQL migration 0021 without a superuser", () => {
    test("on a table already sampled, it keeps the status's statistics and the node hears a warning", async (t) => {
      const schema = freshSchemaName();
      const role = `opq_t21_${schema.slice(-8)}`;
      // Registered before the client's own clean-up, so it runs while the client is open.
      t.after(async () => {
        await db.query("RESET ROLE");
        await dropSchema(schema);
        await db.query(`DROP ROLE IF EXISTS ${role}`);
      });
      const db = await schemaClient(t, schema);
      // A database at version 20 holding a finished job, sampled; the tables owned by a role that is no superuser.
      await db.query(`CREATE SCHEMA ${schema}`);
      await db.query(`CREATE TABLE schema_migrations (
        version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
      const migrations = readMigrations("postgres");
      for (const migration of migrations.slice(0, 20)) {
        await db.query(migration.sql);
        await db.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [
          migration.version,
          migration.name,
        ]);
      }
      await db.query(`WITH specs AS (
          INSERT INTO job_specs (id, operation_id, max_attempts, created_at, enqueued_by_operation_id,
            original_request_id, user_id, authority, request)
          VALUES ('done-1', 'sendWelcomeEmail', 5, now(), 'createUser', 'rid-1', 'u1', '{}', '{}') RETURNING seq)
        INSERT INTO job_state (seq, status, attempt, priority, run_at, operation_id, lane, finished_at)
        SELECT seq, 'succeeded', 1, 0, now(), 'sendWelcomeEmail', 'u:u1', now() FROM specs`);
      await db.query("ANALYZE job_state");
      await db.query(`CREATE ROLE ${role}`);
      await db.query(`ALTER TABLE job_state OWNER TO ${role}`);
      // Migrations after 21 add columns to job_specs (22) and admin_actions (23) and restate opqueue_insert_batch (24),
      // opqueue_rate_allowance and opqueue_operation_room (28): their owner too.
      await db.query(`ALTER TABLE job_specs OWNER TO ${role}`);
      await db.query(`ALTER TABLE admin_actions OWNER TO ${role}`);
      await db.query(`ALTER FUNCTION opqueue_insert_batch(jsonb, timestamptz, integer) OWNER TO ${role}`);
      await db.query(
        `ALTER FUNCTION opqueue_rate_allowance(float8, float8, integer, integer, integer) OWNER TO ${role}`,
      );
      await db.query(`ALTER FUNCTION opqueue_operation_room(text, float8) OWNER TO ${role}`);
      await db.query(`GRANT USAGE, CREATE ON SCHEMA ${schema} TO ${role}`);
      await db.query(`GRANT ALL ON schema_migrations TO ${role}`);
      const statistics = async () =>
        (
          await db.query<{ target: number; sampled: boolean }>(
            `SELECT attstattarget AS target, EXISTS (SELECT 1 FROM pg_stats WHERE schemaname = $1
               AND tablename = 'job_state' AND attname = 'status') AS sampled
             FROM pg_attribute WHERE attrelid = 'job_state'::regclass AND attname = 'status'`,
            [schema],
          )
        ).rows[0];
      assert.deepEqual(await statistics(), { target: -1, sampled: true });

      // The node migrates as that role: the migration's notice reaches it as a warning, the server's own do not.
      const pool = new pg.Pool({ connectionString: POSTGRES_URL, options: `-c search_path=${schema} -c role=${role}` });
      const warnings: string[] = [];
      try {
        assert.equal(await migrate(pool, (message) => warnings.push(message)), migrations.length);
      } finally {
        await pool.end();
      }
      assert.deepEqual(await statistics(), { target: -1, sampled: true }, "sampled as before, not frozen");
      assert.equal(warnings.length, 1, JSON.stringify(warnings));
      assert.ok(warnings[0]?.startsWith("opqueue migration 21:"), `the warning says so: ${warnings[0]}`);
      // A superuser finishes it with docs/postgres.md's two statements, as the migration itself does.
      await db.query(migrations[20]?.sql ?? "");
      assert.deepEqual(await statistics(), { target: 0, sampled: false });
    });
  });

  describe("PostgreSQL flow control functions", () => {
    test("opqueue_rate_allowance answers what the engines' shared arithmetic (rateAllowance) answers", async (t) => {
      const opened = await openPostgresStore(new ManualClock(T0));
      t.after(() => opened.cleanup());
      const db = await schemaClient(t, opened.schema);
      const now = T0;
      const rates: RateLimit[] = [
        { limit: 5, periodMs: 1000, burst: 1 },
        { limit: 3, periodMs: 1000, burst: 4 },
        { limit: 100, periodMs: 60_000, burst: 10 },
      ];
      for (const rate of rates) {
        const spacing = rate.periodMs / rate.limit;
        const tolerance = (rate.burst - 1) * spacing;
        // A full bucket, one in the past, and tats at, just inside and just past each step and the tolerance.
        const tats = [null, now - 5000, now, now + spacing / 2, now + spacing, now + tolerance, now + tolerance + 1];
        for (const tat of tats) {
          const { rows } = await db.query<{ allowed: number }>(
            "SELECT opqueue_rate_allowance($1, $2, $3, $4, $5) AS allowed",
            [tat, now, rate.limit, rate.periodMs, rate.burst],
          );
          assert.equal(rows[0]?.allowed, rateAllowance(rate, tat, now), `${JSON.stringify(rate)} at tat ${tat}`);
        }
      }
    });

    test("opqueue_operation_room: nothing for an operation without limits, 0 while paused, else the least room", async (t) => {
      const opened = await openPostgresStore(new ManualClock(T0));
      t.after(() => opened.cleanup());
      const db = await schemaClient(t, opened.schema);
      const room = async (operationId: string) =>
        (await db.query<{ room: number | null }>("SELECT opqueue_operation_room($1, $2) AS room", [operationId, T0]))
          .rows[0]?.room;
      await db.query(`INSERT INTO operation_controls (operation_id, paused_at, max_concurrency, rate_limit,
          rate_period_ms, rate_burst) VALUES
        ('free', NULL, NULL, NULL, NULL, NULL),
        ('paused', now(), NULL, NULL, NULL, NULL),
        ('capped', NULL, 7, NULL, NULL, NULL),
        ('rated', NULL, 7, 2, 1000, 3)`);
      assert.equal(await room("unknown"), null, "no row: nothing limits it");
      assert.equal(await room("free"), null, "a row with no limit set: nothing limits it");
      assert.equal(await room("paused"), 0);
      assert.equal(await room("capped"), 7, "no job running");
      assert.equal(await room("rated"), 3, "the rate's full bucket (burst 3) is less than the cap");

      // One job of each claimed: it runs, and the rated operation's bucket moves on by one spacing (500 ms).
      await opened.store.jobInsert(jobParams({ operationId: "capped" }));
      await opened.store.jobInsert(jobParams({ operationId: "rated" }));
      assert.equal((await opened.store.jobClaimMany({ limit: 10 })).length, 2);
      assert.equal(await room("capped"), 6, "the cap less the running job");
      assert.equal(await room("rated"), 2, "the bucket's allowance after one start (burst 3, one spent)");
    });
  });

  describe("PostgreSQL chain settling", () => {
    test("a chain whose last job finished at a time with microseconds is reported once (the cursor keeps them)", async (t) => {
      const clock = new ManualClock(T0);
      const opened = await openPostgresStore(clock);
      t.after(() => opened.cleanup());
      const { store, schema } = opened;
      const db = await schemaClient(t, schema);
      assert.deepEqual(await store.chainSettledSince({ cursor: "t", limit: 100 }), [], "the first read starts now");
      const inserted = await store.jobInsert(jobParams({ originalRequestId: "solo" }));
      assert.ok(inserted.kind === "created");
      const job = inserted.job;
      const [running] = await store.jobClaimMany({ limit: 1 });
      assert.equal(running?.id, job.id);
      await store.jobSetStateIfRunningMany({
        outcomes: [{ id: job.id, attempt: 1, status: "succeeded", result: SUCCESS }],
      });
      // A node on the database's clock stamps now(), which has microseconds; a millisecond cursor fell before them.
      await db.query(
        "UPDATE job_state SET finished_at = finished_at + interval '123 microseconds' WHERE status = 'succeeded'",
      );
      clock.advance(10_000);
      assert.deepEqual(
        (await store.chainSettledSince({ cursor: "t", limit: 100 })).map((chain) => chain.originalRequestId),
        ["solo"],
      );
      assert.deepEqual(await store.chainSettledSince({ cursor: "t", limit: 100 }), [], "once");
    });

    test("a pass that reads no finished job writes nothing: an idle node's pass is read-only", async (t) => {
      const clock = new ManualClock(T0);
      const opened = await openPostgresStore(clock);
      t.after(() => opened.cleanup());
      const { store, schema } = opened;
      const db = await schemaClient(t, schema);
      // A row's xmin is the transaction that last wrote it: the same after a pass means the pass did not write it.
      const cursorVersion = async () =>
        (await db.query<{ xmin: string }>("SELECT xmin::text FROM maintenance_cursors WHERE name = 't'")).rows[0]?.xmin;
      await store.chainSettledSince({ cursor: "t", limit: 100 });
      const first = await cursorVersion();
      assert.ok(first !== undefined, "the first pass places the cursor");
      clock.advance(10_000);
      await store.chainSettledSince({ cursor: "t", limit: 100 });
      assert.equal(await cursorVersion(), first, "an idle pass leaves the cursor's row as it was");
      const inserted = await store.jobInsert(jobParams({ originalRequestId: "solo" }));
      assert.ok(inserted.kind === "created");
      const [running] = await store.jobClaimMany({ limit: 1 });
      await store.jobSetStateIfRunningMany({
        outcomes: [{ id: running?.id ?? "", attempt: 1, status: "succeeded", result: SUCCESS }],
      });
      clock.advance(10_000);
      assert.deepEqual(
        (await store.chainSettledSince({ cursor: "t", limit: 100 })).map((chain) => chain.originalRequestId),
        ["solo"],
        "a job finished after idle passes is read",
      );
      assert.notEqual(await cursorVersion(), first, "and the cursor moves past it");
    });

    test("a pass's probe sees a job finished at the cursor's very instant, after the cursor's job", async (t) => {
      const clock = new ManualClock(T0);
      const opened = await openPostgresStore(clock);
      t.after(() => opened.cleanup());
      const { store } = opened;
      await store.chainSettledSince({ cursor: "t", limit: 100 });
      for (const rid of ["first", "second"]) {
        assert.equal((await store.jobInsert(jobParams({ originalRequestId: rid }))).kind, "created");
      }
      const running = await store.jobClaimMany({ limit: 2 });
      assert.equal(running.length, 2);
      // One outcome write: both jobs finish at one instant.
      await store.jobSetStateIfRunningMany({
        outcomes: running.map((job) => ({ id: job.id, attempt: 1, status: "succeeded", result: SUCCESS })),
      });
      clock.advance(10_000);
      const read = async () =>
        (await store.chainSettledSince({ cursor: "t", limit: 1 })).map((chain) => chain.originalRequestId);
      const firstRead = await read();
      const secondRead = await read();
      assert.deepEqual([...firstRead, ...secondRead].sort(), ["first", "second"], "one a pass, the second not missed");
      assert.deepEqual(await read(), [], "and then nothing");
    });

    for (const skew of ["one chain, waiting", "every job finished"] as const)
      test(`the settled-chains pass probes each chain by its index when the statistics saw ${skew}`, async (t) => {
        const opened = await openPostgresStore(new ManualClock(T0));
        t.after(() => opened.cleanup());
        const { store, schema } = opened;
        const db = await schemaClient(t, schema);
        // One request enqueued 20,000 jobs, and the statistics saw only them: one chain, waiting or finished.
        await db.query(
          `WITH specs AS (
          INSERT INTO job_specs (id, operation_id, max_attempts, created_at, enqueued_by_operation_id,
            original_request_id, user_id, authority, request)
          SELECT 'big-' || g, 'sendWelcomeEmail', 5, now(), 'createUser', 'big', 'u1', '{}'::json, '{}'::json
          FROM generate_series(1, 20000) AS g RETURNING seq)
        INSERT INTO job_state (seq, status, attempt, priority, run_at, operation_id, lane, finished_at)
        SELECT seq, $1, 0, 0, now() + interval '1 day', 'sendWelcomeEmail', 'u:u1',
          CASE WHEN $1 = 'succeeded' THEN now() - interval '30 days' END FROM specs`,
          [skew === "every job finished" ? "succeeded" : "pending"],
        );
        await db.query("ANALYZE job_specs, job_state");
        for (let n = 0; n < 20; n++) {
          assert.equal((await store.jobInsert(jobParams({ originalRequestId: `small-${n}` }))).kind, "created");
        }
        const claimed = await store.jobClaimMany({ limit: 20 });
        assert.equal(claimed.length, 20);
        await store.jobSetStateIfRunningMany({
          outcomes: claimed.map((job) => ({ id: job.id, attempt: job.attempt, status: "succeeded", result: SUCCESS })),
        });
        const explained = await db.query<Record<string, string>>(`EXPLAIN (ANALYZE, COSTS OFF) ${SETTLED_SINCE}`, [
          new Date(T0 - 3_600_000),
          0,
          new Date(T0 + 3_600_000),
          100,
        ]);
        const plan = explained.rows.map((row) => row["QUERY PLAN"]).join("\n");
        const removed = [...plan.matchAll(/Rows Removed by Filter: (\d+)/g)].reduce(
          (sum, match) => sum + Number(match[1]),
          0,
        );
        assert.ok(removed < 1000, `the pass read ${removed} rows it did not want:\n${plan}`);
        const settled = await store.chainSettledSince({ cursor: "t", limit: 100 });
        assert.equal(settled.length, 0, "the first read starts now");
      });
  });
}

if (!POSTGRES_SKIP) {
  describe("PostgreSQL inserts beside each other", () => {
    /**
     * A store in a fresh schema whose chains `rids` exist (a job each), and `hold`: a transaction of the test's own
     * that holds a chain's row, with the backend it runs on. Holders end before the schema is dropped, so a test
     * that fails while one holds a row still cleans up.
     */
    async function storeWithChains(t: TestContext, rids: string[]) {
      const opened = await openPostgresStore(new ManualClock(T0));
      const holders: pg.Client[] = [];
      t.after(async () => {
        for (const db of holders) await db.end();
        await opened.cleanup();
      });
      for (const rid of rids) {
        assert.equal((await opened.store.jobInsert(jobParams({ originalRequestId: rid }))).kind, "created");
      }
      const hold = async (rid: string): Promise<{ db: pg.Client; pid: number }> => {
        const db = new pg.Client({ connectionString: POSTGRES_URL, options: `-c search_path=${opened.schema}` });
        await db.connect();
        holders.push(db);
        await db.query("BEGIN");
        const locked = await db.query("SELECT 1 FROM chains WHERE original_request_id = $1 FOR UPDATE", [rid]);
        assert.equal(locked.rowCount, 1, `chain ${rid} exists`);
        return { db, pid: (await db.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]?.pid ?? 0 };
      };
      return { store: opened.store, schema: opened.schema, hold };
    }

    /** Waits until a statement of another backend queues behind backend `pid`'s locks. */
    async function blockedBehind(db: pg.Client, pid: number): Promise<void> {
      await until("a statement waiting for the test's lock", async () => {
        const waiting = await db.query("SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid))", [
          pid,
        ]);
        return waiting.rowCount ? true : undefined;
      });
    }

    for (const order of [
      ["chain-zeta", "chain-alpha"],
      ["chain-alpha", "chain-zeta"],
    ])
      test(`a batch of plain jobs takes its chains in the order of their ids, whatever its items' order (${order.join(", ")})`, async (t) => {
        // Two batches that each charge chains A and B, one taking A first and the other B, would wait for each other
        // until the server's deadlock check undid one (a second later). Taken in one order, the second waits.
        const { store, schema, hold } = await storeWithChains(t, order);
        const holder = await hold("chain-zeta");
        const batch = store.jobInsertMany({ jobs: order.map((rid) => jobParams({ originalRequestId: rid })) });
        await blockedBehind(holder.db, holder.pid);
        const probe = await schemaClient(t, schema);
        const free = await probe.query(
          "SELECT 1 FROM chains WHERE original_request_id = 'chain-alpha' FOR UPDATE SKIP LOCKED",
        );
        assert.equal(free.rowCount, 0, "chain-alpha was taken before the batch queued for chain-zeta");
        await holder.db.query("COMMIT");
        const settled = await batch;
        assert.deepEqual(
          settled.map((s) => s.ok && s.value.kind),
          ["created", "created"],
        );
      });

    test("a statement the server undid to end a deadlock is sent again, and the batch succeeds", async (t) => {
      const { store, hold } = await storeWithChains(t, ["chain-alpha", "chain-zeta"]);
      // The test's transaction holds chain-zeta; the batch takes chain-alpha and queues for chain-zeta; the test then
      // asks for chain-alpha: a deadlock. The test's own check waits a minute, so the batch's backend finds it first
      // and its statement is the one undone.
      const holder = await hold("chain-zeta");
      await holder.db.query("SET deadlock_timeout = '60s'");
      const batch = store.jobInsertMany({
        jobs: ["chain-alpha", "chain-zeta"].map((rid, n) => jobParams({ originalRequestId: rid, dedupeKey: `k${n}` })),
      });
      await blockedBehind(holder.db, holder.pid);
      await holder.db.query("SELECT 1 FROM chains WHERE original_request_id = 'chain-alpha' FOR UPDATE");
      // Given chain-alpha, the test's transaction knows the batch's first statement was undone.
      await holder.db.query("COMMIT");
      const settled = await batch;
      assert.deepEqual(
        settled.map((s) => s.ok && s.value.kind),
        ["created", "created"],
      );
      const chains = await holder.db.query<{ rid: string; n: number }>(
        "SELECT original_request_id AS rid, jobs_created AS n FROM chains ORDER BY 1",
      );
      assert.deepEqual(
        chains.rows.map((row) => [row.rid, row.n]),
        [
          ["chain-alpha", 2],
          ["chain-zeta", 2],
        ],
        "each chain charged once for the batch's job, not for the undone attempt",
      );
    });
  });
}

if (!POSTGRES_SKIP) {
  describe("PostgreSQL statistics of the job tables", () => {
    test("the job tables are analyzed once they grow past twice the pages their statistics counted, and not before", async (t) => {
      const clock = new ManualClock(T0);
      const { store, schema, cleanup } = await openPostgresStore(clock);
      t.after(() => cleanup());
      const db = await schemaClient(t, schema);
      const counted = async () =>
        Number(
          (
            await db.query<{ n: number }>(
              "SELECT reltuples::float8 AS n FROM pg_class WHERE oid = 'job_state'::regclass",
            )
          ).rows[0]?.n,
        );
      await store.jobInsertMany({ jobs: Array.from({ length: 10 }, () => jobParams()) });
      await db.query("ANALYZE job_state, job_specs");
      assert.equal(await counted(), 10);
      assert.equal(await store.statisticsRefresh(), false, "the tables are as their statistics counted them");
      // job_specs's rows take a few hundred bytes each: 4,000 jobs fill well over 66 of its pages.
      for (let i = 0; i < 4; i++) {
        await store.jobInsertMany({ jobs: Array.from({ length: 1000 }, () => jobParams({ spawnCap: 10_000 })) });
      }
      assert.equal(await store.statisticsRefresh(), true);
      assert.equal(await counted(), 4010, "job_state's statistics count its rows");
      assert.equal(await store.statisticsRefresh(), false, "nothing has grown since");
    });

    test("of two nodes asking at once, one analyzes the tables", async (t) => {
      const clock = new ManualClock(T0);
      const a = await openPostgresStore(clock);
      t.after(() => a.cleanup());
      const b = await openPostgresStore(clock, { schema: a.schema });
      t.after(() => b.store.close());
      for (let i = 0; i < 4; i++) {
        await a.store.jobInsertMany({ jobs: Array.from({ length: 1000 }, () => jobParams({ spawnCap: 10_000 })) });
      }
      // Whether two calls overlap is the machine's to decide; a node analyzing meanwhile is not: it holds the lock.
      const db = await schemaClient(t, a.schema);
      await db.query("SELECT pg_advisory_lock(hashtext('opqueue.analyze:' || current_schema()))");
      assert.equal(await b.store.statisticsRefresh(), false, "another node holds the analyze's lock");
      await db.query("SELECT pg_advisory_unlock(hashtext('opqueue.analyze:' || current_schema()))");
      const answers = await Promise.all([a.store.statisticsRefresh(), b.store.statisticsRefresh()]);
      assert.deepEqual(
        answers.filter((analyzed) => analyzed),
        [true],
        "the other found the lock held, or the tables analyzed already",
      );
    });

    test("a role that does not own the tables is answered false, and tries again only once they doubled again", async (t) => {
      const clock = new ManualClock(T0);
      const { store, schema, cleanup } = await openPostgresStore(clock);
      t.after(() => cleanup());
      const db = await schemaClient(t, schema);
      const role = `opq_reader_${schema.slice(-8)}`;
      await db.query(`CREATE ROLE ${role}`);
      // Hooks run in the order they were added: the role goes by a client of its own (the schema's may have ended),
      // once the reader is closed.
      const opened: { reader?: PgConnection } = {};
      t.after(async () => {
        await opened.reader?.close();
        const admin = new pg.Client({ connectionString: POSTGRES_URL });
        await admin.connect();
        try {
          await admin.query(`DROP OWNED BY ${role}`);
          await admin.query(`DROP ROLE ${role}`);
        } finally {
          await admin.end();
        }
      });
      // What opening a pool needs (its CREATE SCHEMA IF NOT EXISTS), and no more: the tables stay the migrating role's.
      const database = (await db.query<{ name: string }>("SELECT current_database() AS name")).rows[0]?.name ?? "";
      await db.query(`GRANT CREATE ON DATABASE ${database} TO ${role}`);
      await db.query(`GRANT USAGE ON SCHEMA ${schema} TO ${role}`);
      const settings = connectionSettings({ url: POSTGRES_URL ?? "", schema });
      const reader = await PgConnection.open({
        settings: { ...settings, options: `${settings.options} -c role=${role}` },
        poolSize: 1,
      });
      opened.reader = reader;
      const analyzes = async () =>
        Number(
          (
            await db.query<{ n: number }>(
              "SELECT analyze_count::int AS n FROM pg_stat_user_tables WHERE relid = 'job_state'::regclass",
            )
          ).rows[0]?.n,
        );
      const insert = async (batches: number) => {
        for (let i = 0; i < batches; i++) {
          await store.jobInsertMany({ jobs: Array.from({ length: 1000 }, () => jobParams({ spawnCap: 100_000 })) });
        }
      };
      await insert(4);
      const refused = await statisticsRefresh(reader, 0);
      assert.equal(refused?.analyzed, false, "the server skipped the tables it does not own");
      assert.ok(refused !== null && refused.size > 0);
      assert.equal(await statisticsRefresh(reader, refused.size), null, "not tried again at the same size");
      await insert(6);
      assert.equal((await statisticsRefresh(reader, refused.size))?.analyzed, false, "tried again, doubled");
      assert.equal(await store.statisticsRefresh(), true, "the owner analyzes them");
      assert.equal(await analyzes(), 1);
    });
  });
}

if (!POSTGRES_SKIP) {
  describe("PostgreSQL erasure of a user's data", () => {
    test("a finished job another transaction holds is skipped, and the next call comes back to it", async (t) => {
      const clock = new ManualClock(T0);
      const { store, schema, cleanup } = await openPostgresStore(clock);
      t.after(() => cleanup());
      const jobs = [];
      for (let i = 0; i < 3; i++) jobs.push(await makeFinished(store, "succeeded", { userId: "ada" }));
      const held = jobs[1]!;
      const erase = () =>
        store.userErase({ userId: "ada", cancelWaiting: false, limit: 10, actor: "dpo", role: "admin", subject: "s" });
      const db = await schemaClient(t, schema);
      await db.query("BEGIN");
      await db.query("SELECT 1 FROM job_state WHERE seq = $1 FOR UPDATE", [held.seq]);
      assert.deepEqual(await erase(), { erased: 2, cancelled: 0, waiting: 0, running: 0, more: true });
      assert.notDeepEqual((await store.jobGet({ id: held.id }))?.request, {}, "the held job keeps its data for now");
      await db.query("COMMIT");
      assert.deepEqual(await erase(), { erased: 1, cancelled: 0, waiting: 0, running: 0, more: false });
      assert.deepEqual((await store.jobGet({ id: held.id }))?.request, {});
    });
  });
}

/**
 * The SQLite engine: the conformance suite on a fresh temporary file per test, then what only SQLite
 * promises (docs/delivery.md, "Durability"): WAL with synchronous=FULL, one process per file with an OS-level lock that dies
 * with its process, migrations applied once, and a `:memory:` store.
 */
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, test, type TestContext } from "node:test";
import type { Worker } from "node:worker_threads";
import Database from "better-sqlite3";
import { ManualClock } from "../../src/clock.js";
import { newJobId } from "../../src/job/job-id.js";
import { SqliteStore } from "../../src/store/sqlite/sqlite-store.js";
import { StoreLockedError, StoreUnavailableError } from "../../src/store/store.js";
import { runStoreConformance } from "./conformance/index.js";
import { jobParams, SUCCESS } from "./conformance/harness.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const STORE_MODULE = new URL("../../src/store/sqlite/sqlite-store.ts", import.meta.url).href;
const CLOCK_MODULE = new URL("../../src/clock.ts", import.meta.url).href;
const MIGRATIONS = fileURLToPath(new URL("../../migrations/sqlite/", import.meta.url));

/** A fresh directory for one test's database, removed when the test ends. */
function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), "opqueue-sqlite-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

runStoreConformance({
  engine: "sqlite",
  open: async (clock) => {
    const dir = mkdtempSync(join(tmpdir(), "opqueue-store-"));
    const store = await SqliteStore.open({ path: join(dir, "opqueue.db"), clock });
    return {
      store,
      cleanup: async () => {
        await store.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  },
});

/** What a child process that tried `SqliteStore.open` on a file reports. */
type ChildReport = { opened: true } | { opened: false; name: string; message: string };

/** Code run by another Node process: opens the file named by OPQUEUE_TEST_DB; `hold` keeps it open until killed. */
const CHILD_SOURCE = `
import { SqliteStore } from ${JSON.stringify(STORE_MODULE)};
import { ManualClock } from ${JSON.stringify(CLOCK_MODULE)};
try {
  const store = await SqliteStore.open({ path: process.env.OPQUEUE_TEST_DB, clock: new ManualClock() });
  console.log(JSON.stringify({ opened: true }));
  if (process.env.OPQUEUE_TEST_HOLD === "1") setInterval(() => {}, 60_000);
  else await store.close();
} catch (error) {
  console.log(JSON.stringify({ opened: false, name: error.name, message: error.message }));
}
`;

function childEnv(path: string, hold: boolean): NodeJS.ProcessEnv {
  // The test runner's own variables would make the child think it is a test file.
  const { NODE_TEST_CONTEXT: _context, ...env } = process.env;
  return { ...env, OPQUEUE_TEST_DB: path, OPQUEUE_TEST_HOLD: hold ? "1" : "0" };
}

const CHILD_ARGS = ["--import", "tsx", "--input-type=module", "-e", CHILD_SOURCE];

/** Runs a child process that tries to open `path` and closes it again; returns what it reports. */
async function openInAnotherProcess(path: string): Promise<ChildReport> {
  const { stdout } = await promisify(execFile)(process.execPath, CHILD_ARGS, { cwd: ROOT, env: childEnv(path, false) });
  return JSON.parse(stdout.trim()) as ChildReport;
}

describe("sqlite engine", () => {
  test("opens the file in WAL mode with synchronous=FULL and an exclusive lock", async (t) => {
    const path = join(tempDir(t), "opqueue.db");
    const store = await SqliteStore.open({ path, clock: new ManualClock() });
    // synchronous and locking_mode are settings of the connection, not of the file: they can only be read on
    // the store's own connection, which lives on the store's thread.
    assert.deepEqual(
      await store.connectionSettings(),
      { synchronous: 2, lockingMode: "exclusive" },
      "synchronous=FULL",
    );
    await store.jobInsert(jobParams());
    await store.close();
    // The journal mode is kept in the file itself.
    const look = new Database(path, { readonly: true });
    try {
      assert.equal(look.pragma("journal_mode", { simple: true }), "wal");
    } finally {
      look.close();
    }
  });

  test("durable writes switch the connection back to synchronous=FULL after claims and outcomes ran without an fsync", async (t) => {
    const store = await SqliteStore.open({ path: join(tempDir(t), "opqueue.db"), clock: new ManualClock() });
    t.after(() => store.close());
    await store.jobInsert(jobParams({ runAt: 0 }));
    const [claimed] = await store.jobClaimMany({ limit: 1 });
    assert.ok(claimed, "the job was claimed");
    assert.equal((await store.connectionSettings()).synchronous, 1, "a claim commits with synchronous=NORMAL");
    await store.jobInsert(jobParams());
    assert.equal((await store.connectionSettings()).synchronous, 2, "an insert commits with synchronous=FULL");
  });

  test("a second process opening the same file fails with StoreLockedError, and succeeds once the holder closes", async (t) => {
    const path = join(tempDir(t), "opqueue.db");
    const holder = await SqliteStore.open({ path, clock: new ManualClock() });
    t.after(() => holder.close());
    const refused = await openInAnotherProcess(path);
    assert.equal(refused.opened, false);
    assert.equal((refused as { name: string }).name, "StoreLockedError");
    const message = (refused as { message: string }).message;
    assert.match(message, /in use by another opqueue process/);
    assert.ok(message.includes(path), "the message names the file");
    await holder.close();
    assert.deepEqual(await openInAnotherProcess(path), { opened: true });
  });

  test("a second store in the same process is refused too", async (t) => {
    const path = join(tempDir(t), "opqueue.db");
    const holder = await SqliteStore.open({ path, clock: new ManualClock() });
    t.after(() => holder.close());
    await assert.rejects(SqliteStore.open({ path, clock: new ManualClock() }), StoreLockedError);
    await holder.ping();
  });

  test("the lock dies with its process: after kill -9 of the holder the file opens at once", async (t) => {
    const path = join(tempDir(t), "opqueue.db");
    const child = spawn(process.execPath, CHILD_ARGS, {
      cwd: ROOT,
      env: childEnv(path, true),
      stdio: ["ignore", "pipe", "inherit"],
    });
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    t.after(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    });
    const report = await new Promise<string>((resolve, reject) => {
      let out = "";
      child.stdout.setEncoding("utf8");
      child.stdout.on("data", (chunk: string) => {
        out += chunk;
        if (out.includes("\n")) resolve(out.trim());
      });
      child.once("exit", (code) => reject(new Error(`the holder exited early (code ${String(code)}): ${out}`)));
    });
    assert.deepEqual(JSON.parse(report), { opened: true });
    await assert.rejects(SqliteStore.open({ path, clock: new ManualClock() }), StoreLockedError, "held by the child");
    child.kill("SIGKILL");
    await exited;
    const store = await SqliteStore.open({ path, clock: new ManualClock() });
    await store.ping();
    await store.close();
  });

  test("applies each migration once: user_version counts the migration files, and reopening is a no-op", async (t) => {
    const path = join(tempDir(t), "opqueue.db");
    const migrationCount = readdirSync(MIGRATIONS).filter((name) => name.endsWith(".sql")).length;
    assert.ok(migrationCount >= 1);
    const clock = new ManualClock();
    const first = await SqliteStore.open({ path, clock });
    const inserted = await first.jobInsert(jobParams());
    await first.close();

    const readSchema = () => {
      const look = new Database(path, { readonly: true });
      try {
        return {
          version: look.pragma("user_version", { simple: true }),
          objects: look.prepare("SELECT type, name, sql FROM sqlite_master ORDER BY name").all(),
        };
      } finally {
        look.close();
      }
    };
    const before = readSchema();
    assert.equal(before.version, migrationCount);

    const second = await SqliteStore.open({ path, clock });
    await second.ping();
    assert.equal(inserted.kind, "created");
    assert.ok(await second.jobGet({ id: (inserted as { job: { id: string } }).job.id }), "the data survives a reopen");
    await second.close();
    assert.deepEqual(readSchema(), before, "reopening changes neither the version nor the schema");
  });

  test("refuses a database whose schema is newer than this opqueue", async (t) => {
    const path = join(tempDir(t), "opqueue.db");
    await (await SqliteStore.open({ path, clock: new ManualClock() })).close();
    const db = new Database(path);
    db.pragma("user_version = 9999");
    db.close();
    await assert.rejects(SqliteStore.open({ path, clock: new ManualClock() }), /newer than this opqueue/);
  });

  test("a :memory: store works", async () => {
    const clock = new ManualClock();
    const store = await SqliteStore.open({ path: ":memory:", clock });
    try {
      await store.ping();
      const outcome = await store.jobInsert(jobParams({ runAt: clock.now() }));
      assert.equal(outcome.kind, "created");
      const [claimed] = await store.jobClaimMany({ limit: 1 });
      assert.ok(claimed);
      assert.deepEqual(
        await store.jobSetStateIfRunningMany({
          outcomes: [{ id: claimed.id, attempt: 1, status: "succeeded", result: SUCCESS }],
        }),
        [true],
      );
      assert.equal((await store.jobGet({ id: claimed.id }))?.status, "succeeded");
      assert.equal((await store.jobList({ limit: 10 })).length, 1);
    } finally {
      await store.close();
    }
  });

  test("close commits the inserts still waiting for their batch, then releases the file", async (t) => {
    const path = join(tempDir(t), "opqueue.db");
    const store = await SqliteStore.open({ path, clock: new ManualClock() });
    const waiting = Array.from({ length: 50 }, () => store.jobInsert(jobParams()));
    await store.close();
    const outcomes = await Promise.all(waiting);
    assert.ok(outcomes.every((outcome) => outcome.kind === "created"));
    const reopened = await SqliteStore.open({ path, clock: new ManualClock() });
    try {
      assert.equal((await reopened.jobList({ limit: 100 })).length, 50, "every acknowledged insert is in the file");
    } finally {
      await reopened.close();
    }
  });

  test("inserts arriving over many turns while batches commit are all created, in the order they came", async (t) => {
    const path = join(tempDir(t), "opqueue.db");
    const store = await SqliteStore.open({ path, clock: new ManualClock() });
    try {
      const waiting = [];
      for (let turn = 0; turn < 40; turn++) {
        for (let i = 0; i < 1 + (turn % 7); i++) waiting.push(store.jobInsert(jobParams()));
        await new Promise((resolve) => setImmediate(resolve));
      }
      const seqs = (await Promise.all(waiting)).map((outcome) => (outcome.kind === "created" ? outcome.job.seq : -1));
      assert.ok(
        seqs.every((seq) => seq > 0),
        "every insert created its job",
      );
      assert.deepEqual(
        seqs,
        [...seqs].sort((a, b) => a - b),
        "batches commit in the order their inserts came",
      );
      assert.equal(new Set(seqs).size, seqs.length);
    } finally {
      await store.close();
    }
  });

  test("when the store's thread is gone, every call fails with StoreUnavailableError (answered 503), none hangs", async () => {
    const store = await SqliteStore.open({ path: ":memory:", clock: new ManualClock() });
    await (store as unknown as { worker: Worker }).worker.terminate();
    await assert.rejects(store.ping(), StoreUnavailableError);
    await assert.rejects(store.jobInsert(jobParams()), StoreUnavailableError);
    await assert.rejects(store.jobClaimMany({ limit: 1 }), StoreUnavailableError);
    await store.close();
  });

  test("a closed store's thread serves the next store opened, and nothing of the closed store reaches it", async (t) => {
    const dir = tempDir(t);
    const clock = new ManualClock();
    const first = await SqliteStore.open({ path: join(dir, "first.db"), clock });
    await first.jobInsert(jobParams());
    const thread = (first as unknown as { worker: Worker }).worker;
    await first.close();
    const second = await SqliteStore.open({ path: join(dir, "second.db"), clock });
    try {
      assert.equal((second as unknown as { worker: Worker }).worker, thread, "the thread was kept for the next store");
      await assert.rejects(first.ping(), StoreUnavailableError);
      await assert.rejects(first.jobInsert(jobParams()), StoreUnavailableError);
      assert.equal((await second.jobList({ limit: 10 })).length, 0, "the second store reads its own file");
      await second.jobInsert(jobParams());
      assert.equal((await second.jobList({ limit: 10 })).length, 1);
    } finally {
      await second.close();
    }
    // The first file is closed and unlocked: another store (on the same kept thread) opens it and finds its job.
    const again = await SqliteStore.open({ path: join(dir, "first.db"), clock });
    try {
      assert.equal((await again.jobList({ limit: 10 })).length, 1);
    } finally {
      await again.close();
    }
  });

  test("a thread that cannot open the next store's file ends, and that store's open says why", async (t) => {
    const dir = tempDir(t);
    const first = await SqliteStore.open({ path: join(dir, "first.db"), clock: new ManualClock() });
    await first.close();
    // A path under a file: no folder can be made there.
    await assert.rejects(SqliteStore.open({ path: join(dir, "first.db", "x.db"), clock: new ManualClock() }));
    const next = await SqliteStore.open({ path: join(dir, "next.db"), clock: new ManualClock() });
    await next.ping();
    await next.close();
  });

  test("times come from the caller's clock: the thread uses the time sent with each call", async () => {
    const clock = new ManualClock(Date.UTC(2030, 5, 1));
    const store = await SqliteStore.open({ path: ":memory:", clock });
    try {
      const outcome = await store.jobInsert(jobParams({ runAt: clock.now() }));
      assert.equal(outcome.kind === "created" && outcome.job.createdAt, clock.now());
      clock.advance(90_000);
      const [claimed] = await store.jobClaimMany({ limit: 1 });
      assert.equal(claimed?.startedAt, clock.now());
    } finally {
      await store.close();
    }
  });
});

describe("job ids", () => {
  test("are 20 URL-safe characters, distinct, and begin with their creation time", () => {
    const ids = Array.from({ length: 10_000 }, (_, i) => newJobId(Date.UTC(2026, 0, 1) + Math.floor(i / 100)));
    assert.equal(new Set(ids).size, ids.length);
    for (const id of ids) assert.match(id, /^[A-Za-z0-9_-]{20}$/);
    const time = (id: string) => Buffer.from(id, "base64url").readUIntBE(0, 6);
    assert.equal(time(ids[0] ?? ""), Date.UTC(2026, 0, 1));
    assert.equal(time(ids.at(-1) ?? ""), Date.UTC(2026, 0, 1) + 99);
  });
});

describe("a batch insert that fills the disk", () => {
  test("is answered as it was stored: no item answered failed is kept, and none answered stored is lost", async (t) => {
    const { SqliteEngine } = await import("../../src/store/sqlite/sqlite-engine.js");
    const dir = mkdtempSync(join(tmpdir(), "opqueue-full-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const engine = SqliteEngine.open({
      path: join(dir, "full.db"),
      clock: new ManualClock(Date.UTC(2026, 10, 21, 12)),
    });
    t.after(() => engine.close());
    // The engine's own connection, reached into only to make its file "full" (max_page_count), as a full disk would.
    const db = (engine as unknown as { db: Database.Database }).db;
    db.pragma(`max_page_count = ${Number(db.pragma("page_count", { simple: true })) + 40}`);
    const batch = Array.from({ length: 400 }, (_, n) =>
      jobParams({ request: { body: { n, pad: "x".repeat(2000) } }, spawnCap: 10_000 }),
    );
    let settled: ReturnType<typeof engine.jobInsertMany> | undefined;
    try {
      settled = engine.jobInsertMany(batch);
    } catch (error) {
      assert.ok(error instanceof StoreUnavailableError, String(error));
    }
    db.pragma("max_page_count = 1073741823");
    const stored = batch.map((params) => engine.jobGet({ id: params.id }) !== undefined);
    if (settled === undefined) {
      assert.deepEqual(stored.filter(Boolean), [], "a batch answered failed whole keeps nothing");
    } else {
      assert.ok(
        settled.some((item) => !item.ok),
        "the file did fill up",
      );
      assert.deepEqual(
        settled.map((item) => item.ok),
        stored,
        "each item stored exactly when it was answered stored",
      );
    }
  });
});

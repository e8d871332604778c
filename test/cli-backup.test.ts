/**
 * `opqueue backup` and `opqueue restore` run as real processes beside a real `serve` (docs/deploying.md, "Backup and
 * restore"): a copy made under enqueue and delivery load holds every job acknowledged before it began (and while it
 * ran), enqueues go on being answered while it is made, a node restored from it serves those jobs; restore refuses a
 * database a service holds and files that are not whole opqueue databases; a PostgreSQL node says to use pg_dump.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { mintToken } from "../src/auth/tokens.js";
import { systemClock } from "../src/clock.js";
import { parseConfig, type Config } from "../src/config.js";
import { latestSchemaVersion } from "../src/store/sqlite/backup-file.js";
import {
  logLines,
  runCli,
  startCli,
  stopServe,
  waitForStart,
  type CliProcess,
  type CliResult,
} from "./helpers/cli-process.js";
import { freePort } from "./helpers/ports.js";
import { dropSchema, freshSchemaName, POSTGRES_SKIP, POSTGRES_URL } from "./helpers/postgres.js";
import { rawTestConfig } from "./helpers/service.js";
import { reply, startTarget } from "./helpers/target.js";

/** Jobs written before the load starts: about 20 MB of database, so the copy takes a few dozen batches. */
const PREFILL_JOBS = 1_600;
/** Characters of padding in each of those jobs' bodies (the payload limit is 16,384 bytes). */
const PREFILL_PADDING = 12_000;
/** How long the target takes to answer a delivery: jobs stay running, and the rest pending, during the backup. */
const TARGET_ANSWER_MS = 50;
/** Concurrent enqueue loops during the backup. */
const LOAD_LOOPS = 4;

/** A fresh temporary folder, removed when the test ends. */
function tempDir(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "opqueue-backup-test-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Writes the test product's config (SQLite file `opqueue.db` in `dir`), changed by `change`. */
function writeConfig(
  dir: string,
  change: (raw: Record<string, unknown>) => void = () => {},
): { file: string; config: Config } {
  const raw = rawTestConfig(dir);
  change(raw);
  const file = path.join(dir, "opqueue.json");
  fs.writeFileSync(file, JSON.stringify(raw, null, 2));
  return { file, config: parseConfig({ raw, baseDir: dir, env: {} }) };
}

/** A running `serve`. */
interface Node {
  dir: string;
  configFile: string;
  config: Config;
  port: number;
  url: string;
  cli: CliProcess;
}

/** Starts `serve` on a config written to `dir` and a free port, and waits until it has started. */
async function startNode(
  t: TestContext,
  dir: string,
  options: { configure?: (raw: Record<string, unknown>) => void; args?: string[]; env?: Record<string, string> } = {},
): Promise<Node> {
  const { file, config } = writeConfig(dir, options.configure);
  const port = await freePort();
  const cli = startCli(t, ["serve", "--config", file, ...(options.args ?? [])], {
    ...options.env,
    OPQUEUE_PORT: String(port),
  });
  await waitForStart(cli);
  return { dir, configFile: file, config, port, url: `http://127.0.0.1:${port}`, cli };
}

/** An enqueue assertion of chain `rid` for the node's config. */
function assertion(config: Config, rid: string): Promise<string> {
  return mintToken({ auth: config.auth, clock: systemClock, sub: "u1", op: "createUser", rid });
}

/** A site admin token for the node's config. */
function adminToken(config: Config): Promise<string> {
  return mintToken({ auth: config.auth, clock: systemClock, sub: "admin", siteAdmin: true });
}

/** Enqueues one sendWelcomeEmail job; answers the status and, on 201, the job's id. */
async function enqueue(
  url: string,
  token: string,
  body: Record<string, unknown>,
): Promise<{ status: number; id: string }> {
  const response = await fetch(`${url}/jobs`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ operation_id: "sendWelcomeEmail", ...body }),
  });
  const text = await response.text();
  assert.equal(response.status, 201, text);
  return { status: response.status, id: (JSON.parse(text) as { job: { id: string } }).job.id };
}

/** Runs `fn` over `items`, `concurrency` at a time. */
async function eachConcurrently<T>(items: T[], concurrency: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) await fn(items[next++] as T);
    }),
  );
}

/** One acknowledged enqueue of the load, timed by this process's clock (the service's is the same machine's). */
interface Ack {
  id: string;
  sentAt: number;
  ackedAt: number;
}

/** Enqueue loops that run until stopped, recording every acknowledgement. */
function startEnqueueLoad(options: { url: string; token: string; loops: number }): {
  acks: Ack[];
  /** Resolves once `count` enqueues have been acknowledged. */
  acked(count: number): Promise<void>;
  /** Stops the loops and waits for their last requests. */
  stop(): Promise<void>;
} {
  const acks: Ack[] = [];
  const waiters: Array<{ count: number; resolve: () => void }> = [];
  let stopped = false;
  const loops = Array.from({ length: options.loops }, async (_, loop) => {
    for (let i = 0; !stopped; i++) {
      const sentAt = Date.now();
      const { id } = await enqueue(options.url, options.token, {
        request: { path_params: { userId: `load-${loop}-${i}` } },
      });
      acks.push({ id, sentAt, ackedAt: Date.now() });
      for (const waiter of waiters.filter((w) => acks.length >= w.count)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve();
      }
    }
  });
  const running = Promise.all(loops);
  // A refused enqueue ends the load; `stop` reports it (and nothing is reported twice as unhandled before then).
  running.catch(() => {
    stopped = true;
  });
  return {
    acks,
    acked: (count) =>
      acks.length >= count ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ count, resolve })),
    async stop() {
      stopped = true;
      await running;
    },
  };
}

/** The time of the serve log line with message `msg` (ms since the epoch), and the line. */
function logged(cli: CliProcess, msg: string): { at: number; line: Record<string, unknown> } {
  const line = logLines(cli.stdout()).find((candidate) => candidate["msg"] === msg);
  assert.ok(line, `serve logged no "${msg}":\n${cli.stdout()}`);
  return { at: Date.parse(String(line["time"])), line };
}

/** Asserts the process printed exactly one line on stderr, with no stack trace, and returns it. */
function oneLine(result: CliResult): string {
  const lines = result.stderr.trim().split("\n");
  assert.equal(lines.length, 1, `expected one line on stderr, got:\n${result.stderr}`);
  assert.doesNotMatch(result.stderr, /^\s+at /m, "no stack trace");
  return lines[0] ?? "";
}

/** The ids of the jobs in the database file at `file`, read while no service holds it. */
function jobIdsIn(file: string): string[] {
  const db = new Database(file, { fileMustExist: true });
  try {
    // Exclusive: no -shm file is left beside it.
    db.pragma("locking_mode = EXCLUSIVE");
    return db.prepare("SELECT id FROM jobs ORDER BY seq").pluck().all() as string[];
  } finally {
    db.close();
  }
}

test(
  "backup copies a serve under enqueue and delivery load, enqueues are answered while it copies, and a node restored from it has every job acknowledged before it began or while it copied",
  { timeout: 180_000 },
  async (t) => {
    const target = await startTarget(t, async (_request, res) => {
      await new Promise((resolve) => setTimeout(resolve, TARGET_ANSWER_MS));
      reply(res, 204);
    });
    const dirA = tempDir(t);
    // The service's own temporary folder, to see that the copy it makes there is gone once sent.
    const serviceTmp = path.join(dirA, "tmp");
    fs.mkdirSync(serviceTmp);
    const nodeA = await startNode(t, dirA, {
      configure: (raw) => {
        raw["target"] = { base_url: target.url, audience: "product" };
        raw["worker"] = { concurrency: 4 };
        raw["limits"] = { spawn_cap: 1_000_000 };
        raw["shutdown"] = { grace_ms: 1000 };
      },
      env: { TMPDIR: serviceTmp },
    });
    const token = await assertion(nodeA.config, "backup-load");

    // Jobs due in an hour: they stay pending, and make the database big enough for the copy to take many batches.
    const prefilled: string[] = [];
    await eachConcurrently(
      Array.from({ length: PREFILL_JOBS }, (_, i) => i),
      16,
      async (i) => {
        const padding = `${i}:`.padEnd(PREFILL_PADDING, "x");
        const { id } = await enqueue(nodeA.url, token, {
          request: { path_params: { userId: `prefill-${i}` }, body: { padding } },
          delay_ms: 3_600_000,
        });
        prefilled.push(id);
      },
    );

    // Load: enqueues of jobs due now, delivered to the slow target, so jobs are running and pending during the copy.
    const load = startEnqueueLoad({ url: nodeA.url, token, loops: LOAD_LOOPS });
    t.after(() => load.stop());
    await load.acked(40);
    await target.waitForRequests(8);

    const acknowledgedBefore = [...prefilled, ...load.acks.map((ack) => ack.id)];
    const backupFile = path.join(tempDir(t), "backups", "opqueue-backup.db");
    fs.mkdirSync(path.dirname(backupFile));
    const backup = await runCli(t, ["backup", "--config", nodeA.configFile, "--to", backupFile], {
      OPQUEUE_PORT: String(nodeA.port),
    });
    await load.stop();
    assert.equal(backup.code, 0, backup.stderr);
    assert.match(
      backup.stdout,
      /^backed up http:\/\/127\.0\.0\.1:\d+\/admin\/backup to .*opqueue-backup\.db: \d+ bytes, \d+ jobs, schema version \d+, integrity ok\n$/,
    );
    assert.equal(
      fs.statSync(backupFile).mode & 0o777,
      0o600,
      "the copy holds job payloads: readable by its owner alone",
    );
    assert.deepEqual(
      fs.readdirSync(path.dirname(backupFile)),
      ["opqueue-backup.db"],
      "no temporary file is left beside it",
    );
    assert.deepEqual(
      fs.readdirSync(serviceTmp).filter((name) => name.startsWith("opqueue-backup-")),
      [],
      "the service removed its own copy",
    );

    // Enqueues were answered while the copy was made: one sent after it began was acknowledged before it ended.
    const started = logged(nodeA.cli, "backup started");
    const copied = logged(nodeA.cli, "backup copied");
    const during = load.acks.filter((ack) => ack.sentAt > started.at && ack.ackedAt < copied.at);
    const overlapping = load.acks.filter((ack) => ack.ackedAt >= started.at && ack.sentAt <= copied.at);
    t.diagnostic(
      `copy: ${String(copied.line["bytes"])} bytes in ${String(copied.line["steps"])} batches, ${copied.at - started.at} ms; ` +
        `${during.length} enqueues sent and acknowledged within it; longest enqueue overlapping it: ` +
        `${Math.max(0, ...overlapping.map((ack) => ack.ackedAt - ack.sentAt))} ms`,
    );
    assert.ok(
      during.length > 0,
      `no enqueue sent after the copy began (${started.at}) was acknowledged before it ended (${copied.at})`,
    );
    assert.ok(
      Number(copied.line["steps"]) >= 3,
      `the copy took ${String(copied.line["steps"])} batches; the test needs several`,
    );
    await stopServe(nodeA.cli);

    // A new node, restored from the copy, serves every job acknowledged before the backup began, and those acknowledged
    // while it copied (SQLite carries the service's writes during the copy into it).
    const dirB = tempDir(t);
    const configB = writeConfig(dirB);
    const restore = await runCli(t, ["restore", "--config", configB.file, "--from", backupFile]);
    assert.equal(restore.code, 0, restore.stderr);
    assert.match(
      restore.stdout,
      /^restored .*opqueue\.db from .*opqueue-backup\.db \(\d+ bytes, \d+ jobs, schema version \d+\)\n$/,
    );
    const nodeB = await startNode(t, dirB, { args: ["--no-worker"] });
    const admin = await adminToken(nodeB.config);
    const missing: string[] = [];
    await eachConcurrently([...acknowledgedBefore, ...during.map((ack) => ack.id)], 16, async (id) => {
      const response = await fetch(`${nodeB.url}/jobs/${id}`, { headers: { authorization: `Bearer ${admin}` } });
      await response.arrayBuffer();
      if (response.status !== 200) missing.push(`${id} (${response.status})`);
    });
    assert.deepEqual(
      missing,
      [],
      `of ${acknowledgedBefore.length} jobs acknowledged before the backup and ${during.length} during it`,
    );
    await stopServe(nodeB.cli);
  },
);

test(
  "restore refuses while a serve holds the database, and refuses files that are not whole opqueue databases",
  { timeout: 120_000 },
  async (t) => {
    // A whole backup: another node's freshly migrated database.
    const source = writeConfig(tempDir(t));
    assert.equal((await runCli(t, ["migrate", "--config", source.file])).code, 0);
    const valid = path.join(path.dirname(source.file), "opqueue.db");

    const node = await startNode(t, tempDir(t));
    const { id } = await enqueue(node.url, await assertion(node.config, "restore-refusals"), {
      request: { path_params: { userId: "kept" } },
    });
    const held = await runCli(t, ["restore", "--config", node.configFile, "--from", valid]);
    assert.equal(held.code, 1, held.stderr);
    assert.match(oneLine(held), /^opqueue: the SQLite database .*opqueue\.db is in use by another opqueue process/);
    const stillServed = await fetch(`${node.url}/jobs/${id}`, {
      headers: { authorization: `Bearer ${await adminToken(node.config)}` },
    });
    assert.equal(stillServed.status, 200, "the running service and its job are untouched");
    await stopServe(node.cli);

    // Against the stopped node, every file that is not a whole opqueue database of this opqueue's version is refused.
    const database = path.join(node.dir, "opqueue.db");
    const before = fs.readdirSync(node.dir).sort();
    const files = tempDir(t);
    const notSqlite = path.join(files, "random.bin");
    fs.writeFileSync(notSqlite, Buffer.alloc(64 * 1024, 0x5a));
    const someoneElses = path.join(files, "notes.db");
    const notes = new Database(someoneElses);
    notes.exec("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hello')");
    notes.close();
    const corrupt = path.join(files, "corrupt.db");
    fs.copyFileSync(valid, corrupt);
    const fd = fs.openSync(corrupt, "r+");
    // Pages 3 to 5 (of 4 KiB): the roots of opqueue's tables and indexes, overwritten with noise.
    fs.writeSync(fd, Buffer.alloc(3 * 4096, 0xa5), 0, 3 * 4096, 2 * 4096);
    fs.closeSync(fd);
    const newer = path.join(files, "newer.db");
    fs.copyFileSync(valid, newer);
    const newerDb = new Database(newer);
    newerDb.pragma(`user_version = ${latestSchemaVersion() + 1}`);
    newerDb.close();

    for (const [file, refusal] of [
      [notSqlite, /random\.bin is not a SQLite database$/],
      [someoneElses, /notes\.db is not an opqueue database: it has no opqueue schema version$/],
      [corrupt, /corrupt\.db is corrupt: /],
      [
        newer,
        new RegExp(
          `newer\\.db has schema version ${latestSchemaVersion() + 1}, newer than this opqueue's \\(${latestSchemaVersion()}\\)`,
        ),
      ],
      [path.join(files, "absent.db"), /--from .*absent\.db is not a file/],
    ] as const) {
      const result = await runCli(t, ["restore", "--config", node.configFile, "--from", file]);
      assert.equal(result.code, file.endsWith("absent.db") ? 2 : 1, `${file}: ${result.stderr}`);
      assert.match(result.stderr.split("\n")[0] ?? "", refusal, file);
      assert.doesNotMatch(result.stderr, /^\s+at /m, "no stack trace");
      assert.equal(result.stdout, "", file);
      assert.deepEqual(jobIdsIn(database), [id], `the database keeps its job after refusing ${file}`);
      assert.deepEqual(
        fs.readdirSync(node.dir).sort(),
        before,
        `nothing is left beside the database after refusing ${file}`,
      );
    }

    // A whole backup replaces the stopped node's database.
    const restored = await runCli(t, ["restore", "--config", node.configFile, "--from", valid]);
    assert.equal(restored.code, 0, restored.stderr);
    assert.match(restored.stdout, /replacing the database that was there and its -wal and -shm files\n$/);
    assert.deepEqual(jobIdsIn(database), []);
    assert.deepEqual(fs.readdirSync(node.dir).sort(), before);
  },
);

test("restore with a PostgreSQL config exits 2 saying to use pg_restore", async (t) => {
  const { file } = writeConfig(tempDir(t), (raw) => (raw["database"] = "postgres://opqueue@127.0.0.1:1/opqueue"));
  const result = await runCli(t, ["restore", "--config", file, "--from", file]);
  assert.equal(result.code, 2, result.stderr);
  assert.match(
    oneLine(result),
    /^opqueue: restore: this config's database is PostgreSQL; restore a pg_dump of it with pg_restore$/,
  );
});

test("backup without --to, or onto the config's own database, exits 2 and fetches nothing", async (t) => {
  const { file } = writeConfig(tempDir(t));
  const noTarget = await runCli(t, ["backup", "--config", file]);
  assert.equal(noTarget.code, 2);
  assert.match(noTarget.stderr, /backup: --to FILE is required/);
  const ontoItself = await runCli(t, ["backup", "--config", file, "--to", path.join(path.dirname(file), "opqueue.db")]);
  assert.equal(ontoItself.code, 2);
  assert.match(ontoItself.stderr, /backup: --to names the database itself/);
});

test(
  "backup of a PostgreSQL node exits 2 saying to use pg_dump, and writes nothing",
  { skip: POSTGRES_SKIP, timeout: 60_000 },
  async (t) => {
    const schema = freshSchemaName();
    const database = new URL(POSTGRES_URL ?? "");
    database.searchParams.set("schema", schema);
    const dir = tempDir(t);
    const node = await startNode(t, dir, {
      configure: (raw) => {
        raw["database"] = database.toString();
        raw["database_pool_size"] = 2;
      },
    });
    // The node's connections go before its schema does.
    t.after(async () => {
      if (node.cli.child.exitCode === null && node.cli.child.signalCode === null) node.cli.child.kill("SIGKILL");
      await node.cli.exited;
      await dropSchema(schema);
    });
    const to = path.join(dir, "backup.db");
    const result = await runCli(t, ["backup", "--config", node.configFile, "--to", to], {
      OPQUEUE_PORT: String(node.port),
    });
    assert.equal(result.code, 2, result.stderr);
    const message = oneLine(result);
    assert.match(message, /^opqueue: backup: http:\/\/127\.0\.0\.1:\d+\/admin\/backup answered 404 not_found: /);
    assert.match(message, /this node's database is PostgreSQL, which opqueue does not copy: back it up with pg_dump/);
    assert.equal(fs.existsSync(to), false);
    assert.deepEqual(fs.readdirSync(dir).sort(), ["opqueue.json"], "no temporary file is left");
    await stopServe(node.cli);
  },
);

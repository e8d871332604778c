/**
 * Fuzzing the HTTP API (docs/api.md). The promise under test: no input, however malformed, yields a 5xx;
 * every 4xx body is exactly `{code, message}` with a code that §11 lists for that status; every 2xx job is in
 * the wire form of docs/api.md.
 *
 * One service per property, many runs each. `FUZZ_SEED=<n>` replays a failing run (fast-check prints the
 * seed and the shrunk counterexample); `FUZZ_RUNS=<n>` scales the number of runs.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import { connect } from "node:net";
import fc from "fast-check";
import type { InjectOptions, LightMyRequestResponse } from "fastify";
import { parse as parseYaml } from "yaml";
import { deliveryTokenHash } from "../../src/auth/delivery-tokens.js";
import { mintToken } from "../../src/auth/tokens.js";
import { buildPath } from "../../src/dispatcher/deliverer.js";
import {
  startTestService,
  TEST_DELIVERY_SECRET,
  TEST_OPENAPI,
  TEST_SECRET,
  type TestService,
} from "../helpers/service.js";

// ---------------------------------------------------------------------------------------------------------
// Oracles
// ---------------------------------------------------------------------------------------------------------

/** docs/api.md, "Errors", copied here rather than imported so the test does not trust the code it checks. */
const DOCUMENTED_CODES: Readonly<Record<number, readonly string[]>> = {
  400: ["invalid_request", "payload_too_large", "invalid_on_behalf_of", "missing_path_param", "invalid_path_param"],
  401: ["invalid_assertion", "unauthenticated", "invalid_delivery_token"],
  403: ["trigger_not_allowed", "on_behalf_of_not_allowed", "chain_mismatch", "site_admin_required"],
  404: ["job_not_found", "not_found", "chain_not_found", "schedule_not_found"],
  409: [
    "job_running",
    "job_not_cancellable",
    "job_not_retryable",
    "dedupe_conflict",
    "job_not_waiting",
    "chain_exists",
    "schedule_exists",
    "schedule_read_only",
    "job_not_running",
    "schedule_limit_reached",
  ],
  413: ["body_too_large"],
  415: ["unsupported_media_type"],
  422: ["unknown_operation", "operation_not_background", "request_schema_mismatch", "idempotency_key_reused"],
  429: ["spawn_cap_exceeded"],
};

/** The fields of a Job (docs/api.md), exactly. */
const JOB_FIELDS = [
  "attempt",
  "authority",
  "concurrency_key",
  "created_at",
  "dedupe_key",
  "enqueued_by_operation_id",
  "finished_at",
  "id",
  "max_attempts",
  "operation_id",
  "original_request_id",
  "parent_job_id",
  "priority",
  "request",
  "result",
  "run_at",
  "started_at",
  "status",
  "user_id",
];
const STATUSES = ["pending", "running", "retrying", "succeeded", "dead", "cancelled"];
/** RFC 3339 UTC with milliseconds, as docs/api.md "Wire form" fixes. */
const WIRE_DATE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** A short, printable description of a request for assertion messages. */
function describe(options: InjectOptions): string {
  const payload = options.payload;
  const text = typeof payload === "string" ? payload : Buffer.isBuffer(payload) ? `<${payload.length} bytes>` : "";
  const headers = JSON.stringify(options.headers ?? {});
  return `${options.method} ${String(options.url).slice(0, 300)} headers=${headers.slice(0, 300)} body=${text.slice(0, 300)}`;
}

/** No 5xx; a 4xx body is `{code, message}` with a §11 code for its status. */
function checkResponse(
  options: InjectOptions,
  res: Pick<LightMyRequestResponse, "statusCode" | "body" | "headers">,
): void {
  const where = `${describe(options)} -> ${res.statusCode} ${res.body.slice(0, 500)}`;
  assert.ok(res.statusCode < 500, `5xx: ${where}`);
  assert.ok(res.statusCode >= 200, `unexpected status: ${where}`);
  if (options.method === "HEAD" || res.statusCode < 400) return;
  assert.match(String(res.headers["content-type"]), /^application\/json\b/, `error content-type: ${where}`);
  let body: unknown;
  assert.doesNotThrow(() => (body = JSON.parse(res.body)), `error body is not JSON: ${where}`);
  assert.ok(typeof body === "object" && body !== null && !Array.isArray(body), `error body is not an object: ${where}`);
  assert.deepEqual(Object.keys(body).sort(), ["code", "message"], `error body keys: ${where}`);
  const { code, message } = body as { code: unknown; message: unknown };
  assert.equal(typeof message, "string", `message is not a string: ${where}`);
  assert.ok((message as string).length > 0, `empty message: ${where}`);
  const allowed = DOCUMENTED_CODES[res.statusCode];
  assert.ok(allowed !== undefined, `status ${res.statusCode} has no §11 codes: ${where}`);
  assert.ok(
    allowed.includes(code as string),
    `code ${JSON.stringify(code)} is not a §11 code for ${res.statusCode}: ${where}`,
  );
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A job in the wire form of docs/api.md / docs/api.md. */
function checkJob(job: unknown, where: string): Record<string, unknown> {
  assert.ok(isObject(job), `job is not an object: ${where}`);
  assert.deepEqual(Object.keys(job).sort(), JOB_FIELDS, `job fields: ${where}`);
  assert.match(String(job["id"]), /^[0-9A-Za-z_-]{8,32}$/, `job id: ${where}`);
  assert.ok(STATUSES.includes(job["status"] as string), `job status: ${where}`);
  for (const field of ["attempt", "max_attempts", "priority"]) {
    assert.ok(Number.isInteger(job[field]), `job ${field} is not an integer: ${where}`);
  }
  for (const field of ["run_at", "created_at"]) assert.match(String(job[field]), WIRE_DATE, `job ${field}: ${where}`);
  for (const field of ["started_at", "finished_at"]) {
    if (job[field] !== null) assert.match(String(job[field]), WIRE_DATE, `job ${field}: ${where}`);
  }
  for (const field of ["dedupe_key", "concurrency_key", "parent_job_id"]) {
    assert.ok(job[field] === null || typeof job[field] === "string", `job ${field}: ${where}`);
  }
  for (const field of ["operation_id", "enqueued_by_operation_id", "original_request_id", "user_id"]) {
    assert.equal(typeof job[field], "string", `job ${field}: ${where}`);
  }
  const authority = job["authority"];
  assert.ok(isObject(authority), `job authority: ${where}`);
  assert.ok(["request", "resource", "cron"].includes(authority["kind"] as string), `authority kind: ${where}`);
  assert.ok(!("assertion" in authority), `the stored assertion leaked into the wire form: ${where}`);
  assert.ok(isObject(job["request"]), `job request: ${where}`);
  assert.ok(job["result"] === null || isObject(job["result"]), `job result: ${where}`);
  return job;
}

/** The fields of a schedule (docs/schedules.md), exactly. */
const SCHEDULE_FIELDS = [
  "concurrency_key",
  "created",
  "dedupe_key",
  "last_job_id",
  "last_run_at",
  "name",
  "next_run_at",
  "operation_id",
  "paused",
  "priority",
  "request",
  "schedule",
  "source",
  "timezone",
  "updated",
  "user_id",
];

/** A schedule in the wire form of docs/schedules.md. */
function checkSchedule(schedule: unknown, where: string): void {
  assert.ok(isObject(schedule), `schedule is not an object: ${where}`);
  assert.deepEqual(Object.keys(schedule).sort(), SCHEDULE_FIELDS, `schedule fields: ${where}`);
  assert.ok(["config", "api"].includes(schedule["source"] as string), `schedule source: ${where}`);
  for (const field of ["name", "schedule", "timezone", "operation_id", "user_id"]) {
    assert.equal(typeof schedule[field], "string", `schedule ${field}: ${where}`);
  }
  assert.ok(Number.isInteger(schedule["priority"]), `schedule priority: ${where}`);
  for (const field of ["next_run_at", "last_run_at"]) {
    if (schedule[field] !== null) assert.match(String(schedule[field]), WIRE_DATE, `schedule ${field}: ${where}`);
  }
  for (const field of ["paused", "created", "updated"]) {
    const stamp = schedule[field];
    if (stamp === null) continue;
    assert.ok(isObject(stamp) && typeof stamp["by"] === "string", `schedule ${field}: ${where}`);
    assert.match(String(stamp["at"]), WIRE_DATE, `schedule ${field}.at: ${where}`);
  }
  assert.ok(isObject(schedule["request"]), `schedule request: ${where}`);
}

/**
 * Checks the 2xx body of an admin, enqueue or attempt-call route: `{job}`, `{jobs}`, `{jobs, next_cursor}`,
 * `{schedule}`, `{schedules}` or a heartbeat's `{lease_expires_at}`.
 */
function checkSuccessBody(res: LightMyRequestResponse, where: string): unknown {
  const body: unknown = JSON.parse(res.body);
  assert.ok(isObject(body), `2xx body is not an object: ${where}`);
  const keys = Object.keys(body).sort();
  if (keys.length === 1 && keys[0] === "lease_expires_at") {
    assert.match(String(body["lease_expires_at"]), WIRE_DATE, `lease_expires_at: ${where}`);
  } else if (keys.length === 1 && keys[0] === "job") {
    checkJob(body["job"], where);
  } else if (keys.length === 1 && keys[0] === "schedule") {
    checkSchedule(body["schedule"], where);
  } else if (keys.length === 1 && keys[0] === "schedules") {
    assert.ok(Array.isArray(body["schedules"]), `schedules is not an array: ${where}`);
    for (const schedule of body["schedules"] as unknown[]) checkSchedule(schedule, where);
  } else if (keys.includes("jobs")) {
    assert.ok(
      (keys.length === 1 && keys[0] === "jobs") || (keys.length === 2 && keys[1] === "next_cursor"),
      `2xx body keys ${keys.join(",")}: ${where}`,
    );
    assert.ok(Array.isArray(body["jobs"]), `jobs is not an array: ${where}`);
    for (const job of body["jobs"] as unknown[]) checkJob(job, where);
    if ("next_cursor" in body) assert.ok(body["next_cursor"] === null || typeof body["next_cursor"] === "string");
  } else {
    assert.fail(`2xx body keys ${keys.join(",")}: ${where}`);
  }
  return body;
}

/** Counts of each outcome ("201", "400 invalid_request", ...), reported per property to show what the runs reached. */
type Tally = Map<string, number>;

async function send(s: TestService, options: InjectOptions, tally?: Tally): Promise<LightMyRequestResponse> {
  const res = await s.service.app.inject(options);
  checkResponse(options, res);
  if (tally) {
    const code = res.statusCode >= 400 && options.method !== "HEAD" ? ` ${(res.json() as { code: string }).code}` : "";
    const key = `${res.statusCode}${code}`;
    tally.set(key, (tally.get(key) ?? 0) + 1);
  }
  return res;
}

function report(t: { diagnostic(message: string): void }, tally: Tally): void {
  t.diagnostic(`outcomes: ${JSON.stringify(Object.fromEntries([...tally].sort((a, b) => b[1] - a[1])))}`);
}

/** A response read off a socket, in the shape `checkResponse` reads. */
interface RawResponse {
  statusCode: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Sends raw bytes to a listening service and reads the response until the server closes the connection (send
 * `Connection: close`, or bytes the server refuses). For what `inject` cannot express: bytes Node's HTTP parser
 * refuses, request targets the WHATWG URL parser rejects, requests without Host.
 */
function rawHttp(port: number, request: string | Buffer): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no response within 3 s to ${JSON.stringify(String(request).slice(0, 300))}`));
    }, 3000);
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("error", () => undefined); // a reset after the response is fine; no response fails below
    socket.on("close", () => {
      clearTimeout(timer);
      let text = Buffer.concat(chunks).toString("latin1");
      while (/^HTTP\/1\.1 1\d\d /.test(text)) text = text.slice(text.indexOf("\r\n\r\n") + 4);
      const end = text.indexOf("\r\n\r\n");
      const match = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      if (end < 0 || !match) {
        reject(
          new Error(
            `no HTTP response to ${JSON.stringify(String(request).slice(0, 300))}: ${JSON.stringify(text.slice(0, 300))}`,
          ),
        );
        return;
      }
      const headers: Record<string, string> = {};
      for (const line of text.slice(0, end).split("\r\n").slice(1)) {
        const colon = line.indexOf(":");
        headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
      }
      let body = text.slice(end + 4);
      if (headers["transfer-encoding"] === "chunked") {
        let decoded = "";
        for (let size = parseInt(body, 16); size > 0; size = parseInt(body, 16)) {
          const start = body.indexOf("\r\n") + 2;
          decoded += body.slice(start, start + size);
          body = body.slice(start + size + 2);
        }
        body = decoded;
      }
      resolve({ statusCode: Number(match[1]), headers, body: Buffer.from(body, "latin1").toString("utf8") });
    });
    // Not `end()`: Node's server aborts a request still being handled when the client half-closes.
    socket.write(request);
  });
}

/** Builds the bytes of an HTTP/1.1 request; the body's Content-Length is computed. */
function rawRequest(method: string, target: string, headers: Record<string, string>, body?: string | Buffer): Buffer {
  const bytes = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(body, "utf8");
  const lines = [`${method} ${target} HTTP/1.1`, "Host: localhost", "Connection: close"];
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  if (bytes) lines.push(`Content-Length: ${bytes.length}`);
  return Buffer.concat([Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "utf8"), bytes ?? Buffer.alloc(0)]);
}

// ---------------------------------------------------------------------------------------------------------
// Settings and shared generators
// ---------------------------------------------------------------------------------------------------------

const RUNS = Number(process.env["FUZZ_RUNS"] ?? 300);
const SEED = process.env["FUZZ_SEED"] === undefined ? undefined : Number(process.env["FUZZ_SEED"]);
const runOptions = (numRuns = RUNS): fc.Parameters<unknown> => ({
  numRuns,
  includeErrorInReport: true,
  ...(SEED === undefined ? {} : { seed: SEED }),
});

/** operationIds of the test product, read from the fixture itself. */
const PRODUCT_OPERATIONS: string[] = (() => {
  const doc = parseYaml(readFileSync(TEST_OPENAPI, "utf8")) as {
    paths: Record<string, Record<string, { operationId?: string }>>;
  };
  return Object.values(doc.paths).flatMap((item) =>
    Object.values(item).flatMap((op) => (op.operationId ? [op.operationId] : [])),
  );
})();
const PROTOTYPE_KEYS = ["constructor", "__proto__", "toString", "hasOwnProperty", "valueOf", "prototype"];
const CALLERS = ["createUser", "importUsers", "sendWelcomeEmail", "recordEmailSent", "cron:nightly"];

/** 0001-01-01T00:00:00.000Z (year 0000 is refused: PostgreSQL has none) and 9999-12-31T23:59:59.999Z. */
const MIN_RFC3339_MS = -62_135_596_800_000;
const MAX_RFC3339_MS = 253_402_300_799_999;
const MAX_DELAY_MS = 100 * 365 * 24 * 3600 * 1000;

const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((code) => String.fromCharCode(code));
const oddChar = fc.oneof(
  fc.string({ unit: "binary", minLength: 1, maxLength: 1 }),
  loneSurrogate,
  fc.constantFrom("😀", "👩‍👩‍👧", "\u0000", "\u202e", "\ufeff", "\\", '"', "%", "/", ".", "{", "}", "\n", "\r", "é"),
);
/** Strings of ~16 KB of JSON, around the payload cap, in 1-, 2-, 4- and 6-byte characters. */
const hugeString = fc
  .tuple(fc.integer({ min: 16_000, max: 16_600 }), fc.constantFrom("x", "é", "😀", "\ud800", "\u0000"))
  .map(([bytes, ch]) => ch.repeat(Math.ceil(bytes / (JSON.stringify(ch).length - 2))));
const wildString = fc.oneof(
  { weight: 3, arbitrary: fc.string() },
  { weight: 2, arbitrary: fc.string({ unit: oddChar, maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ unit: "grapheme", maxLength: 40 }) },
  { weight: 1, arbitrary: fc.constantFrom(...PROTOTYPE_KEYS, "", " ", "null", "undefined") },
);
const wildNumber = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.maxSafeInteger(),
  fc.constantFrom(2 ** 31, -(2 ** 31), 2 ** 31 - 1, -(2 ** 31) - 1, 2 ** 53, -0, 0.5, 1.5, 1e308, -1e308, -1),
  fc.constantFrom(MAX_DELAY_MS, MAX_DELAY_MS + 1, 8.64e15, 8.64e15 + 1, Number.MAX_SAFE_INTEGER, Number.MIN_VALUE),
);
const numberLike = fc.oneof(
  { weight: 4, arbitrary: wildNumber },
  { weight: 1, arbitrary: fc.constantFrom("NaN", "Infinity", "-Infinity", "1", "1e3", "0x10", "", " 1", "-0") },
  { weight: 1, arbitrary: fc.constantFrom(true, false, null, [], {}, [1]) },
);

const pad = (n: number, width: number): string => String(n).padStart(width, "0");
/** RFC 3339-shaped strings, mostly valid, with out-of-range parts, odd separators and offsets. */
const dateTimeish = fc
  .record({
    year: fc.oneof(fc.integer({ min: 0, max: 9999 }), fc.constantFrom(0, 1, 1969, 1970, 2026, 9999)),
    month: fc.oneof({ weight: 5, arbitrary: fc.integer({ min: 1, max: 12 }) }, fc.constantFrom(0, 13)),
    day: fc.oneof({ weight: 5, arbitrary: fc.integer({ min: 1, max: 28 }) }, fc.integer({ min: 0, max: 32 })),
    hour: fc.oneof({ weight: 5, arbitrary: fc.integer({ min: 0, max: 23 }) }, fc.constant(24)),
    minute: fc.oneof({ weight: 5, arbitrary: fc.integer({ min: 0, max: 59 }) }, fc.constant(60)),
    second: fc.oneof({ weight: 5, arbitrary: fc.integer({ min: 0, max: 59 }) }, fc.constantFrom(60, 61)),
    fraction: fc.option(fc.stringMatching(/^[0-9]{1,12}$/), { nil: undefined }),
    separator: fc.oneof({ weight: 5, arbitrary: fc.constant("T") }, fc.constantFrom("t", " ", "_")),
    offset: fc.oneof(
      fc.constantFrom("Z", "z", "+00:00", "-00:00", "", "+0000", "UTC"),
      fc
        .tuple(fc.constantFrom("+", "-"), fc.integer({ min: 0, max: 24 }), fc.integer({ min: 0, max: 60 }))
        .map(([sign, h, m]) => `${sign}${pad(h, 2)}:${pad(m, 2)}`),
    ),
  })
  .map(
    (d) =>
      `${pad(d.year, 4)}-${pad(d.month, 2)}-${pad(d.day, 2)}${d.separator}${pad(d.hour, 2)}:${pad(d.minute, 2)}:` +
      `${pad(d.second, 2)}${d.fraction === undefined ? "" : `.${d.fraction}`}${d.offset}`,
  );
/** Any instant RFC 3339 can write, as `Date#toISOString` writes it. */
const isoDate = fc
  .date({ min: new Date(MIN_RFC3339_MS), max: new Date(MAX_RFC3339_MS), noInvalidDate: true })
  .map((d) => d.toISOString());
const runAtArb = fc.oneof(
  { weight: 3, arbitrary: isoDate },
  { weight: 3, arbitrary: dateTimeish },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      "2026-06-30T23:59:60Z",
      "2016-12-31T23:59:60Z",
      "1998-12-31T23:59:60.5+00:00",
      "2026-12-31T23:59:60-23:59",
      "9999-12-31T23:59:59-23:59",
      "9999-12-31T23:59:59.999Z",
      "0000-01-01T00:00:00+23:59",
      "0000-01-01T00:00:00Z",
      "1970-01-01T00:00:00Z",
      "2026-02-29T00:00:00Z",
      "2024-02-29T00:00:00Z",
      "+275760-09-13T00:00:00Z",
      "2026-11-21T12:00:00.123456789012Z",
      "2026-11-21",
      "12:00:00Z",
    ),
  },
  { weight: 1, arbitrary: wildString },
);

const userIdArb = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom("u1", "u2", "importer") },
  { weight: 1, arbitrary: wildString },
);
const nonEmptyish = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom("r1", "res-9", "nightly", "user") },
  { weight: 1, arbitrary: wildString },
);
const authorityArb = fc.oneof(
  fc.record({ kind: fc.constant("request"), request_id: nonEmptyish, user_id: userIdArb }, { requiredKeys: [] }),
  fc.record(
    { kind: fc.constant("resource"), resource_id: nonEmptyish, resource_kind: nonEmptyish, user_id: userIdArb },
    { requiredKeys: [] },
  ),
  fc.record({ kind: fc.constant("cron"), cron_job_name: nonEmptyish, user_id: userIdArb }, { requiredKeys: [] }),
  fc.record(
    {
      kind: fc.oneof(fc.constantFrom("request", "resource", "cron", "REQUEST", "", "admin"), wildString),
      request_id: fc.anything(),
      user_id: fc.anything(),
      assertion: fc.string(),
      extra: fc.anything(),
    },
    { requiredKeys: [] },
  ),
  fc.anything(),
);
const onBehalfOfArb = fc.oneof(
  // user_id matching the authority's, as a valid call would have it
  fc.tuple(userIdArb, authorityArb).map(([user_id, authority]) => ({
    user_id,
    authority: isObject(authority) ? { ...authority, user_id } : authority,
  })),
  fc.record({ user_id: userIdArb, authority: authorityArb }, { requiredKeys: [] }),
  fc.record({ user_id: fc.anything(), authority: fc.anything(), extra: fc.anything() }, { requiredKeys: [] }),
  fc.anything(),
);

/** `arb` in one run of `n`, else null. */
const oneIn = <T>(n: number, arb: fc.Arbitrary<T>): fc.Arbitrary<T | null> =>
  fc.oneof({ weight: n - 1, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: arb });

/** Present (mostly valid), present and invalid, or absent (JSON.stringify drops `undefined`). */
function field<T, U>(
  valid: fc.Arbitrary<T>,
  invalid: fc.Arbitrary<U>,
  absentFreq = 2,
): fc.Arbitrary<T | U | undefined> {
  return fc.option(fc.oneof({ weight: 9, arbitrary: valid }, { weight: 1, arbitrary: invalid }), {
    nil: undefined,
    freq: absentFreq,
  });
}

/** JSON objects whose keys are Object.prototype's members ({"toString": 1} makes `String(value)` throw), or arrays of them. */
const prototypeKeyed = fc
  .tuple(
    fc.dictionary(fc.constantFrom(...PROTOTYPE_KEYS), fc.jsonValue({ maxDepth: 1 }), { minKeys: 1, maxKeys: 3 }),
    fc.boolean(),
  )
  .map(([object, inArray]) => (inArray ? [object] : object));
const smallValue = fc.oneof(
  { weight: 4, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 2, arbitrary: wildString },
  { weight: 1, arbitrary: wildNumber },
  { weight: 1, arbitrary: prototypeKeyed },
);
/** Nested arrays/objects of a given depth, built without recursion; kept shallow enough for JSON.stringify here. */
const nestedArb = fc.tuple(fc.integer({ min: 1, max: 3000 }), fc.boolean()).map(([depth, asArrays]) => {
  let value: unknown = 1;
  for (let i = 0; i < depth; i++) value = asArrays ? [value] : { a: value };
  return value;
});
const requestArb = fc.record({
  body: fc.option(
    fc.oneof(
      { weight: 12, arbitrary: smallValue },
      { weight: 1, arbitrary: hugeString },
      { weight: 1, arbitrary: nestedArb },
    ),
    { nil: undefined, freq: 3 },
  ),
  path_params: field(
    fc.oneof(fc.constant({ userId: "42", emailId: "e-1" }), fc.record({ userId: smallValue, emailId: smallValue })),
    fc.oneof(fc.dictionary(wildString, smallValue, { maxKeys: 4 }), fc.record({ userId: hugeString }), fc.anything()),
    5,
  ),
  query: field(fc.dictionary(wildString, smallValue, { maxKeys: 4 }), fc.anything()),
});

const keyArb = field(
  fc.oneof(fc.constantFrom("k1", "k2", "k3", null, "x".repeat(255), "😀".repeat(60)), fc.uuid()),
  fc.oneof(fc.constantFrom("", "x".repeat(256), "😀".repeat(128)), wildString, numberLike),
);
const operationIdArb = fc.oneof(
  { weight: 12, arbitrary: fc.constantFrom("sendWelcomeEmail", "buildReport", "recordEmailSent") },
  { weight: 2, arbitrary: fc.constantFrom(...PRODUCT_OPERATIONS) },
  { weight: 1, arbitrary: fc.constantFrom(...PROTOTYPE_KEYS, "", "SENDWELCOMEEMAIL", "sendWelcomeEmail ") },
  { weight: 1, arbitrary: wildString },
);

/** Bodies of the right shape, with every field's value drawn from valid and (less often) invalid ones. */
const shapedBody = fc.record({
  operation_id: operationIdArb,
  request: fc.oneof({ weight: 12, arbitrary: requestArb }, { weight: 1, arbitrary: fc.anything() }),
  priority: field(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), numberLike),
  delay_ms: field(
    fc.oneof(fc.integer({ min: 0, max: 60_000 }), fc.integer({ min: 0, max: MAX_DELAY_MS })),
    numberLike,
    3,
  ),
  run_at: field(
    fc
      .date({ min: new Date(MIN_RFC3339_MS), max: new Date(MAX_RFC3339_MS), noInvalidDate: true })
      .map((d) => d.toISOString()),
    runAtArb,
    3,
  ),
  dedupe_key: keyArb,
  concurrency_key: keyArb,
  on_behalf_of: fc.oneof({ weight: 5, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: onBehalfOfArb }),
  // opqueue's own fields (docs/api.md, "Expiry", "Idempotency"), mostly absent.
  ttl_ms: field(fc.integer({ min: 1, max: MAX_DELAY_MS }), numberLike, 4),
  expires_at: field(
    fc
      .date({ min: new Date(MIN_RFC3339_MS), max: new Date(MAX_RFC3339_MS), noInvalidDate: true })
      .map((d) => d.toISOString()),
    runAtArb,
    4,
  ),
  idempotency_key: fc.oneof(
    { weight: 6, arbitrary: fc.constant(undefined) },
    { weight: 2, arbitrary: fc.constantFrom("k-1", "k-2", "k-3") },
    { weight: 1, arbitrary: wildString },
  ),
}) as fc.Arbitrary<Record<string, unknown>>;

type Mutation =
  | { kind: "none" }
  | { kind: "replace"; field: string; value: unknown }
  | { kind: "delete"; field: string }
  | { kind: "extra"; extra: Record<string, unknown> };
const FIELDS = [
  "operation_id",
  "request",
  "priority",
  "delay_ms",
  "run_at",
  "dedupe_key",
  "concurrency_key",
  "on_behalf_of",
  "ttl_ms",
  "expires_at",
  "idempotency_key",
];
const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 6, arbitrary: fc.constant<Mutation>({ kind: "none" }) },
  fc.record({
    kind: fc.constant("replace" as const),
    field: fc.constantFrom(
      ...FIELDS,
      "request.body",
      "request.path_params",
      "request.query",
      "request.headers",
      "on_behalf_of.authority",
    ),
    value: fc.anything(),
  }),
  fc.record({ kind: fc.constant("delete" as const), field: fc.constantFrom(...FIELDS) }),
  fc.record({
    kind: fc.constant("extra" as const),
    extra: fc.dictionary(wildString, fc.anything(), { minKeys: 1, maxKeys: 3 }),
  }),
);

function applyMutation(body: Record<string, unknown>, mutation: Mutation): Record<string, unknown> {
  const copy: Record<string, unknown> = { ...body };
  switch (mutation.kind) {
    case "none":
      return copy;
    case "delete":
      delete copy[mutation.field];
      return copy;
    case "extra":
      return Object.assign(copy, mutation.extra);
    case "replace": {
      const [outer, inner] = mutation.field.split(".") as [string, string | undefined];
      if (inner === undefined) {
        copy[outer] = mutation.value;
      } else {
        const nested = isObject(copy[outer]) ? { ...(copy[outer] as Record<string, unknown>) } : {};
        nested[inner] = mutation.value;
        copy[outer] = nested;
      }
      return copy;
    }
  }
}

/** JSON text with raw number literals JSON.stringify cannot write (1e400, 1.0, 2^63, ...). */
const rawNumber = fc.oneof(
  fc.constantFrom(
    "1e400",
    "-1e400",
    "1.0",
    "1e2",
    "1E9",
    "2147483648",
    "-2147483649",
    "9007199254740993",
    "-0",
    "0.0000001",
  ),
  fc.constantFrom("100000000000000000000000", "3153600000000", "3153600000001", "8640000000000001", "1e-400", "0e0"),
  wildNumber.map((n) => JSON.stringify(n)),
);
const rawNumberBody = fc
  .record({
    operation_id: fc.constantFrom("buildReport", "sendWelcomeEmail"),
    priority: rawNumber,
    delay_ms: rawNumber,
    which: fc.nat(3),
  })
  .map(({ operation_id, priority, delay_ms, which }) => {
    const request = operation_id === "buildReport" ? "{}" : `{"path_params":{"userId":${priority}}}`;
    const fields = [`"operation_id":"${operation_id}"`, `"request":${request}`];
    if (which & 1) fields.push(`"priority":${priority}`);
    if (which & 2) fields.push(`"delay_ms":${delay_ms}`);
    return `{${fields.join(",")}}`;
  });

/** Header values: printable ASCII, Latin-1, controls. */
const headerJunk = fc.oneof(fc.string({ unit: "grapheme-ascii" }), fc.string({ unit: "binary-ascii", maxLength: 30 }));
const b64url = (text: string): string => Buffer.from(text, "utf8").toString("base64url");

/** A compact JWT with the given header and payload texts, HMAC-signed with `secret`. */
function signRaw(headerText: string, payloadText: string, secret = TEST_SECRET): string {
  const signingInput = `${b64url(headerText)}.${b64url(payloadText)}`;
  return `${signingInput}.${createHmac("sha256", secret).update(signingInput).digest("base64url")}`;
}

/** JSON text of one claim value: any JSON value or a raw number literal. */
const claimText = fc.oneof(
  { weight: 3, arbitrary: fc.anything().map((value) => JSON.stringify(value) ?? "null") },
  { weight: 1, arbitrary: rawNumber },
);

/**
 * Tokens signed with the real key (or a wrong one) whose header and claims are fuzzed: each claim of a valid
 * token kept, dropped or replaced, plus extra claims; the header's alg/kid/crit likewise.
 */
function signedTokenArb(nowS: number, kind: "assertion" | "admin"): fc.Arbitrary<string> {
  const base: Record<string, string> =
    kind === "assertion"
      ? { aud: '"opqueue"', iat: String(nowS), exp: String(nowS + 60), sub: '"u1"', op: '"createUser"', rid: '"req-1"' }
      : { aud: '"opqueue"', iat: String(nowS), exp: String(nowS + 60), sub: '"admin"', site_admin: "true" };
  const claimChoice = fc.oneof(
    { weight: 12, arbitrary: fc.constant<"keep">("keep") },
    { weight: 1, arbitrary: fc.constant<"drop">("drop") },
    { weight: 1, arbitrary: claimText },
  );
  const timeText = fc.oneof(
    { weight: 3, arbitrary: fc.constant(null) },
    { weight: 1, arbitrary: fc.integer({ min: -400, max: 400 }).map((delta) => String(nowS + delta)) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        String(nowS + 0.5),
        `${nowS}.999`,
        "1e400",
        "-1e400",
        "0",
        "null",
        '"soon"',
        String(2 ** 53),
      ),
    },
  );
  const headerArb = fc
    .record({
      alg: fc.oneof(
        { weight: 8, arbitrary: fc.constant("HS256") },
        { weight: 1, arbitrary: fc.constantFrom("none", "None", "RS256", "HS512", "ES256", "EdDSA", "hs256", "") },
        { weight: 1, arbitrary: fc.anything() },
      ),
      kid: fc.oneof(
        { weight: 8, arbitrary: fc.constant("k1") },
        { weight: 1, arbitrary: fc.constantFrom(undefined, "q1", "k2", "", "__proto__", "constructor") },
        { weight: 1, arbitrary: fc.anything() },
      ),
      typ: fc.constantFrom("JWT", "at+jwt", "JOSE+JSON", undefined),
      extra: fc.oneof(
        { weight: 8, arbitrary: fc.constant({}) },
        {
          weight: 1,
          arbitrary: fc.record(
            { crit: fc.oneof(fc.constant(["exp"]), fc.constant(["b64"]), fc.anything()), b64: fc.boolean() },
            { requiredKeys: [] },
          ),
        },
      ),
    })
    .map(({ extra, ...header }) => JSON.stringify({ ...header, ...extra }));
  return fc
    .record({
      headerText: fc.oneof({ weight: 12, arbitrary: headerArb }, { weight: 1, arbitrary: headerJunk }),
      claims: fc.record(
        Object.fromEntries(Object.keys(base).map((claim) => [claim, claimChoice])) as Record<
          string,
          typeof claimChoice
        >,
      ),
      times: fc.record({ iat: timeText, exp: timeText }),
      extra: fc.dictionary(
        fc.constantFrom("job", "rid", "op", "site_admin", "nbf", "aud", "sub", "__proto__", "jti"),
        claimText,
        { maxKeys: 2 },
      ),
      extraCount: fc.nat(3),
      wrongSecret: fc.nat(19).map((n) => n === 0),
    })
    .map(({ headerText, claims, times, extra, extraCount, wrongSecret }) => {
      const entries: string[] = [];
      for (const [claim, text] of Object.entries(base)) {
        const choice = claims[claim];
        const timed = claim === "iat" ? times.iat : claim === "exp" ? times.exp : null;
        if (choice === "drop") continue;
        const value = choice === "keep" || choice === undefined ? (timed ?? text) : choice;
        entries.push(`${JSON.stringify(claim)}:${value}`);
      }
      // Extra (or duplicate: JSON.parse keeps the last) claims in one run of four.
      if (extraCount === 0)
        for (const [claim, text] of Object.entries(extra)) entries.push(`${JSON.stringify(claim)}:${text}`);
      const secret = wrongSecret ? "another-secret-that-is-also-32-bytes-long" : TEST_SECRET;
      return signRaw(headerText, `{${entries.join(",")}}`, secret);
    });
}

/** Three dot-separated segments of junk, base64url-encoded or not. */
const jwtShapedJunk = fc
  .array(
    fc.oneof(
      headerJunk,
      fc.jsonValue().map((value) => b64url(JSON.stringify(value))),
      fc.base64String(),
    ),
    {
      minLength: 1,
      maxLength: 6,
    },
  )
  .map((segments) => segments.join("."));

/** `encodeURIComponent` that leaves a lone surrogate (which it cannot encode) raw. */
function encodeLoosely(text: string): string {
  try {
    return encodeURIComponent(text);
  } catch {
    return text;
  }
}

/** Path or query fragments: percent-encoded junk, bad escapes, encoded dots and slashes, raw unicode. */
const urlJunk = fc.constantFrom(
  "%zz",
  "%00",
  "%",
  "%2",
  "%E0%A4%A",
  "%C0%AF",
  "%2e%2e",
  "%2E",
  "%2F",
  "%2f%2e%2e%2f",
  "%5C",
  "..",
  ".",
  "%u0041",
  "%252F",
  "%ff",
  "%fe%ff",
  "%F0%9F%98%80",
  "%ED%A0%80",
  "%0A",
  "%0D%0A",
  "%20",
  "+",
  "é",
  "😀",
  "\ud800",
  ";",
  "&",
  "=",
  "~",
  "*",
);
const idArb = (realIds: readonly string[]): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom(...realIds) },
    { weight: 2, arbitrary: wildString.map(encodeLoosely) },
    {
      weight: 2,
      arbitrary: fc
        .array(fc.oneof(urlJunk, fc.string({ unit: "grapheme-ascii", maxLength: 4 })), { minLength: 1, maxLength: 6 })
        .map((parts) => parts.join("")),
    },
    { weight: 1, arbitrary: fc.integer({ min: 90, max: 6000 }).map((n) => "a".repeat(n)) },
    { weight: 1, arbitrary: fc.string({ unit: "grapheme", minLength: 1, maxLength: 10 }) },
    { weight: 1, arbitrary: fc.constantFrom("", "%2e", "%2F..%2F", "jobs", "cancel") },
  );

// ---------------------------------------------------------------------------------------------------------
// Property 1: POST /jobs with a valid assertion and random JSON bodies
// ---------------------------------------------------------------------------------------------------------

test("fuzz: POST /jobs with a valid assertion and random JSON bodies never answers 5xx", async (t) => {
  const s = await startTestService({
    configure: (raw) => {
      raw["limits"] = { spawn_cap: 5 };
    },
  });
  t.after(() => s.close());

  // A few real jobs, for chained calls (assertions naming a parent).
  const parents: string[] = [];
  for (const [op, userId] of [
    ["createUser", "u1"],
    ["importUsers", "importer"],
  ] as const) {
    const res = await send(s, {
      method: "POST",
      url: "/jobs",
      headers: { authorization: `Bearer ${await s.assertion({ op, sub: userId, rid: `seed-${op}` })}` },
      payload: { operation_id: "sendWelcomeEmail", request: { path_params: { userId: "1" } } },
    });
    assert.equal(res.statusCode, 201, res.body);
    parents.push((res.json() as { job: { id: string } }).job.id);
  }

  const callerArb = fc.record({
    op: fc.oneof(
      { weight: 8, arbitrary: fc.constantFrom(...CALLERS) },
      { weight: 1, arbitrary: fc.constantFrom(...PROTOTYPE_KEYS) },
      { weight: 1, arbitrary: wildString.filter((op) => op !== "") },
    ),
    sub: fc.oneof({ weight: 4, arbitrary: userIdArb }, { weight: 1, arbitrary: fc.constantFrom(...PROTOTYPE_KEYS) }),
    rid: fc.oneof(
      { weight: 3, arbitrary: fc.uuid() },
      fc.constant("req-shared"),
      wildString.filter((rid) => rid !== ""),
    ),
    job: fc.oneof(
      { weight: 8, arbitrary: fc.constant(null) },
      { weight: 1, arbitrary: fc.constantFrom(...parents) },
      { weight: 1, arbitrary: fc.string({ minLength: 1 }) },
    ),
  });
  const bodyArb = fc.oneof(
    { weight: 1, arbitrary: fc.anything().map((value) => JSON.stringify(value) ?? "") },
    { weight: 1, arbitrary: fc.jsonValue().map((value) => JSON.stringify(value)) },
    { weight: 1, arbitrary: rawNumberBody },
    {
      weight: 10,
      arbitrary: fc
        .tuple(shapedBody, mutationArb)
        .map(([body, mutation]) => JSON.stringify(applyMutation(body, mutation))),
    },
  );

  let created = 0;
  const tally: Tally = new Map();
  await fc.assert(
    fc.asyncProperty(callerArb, bodyArb, async (caller, payload) => {
      const token = await s.assertion({
        op: caller.op,
        sub: caller.sub === "" ? "u1" : caller.sub,
        rid: caller.rid,
        ...(caller.job === null ? {} : { job: caller.job }),
      });
      const options: InjectOptions = {
        method: "POST",
        url: "/jobs",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        payload,
      };
      const res = await send(s, options, tally);
      if (res.statusCode >= 300) return;
      const where = `${describe(options)} -> ${res.statusCode} ${res.body.slice(0, 300)}`;
      assert.ok(res.statusCode === 200 || res.statusCode === 201, where);
      created++;
      const body = checkSuccessBody(res, where) as { job: Record<string, unknown> };
      const sent = JSON.parse(payload) as Record<string, unknown>;
      assert.equal(body.job["operation_id"], sent["operation_id"], where);
      assert.deepEqual(
        body.job["request"],
        JSON.parse(JSON.stringify(sent["request"])),
        `request round trip: ${where}`,
      );
      if (res.statusCode === 201) assert.equal(body.job["attempt"], 0, where);
    }),
    runOptions(),
  );
  report(t, tally);
  // The generators must reach the end of the enqueue path, not only its refusals: about one run in 25 does (10 to 16
  // of 300 seen). One is the floor that still says so (a floor of 3 failed about one unlucky seed in 2,000); fewer
  // runs than the default (FUZZ_RUNS) may well have none.
  if (RUNS >= 300) assert.ok(created >= 1, `no run of ${RUNS} enqueued a job`);
});

// ---------------------------------------------------------------------------------------------------------
// Property 1a: POST /jobs/batch with a valid assertion and random batches
// ---------------------------------------------------------------------------------------------------------

/** A batch's 200 body: one result per item, each a job (200/201) or a 4xx with a documented code. */
function checkBatchBody(res: LightMyRequestResponse, items: number, where: string): Array<Record<string, unknown>> {
  const body: unknown = JSON.parse(res.body);
  assert.ok(isObject(body), `batch body is not an object: ${where}`);
  assert.deepEqual(Object.keys(body), ["results"], `batch body keys: ${where}`);
  const results = body["results"];
  assert.ok(Array.isArray(results), `results is not an array: ${where}`);
  assert.equal(results.length, items, `one result per item: ${where}`);
  for (const result of results as unknown[]) {
    assert.ok(isObject(result), `a result is not an object: ${where}`);
    const status = result["status"] as number;
    if (status === 200 || status === 201) {
      const keys = Object.keys(result).sort();
      assert.ok(
        keys.join() === "id,status" || keys.join() === "id,replayed,status",
        `result keys ${keys.join()}: ${where}`,
      );
      assert.match(String(result["id"]), /^[0-9A-Za-z_-]{8,32}$/, `result id: ${where}`);
    } else {
      assert.deepEqual(Object.keys(result).sort(), ["code", "message", "status"], `result keys: ${where}`);
      const allowed = DOCUMENTED_CODES[status];
      assert.ok(allowed?.includes(result["code"] as string), `code ${String(result["code"])} for ${status}: ${where}`);
      assert.ok(typeof result["message"] === "string" && result["message"].length > 0, `message: ${where}`);
    }
  }
  return results as Array<Record<string, unknown>>;
}

test("fuzz: POST /jobs/batch with a valid assertion and random batches never answers 5xx", async (t) => {
  const s = await startTestService({
    configure: (raw) => {
      raw["limits"] = { spawn_cap: 20 };
    },
  });
  t.after(() => s.close());
  const itemArb = fc.oneof(
    {
      weight: 10,
      arbitrary: fc.tuple(shapedBody, mutationArb).map(([body, mutation]) => applyMutation(body, mutation) as unknown),
    },
    { weight: 1, arbitrary: fc.jsonValue() as fc.Arbitrary<unknown> },
  );
  const bodyArb = fc.oneof(
    { weight: 8, arbitrary: fc.array(itemArb, { minLength: 1, maxLength: 8 }).map((jobs) => JSON.stringify({ jobs })) },
    { weight: 1, arbitrary: fc.array(itemArb, { maxLength: 3 }).map((jobs) => JSON.stringify({ jobs, extra: 1 })) },
    { weight: 1, arbitrary: fc.constantFrom('{"jobs":[]}', "{}", "[]", '{"jobs":{}}', '{"jobs":null}', "null", '"x"') },
    { weight: 1, arbitrary: fc.jsonValue().map((value) => JSON.stringify(value)) },
  );
  let enqueued = 0;
  const tally: Tally = new Map();
  await fc.assert(
    fc.asyncProperty(fc.constantFrom(...CALLERS), fc.uuid(), bodyArb, async (op, rid, payload) => {
      const options: InjectOptions = {
        method: "POST",
        url: "/jobs/batch",
        headers: { authorization: `Bearer ${await s.assertion({ op, rid })}`, "content-type": "application/json" },
        payload,
      };
      const res = await send(s, options, tally);
      if (res.statusCode !== 200) return;
      const where = `${describe(options)} -> ${res.statusCode} ${res.body.slice(0, 300)}`;
      const sent = JSON.parse(payload) as { jobs: unknown[] };
      const results = checkBatchBody(res, sent.jobs.length, where);
      enqueued += results.filter((result) => result["status"] === 201 || result["status"] === 200).length;
    }),
    runOptions(),
  );
  report(t, tally);
  t.diagnostic(`items enqueued: ${enqueued}`);
  // Some 40 items of 300 runs are (36 and 44 seen); the floor only says the generators reach the end of the path.
  if (RUNS >= 300) assert.ok(enqueued >= 1, `no item of ${RUNS} runs was enqueued`);
});

// ---------------------------------------------------------------------------------------------------------
// Property 1b: request ids and path parameters that must travel in a header and a URL (Revision 2)
// ---------------------------------------------------------------------------------------------------------

/** docs/tokens.md Revision 2, restated rather than imported: 1..255 visible ASCII, neither "." nor "..". */
const travels = (rid: string) => /^[\x21-\x7e]{1,255}$/.test(rid) && rid !== "." && rid !== "..";
/** docs/api.md step 2 Revision 2: a path parameter whose text is empty, "." or ".." is refused. */
const normalisesAway = (value: unknown) => ["", ".", ".."].includes(String(value));

const ridArb = fc.oneof(
  { weight: 4, arbitrary: fc.stringMatching(/^[\x21-\x7e]{1,40}$/) },
  { weight: 2, arbitrary: fc.string({ unit: "binary-ascii", minLength: 0, maxLength: 300 }) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      ".",
      "..",
      "...",
      "a b",
      "a\r\nx-evil: 1",
      "\u00e9",
      "\u2028",
      "\x7f",
      "x".repeat(255),
      "x".repeat(256),
    ),
  },
  { weight: 1, arbitrary: fc.string({ unit: "grapheme", minLength: 1, maxLength: 20 }) },
  { weight: 1, arbitrary: fc.integer({ min: 200, max: 9000 }).map((n) => "r".repeat(n)) },
);
const pathParamArb = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom("", ".", "..", "...", "./", "%2e%2e", "a/../b", "\\..", "..;", "42") },
  {
    weight: 2,
    arbitrary: fc.array(fc.constantFrom(".", "/", "%", "2", "e", "a"), { maxLength: 5 }).map((parts) => parts.join("")),
  },
  { weight: 1, arbitrary: fc.oneof(fc.constant([]), fc.constant([".."]), fc.integer(), fc.boolean()) },
  { weight: 1, arbitrary: wildString },
);

test("fuzz: request ids and path parameters are accepted exactly when they can travel in a header and a URL", async (t) => {
  const s = await startTestService({ configure: (raw) => (raw["limits"] = { spawn_cap: 100_000 }) });
  t.after(() => s.close());
  const tally: Tally = new Map();
  let created = 0;
  await fc.assert(
    fc.asyncProperty(ridArb, pathParamArb, async (rid, userId) => {
      const token = await s.assertion({ rid });
      const options: InjectOptions = {
        method: "POST",
        url: "/jobs",
        headers: { authorization: `Bearer ${token}` },
        payload: { operation_id: "sendWelcomeEmail", request: { path_params: { userId } } },
      };
      const res = await send(s, options, tally);
      const where = `rid ${JSON.stringify(rid).slice(0, 80)}, userId ${JSON.stringify(userId).slice(0, 80)} -> ${res.statusCode} ${res.body.slice(0, 200)}`;
      if (!travels(rid)) {
        assert.equal(res.statusCode, 401, where);
        return;
      }
      // U+0000 and lone surrogates cannot be stored by either engine (a separate rule, tested above).
      // eslint-disable-next-line no-control-regex -- matching U+0000 is the point
      if (typeof userId === "string" && /[\u0000\p{Cs}]/u.test(userId)) {
        assert.equal((res.json() as { code: string }).code, "invalid_request", where);
        return;
      }
      if (normalisesAway(userId)) {
        assert.equal((res.json() as { code: string }).code, "invalid_path_param", where);
        return;
      }
      assert.equal(res.statusCode, 201, where);
      created++;
      const job = (res.json() as { job: Record<string, unknown> }).job;
      assert.equal(job["original_request_id"], rid, where);
    }),
    runOptions(),
  );
  report(t, tally);
  if (RUNS >= 300) assert.ok(created > 5, `only ${created} runs enqueued a job`);
});

// ---------------------------------------------------------------------------------------------------------
// Property 2: POST /jobs with raw bodies, content types and Authorization headers
// ---------------------------------------------------------------------------------------------------------

/** Deeply nested JSON text, as a whole body or inside a valid one, built as text (no recursion). */
const deepBody = fc
  .tuple(
    fc.integer({ min: 1, max: 12_000 }),
    fc.constantFrom("array", "object", "in-body", "in-query", "in-path-params", "in-on-behalf-of"),
  )
  .map(([depth, where]) => {
    const arrays = `${"[".repeat(depth)}${"]".repeat(depth)}`;
    const objects = `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`;
    switch (where) {
      case "array":
        return arrays;
      case "object":
        return objects;
      case "in-body":
        return `{"operation_id":"buildReport","request":{"body":${depth % 2 ? arrays : objects}}}`;
      case "in-query":
        return `{"operation_id":"buildReport","request":{"query":{"q":${arrays}}}}`;
      case "in-path-params":
        return `{"operation_id":"sendWelcomeEmail","request":{"path_params":{"userId":${objects}}}}`;
      default:
        return `{"operation_id":"buildReport","request":{},"on_behalf_of":{"user_id":"u","authority":${objects}}}`;
    }
  });
const validBodyText = JSON.stringify({
  operation_id: "sendWelcomeEmail",
  request: { path_params: { userId: "42" }, body: { hello: "wörld 😀" }, query: { a: [1, 2] } },
  priority: 5,
  dedupe_key: "raw-dedupe",
});
const rawBodyArb: fc.Arbitrary<string | Buffer | undefined> = fc.oneof(
  fc.constant(undefined),
  fc.constantFrom(
    "",
    " ",
    "\n",
    "null",
    "[]",
    "{}",
    "true",
    "1",
    '"x"',
    "{",
    "}",
    "[",
    "{,}",
    '{"a":1,}',
    "{'a':1}",
    "NaN",
    "\ufeff{}",
    `\ufeff${validBodyText}`,
    `${validBodyText}${validBodyText}`,
    `${validBodyText} trailing`,
    '{"__proto__":{"x":1}}',
    '{"operation_id":"buildReport","request":{},"__proto__":{"isAdmin":true}}',
    '{"constructor":{"prototype":{"x":1}}}',
    '{"operation_id":"buildReport","request":{"body":{"constructor":{"prototype":{"polluted":1}}}}}',
    '{"operation_id":"buildReport","request":{"body":{"__proto__":null}}}',
    '{"operation_id":"buildReport","operation_id":"sendWelcomeEmail","request":{}}',
    '{"operation_id":"buildReport","request":{"path_params":{"__proto__":{}}}}',
    '{"operation_id":"buildReport","request":{"body":"\\ud800"}}',
    '{"operation_id":"buildReport","request":{"body":"\\u0000"}}',
    '{"operation_id":"buildReport","request":{},"run_at":"2026-06-30T23:59:60Z"}',
  ),
  fc.constant(validBodyText),
  fc.string({ unit: "binary" }),
  fc.string({ unit: "binary-ascii" }),
  fc.uint8Array({ maxLength: 300 }).map((bytes) => Buffer.from(bytes)),
  fc.json(),
  fc.nat().map((n) => validBodyText.slice(0, n % (validBodyText.length + 1))),
  fc.tuple(fc.nat(), fc.uint8Array({ minLength: 1, maxLength: 4 })).map(([n, bytes]) => {
    const text = Buffer.from(validBodyText);
    const at = n % text.length;
    return Buffer.concat([text.subarray(0, at), Buffer.from(bytes), text.subarray(at)]);
  }),
  rawNumberBody,
  deepBody,
);
/** Other headers a body's handling could trip on: lengths that lie, encodings, request ids. */
const extraHeadersArb = fc.dictionary(
  fc.constantFrom(
    ...["content-length", "transfer-encoding", "content-encoding", "x-request-id", "expect", "accept"],
    ...["accept-encoding", "host", "connection"],
  ),
  fc.oneof(
    fc.nat({ max: 2_000_000 }).map(String),
    fc.constantFrom("-1", "abc", "1e3", "chunked", "gzip", "identity", "br, junk", "100-continue", "close", "*/*"),
    headerJunk,
    fc.integer({ min: 8_000, max: 70_000 }).map((n) => "r".repeat(n)),
  ),
  { maxKeys: 2 },
);
const contentTypeArb = fc.oneof(
  { weight: 2, arbitrary: fc.constant(undefined) },
  { weight: 3, arbitrary: fc.constantFrom("application/json", "application/json; charset=utf-8") },
  {
    weight: 4,
    arbitrary: fc.constantFrom(
      "application/json; charset=UTF-16",
      "application/json; charset=latin1",
      'application/json; charset="',
      "application/json;;",
      "application/json; foo",
      "application/json ; x=y",
      "application/json;charset=utf-8;charset=utf-16",
      "APPLICATION/JSON",
      "Application/Json; Charset=utf-8",
      "application/jsonx",
      "application/json-patch+json",
      "application/vnd.api+json",
      "text/json",
      "text/plain",
      "text/plain; charset=utf-8",
      "application/x-www-form-urlencoded",
      "multipart/form-data; boundary=xyz",
      "multipart/form-data",
      "application/octet-stream",
      "*/*",
      "application/*",
      "",
      " ",
      ";",
      "application/json, text/plain",
      "application/json\u0000",
    ),
  },
  { weight: 1, arbitrary: headerJunk },
);

test("fuzz: POST /jobs with raw bodies, content types and Authorization headers never answers 5xx", async (t) => {
  const s = await startTestService();
  t.after(() => s.close());
  const nowS = Math.floor(s.clock.now() / 1000);
  const valid = await s.assertion({ rid: "raw-1" });
  const admin = await s.adminToken();
  const past = { now: () => s.clock.now() - 3_600_000 };
  const expired = await mintToken({ auth: s.config.auth, clock: past, sub: "u1", op: "createUser", rid: "r" });

  const authArb = fc.oneof(
    { weight: 1, arbitrary: fc.constant(undefined) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        "",
        "Bearer",
        "Bearer ",
        "Bearer  ",
        "bearer",
        "Basic xyz",
        "Token abc",
        "Bearer a b",
        "Bearer\tx",
      ),
    },
    { weight: 1, arbitrary: headerJunk.map((junk) => `Bearer ${junk}`) },
    { weight: 1, arbitrary: jwtShapedJunk.map((junk) => `Bearer ${junk}`) },
    { weight: 2, arbitrary: signedTokenArb(nowS, "assertion").map((token) => `Bearer ${token}`) },
    {
      weight: 10,
      arbitrary: fc.constantFrom(`Bearer ${valid}`, `bearer ${valid}`, `Bearer ${valid} `, `Bearer\t${valid}`),
    },
    {
      weight: 1,
      arbitrary: fc
        .tuple(fc.constantFrom("", " ", ".", ".x", "=", "\u0000", " x"), headerJunk)
        .map(([sep, junk]) => `Bearer ${valid}${sep}${junk}`),
    },
    { weight: 1, arbitrary: fc.constantFrom(`Bearer ${admin}`, `Bearer ${expired}`, `Basic ${valid}`, valid) },
    { weight: 1, arbitrary: fc.integer({ min: 8_000, max: 70_000 }).map((n) => `Bearer ${"a".repeat(n)}`) },
    { weight: 1, arbitrary: fc.integer({ min: 8_000, max: 70_000 }).map((n) => `Bearer ${valid}${".".repeat(n)}`) },
  );

  const tally: Tally = new Map();
  await fc.assert(
    fc.asyncProperty(
      authArb,
      contentTypeArb,
      rawBodyArb,
      oneIn(4, extraHeadersArb),
      async (authorization, contentType, payload, extra) => {
        const headers: Record<string, string> = { ...extra };
        if (authorization !== undefined) headers["authorization"] = authorization;
        if (contentType !== undefined) headers["content-type"] = contentType;
        const options: InjectOptions = {
          method: "POST",
          url: "/jobs",
          headers,
          ...(payload === undefined ? {} : { payload }),
        };
        const res = await send(s, options, tally);
        if (res.statusCode < 300) checkSuccessBody(res, describe(options));
      },
    ),
    runOptions(),
  );
  report(t, tally);
});

// ---------------------------------------------------------------------------------------------------------
// Property 3: admin routes with random ids, query strings, tokens and bodies
// ---------------------------------------------------------------------------------------------------------

/** Bodies of the schedules' routes of the right shape, every field drawn from valid and (less often) invalid values. */
const scheduleBodyArb = fc.record(
  {
    name: field(
      fc.constantFrom("sched-a", "sched.b", "nightly", "new-one", "x".repeat(200)),
      fc.oneof(wildString, fc.constantFrom("..", ".x", "x".repeat(201))),
    ),
    schedule: field(
      fc.constantFrom(
        "* * * * *",
        "0 3 * * *",
        "*/5 * * * * *",
        "0 0 29 2 *",
        "0 0 31 2 *",
        "59 59 23 31 12 *",
        "0 9 * * 1-5",
      ),
      fc.oneof(
        fc.constantFrom("61 * * * *", "@daily", "", "* * * *", "* * * * * * *", "0 0 0 0 0", "L W # ?"),
        wildString,
      ),
    ),
    timezone: field(
      fc.constantFrom("UTC", "Europe/Paris", "Asia/Kolkata", "America/St_Johns", "Etc/GMT+12"),
      fc.oneof(fc.constantFrom("Mars/Base", "+01:00", "utc", "", "Europe/Paris "), wildString),
    ),
    operation_id: operationIdArb,
    user_id: field(userIdArb, numberLike),
    request: field(requestArb, fc.anything()),
    priority: field(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), numberLike),
    dedupe_key: keyArb,
    concurrency_key: keyArb,
  },
  { requiredKeys: [] },
);

test("fuzz: admin routes with random ids, queries, tokens and bodies never answer 5xx", async (t) => {
  const s = await startTestService({
    configure: (raw) => {
      // Schedules may enqueue two of the product's operations, so some creates go through.
      raw["triggers"] = {
        ...(raw["triggers"] as Record<string, string[]>),
        "cron:*": ["buildReport", "sendWelcomeEmail"],
      };
    },
  });
  t.after(() => s.close());
  const nowS = Math.floor(s.clock.now() / 1000);
  const admin = await s.adminToken();
  const notAdmin = await s.adminToken({ siteAdmin: false });
  const expired = await mintToken({
    auth: s.config.auth,
    clock: { now: () => s.clock.now() - 90_000_000 },
    sub: "admin",
    siteAdmin: true,
  });
  const assertion = await s.assertion();

  // Real jobs in two chains; one cancelled, so retry can succeed.
  const ids: string[] = [];
  for (let i = 0; i < 6; i++) {
    const res = await send(s, {
      method: "POST",
      url: "/jobs",
      headers: { authorization: `Bearer ${await s.assertion({ rid: i < 3 ? "chain-a" : "chain/b%?#" })}` },
      payload: {
        operation_id: "buildReport",
        request: { body: { i } },
        ...(i === 5 ? { dedupe_key: "admin-dedupe" } : {}),
      },
    });
    assert.equal(res.statusCode, 201, res.body);
    ids.push((res.json() as { job: { id: string } }).job.id);
  }
  const cancelled = await send(s, {
    method: "POST",
    url: `/jobs/${ids[0]}/cancel`,
    headers: { authorization: `Bearer ${admin}` },
  });
  assert.equal(cancelled.statusCode, 200, cancelled.body);
  const page = await send(s, { method: "GET", url: "/jobs?limit=2", headers: { authorization: `Bearer ${admin}` } });
  const validCursor = (page.json() as { next_cursor: string }).next_cursor;
  assert.equal(typeof validCursor, "string");

  const tokenArb = fc.oneof(
    { weight: 6, arbitrary: fc.constant(`Bearer ${admin}`) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        ...[undefined, `Bearer ${notAdmin}`, `Bearer ${expired}`, `Bearer ${assertion}`, `Bearer ${admin}x`],
        ...["Bearer", "Basic YWRtaW46YWRtaW4="],
      ),
    },
    { weight: 1, arbitrary: signedTokenArb(nowS, "admin").map((token) => `Bearer ${token}`) },
    { weight: 1, arbitrary: fc.oneof(jwtShapedJunk, headerJunk).map((junk) => `Bearer ${junk}`) },
  );
  const b64 = (text: string): string => Buffer.from(text).toString("base64url");
  const cursorArb = fc.oneof(
    fc.constant(validCursor),
    fc.string().map(b64),
    fc.constantFrom("s1", "s0", "s-1", `s${"9".repeat(15)}`, `s${"9".repeat(16)}`, "s1\n", "s 1", "s١").map(b64),
    fc.constantFrom("czE", "czE=", "czE==", "s1", "", "====", "%00", "%zz"),
    fc.constantFrom(`${validCursor}=`, `${validCursor}!`, validCursor.toUpperCase()),
    fc.base64String(),
    wildString.map(encodeLoosely),
  );
  const limitArb = fc.oneof(
    fc.integer({ min: -5, max: 600 }).map(String),
    fc.constantFrom("0", "1", "500", "501", "-1", "1.5", "1.0", "1e2", "0x10", "NaN", "Infinity", " 5", "5 ", ""),
    fc.constantFrom("%00", "9".repeat(400), "true", "null", "%2B5"),
    wildString.map(encodeLoosely),
  );
  const statusArb = fc.oneof(
    fc.constantFrom(...STATUSES),
    fc.constantFrom("PENDING", "", "bogus", "pending,dead", "__proto__"),
    wildString.map(encodeLoosely),
  );
  const plainValue = fc.oneof(
    fc.constantFrom(...ids, "chain-a", "buildReport", "u1"),
    wildString.map(encodeLoosely),
    urlJunk,
  );
  const queryPair = fc.oneof(
    statusArb.map((v) => `status=${v}`),
    limitArb.map((v) => `limit=${v}`),
    cursorArb.map((v) => `cursor=${v}`),
    fc
      .tuple(fc.constantFrom("operation_id", "original_request_id", "user_id", "parent_job_id"), plainValue)
      .map(([k, v]) => `${k}=${v}`),
    fc
      .tuple(
        fc.oneof(
          fc.constantFrom("status[]", "status[0]", "__proto__", "constructor", "", "LIMIT", "limit", "status", "a[b]"),
          wildString.map(encodeLoosely),
          urlJunk,
        ),
        fc.option(plainValue),
      )
      .map(([k, v]) => (v === null ? k : `${k}=${v}`)),
  );
  const queryArb = fc
    .tuple(fc.array(queryPair, { maxLength: 6 }), fc.constantFrom("&", "&", "&", ";", "&&", "?"))
    .map(([pairs, sep]) => pairs.join(sep));
  const bodyArb = fc.oneof(
    { weight: 3, arbitrary: fc.constant<{ payload?: string | Buffer; contentType?: string }>({}) },
    {
      weight: 1,
      arbitrary: fc.constantFrom("{}", "", "null").map((payload) => ({ payload, contentType: "application/json" })),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        payload: fc.oneof(
          fc.json(),
          fc.string({ unit: "binary" }),
          fc.constantFrom("{", '{"__proto__":{}}', "[]"),
          deepBody,
        ),
        contentType: contentTypeArb,
      }),
    },
  );
  // Two schedules to find, change and delete; one paused.
  for (const name of ["sched-a", "sched.b"]) {
    const created = await send(s, {
      method: "POST",
      url: "/schedules",
      headers: { authorization: `Bearer ${admin}` },
      payload: { name, schedule: "*/5 * * * *", operation_id: "buildReport", user_id: "u1" },
    });
    assert.equal(created.statusCode, 201, created.body);
  }
  await send(s, { method: "POST", url: "/schedules/sched.b/pause", headers: { authorization: `Bearer ${admin}` } });
  const scheduleNameArb = fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom("sched-a", "sched.b", "nightly", "sched%2Eb") },
    { weight: 2, arbitrary: idArb(ids) },
  );
  const scheduleRequestArb = fc.oneof(
    {
      weight: 3,
      arbitrary: scheduleBodyArb.map((value) => ({ payload: JSON.stringify(value), contentType: "application/json" })),
    },
    { weight: 1, arbitrary: bodyArb },
  );

  const routeArb = fc.constantFrom(
    "get",
    "cancel",
    "retry",
    "chain",
    "list",
    "list",
    "get-method-mismatch",
    "schedule-list",
    "schedule-get",
    "schedule-create",
    "schedule-create",
    "schedule-patch",
    "schedule-patch",
    "schedule-pause",
    "schedule-resume",
    "schedule-delete",
    "schedule-run-now",
  );

  const tally: Tally = new Map();
  await fc.assert(
    fc.asyncProperty(
      routeArb,
      idArb(ids),
      queryArb,
      tokenArb,
      bodyArb,
      scheduleNameArb,
      scheduleRequestArb,
      async (route, id, query, authorization, plainBody, scheduleName, scheduleBody) => {
        let method: InjectOptions["method"] = "POST";
        let url: string;
        let body = plainBody;
        switch (route) {
          case "get":
            method = "GET";
            url = `/jobs/${id}`;
            break;
          case "cancel":
            url = `/jobs/${id}/cancel`;
            break;
          case "retry":
            url = `/jobs/${id}/retry`;
            break;
          case "chain":
            url = `/chains/${id}/cancel`;
            break;
          case "list":
            method = "GET";
            url = `/jobs?${query}`;
            break;
          case "schedule-list":
            method = "GET";
            url = `/schedules?${query}`;
            break;
          case "schedule-get":
            method = "GET";
            url = `/schedules/${scheduleName}`;
            break;
          case "schedule-create":
            url = "/schedules";
            body = scheduleBody;
            break;
          case "schedule-patch":
            method = "PATCH";
            url = `/schedules/${scheduleName}`;
            body = scheduleBody;
            break;
          case "schedule-pause":
          case "schedule-resume":
            url = `/schedules/${scheduleName}/${route.slice("schedule-".length)}`;
            break;
          case "schedule-delete":
            method = "DELETE";
            url = `/schedules/${scheduleName}`;
            break;
          case "schedule-run-now":
            url = `/schedules/${scheduleName}/run-now`;
            break;
          default:
            method = "GET";
            url = `/jobs/${id}/cancel?${query}`;
        }
        const headers: Record<string, string> = {};
        if (authorization !== undefined) headers["authorization"] = authorization;
        if (body.contentType !== undefined) headers["content-type"] = body.contentType;
        const options: InjectOptions = {
          method,
          url,
          headers,
          ...(body.payload === undefined ? {} : { payload: body.payload }),
        };
        const res = await send(s, options, tally);
        if (res.statusCode < 300)
          checkSuccessBody(res, `${describe(options)} -> ${res.statusCode} ${res.body.slice(0, 300)}`);
      },
    ),
    runOptions(),
  );
  report(t, tally);
});

// ---------------------------------------------------------------------------------------------------------
// Property 3b: a target's calls on its attempt (heartbeat, complete, fail)
// ---------------------------------------------------------------------------------------------------------

test("fuzz: heartbeat, complete and fail with random delivery tokens, ids and bodies never answer 5xx", async (t) => {
  const s = await startTestService();
  t.after(() => s.close());
  const store = s.service.store;
  const nowS = Math.floor(s.clock.now() / 1000);

  // Jobs running their first attempt, each with the token the deliverer would have signed; every other one marked as
  // taken asynchronously with it. Calls that end one leave the rest running, so later runs still reach them.
  const running: Array<{ id: string; token: string }> = [];
  for (let i = 0; i < 12; i++) {
    const created = await send(s, {
      method: "POST",
      url: "/jobs",
      headers: { authorization: `Bearer ${await s.assertion()}` },
      payload: { operation_id: "buildReport", request: { body: { i } } },
    });
    const id = (created.json() as { job: { id: string } }).job.id;
    const [job] = await store.jobClaimMany({ limit: 1 });
    assert.equal(job?.id, id);
    const token = await s.service.signer.sign({
      sub: job.userId,
      op: job.operationId,
      job: job.id,
      att: job.attempt,
      clm: job.claimCount,
      rid: job.originalRequestId,
      authority: { kind: "request", request_id: job.originalRequestId, user_id: job.userId },
      timeoutMs: 30_000,
    });
    if (i % 2 === 0)
      await store.jobMarkAsyncIfRunning({
        job: { id, attempt: 1, startedAt: job.startedAt },
        tokenHash: deliveryTokenHash(token),
      });
    running.push({ id, token });
  }
  const ids = running.map((job) => job.id);

  // Delivery tokens whose claims are fuzzed: each claim of a valid one kept, dropped or replaced, signed with the
  // delivery secret (or, once in twenty, another).
  const deliveryTokenArb = (job: string) =>
    fc
      .record({
        claims: fc.dictionary(
          fc.constantFrom("iss", "aud", "op", "job", "att", "jti", "iat", "exp", "kid-header"),
          claimText,
          { maxKeys: 2 },
        ),
        drop: fc.subarray(["iss", "aud", "op", "att", "jti", "iat", "exp"], { maxLength: 2 }),
        exp: fc.integer({ min: -400, max: 400 }),
        wrongSecret: fc.nat(19).map((n) => n === 0),
      })
      .map(({ claims, drop, exp, wrongSecret }) => {
        const payload: Record<string, string> = {
          iss: '"opqueue"',
          aud: '"product"',
          sub: '"u1"',
          op: '"buildReport"',
          job: JSON.stringify(job),
          att: "1",
          rid: '"req-1"',
          authority: '{"kind":"request","request_id":"req-1","user_id":"u1"}',
          iat: String(nowS),
          exp: String(nowS + exp),
          jti: JSON.stringify(`${job}:1`),
        };
        for (const claim of drop) delete payload[claim];
        const header = { alg: "HS256", kid: "q1", typ: "JWT" };
        for (const [claim, text] of Object.entries(claims)) {
          if (claim === "kid-header") Object.assign(header, { kid: JSON.parse(text) as unknown });
          else payload[claim] = text;
        }
        const payloadText = `{${Object.entries(payload)
          .map(([claim, text]) => `${JSON.stringify(claim)}:${text}`)
          .join(",")}}`;
        return signRaw(
          JSON.stringify(header),
          payloadText,
          wrongSecret ? "another-secret-that-is-also-32-bytes-long" : TEST_DELIVERY_SECRET,
        );
      });
  const adminToken = await s.adminToken();
  const assertion = await s.assertion();
  // Mostly the job's own token on its own route, so the calls reach the store; else another's, fuzzed ones and junk.
  const tokenArb = (own: { id: string; token: string }) =>
    fc.oneof(
      { weight: 8, arbitrary: fc.constant(`Bearer ${own.token}`) },
      { weight: 1, arbitrary: fc.constantFrom(...running.map((job) => `Bearer ${job.token}`)) },
      { weight: 3, arbitrary: deliveryTokenArb(own.id).map((token) => `Bearer ${token}`) },
      {
        weight: 1,
        arbitrary: fc.constantFrom(
          ...[undefined, `Bearer ${adminToken}`, `Bearer ${assertion}`, `Bearer ${own.token}x`],
          ...["Bearer", "Basic YWRtaW46YWRtaW4="],
        ),
      },
      { weight: 1, arbitrary: fc.oneof(jwtShapedJunk, headerJunk).map((junk) => `Bearer ${junk}`) },
    );
  const jsonish = fc.oneof(fc.jsonValue(), fc.anything(), hugeString);
  // Deep values as text: JSON.stringify of them would overflow this test's own stack.
  const deepField = fc
    .tuple(fc.constantFrom("progress", "result"), fc.integer({ min: 100, max: 12_000 }))
    .map(([field, depth]) => `{"${field}":${"[".repeat(depth)}${"]".repeat(depth)}}`);
  const bodyArb = fc.oneof(
    { weight: 2, arbitrary: fc.constant<{ payload?: string | Buffer; contentType?: string }>({}) },
    {
      // Bodies every route accepts, or nearly: the calls then go on to the store.
      weight: 3,
      arbitrary: fc
        .oneof(
          fc.record({ progress: fc.jsonValue({ maxDepth: 3 }) }, { requiredKeys: [] }),
          fc.record(
            {
              status_code: fc.integer({ min: 300, max: 599 }),
              retry: fc.constantFrom("never", "always"),
              error: wildString,
            },
            { requiredKeys: [] },
          ),
        )
        .map((body) => ({ payload: JSON.stringify(body), contentType: "application/json" })),
    },
    {
      weight: 4,
      arbitrary: fc
        .record(
          {
            progress: jsonish,
            status_code: fc.oneof(fc.integer({ min: 100, max: 700 }), wildNumber, fc.constantFrom("500", null)),
            result: jsonish,
            retry: fc.oneof(fc.constantFrom("never", "always", "NEVER", "", null), wildString),
            error: fc.oneof(wildString, hugeString, fc.constantFrom(null, 5)),
            extra: fc.anything(),
          },
          { requiredKeys: [] },
        )
        .map((body) => ({ payload: JSON.stringify(body) ?? "{}", contentType: "application/json" })),
    },
    {
      weight: 1,
      arbitrary: fc.record({
        payload: fc.oneof(
          fc.json(),
          fc.string({ unit: "binary" }),
          fc.constantFrom("", "{", "null", "[]", '{"__proto__":{}}'),
          deepBody,
        ),
        contentType: contentTypeArb,
      }),
    },
    { weight: 1, arbitrary: deepField.map((payload) => ({ payload, contentType: "application/json" })) },
  );
  const tally: Tally = new Map();
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom("heartbeat", "heartbeat", "heartbeat", "heartbeat", "complete", "fail"),
      fc
        .constantFrom(...running)
        .chain((own) =>
          fc.tuple(
            fc.oneof({ weight: 6, arbitrary: fc.constant(own.id) }, { weight: 1, arbitrary: idArb(ids) }),
            tokenArb(own),
          ),
        ),
      bodyArb,
      fc.nat(7),
      async (action, [id, authorization], body, clockStep) => {
        // Now and then time moves on past the tokens' exp: expired tokens keep acting on asynchronous attempts only.
        if (clockStep === 0) s.clock.advance(30_000);
        const headers: Record<string, string> = {};
        if (authorization !== undefined) headers["authorization"] = authorization;
        if (body.contentType !== undefined) headers["content-type"] = body.contentType;
        const options: InjectOptions = {
          method: "POST",
          url: `/jobs/${id}/${action}`,
          headers,
          ...(body.payload === undefined ? {} : { payload: body.payload }),
        };
        const res = await send(s, options, tally);
        if (res.statusCode < 300)
          checkSuccessBody(res, `${describe(options)} -> ${res.statusCode} ${res.body.slice(0, 300)}`);
      },
    ),
    runOptions(),
  );
  report(t, tally);
});

// ---------------------------------------------------------------------------------------------------------
// Property 4: any method on any path
// ---------------------------------------------------------------------------------------------------------

test("fuzz: random methods on random paths never answer 5xx", async (t) => {
  const s = await startTestService();
  t.after(() => s.close());
  // Some requests go over a real socket: Node's HTTP parser sees bytes `inject` never produces.
  await s.service.app.listen({ host: "127.0.0.1", port: 0 });
  const { port } = s.service.app.server.address() as { port: number };
  const admin = await s.adminToken();
  const assertion = await s.assertion();
  const seeded = await send(s, {
    method: "POST",
    url: "/jobs",
    headers: { authorization: `Bearer ${assertion}` },
    payload: { operation_id: "buildReport", request: {} },
  });
  const id = (seeded.json() as { job: { id: string } }).job.id;

  const segment = fc.oneof(
    {
      weight: 4,
      arbitrary: fc.constantFrom(
        ...["jobs", "chains", "cancel", "retry", "healthz", "readyz", "metrics", "openapi.json", ".well-known"],
        ...["jwks.json", id],
      ),
    },
    {
      weight: 1,
      arbitrary: fc.constantFrom("", ".", "..", "*", "JOBS", "jobs.json", "docs", "documentation", "static", "admin"),
    },
    { weight: 1, arbitrary: urlJunk },
    { weight: 1, arbitrary: fc.webSegment() },
    { weight: 1, arbitrary: fc.string({ unit: "grapheme-ascii", maxLength: 8 }) },
    { weight: 1, arbitrary: fc.string({ unit: "grapheme", maxLength: 4 }) },
  );
  const pathArb = fc
    .record({
      segments: fc.array(segment, { minLength: 0, maxLength: 5 }),
      trailingSlash: fc.boolean(),
      query: fc.option(fc.oneof(fc.webQueryParameters(), fc.string({ unit: "grapheme-ascii" }), urlJunk)),
      fragment: oneIn(8, fc.string({ unit: "grapheme-ascii", maxLength: 5 })),
    })
    .map(({ segments, trailingSlash, query, fragment }) => {
      let path = `/${segments.join("/")}${trailingSlash ? "/" : ""}`;
      if (query !== null) path += `?${query}`;
      if (fragment !== null) path += `#${fragment}`;
      return path;
    });
  const methodArb = fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD") as fc.Arbitrary<
    InjectOptions["method"]
  >;
  const authArb = fc.constantFrom(undefined, `Bearer ${admin}`, `Bearer ${assertion}`, "Bearer junk");
  const bodyArb = fc.option(
    fc.record({ payload: fc.oneof(fc.json(), fc.string(), fc.constantFrom("{", "")), contentType: contentTypeArb }),
    { freq: 2 },
  );

  const tally: Tally = new Map();
  await fc.assert(
    fc.asyncProperty(
      methodArb,
      pathArb,
      authArb,
      bodyArb,
      oneIn(4, extraHeadersArb),
      fc.boolean(),
      async (method, url, authorization, body, extra, overSocket) => {
        const headers: Record<string, string> = { ...extra };
        if (authorization !== undefined) headers["authorization"] = authorization;
        if (body?.contentType !== undefined) headers["content-type"] = body.contentType;
        const options: InjectOptions = { method, url, headers, ...(body === null ? {} : { payload: body.payload }) };
        // light-my-request cannot send a target the WHATWG URL parser rejects (such as "/\\"); a socket can.
        if (!overSocket && URL.canParse(url, "http://localhost")) {
          await send(s, options, tally);
          return;
        }
        // The request's framing is ours: no lying length, no chunking, no 100-continue.
        for (const name of ["content-length", "transfer-encoding", "expect", "host", "connection"])
          delete headers[name];
        const res = await rawHttp(port, rawRequest(String(method), url, headers, body?.payload));
        checkResponse(options, res);
        tally.set(`socket ${res.statusCode}`, (tally.get(`socket ${res.statusCode}`) ?? 0) + 1);
      },
    ),
    runOptions(),
  );
  report(t, tally);
});

// ---------------------------------------------------------------------------------------------------------
// Fixed regression cases
// ---------------------------------------------------------------------------------------------------------

test("fuzz regressions: inputs the fuzzer found or that sit on a boundary", async (t) => {
  const s = await startTestService();
  t.after(() => s.close());
  const token = await s.assertion({ rid: "regressions" });
  const admin = await s.adminToken();
  const json = { "content-type": "application/json" };
  const enqueue = (payload: string, bearer = token) =>
    send(s, { method: "POST", url: "/jobs", headers: { ...json, authorization: `Bearer ${bearer}` }, payload });
  const expectError = (res: LightMyRequestResponse, status: number, code: string) => {
    assert.equal(res.statusCode, status, res.body);
    assert.equal((res.json() as { code: string }).code, code, res.body);
  };

  await t.test(
    "an assertion whose op is an Object.prototype key is refused by the trigger map, not a 500",
    async () => {
      for (const op of ["constructor", "__proto__", "toString", "hasOwnProperty", "valueOf"]) {
        const bearer = await s.assertion({ op, rid: "proto-op" });
        const res = await enqueue('{"operation_id":"buildReport","request":{}}', bearer);
        expectError(res, 403, "trigger_not_allowed");
      }
    },
  );

  await t.test(
    "a path parameter holding an object with a toString or valueOf member is sent as [object Object], not a 500",
    async () => {
      // CI found it: String({"toString": 1}) throws, and every reading of a path parameter's text went through String.
      const batch = (payload: string) =>
        send(s, {
          method: "POST",
          url: "/jobs/batch",
          headers: { ...json, authorization: `Bearer ${token}` },
          payload,
        });
      const cases: Array<[unknown, string]> = [
        [{ toString: 1 }, "[object Object]"],
        [{ valueOf: "x", toString: null }, "[object Object]"],
        [[{ toString: 1 }, 2, null], "[object Object],2,"],
        [[[{ valueOf: {} }]], "[object Object]"],
      ];
      for (const [userId, text] of cases) {
        const item = { operation_id: "sendWelcomeEmail", request: { path_params: { userId } } };
        const res = await enqueue(JSON.stringify(item));
        assert.equal(res.statusCode, 201, res.body);
        const results = (await batch(JSON.stringify({ jobs: [item] }))).json() as {
          results: Array<{ status: number }>;
        };
        assert.equal(results.results[0]?.status, 201, JSON.stringify(results));
        assert.equal(buildPath("/users/{userId}/welcome", { userId }), `/users/${encodeURIComponent(text)}/welcome`);
      }
      // A callback's path parameter nested deeper than a request may be: refused as the request's would be, not a 500
      // (its text is read recursively, as String reads an array).
      const deep = `${"[".repeat(3000)}1${"]".repeat(3000)}`;
      const withDeepCallback = `{"operation_id":"buildReport","request":{},"on_complete":{"operation_id":"sendWelcomeEmail","request":{"path_params":{"userId":${deep}}}}}`;
      expectError(await enqueue(withDeepCallback), 400, "invalid_request");
      const deepBatch = (await batch(`{"jobs":[${withDeepCallback}]}`)).json() as {
        results: Array<{ status: number; code?: string }>;
      };
      assert.deepEqual(
        deepBatch.results.map((result) => [result.status, result.code]),
        [[400, "invalid_request"]],
      );
      // A template's parameter named after an Object.prototype member is missing unless the job holds it.
      assert.equal(buildPath("/x/{constructor}", {}), "/x/");
    },
  );

  await t.test("deeply nested request payloads are refused with 400, not a stack overflow", async () => {
    const depth = 10_000;
    const arrays = `${"[".repeat(depth)}${"]".repeat(depth)}`;
    const objects = `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`;
    expectError(await enqueue(`{"operation_id":"buildReport","request":{"body":${arrays}}}`), 400, "invalid_request");
    expectError(await enqueue(`{"operation_id":"buildReport","request":{"body":${objects}}}`), 400, "invalid_request");
    expectError(
      await enqueue(`{"operation_id":"buildReport","request":{"query":{"q":${arrays}}}}`),
      400,
      "invalid_request",
    );
    // 5000 levels of arrays is only 10 KB: under the payload cap, still refused.
    const shallower = `${"[".repeat(5000)}${"]".repeat(5000)}`;
    expectError(
      await enqueue(`{"operation_id":"buildReport","request":{"body":${shallower}}}`),
      400,
      "invalid_request",
    );
    // The whole body nested: a schema error.
    expectError(await enqueue(arrays), 400, "invalid_request");
  });

  await t.test("a request nested up to the allowed depth is stored and read back", async () => {
    // `request` is level 1, so `body` may hold 127 levels of arrays: 128 in all.
    const depth = 127;
    const body = `${"[".repeat(depth)}${"]".repeat(depth)}`;
    const res = await enqueue(`{"operation_id":"buildReport","request":{"body":${body}}}`);
    assert.equal(res.statusCode, 201, res.body);
    const id = (res.json() as { job: { id: string } }).job.id;
    const got = await send(s, { method: "GET", url: `/jobs/${id}`, headers: { authorization: `Bearer ${admin}` } });
    assert.equal(got.statusCode, 200, got.body);
    assert.equal(JSON.stringify((got.json() as { job: { request: { body: unknown } } }).job.request.body), body);
    const list = await send(s, {
      method: "GET",
      url: "/jobs?limit=500",
      headers: { authorization: `Bearer ${admin}` },
    });
    assert.equal(list.statusCode, 200, list.body);
    const tooDeep = await enqueue(`{"operation_id":"buildReport","request":{"body":[${body}]}}`);
    expectError(tooDeep, 400, "invalid_request");
  });

  await t.test(
    "run_at that would leave RFC 3339's years once in UTC is refused, so wire dates stay RFC 3339",
    async () => {
      // Year 0000 is refused too: PostgreSQL's timestamptz has no year 0.
      for (const runAt of [
        "9999-12-31T23:59:59-23:59",
        "0000-01-01T00:00:00+00:01",
        "0000-01-01T00:00:00Z",
        "0000-12-31T23:59:59Z",
      ]) {
        expectError(
          await enqueue(JSON.stringify({ operation_id: "buildReport", request: {}, run_at: runAt })),
          400,
          "invalid_request",
        );
      }
      for (const [runAt, wire] of [
        ["0001-01-01T00:00:00Z", "0001-01-01T00:00:00.000Z"],
        ["9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"],
        ["9999-12-31T23:59:59+00:00", "9999-12-31T23:59:59.000Z"],
        ["2026-11-21T12:00:00.123456789012Z", "2026-11-21T12:00:00.123Z"],
      ]) {
        const res = await enqueue(JSON.stringify({ operation_id: "buildReport", request: {}, run_at: runAt }));
        assert.equal(res.statusCode, 201, res.body);
        assert.equal((res.json() as { job: { run_at: string } }).job.run_at, wire);
      }
    },
  );

  await t.test("path_params and query keys holding line breaks survive the response serializer", async () => {
    const request = {
      path_params: { userId: "1", "a\nb": 1, "\r": 2, "\u2028": 3 },
      query: { "\n": [1], "x\ry": null },
    };
    const res = await enqueue(JSON.stringify({ operation_id: "sendWelcomeEmail", request }));
    assert.equal(res.statusCode, 201, res.body);
    const job = (res.json() as { job: { id: string; request: unknown } }).job;
    assert.deepEqual(job.request, request);
    const got = await send(s, { method: "GET", url: `/jobs/${job.id}`, headers: { authorization: `Bearer ${admin}` } });
    assert.deepEqual((got.json() as { job: { request: unknown } }).job.request, request);
  });

  await t.test("a leap second is answered 201 or 400, never 5xx", async () => {
    const res = await enqueue('{"operation_id":"buildReport","request":{},"run_at":"2026-06-30T23:59:60Z"}');
    assert.ok([201, 400].includes(res.statusCode), res.body);
  });

  await t.test("prototype-pollution bodies are refused with 400", async () => {
    expectError(await enqueue('{"__proto__":{"x":1}}'), 400, "invalid_request");
    expectError(await enqueue('{"constructor":{"prototype":{"x":1}}}'), 400, "invalid_request");
    expectError(
      await enqueue('{"operation_id":"buildReport","request":{"body":{"__proto__":{"x":1}}}}'),
      400,
      "invalid_request",
    );
    assert.equal(({} as Record<string, unknown>)["x"], undefined);
  });

  await t.test("numbers at the schema's edges", async () => {
    const body = (extra: string) => `{"operation_id":"buildReport","request":{},${extra}}`;
    assert.equal((await enqueue(body('"priority":-2147483648'))).statusCode, 201);
    assert.equal((await enqueue(body('"priority":2147483647'))).statusCode, 201);
    assert.equal((await enqueue(body('"priority":1.0'))).statusCode, 201);
    for (const extra of [
      '"priority":2147483648',
      '"priority":-2147483649',
      '"priority":1.5',
      '"priority":1e400',
      '"priority":"1"',
    ]) {
      expectError(await enqueue(body(extra)), 400, "invalid_request");
    }
    assert.equal((await enqueue(body(`"delay_ms":${MAX_DELAY_MS}`))).statusCode, 201);
    for (const extra of [`"delay_ms":${MAX_DELAY_MS + 1}`, '"delay_ms":-1', '"delay_ms":1e400', '"delay_ms":0.5']) {
      expectError(await enqueue(body(extra)), 400, "invalid_request");
    }
  });

  await t.test("the payload cap counts UTF-8 bytes of JSON.stringify(request)", async () => {
    // {"body":"…"} is 11 bytes of framing; "é" is 2 bytes of UTF-8 but 1 UTF-16 unit.
    const request = (body: string) => JSON.stringify({ operation_id: "buildReport", request: { body } });
    assert.equal(Buffer.byteLength(JSON.stringify({ body: "x".repeat(16_384 - 11) })), 16_384);
    assert.equal((await enqueue(request("x".repeat(16_384 - 11)))).statusCode, 201);
    expectError(await enqueue(request("x".repeat(16_384 - 10))), 400, "payload_too_large");
    assert.equal((await enqueue(request(`x${"é".repeat((16_384 - 12) / 2)}`))).statusCode, 201);
    expectError(await enqueue(request("é".repeat((16_384 - 10) / 2))), 400, "payload_too_large");
  });

  await t.test("bodies over 1 MiB get 413, wrong media types 415, bad URLs 400", async () => {
    const big = `{"operation_id":"buildReport","request":{"body":"${"x".repeat(1024 * 1024)}"}}`;
    expectError(await enqueue(big), 413, "body_too_large");
    const plain = await send(s, {
      method: "POST",
      url: "/jobs",
      headers: { authorization: `Bearer ${token}`, "content-type": "text/plain" },
      payload: "{}",
    });
    expectError(plain, 415, "unsupported_media_type");
    const badUrl = await send(s, { method: "GET", url: "/jobs/%zz", headers: { authorization: `Bearer ${admin}` } });
    expectError(badUrl, 400, "invalid_request");
    const cursor = Buffer.from(`s${"9".repeat(16)}`).toString("base64url");
    const junkCursor = await send(s, {
      method: "GET",
      url: `/jobs?cursor=${cursor}`,
      headers: { authorization: `Bearer ${admin}` },
    });
    expectError(junkCursor, 400, "invalid_request");
  });
});

test("fuzz regressions over a socket: requests Node's HTTP parser refuses get {code, message}", async (t) => {
  const s = await startTestService();
  t.after(() => s.close());
  await s.service.app.listen({ host: "127.0.0.1", port: 0 });
  const { port } = s.service.app.server.address() as { port: number };
  const cases: Array<[string, string, number, string | null]> = [
    // [what, request bytes (latin1), status, code]
    ["a space in the target", "GET /jobs/a b HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid_request"],
    ["a non-ASCII target", "GET /jobs/\u00e9 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid_request"],
    ["a header name with a space", "GET /jobs HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", 400, "invalid_request"],
    [
      "a control character in a header",
      "GET /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \u0001\r\n\r\n",
      400,
      "invalid_request",
    ],
    [
      "headers over 16 KiB",
      `GET /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${"a".repeat(20_000)}\r\n\r\n`,
      400,
      "invalid_request",
    ],
    ["not HTTP at all", "HELLO\r\n\r\n", 400, "invalid_request"],
    ["an HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, "invalid_request"],
    [
      "a non-numeric Content-Length",
      "POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
      400,
      "invalid_request",
    ],
    [
      "Content-Length with chunked",
      "POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      400,
      "invalid_request",
    ],
    [
      "a bad chunk size",
      "POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      400,
      "invalid_request",
    ],
    ["HTTP/1.1 without Host", "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n", 400, "invalid_request"],
    ["HTTP/1.0 without Host (allowed)", "GET /healthz HTTP/1.0\r\n\r\n", 200, null],
    ["a backslash target", "GET /\\ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404, "not_found"],
    [
      "an absolute-form target",
      "GET http://elsewhere/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
      200,
      null,
    ],
    ["an asterisk-form target", "OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404, "not_found"],
  ];
  for (const [what, bytes, status, code] of cases) {
    await t.test(what, async () => {
      const res = await rawHttp(port, Buffer.from(bytes, "latin1"));
      checkResponse({ method: "GET", url: what }, res);
      assert.equal(res.statusCode, status, res.body);
      if (code !== null) assert.equal((JSON.parse(res.body) as { code: string }).code, code, res.body);
    });
  }
});
